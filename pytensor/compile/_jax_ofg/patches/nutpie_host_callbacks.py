"""nutpie calls a model holding JAX ops through host callbacks, compiled in no process.

Changes
-------
Wraps ``nutpie.compile_pymc._compile_pymc_model_numba`` (nutpie's Numba
backend, through ``compat.NUTPIE_NUMBA_COMPILER``) when ``nutpie.compile_pymc``
is imported: for a model holding JAX ops, and no ``numba.cfunc`` options,
nutpie gets C function pointers made by :mod:`ctypes`
(:func:`~pytensor.compile._jax_ofg.samplers.nutpie.compile_with_host_callbacks`)
instead of a ``numba.cfunc`` around the log-density. Other models keep
nutpie's own path.

Why
---
nutpie's ``numba.cfunc`` closes over the model, so Numba cannot cache it:
every process types and lowers the whole log-density again before its first
draw (about 3 s for ``examples/stan_ode.py``, 10 s for larger models), to
enter object mode and call XLA anyway.

Upstream
--------
https://github.com/pymc-devs/nutpie/pull/334 (make nutpie's Numba wrapper
functions disk-cacheable; closed: ``compile_kwargs={"cache": True}`` reaches
``numba.cfunc``). It would be unnecessary if nutpie let a compiled function
bring its own C callback, or cached its wrapper.

Checked with
------------
nutpie 0.16.11 (``_compile_pymc_model_numba``, ``_make_functions``,
``make_user_data``, ``_prepare_dims_and_coords``, ``CompiledPyMCModel``),
PyMC 6.4.0.

Off switch
----------
``jax_ofg__nutpie_host_callbacks=False``: nutpie's own ``numba.cfunc``.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import NUTPIE_HOST_CALLBACKS
from pytensor.compile._jax_ofg.hooks.import_finder import after_import
from pytensor.compile._jax_ofg.samplers.nutpie import compile_with_host_callbacks
from pytensor.compile._jax_ofg.samplers.pymc import model_holds_jax_ops


__all__ = ["install", "patch_nutpie_module"]

_log = logging.getLogger(__name__)


def _compiling_with_host_callbacks(compile_numba: Callable) -> Callable:
    """Wrap nutpie's ``_compile_pymc_model_numba``: models holding JAX ops get host callbacks.

    Other models, and calls with ``numba.cfunc`` options, keep nutpie's own path.
    """
    nutpie_module = compile_numba.__module__

    @functools.wraps(compile_numba)
    def compile_pymc_model_numba(
        model, pymc_initial_point_fn, var_names=None, **kwargs
    ):
        if kwargs or not model_holds_jax_ops(model):
            return compile_numba(model, pymc_initial_point_fn, var_names, **kwargs)
        _log.debug("nutpie calls the model's JAX ops through host callbacks")
        return compile_with_host_callbacks(
            sys.modules[nutpie_module], model, pymc_initial_point_fn, var_names
        )

    return compile_pymc_model_numba


def patch_nutpie_module(module: ModuleType) -> bool:
    """Install host callbacks in ``nutpie.compile_pymc``.

    Returns whether they are installed; ``False`` (nothing changed) when
    nutpie has moved one of the names they use.
    """
    if compat.nutpie_numba_api(module) is None:
        return False
    return compat.patch_method(
        module,
        compat.NUTPIE_NUMBA_COMPILER,
        "compiles_host_callbacks",
        _compiling_with_host_callbacks,
    )


def install() -> None:
    """Patch ``nutpie.compile_pymc`` now, or when it is imported, unless switched
    off."""
    if NUTPIE_HOST_CALLBACKS.value:
        after_import(compat.NUTPIE_COMPILE_MODULE, patch_nutpie_module)
