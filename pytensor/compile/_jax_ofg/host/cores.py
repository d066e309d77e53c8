"""One XLA CPU runtime per core, for sampler threads pinned to that core.

JAX's CPU client runs a program on thread pools of its own: it hands the
whole call to one (asynchronous dispatch), and XLA's executor hands ready
operations of the program to another (the intra-op pool), both sized to the
cores the process may use. A small program's call is then a chain of
hand-offs between threads; when two sampler threads call at once, their
hand-offs meet in the same pools, cross cores, and the pools' idle threads
spin on the core the other chain needs. A process pinned to one core has
neither cost: its pools are one thread each, on the caller's core.

:func:`pin_this_thread` gives a thread that: it pins the thread to a core of
its own (round robin over the usable cores) and makes it a runtime on that
core, a CPU client created there, so that its pools are one thread each on
that core, and that runs each call on the calling thread (synchronous
dispatch). Host programs called from the thread run on that runtime's device
(:func:`thread_device`); every other thread keeps JAX's default device.
nutpie's chain threads are pinned at their first call
(:mod:`~pytensor.compile._jax_ofg.samplers.nutpie`). The flag
``jax_ofg__pin_sampler_threads`` (default on) turns it off.

The benchmarks page's "Chains on threads" section has the measurements.
Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` adds the
flag (:func:`add_config_flag`).

Examples
--------
>>> import threading
>>> found = []
>>> def chain():
...     runtime = pin_this_thread()
...     found.append(runtime is None or thread_device() is runtime.device)
>>> thread = threading.Thread(target=chain)
>>> thread.start(); thread.join()
>>> found
[True]
>>> thread_device() is None  # this thread was not pinned
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import Iterator

import jax

from pytensor import config
from pytensor.compile._jax_ofg import compat
from pytensor.configparser import BoolParam


__all__ = [
    "CoreRuntime",
    "add_config_flag",
    "pin_this_thread",
    "runtime_of_core",
    "thread_device",
    "usable_cores",
]

_log = logging.getLogger(__name__)


def add_config_flag() -> None:
    """Add the PyTensor flag ``jax_ofg__pin_sampler_threads`` (default on)."""
    if not hasattr(config, "jax_ofg__pin_sampler_threads"):
        config.add(
            "jax_ofg__pin_sampler_threads",
            "Pin each of nutpie's chain threads to a core of its own and run its "
            "programs on an XLA CPU runtime of that core (synchronous, its thread "
            "pools on that core), as a process pinned to one core runs them. Off: "
            "chains call JAX's default CPU device from unpinned threads.",
            BoolParam(True),
            in_c_key=False,
        )


@dataclasses.dataclass(frozen=True)
class CoreRuntime:
    """An XLA CPU client made on one core: its device, and that core."""

    core: int
    device: jax.Device


_RUNTIMES: dict[int, CoreRuntime] = {}
_LOCK = threading.Lock()
_NEXT = itertools.count()
_THREAD = threading.local()


def usable_cores() -> list[int]:
    """Return the cores this process may run on, in order: its main thread's affinity.

    Not the calling thread's: a thread inherits the affinity of the thread
    that started it, which may be one that this module pinned.
    """
    return sorted(os.sched_getaffinity(os.getpid()))


@contextlib.contextmanager
def _on_core(core: int) -> Iterator[None]:
    """Run the block with this thread pinned to ``core``; its affinity is restored."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def runtime_of_core(core: int) -> CoreRuntime:
    """Return the runtime of ``core``, made once per process.

    The client is made with this thread pinned to ``core``: XLA sizes its
    pools to the cores the creating thread may use (one) and their threads
    inherit its pin.
    """
    with _LOCK:
        runtime = _RUNTIMES.get(core)
        if runtime is None:
            with _on_core(core):
                client = compat.make_cpu_client(asynchronous=False)
            (device,) = client.local_devices()
            runtime = _RUNTIMES[core] = CoreRuntime(core, device)
            _log.debug("Made an XLA CPU runtime on core %d", core)
        return runtime


def _applies() -> bool:
    """Whether the flag allows pinning, and the platform can pin threads."""
    return bool(getattr(config, "jax_ofg__pin_sampler_threads", False)) and hasattr(
        os, "sched_setaffinity"
    )


def pin_this_thread() -> CoreRuntime | None:
    """Pin the calling thread to the next usable core and return that core's runtime.

    Consecutive calls take consecutive cores, so that the threads of one
    sampler get distinct cores while there are as many cores as threads.
    Returns None, and pins nothing, when the flag
    ``jax_ofg__pin_sampler_threads`` is off or the platform cannot pin
    threads (not Linux). A thread pinned already keeps its core. Host
    programs that run on another device than the CPU
    (``jax_ofg__host_device``) ignore the runtime.
    """
    runtime = getattr(_THREAD, "runtime", None)
    if runtime is not None or not _applies():
        return runtime
    cores = usable_cores()
    core = cores[next(_NEXT) % len(cores)]
    runtime = runtime_of_core(core)
    os.sched_setaffinity(0, {core})
    _THREAD.runtime = runtime
    _log.debug("Pinned thread %s to core %d", threading.get_native_id(), core)
    return runtime


def thread_device() -> jax.Device | None:
    """Return the device of the runtime the calling thread is pinned to, or None."""
    runtime = getattr(_THREAD, "runtime", None)
    return None if runtime is None else runtime.device
