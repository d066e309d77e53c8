"""PyMC picks a start method that does not deadlock for models holding JAX ops.

``forkserver``, not ``fork``, when ``pm.sample`` or ``pm.sample_smc`` runs
such a model's chains in processes without an ``mp_ctx``. Registers nothing
itself: :func:`pytensor.compile.jax_ofg.install` calls
:func:`install_pymc_start_method_choice`.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from collections.abc import Callable
from types import ModuleType
from typing import Any

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.import_hooks import after_import
from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops


__all__ = [
    "SAFE_START_METHOD",
    "install_pymc_start_method_choice",
    "model_holds_jax_ops",
]

#: The start method PyMC gets for models holding JAX ops.
SAFE_START_METHOD = (
    "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
)


def model_holds_jax_ops(model: Any) -> bool:
    """Return whether a PyMC model's variables or its log-density hold JAX ops.

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

_log = logging.getLogger(__name__)


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
        caller = compat.caller_frame(1)
        try:
            model = compat.sampled_model(caller)
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

    return initialize_multiprocessing_context


def patch_pymc_module(module: ModuleType) -> bool:
    """Install the start-method choice in one of PyMC's sampling modules.

    Returns whether it is installed; ``False`` when PyMC no longer has the
    function it wraps there (nothing is changed then).
    """
    return compat.patch_method(
        module,
        compat.PYMC_START_METHOD_CHOOSER,
        "chooses_safe_start_method",
        _choosing_safe_start_method,
    )


def install_pymc_start_method_choice() -> None:
    """Patch PyMC's sampling modules now, or when they are imported."""
    for name in compat.PYMC_SAMPLING_MODULES:
        after_import(name, patch_pymc_module)
