"""Wrap JAX functions as PyTensor Ops: the public names, and :func:`install`.

Importing this module runs :func:`install` once, the one place where the
package acts on the process (registrations with PyTensor, JAX settings, hooks
into PyMC); every other module imports without side effects. The modules and
their layers: the developer notes (``doc/developer.rst``).
"""

from __future__ import annotations

import threading


try:
    import jax
except ImportError as _error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "pytensor.compile.jax_ofg needs JAX, which is not installed. "
        "Install it with `pip install jax` (or `pip install pytensor-jax-ofg`, "
        "which depends on it)."
    ) from _error

from pytensor.compile._jax_ofg import compat, flags
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.cache.api import clear_trace_cache, trace_cache_info
from pytensor.compile._jax_ofg.cores import api as cores
from pytensor.compile._jax_ofg.errors import (
    WrappedFunctionRuntimeWarning,
    runtime_error_counts,
)
from pytensor.compile._jax_ofg.hooks import at_fork, callback_logs
from pytensor.compile._jax_ofg.hooks.import_finder import after_import
from pytensor.compile._jax_ofg.host import fork_guard
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
from pytensor.compile._jax_ofg.patches import (
    jax_linker_check,
    linalg_lowering,
    numba_direct_thunk,
    nutpie_adaptation,
    nutpie_host_callbacks,
    pymc_sampling,
    xla_cache,
    xla_cache_writes,
)
from pytensor.compile._jax_ofg.samplers.chain_processes import (
    ChainProcessError,
    SamplingInterrupted,
    sample_in_processes,
)
from pytensor.compile._jax_ofg.stan import diffrax_settings, stan_bound, stan_initvals
from pytensor.compile._jax_ofg.tracing.shapes import ShapeInferenceError
from pytensor.compile.mode import optdb
from pytensor.graph.rewriting.basic import dfs_rewriter


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

    It switches JAX to 64-bit types, registers the ops with PyTensor's
    linkers, graph rewrites and ``vectorize_graph``, and makes a few changes
    to JAX, PyTensor, PyMC and nutpie, each of which can be turned off on its
    own with a PyTensor flag set before the import (``PYTENSOR_FLAGS`` or
    ``.pytensorrc``): the list, with each flag, is in Getting started, "What
    importing the package changes". Calling it again does nothing.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True

        flags.declare()  # first: everything below reads its flag
        jax.config.update("jax_enable_x64", True)
        linalg_lowering.install()

        after_import(compat.JAX_BACKEND, _register_jax_lowering)
        jax_linker_check.install()
        after_import(compat.NUMBA_DISPATCH, _register_numba_call)
        numba_direct_thunk.install()

        compat.register_vectorization(OpFromJax, vectorize_op_from_jax)
        compat.register_as_tensor(SymbolicCallable, not_a_tensor)

        _register_rewrites()

        at_fork.install(fork_guard.before_fork, _after_fork_in_child)
        pymc_sampling.install()
        nutpie_host_callbacks.install()
        nutpie_adaptation.install()

        xla_cache.install()
        xla_cache_writes.install()
        trace_cache.install()

        callback_logs.install()


def _after_fork_in_child() -> None:
    """In a forked child: no JAX (it would deadlock), none of the parent's leases."""
    fork_guard.after_fork_in_child()
    cores.forget_in_child()


def _register_jax_lowering(backend) -> None:
    """Register the JAX lowering of :class:`OpFromJax`, once PyTensor's JAX backend is in.

    Imported here, not at the top: importing the module imports the backend.
    The backend sets ``jax_enable_x64`` from ``floatX`` when imported: x64 is
    set again.
    """
    from pytensor.link.jax.dispatch.jax_ofg import jax_funcify_OpFromJax

    backend.jax_funcify.register(OpFromJax)(jax_funcify_OpFromJax)
    jax.config.update("jax_enable_x64", True)


def _register_numba_call(dispatch) -> None:
    """Register the Numba linker's call of :class:`JaxHostOp`, once PyTensor's Numba
    dispatch is in.

    Imported here, not at the top: PyTensor's Numba dispatch takes about a
    tenth of a second to import, which a process compiling with another
    linker, or none, need not pay.
    """
    from pytensor.link.numba.dispatch import jax_ofg as numba_dispatch
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    register_funcify_and_cache_key(JaxHostOp)(numba_dispatch.numba_funcify_JaxHostOp)
    numba_dispatch.bodies_module()


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
