"""PyMC picks a start method that does not deadlock for models holding JAX ops.

Changes
-------
Wraps ``_initialize_multiprocessing_context`` in PyMC's sampling modules
(``pymc.sampling.mcmc`` and ``pymc.smc.sampling``, through
``compat.PYMC_START_METHOD_CHOOSER``), when they are imported: when the user
gave no ``mp_ctx`` and PyMC chose ``fork``, the sampled model is looked up
and, when it holds JAX ops, the start method becomes
:data:`~pytensor.compile._jax_ofg.samplers.pymc.SAFE_START_METHOD`
(``forkserver``, ``spawn`` where there is none). Any other choice is PyMC's.

Why
---
XLA's threads do not survive a fork: ``pm.sample(cores=2)`` or
``pm.sample_smc`` with PyMC's default ``fork`` on Linux would deadlock (or,
with ``hooks/at_fork``, stop with a clear error) on a model holding wrapped
functions. PyMC makes the same choice on its own only when the compile mode
is JAX.

Upstream
--------
https://github.com/pymc-devs/pymc/issues/7668 (closed: no ``fork`` when
compiling with ``mode="JAX"``); it would be unnecessary if PyMC also avoided
``fork`` for graphs holding ops that are not fork-safe (a flag on the op, say).

Checked with
------------
PyMC 6.4.0 (``_initialize_multiprocessing_context`` and its callers'
``model``, checked by ``tests/compile/test_jax_ofg_compat.py``).

Off switch
----------
``jax_ofg__pymc_start_method=False``: PyMC's own choice (pass ``mp_ctx``).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import PYMC_START_METHOD
from pytensor.compile._jax_ofg.hooks.import_finder import after_import
from pytensor.compile._jax_ofg.samplers.pymc import (
    SAFE_START_METHOD,
    model_holds_jax_ops,
)


__all__ = ["install", "patch_pymc_module"]

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


def install() -> None:
    """Patch PyMC's sampling modules now, or when they are imported, unless
    switched off."""
    if PYMC_START_METHOD.value:
        for name in compat.PYMC_SAMPLING_MODULES:
            after_import(name, patch_pymc_module)
