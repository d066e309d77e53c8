"""XLA CPU runtimes on a core (or a few) of their own, for sampler threads pinned there.

JAX's CPU client runs a program on thread pools of its own: it hands the
whole call to one (asynchronous dispatch), and XLA's executor hands ready
operations of the program to another (the intra-op pool), both sized to the
cores the process may use. A small program's call is then a chain of
hand-offs between threads; when two sampler threads call at once, their
hand-offs meet in the same pools, cross cores, and the pools' idle threads
spin on the core the other chain needs. A process pinned to one core has
neither cost: its pools are one thread each, on the caller's core.

A sampler about to start its threads says how many
(:func:`plan_sampler_threads`); each thread, at its first call, takes a share
of the usable cores and is pinned to the first of them, its home core
(:func:`pin_this_thread`). Its programs then run on a runtime of its own: a
CPU client created on the home core, so that its pools are one thread each
there, which runs each call on the calling thread (synchronous dispatch);
the runtime's device is the thread's JAX default device from then on.
When there are more cores than threads, a share holds several cores, and a
program big enough to use them (:data:`WIDE_FLOPS`, by XLA's cost analysis)
runs on a runtime made on all of them. Every other thread keeps JAX's default
device. nutpie's chain threads are pinned at their first call
(:mod:`~pytensor.compile._jax_ofg.samplers.nutpie`); the flag
``jax_ofg__pin_sampler_threads`` (default on) turns it off.

Registers nothing itself (the flag is declared in ``flags``).

Examples
--------
>>> import threading
>>> found = []
>>> def chain():
...     share = pin_this_thread()
...     found.append(share is None or thread_share() is share)
>>> thread = threading.Thread(target=chain)
>>> thread.start(); thread.join()
>>> found
[True]
>>> thread_share() is None  # this thread was not pinned
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import Iterator, Sequence

import jax

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import PIN_SAMPLER_THREADS


__all__ = [
    "WIDE_FLOPS",
    "Runtime",
    "Share",
    "pin_this_thread",
    "plan_sampler_threads",
    "runtime_on",
    "shares_of",
    "thread_share",
    "usable_cores",
]

_log = logging.getLogger(__name__)

#: A program whose operations add up to this many floating-point operations
#: (XLA's cost analysis: a loop's body counted once) runs on all of its
#: thread's cores, where it has more than one: a 500 x 500 matrix product is
#: 2.5e8; an ODE solve's step, a few thousand.
WIDE_FLOPS = 1e7


@dataclasses.dataclass(frozen=True)
class Runtime:
    """An XLA CPU client made on some cores: those cores, and its one device."""

    cores: tuple[int, ...]
    device: jax.Device


@dataclasses.dataclass(frozen=True)
class Share:
    """A sampler thread's cores: its home core's runtime, and one on all of them."""

    home: Runtime
    #: the runtime on every core of the share, if it has more than one
    wide: Runtime | None


_RUNTIMES: dict[tuple[int, ...], Runtime] = {}
_LOCK = threading.Lock()


class _ThreadState(threading.local):
    """A thread's share and its entered default device; None until it is pinned.

    Class defaults, so that reading an unpinned thread's share (every host
    call does) finds them instead of raising and catching AttributeError,
    which cost 0.7 µs a call.
    """

    share: Share | None = None
    default_device: contextlib.AbstractContextManager | None = None


_THREAD = _ThreadState()
#: The shares the next pinned threads take, in turn (see plan_sampler_threads).
_plan: list[tuple[int, ...]] = []
_next = itertools.count()


def usable_cores() -> list[int]:
    """Return the cores this process may run on, in order: its main thread's affinity.

    Not the calling thread's: a thread inherits the affinity of the thread
    that started it, which may be one that this module pinned.
    """
    return sorted(os.sched_getaffinity(os.getpid()))


def shares_of(cores: Sequence[int], threads: int) -> list[tuple[int, ...]]:
    """Split ``cores`` among ``threads`` threads: contiguous shares, as even as can be.

    >>> shares_of([0, 1, 2, 3, 4], 2)
    [(0, 1, 2), (3, 4)]
    >>> shares_of([0, 1], 4)  # more threads than cores: a core each, in turn
    [(0,), (1,)]
    """
    if threads >= len(cores):
        return [(core,) for core in cores]
    size, extra = divmod(len(cores), threads)
    shares, start = [], 0
    for k in range(threads):
        stop = start + size + (k < extra)
        shares.append(tuple(cores[start:stop]))
        start = stop
    return shares


def plan_sampler_threads(threads: int) -> None:
    """Say that a sampler is about to start ``threads`` threads: their shares of the
    cores, taken in turn by :func:`pin_this_thread`."""
    global _next
    with _LOCK:
        _plan[:] = shares_of(usable_cores(), max(threads, 1))
        _next = itertools.count()


@contextlib.contextmanager
def _on_cores(cores: tuple[int, ...]) -> Iterator[None]:
    """Run the block with this thread pinned to ``cores``; its affinity is restored."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def runtime_on(cores: tuple[int, ...]) -> Runtime:
    """Return the runtime made on ``cores``, once per process.

    The client is made with this thread pinned to ``cores``: XLA sizes its
    pools to the cores the creating thread may use, and their threads
    inherit its pin.
    """
    with _LOCK:
        runtime = _RUNTIMES.get(cores)
        if runtime is None:
            with _on_cores(cores):
                client = compat.make_cpu_client(asynchronous=False)
            (device,) = client.local_devices()
            runtime = _RUNTIMES[cores] = Runtime(cores, device)
            _log.debug("Made an XLA CPU runtime on cores %s", cores)
        return runtime


def pin_this_thread() -> Share | None:
    """Pin the calling thread to its share's home core; return the share.

    Threads take the shares of the last :func:`plan_sampler_threads` in turn
    (without a plan, a core each, in turn). Returns None, and pins nothing,
    when the flag ``jax_ofg__pin_sampler_threads`` is off or the platform
    cannot pin threads (not Linux). A thread pinned already keeps its share,
    and its home core's device is its JAX default device.
    """
    share = _THREAD.share
    if share is not None or not _applies():
        return share
    with _LOCK:
        plan = list(_plan) or shares_of(usable_cores(), len(usable_cores()))
        cores = plan[next(_next) % len(plan)]
    home = runtime_on(cores[:1])
    share = Share(home, runtime_on(cores) if len(cores) > 1 else None)
    os.sched_setaffinity(0, {cores[0]})
    # JAX's default device, for this thread's life: its home core's. Entered,
    # never left, as a sampler thread runs only this package's calls: each
    # call would otherwise pay for entering it (3 µs of 70).
    _THREAD.default_device = jax.default_device(home.device)
    _THREAD.default_device.__enter__()
    _THREAD.share = share
    _log.debug("Pinned thread %s to core %d", threading.get_native_id(), cores[0])
    return share


def _applies() -> bool:
    """Whether the flag allows pinning, and the platform can pin threads."""
    return bool(PIN_SAMPLER_THREADS.value) and hasattr(os, "sched_setaffinity")


def thread_share() -> Share | None:
    """Return the share of the cores the calling thread is pinned to, or None."""
    return _THREAD.share
