"""Wrap JAX functions as PyTensor Ops: the public names, and :func:`install`.

Importing this module runs :func:`install` once, the one place where the
package acts on the process (registrations with PyTensor, JAX settings, hooks
into PyMC); every other module imports without side effects. The modules and
their layers: the developer notes (``doc/developer.rst``).
"""

from __future__ import annotations

import logging
import os
import threading


try:
    import jax
except ImportError as _error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "pytensor.compile.jax_ofg needs JAX, which is not installed. "
        "Install it with `pip install jax` (or `pip install pytensor-jax-ofg`, "
        "which depends on it)."
    ) from _error

from pytensor.compile._jax_ofg import compat, small_linalg
from pytensor.compile._jax_ofg.cache import environment, watch, xla
from pytensor.compile._jax_ofg.cache import traces as trace_cache
from pytensor.compile._jax_ofg.cache.import_hooks import JAX_BACKEND, after_import
from pytensor.compile._jax_ofg.cache.traces import clear_trace_cache, trace_cache_info
from pytensor.compile._jax_ofg.errors import (
    CALLBACK_LOGGER,
    MuteCallbackLogs,
    WrappedFunctionRuntimeWarning,
    runtime_error_counts,
)
from pytensor.compile._jax_ofg.host import cores, fork_guard, programs
from pytensor.compile._jax_ofg.host.fork_guard import ForkedAfterJaxError
from pytensor.compile._jax_ofg.host.op import JaxHostOp
from pytensor.compile._jax_ofg.host.readonly_outputs import ReadOnlyOutputs
from pytensor.compile._jax_ofg.islands.fusion import (
    FuseValueAndVJP,
    bake_constant_inputs,
    prune_pullback_inputs,
)
from pytensor.compile._jax_ofg.islands.op import JaxIsland, JaxIslandFallbackWarning
from pytensor.compile._jax_ofg.islands.selection import (
    ISLANDS_REWRITE,
    form_jax_islands,
)
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.vmap import vectorize_op_from_jax, vmap_blockwise
from pytensor.compile._jax_ofg.op.wrapper import (
    JaxOpWrapper,
    SymbolicCallable,
    as_jax_op,
    not_a_tensor,
)
from pytensor.compile._jax_ofg.samplers import nutpie, pymc
from pytensor.compile._jax_ofg.samplers.chain_processes import (
    ChainProcessError,
    SamplingInterrupted,
    sample_in_processes,
)
from pytensor.compile._jax_ofg.stan import diffrax_settings, stan_bound, stan_initvals
from pytensor.compile._jax_ofg.tracing.shapes import ShapeInferenceError
from pytensor.compile.mode import optdb
from pytensor.graph.rewriting.basic import dfs_rewriter
from pytensor.link.numba.dispatch import jax_ofg as numba_dispatch
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key


__all__ = [
    "ChainProcessError",
    "ForkedAfterJaxError",
    "JaxIsland",
    "JaxIslandFallbackWarning",
    "OpFromJax",
    "SamplingInterrupted",
    "ShapeInferenceError",
    "SymbolicCallable",
    "WrappedFunctionRuntimeWarning",
    "as_jax_op",
    "clear_trace_cache",
    "diffrax_settings",
    "install",
    "runtime_error_counts",
    "sample_in_processes",
    "stan_bound",
    "stan_initvals",
    "trace_cache_info",
]

# Pickles name these classes by this module: loading one (a compiled function
# in a worker process) imports it, and so runs install() before the graph is
# compiled again there.
for _public in (JaxIsland, JaxOpWrapper, OpFromJax, SymbolicCallable):
    _public.__module__ = __name__

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Make this package's ops work in this process; run once, on import.

    Every act on the process is here, in this order:

    1. **JAX float64**: ``jax_enable_x64`` on. PyTensor types carry explicit
       dtypes; without x64, JAX would silently turn float64 into float32 and
       int64 into int32.
    2. **Small dense linear algebra**: LU, triangular solves and Cholesky of
       square matrices up to ``jax_ofg__small_linalg_max_size`` rows are
       lowered for the CPU as unrolled XLA operations instead of LAPACK
       calls, in every JAX program of the process
       (:mod:`~pytensor.compile._jax_ofg.small_linalg`).
    3. **Linkers**: the JAX lowering of :class:`OpFromJax` (``jax_funcify``),
       registered when PyTensor's JAX backend is first imported -- it takes
       about a second, and a process whose programs the trace cache serves
       never needs it (:mod:`~pytensor.compile._jax_ofg.cache.import_hooks`); the
       Numba lowering of every :class:`~pytensor.compile._jax_ofg.host.op.JaxHostOp`
       (``numba_funcify`` with cache keys), whose compiled bodies live in a
       module put in ``sys.modules``; a graph that is one such op runs its
       host function from a Python thunk instead of a Numba function.
    4. **Graphs**: ``vectorize_graph`` of an :class:`OpFromJax` is a
       ``jax.vmap`` (``_vectorize_node``); a :class:`SymbolicCallable` used as
       a tensor is a clear error (``as_tensor_variable``).
    5. **Rewrites** in ``optdb`` (see each module): ``jax_ofg_vmap_blockwise``
       (0.95), ``jax_ofg_prune_pullback_inputs`` (48.4),
       ``jax_ofg_fuse_value_and_vjp`` (48.5), ``jax_islands`` (48.95),
       ``jax_ofg_bake_constant_inputs`` (48.97), ``jax_ofg_readonly_outputs``
       (150).
    6. **Processes**: at-fork handlers that make a process forked after JAX
       started refuse to run JAX (instead of deadlocking); PyMC's choice of
       start method for models holding JAX ops; the fork check of functions
       compiled with ``mode="JAX"``; nutpie's Numba backend calls a model
       holding JAX ops through host callbacks, not a ``numba.cfunc`` it
       would compile in every process, and adapts its mass matrix from
       the draws' variances (``adaptation="draw_diag"``) unless told
       otherwise (:mod:`~pytensor.compile._jax_ofg.samplers.nutpie`).
    7. **Start-up**: the PyTensor flags ``jax_ofg__xla_cache`` (JAX's
       persistent compilation cache under PyTensor's ``compiledir``) and
       ``jax_ofg__trace_cache`` (traces kept in memory and on disk, next to
       it: :mod:`~pytensor.compile._jax_ofg.cache.traces`); an audit hook
       that watched traces see (:mod:`~pytensor.compile._jax_ofg.cache.watch`),
       and the installed distributions as the process starts (part of every
       key).
    8. **Errors**: JAX's log of a failed callback is dropped when the error
       comes out of one of our calls, which names the function itself
       (:class:`~pytensor.compile._jax_ofg.errors.MuteCallbackLogs`).

    Calling it again does nothing.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True

        jax.config.update("jax_enable_x64", True)
        small_linalg.add_config_flag()
        small_linalg.lower_small_linalg()

        after_import(JAX_BACKEND, _register_jax_lowering)
        register_funcify_and_cache_key(JaxHostOp)(
            numba_dispatch.numba_funcify_JaxHostOp
        )
        numba_dispatch.bodies_module()
        numba_dispatch.install_direct_host_thunk()

        compat.register_vectorization(OpFromJax, vectorize_op_from_jax)
        compat.register_as_tensor(SymbolicCallable, not_a_tensor)

        _register_rewrites()

        if hasattr(os, "register_at_fork"):  # Unix; elsewhere there is no fork
            os.register_at_fork(
                before=fork_guard.before_fork,
                after_in_child=fork_guard.after_fork_in_child,
            )
        pymc.install_pymc_start_method_choice()
        nutpie.install_nutpie_host_callbacks()

        xla.add_config_flag()
        programs.add_config_flag()
        cores.add_config_flag()
        xla.configure_xla_cache()
        xla.write_entries_atomically()
        trace_cache.add_config_flag()
        watch.install()
        environment.installed_distributions()

        logging.getLogger(CALLBACK_LOGGER).addFilter(MuteCallbackLogs())


def _register_jax_lowering(backend) -> None:
    """Register the JAX lowering of :class:`OpFromJax`, once PyTensor's JAX backend is in.

    Imported here, not at the top: importing the module imports the backend.
    The backend sets ``jax_enable_x64`` from ``floatX`` when imported: x64 is
    set again.
    """
    from pytensor.link.jax.dispatch.jax_ofg import (
        install_jax_linker_check,
        jax_funcify_OpFromJax,
    )

    backend.jax_funcify.register(OpFromJax)(jax_funcify_OpFromJax)
    install_jax_linker_check()
    jax.config.update("jax_enable_x64", True)


def _register_rewrites() -> None:
    # Before canonicalization, so that later rewrites see the vmapped op.
    optdb.register(
        "jax_ofg_vmap_blockwise",
        dfs_rewriter(vmap_blockwise, ignore_newtrees=True),
        "fast_run",
        "fast_compile",
        position=0.95,
    )
    # Once the graph is simplified (dead gradients have no clients), before
    # the rewrites below, which pair and lower pullbacks by their inputs.
    optdb.register(
        "jax_ofg_prune_pullback_inputs",
        dfs_rewriter(prune_pullback_inputs, ignore_newtrees=True),
        "fast_run",
        "fast_compile",
        position=48.4,
    )
    # After the graph is merged and simplified (equal forward ops are one node
    # by then), before in-place rewrites.
    optdb.register(
        "jax_ofg_fuse_value_and_vjp",
        FuseValueAndVJP(),
        "fast_run",
        "fast_compile",
        position=48.5,
    )
    # After value+grad fusion (48.5) and lazy-ifelse extraction (48.9), before
    # elemwise fusion (49) and in-place rewrites (49.5): island members are
    # plain PyTensor nodes, and what stays outside is fused and made in-place
    # as usual.
    optdb.register(
        ISLANDS_REWRITE, form_jax_islands, "fast_run", "fusion", position=48.95
    )
    # After value+grad fusion, which matches the ops' functions as they were,
    # and after islands, inside which constants are part of the XLA program.
    optdb.register(
        "jax_ofg_bake_constant_inputs",
        dfs_rewriter(bake_constant_inputs, ignore_newtrees=True),
        "fast_run",
        "fast_compile",
        position=48.97,
    )
    # Last: the graph is final (in-place rewrites are at 50-110).
    optdb.register(
        "jax_ofg_readonly_outputs",
        ReadOnlyOutputs(),
        "fast_run",
        "fast_compile",
        position=150,
    )


install()
