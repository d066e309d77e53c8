"""``pm.sample`` sets up its processes for models holding JAX ops: start method, cores.

Changes
-------
Two functions PyMC's sampling modules call while they set up, each wrapped
when its module is imported, each with its own switch:

* ``_initialize_multiprocessing_context`` (in ``pymc.sampling.mcmc`` and
  ``pymc.smc.sampling``, through ``compat.PYMC_START_METHOD_CHOOSER``): when
  the user gave no ``mp_ctx`` and PyMC chose ``fork``, the sampled model is
  looked up and, when it holds JAX ops, the start method becomes
  :data:`~pytensor.compile._jax_ofg.samplers.pymc.SAFE_START_METHOD`
  (``forkserver``, ``spawn`` where there is none). Any other choice is PyMC's.
* ``_cpu_count`` (in ``pymc.sampling.mcmc``, through ``compat.PYMC_CPU_COUNT``):
  when ``pm.sample`` asks for it (the user gave no ``cores``) and the model
  holds JAX ops, the answer is the physical cores of the process's affinity
  mask, capped by its CPU quota
  (:func:`~pytensor.compile._jax_ofg.cores.api.default_cores`). PyMC still
  caps it at 4 and at the number of chains; a ``cores=`` the user passes is
  PyMC's as given; other models get PyMC's own count.

Why
---
XLA's threads do not survive a fork: ``pm.sample(cores=2)`` or
``pm.sample_smc`` with PyMC's default ``fork`` on Linux would deadlock (or,
with ``hooks/at_fork``, stop with a clear error) on a model holding wrapped
functions. PyMC makes the same choice on its own only when the compile mode
is JAX.

PyMC's default ``cores`` is ``min(4, _cpu_count())``, and ``_cpu_count``
returns ``multiprocessing.cpu_count() // 2``: it assumes that half of the
CPUs are SMT siblings. On a machine with one hardware thread per core (many
cloud machines and CI runners), that halves the chains that run at once: on
2 cores, ``pm.sample()`` gave nutpie ``cores=1``, and all its chains ran on
one core.

Upstream
--------
https://github.com/pymc-devs/pymc/issues/7668 (closed: no ``fork`` when
compiling with ``mode="JAX"``); the start method would need no patch if PyMC
also avoided ``fork`` for graphs holding ops that are not fork-safe (a flag
on the op, say). For the cores, no issue is filed yet; this one would
remove the patch:

    **`pm.sample()` uses half the cores on machines without SMT.**
    `pymc.sampling.parallel._cpu_count` returns `multiprocessing.cpu_count() // 2`
    ("assume that half of the cpus are only hardware threads"); its
    docstring says psutil is used when installed, but the code never uses
    it. On a machine with one thread per core (`lscpu`: "Thread(s) per core:
    1"; common on cloud VMs and CI runners) `pm.sample()` runs half as many
    chains at once as it could: on 2 cores, nutpie gets `cores=1` and runs
    every chain on one thread. It also ignores the affinity mask (`taskset`,
    cpusets) and cgroup CPU quotas (`cpu.max`), which containers set.
    Proposal: count the physical cores in the process's affinity mask
    (Linux: `/sys/devices/system/cpu/cpuN/topology/thread_siblings_list`;
    `psutil.cpu_count(logical=False)` elsewhere), capped by the cgroup
    quota, as `os.process_cpu_count()` counts the mask in Python 3.13.

Checked with
------------
PyMC 6.4.0 (``_initialize_multiprocessing_context`` and its callers'
``model``; ``_cpu_count``, called by ``sample`` after it resolved its
``model``: checked by ``tests/compile/test_jax_ofg_compat.py``).

Off switch
----------
``jax_ofg__pymc_start_method=False``: PyMC's own start method (pass
``mp_ctx``). ``jax_ofg__pymc_default_cores=False``: PyMC's own count (pass
``cores``).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cores import api as cores
from pytensor.compile._jax_ofg.flags import PYMC_DEFAULT_CORES, PYMC_START_METHOD
from pytensor.compile._jax_ofg.hooks.import_finder import after_import
from pytensor.compile._jax_ofg.samplers.pymc import (
    SAFE_START_METHOD,
    model_holds_jax_ops,
)


__all__ = ["install", "patch_cpu_count", "patch_start_method"]

_log = logging.getLogger(__name__)


def _sampled_model_holds_jax_ops() -> bool:
    """Whether the model PyMC's sampling function (two frames up) samples holds JAX
    ops."""
    caller = compat.caller_frame(2)
    try:
        model = compat.sampled_model(caller)
    finally:
        del caller
    return model is not None and model_holds_jax_ops(model)


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
        if not _sampled_model_holds_jax_ops():
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


def _counting_physical_cores(cpu_count: Callable[[], int]) -> Callable[[], int]:
    """Wrap PyMC's ``_cpu_count``: the physical cores, for models holding JAX ops."""

    @functools.wraps(cpu_count)
    def physical_cpu_count() -> int:
        if not PYMC_DEFAULT_CORES.value or not _sampled_model_holds_jax_ops():
            return cpu_count()
        count = cores.default_cores()
        _log.debug("pm.sample's default cores: %d physical cores", count)
        return count

    return physical_cpu_count


def patch_start_method(module: ModuleType) -> bool:
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


def patch_cpu_count(module: ModuleType) -> bool:
    """Install the count in ``pymc.sampling.mcmc``; whether it is installed
    (``False``, nothing changed, when PyMC moved the function)."""
    return compat.patch_method(
        module, compat.PYMC_CPU_COUNT, "counts_physical_cores", _counting_physical_cores
    )


def install() -> None:
    """Patch PyMC's sampling modules now, or when they are imported.

    The start method unless switched off (read now); the count always, the
    flag ``jax_ofg__pymc_default_cores`` read when ``pm.sample`` asks for it.
    """
    if PYMC_START_METHOD.value:
        for name in compat.PYMC_SAMPLING_MODULES:
            after_import(name, patch_start_method)
    after_import(compat.PYMC_SAMPLE_MODULE, patch_cpu_count)
