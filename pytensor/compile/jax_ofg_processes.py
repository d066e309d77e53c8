"""PyMC and the JAX linker: processes running wrapped functions never deadlock.

JAX cannot run in a process forked after it started (see
:mod:`~pytensor.compile.jax_ofg_fork`, whose at-fork handlers make every host
call in such a process raise a clear error). This module covers the rest:

* **PyMC picks a safe start method by itself**: when ``pm.sample`` or
  ``pm.sample_smc`` runs chains in processes, the user gave no ``mp_ctx`` and
  the model holds JAX ops, PyMC's choice of ``fork`` becomes ``forkserver``
  (``spawn`` where there is no forkserver). PyMC does the same on its own only
  when the compile mode is JAX. Other models, an explicit ``mp_ctx`` and the
  rest of the program's multiprocessing are left alone
  (:func:`install_pymc_start_method_choice`);
* **the JAX linker**, which has no host call: a function compiled with
  ``mode="JAX"`` whose graph holds such ops checks the fork note before
  calling its XLA program (:func:`install_jax_linker_check`).

Each step checks the PyMC and PyTensor internals it relies on and leaves them
as they are when they have moved (the at-fork error still prevents the
deadlock); ``tests/compile/test_jax_ofg_processes.py`` fails when they do.

Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` calls both
``install_*`` functions.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from types import FrameType, ModuleType
from typing import Any

from pytensor.compile import jax_ofg_fork
from pytensor.compile.jax_ofg_errors import report
from pytensor.compile.jax_ofg_host import graph_holds_jax_ops, wrapped_functions_in
from pytensor.compile.jax_ofg_import_hooks import after_import


__all__ = [
    "SAFE_START_METHOD",
    "install_jax_linker_check",
    "install_pymc_start_method_choice",
    "model_holds_jax_ops",
]

#: The start method PyMC gets for models holding JAX ops.
SAFE_START_METHOD = (
    "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
)


def model_holds_jax_ops(model: Any) -> bool:
    """Whether a PyMC model's variables or its log-density hold JAX ops.

    The log-density graph is built only when the variables hold none: it is
    where the ``logp=`` function of a ``pm.CustomDist`` first runs.
    """
    variables = [*model.basic_RVs, *model.deterministics, *model.potentials]
    if graph_holds_jax_ops(variables):
        return True
    try:
        return graph_holds_jax_ops([model.logp()])
    except Exception:  # PyMC will report it when it builds the same graph
        return False


# --------------------------------------------------------------------------
# PyMC: a non-fork start method for models holding JAX ops
# --------------------------------------------------------------------------

#: The modules whose sampling functions choose PyMC's start method, through
#: the function :data:`_PYMC_CHOOSER` they import from ``pymc.sampling.parallel``.
PYMC_SAMPLING_MODULES = ("pymc.sampling.mcmc", "pymc.smc.sampling")
_PYMC_CHOOSER = "_initialize_multiprocessing_context"

_log = logging.getLogger(__name__)


def _sampled_model(caller: FrameType | None) -> Any:
    """The model that ``pm.sample`` / ``pm.sample_smc`` (the caller) is sampling.

    Both resolve their ``model`` argument into a local of that name before
    choosing the start method; outside them, the model on the context stack.
    """
    from pymc.model.core import Model

    model = caller.f_locals.get("model") if caller is not None else None
    if isinstance(model, Model):
        return model
    return Model.get_context(error_if_none=False)


def _choosing_safe_start_method(choose: Callable) -> Callable:
    """Wrap PyMC's ``_initialize_multiprocessing_context``.

    When the user gave no ``mp_ctx`` and PyMC chose ``fork``, the sampled
    model is looked up and, when it holds JAX ops, the start method becomes
    :data:`SAFE_START_METHOD`.
    """

    @functools.wraps(choose)
    def initialize_multiprocessing_context(mp_ctx=None, *args, **kwargs):
        context = choose(mp_ctx, *args, **kwargs)
        if mp_ctx is not None or context.get_start_method() != "fork":
            return context
        caller = sys._getframe(1)
        try:
            model = _sampled_model(caller)
        finally:
            del caller
        if model is None or not model_holds_jax_ops(model):
            return context
        # Not logged above debug level: pm.sample chooses the start method
        # before the sampler, and nutpie, numpyro and blackjax start no processes.
        _log.debug(
            "The model holds JAX ops, which cannot run in forked processes: "
            "PyMC's worker processes (if any) are started with mp_ctx=%r.",
            SAFE_START_METHOD,
        )
        return multiprocessing.get_context(SAFE_START_METHOD)

    initialize_multiprocessing_context.chooses_safe_start_method = True
    return initialize_multiprocessing_context


def patch_pymc_module(module: ModuleType) -> bool:
    """Install the start-method choice in one of :data:`PYMC_SAMPLING_MODULES`.

    Returns whether it is installed; ``False`` when PyMC no longer has the
    function it wraps there (nothing is changed then).
    """
    choose = getattr(module, _PYMC_CHOOSER, None)
    if not callable(choose):
        return False
    if not getattr(choose, "chooses_safe_start_method", False):
        setattr(module, _PYMC_CHOOSER, _choosing_safe_start_method(choose))
    return True


def install_pymc_start_method_choice() -> None:
    """Patch PyMC's sampling modules now, or when they are imported."""
    for name in PYMC_SAMPLING_MODULES:
        after_import(name, patch_pymc_module)


# --------------------------------------------------------------------------
# The JAX linker: no host call, so its compiled function checks
# --------------------------------------------------------------------------


class _ForkCheckedFunction:
    """A JAX-linker function holding wrapped JAX functions, checked before each call.

    Its errors name the wrapped functions, as a host call's do (see
    :func:`~pytensor.compile.jax_ofg_errors.report`).
    """

    __slots__ = ("_compiled", "_functions")

    def __init__(self, compiled: Callable, functions: Sequence[str] = ()):
        self._compiled = compiled
        self._functions = tuple(functions)

    def __call__(self, *args):
        if jax_ofg_fork.forked_after_jax_started:
            jax_ofg_fork.refuse_call_after_fork(
                "A function compiled with mode='JAX' that holds wrapped JAX functions"
            )
        try:
            return self._compiled(*args)
        except Exception as error:
            what = f"The XLA program of mode='JAX' holding {', '.join(self._functions)}"
            report(error, what, self._functions)
            raise

    def __getattr__(self, name: str) -> Any:  # `lower`, `trace`, ... of jax.jit
        return getattr(self._compiled, name)


def install_jax_linker_check() -> bool:
    """Make ``JAXLinker.jit_compile`` check graphs holding JAX ops after a fork.

    Graphs without them get PyTensor's function unchanged. Returns whether the
    check is installed (``False`` when PyTensor's linker has moved).
    """
    from pytensor.link.jax.linker import JAXLinker

    jit_compile = getattr(JAXLinker, "jit_compile", None)
    if not callable(jit_compile):
        return False
    if getattr(jit_compile, "checks_forked_processes", False):
        return True

    @functools.wraps(jit_compile)
    def checked_jit_compile(self, fn):
        compiled = jit_compile(self, fn)
        fgraph = getattr(self, "fgraph", None)
        if fgraph is not None and graph_holds_jax_ops(fgraph.outputs):
            return _ForkCheckedFunction(compiled, wrapped_functions_in(fgraph.outputs))
        return compiled

    checked_jit_compile.checks_forked_processes = True
    JAXLinker.jit_compile = checked_jit_compile
    return True
