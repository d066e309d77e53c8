"""Sampler threads pinned to CPUs of their own, chosen by what is free machine-wide.

A sampler about to start its threads opens a :class:`SamplerSession` for
them. The session plans a share of the free CPUs for each thread
(:func:`shares_of`): its home CPU, a distinct physical core where one is
free, and the spare CPUs a big program may use. At its first call each
thread takes a :class:`~pytensor.compile._jax_ofg.cores.leases.Lease` on its
home CPU, so that no other thread, of this process or another, is pinned
there while it lives; it is pinned to that CPU and runs its programs on the
CPU's :class:`~pytensor.compile._jax_ofg.cores.runtimes.Runtime`. A thread
that finds no free CPU, or that would exceed the CPU quota, stays where the
OS puts it: never more chains on a CPU than the OS would put there.

A thread's pin lives as long as the thread: its lease is closed by the C
library when the thread exits (:func:`compat.close_at_thread_exit`), so a
sampler's threads free their CPUs as they end, even in a process that goes
on. When a session closes (its sampler is gone), its threads still alive get
their affinity back. Nothing here runs per call but :func:`thread_pin`.
Any failure while pinning leaves the thread unpinned, with one warning.
Registers nothing on import.

Examples
--------
>>> shares_of([0, 1, 2, 3, 4], 2)  # a home each, the rest in turn
[(0, 2, 4), (1, 3)]
>>> shares_of([0, 1], 4)  # more threads than free CPUs: the others float
[(0,), (1,)]
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import threading
import warnings
from collections.abc import Sequence

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cores.leases import Leases
from pytensor.compile._jax_ofg.cores.runtimes import Runtime, runtime_on
from pytensor.compile._jax_ofg.cores.topology import Topology, read_topology


__all__ = ["SamplerSession", "ThreadPin", "shares_of", "thread_pin"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class ThreadPin:
    """A thread pinned to a CPU of its own: its runtime, and the cores it spares."""

    #: the thread's native id
    tid: int
    #: the CPU it holds a lease on (None: it holds none and is not pinned)
    cpu: int | None
    #: the runtime of its CPU while its session runs (None: not pinned now)
    runtime: Runtime | None
    #: the CPUs of its share (its home first): a big program runs on all of them
    share: tuple[int, ...]
    #: its affinity before it was pinned, given back when its session closes
    previous: frozenset[int]
    session: SamplerSession | None

    def runtime_on_share(self) -> Runtime | None:
        """Return the runtime on every CPU of its share (for big programs), if it
        has several."""
        if self.runtime is None or len(self.share) < 2:
            return None
        return runtime_on(tuple(sorted(self.share)))


class _CallingThread(threading.local):
    """The calling thread's pin; a class default, so that an unpinned thread's
    lookup (every host call makes one) does not raise and catch."""

    pin: ThreadPin | None = None


_CALLING = _CallingThread()
#: Every thread this process pinned (or tried to), by native id: the pins
#: outlive a thread's Python state, which nutpie's threads may lose per call.
_PINS: dict[int, ThreadPin] = {}
_LOCK = threading.Lock()
_warned: list[str] = []


def thread_pin() -> ThreadPin | None:
    """Return the calling thread's pin, if it is pinned now (the per-call lookup)."""
    return _CALLING.pin


def shares_of(free: Sequence[int], threads: int) -> list[tuple[int, ...]]:
    """Split the ``free`` CPUs (in order of preference) among ``threads`` threads.

    Each share's first CPU is its thread's home: the first ``threads`` free
    CPUs, distinct physical cores when ``free`` lists them first; the other
    CPUs go to the shares in turn. At most one share per free CPU.
    """
    count = min(threads, len(free))
    shares = [[cpu] for cpu in free[:count]]
    for k, cpu in enumerate(free[count:]):
        shares[k % count].append(cpu)
    return [tuple(share) for share in shares]


class SamplerSession:
    """The threads one sampler is about to start: their shares of the free CPUs.

    Parameters
    ----------
    threads
        How many threads the sampler starts that will call the model.
    machine, leases
        The process's CPUs and the machine's leases (tests pass their own).
    """

    def __init__(
        self,
        threads: int,
        machine: Topology | None = None,
        leases: Leases | None = None,
    ):
        self.machine = machine or read_topology()
        self.leases = leases or Leases()
        _forget_dead_threads()
        room = self.machine.busy_threads() - _pinned_threads()
        self.shares = shares_of(self.leases.free(self.machine), min(threads, room))
        self._next = itertools.count()
        self.pins: list[ThreadPin] = []
        self.closed = False

    def pin_calling_thread(self) -> ThreadPin | None:
        """Pin the calling thread to its share's home CPU; return its pin, or None.

        A thread pinned already by this session keeps its pin; one pinned by
        an earlier session takes its CPU again. A thread beyond the planned
        shares, or that finds every CPU taken, is not pinned. Any failure
        leaves the thread unpinned, with one warning.
        """
        tid = threading.get_native_id()
        with _LOCK:
            pin = _PINS.get(tid)
        if pin is not None and pin.session is self:
            _CALLING.pin = pin if pin.runtime is not None else None
            return _CALLING.pin
        try:
            pin = self._resume(pin) if pin is not None else self._pin_new(tid)
        except Exception as error:
            _warn_once(error)
            pin = ThreadPin(tid, None, None, (), frozenset(), self)
        with _LOCK:
            _PINS[tid] = pin
        _CALLING.pin = pin if pin.runtime is not None else None
        return _CALLING.pin

    def _pin_new(self, tid: int) -> ThreadPin:
        previous = frozenset(os.sched_getaffinity(0))
        k = next(self._next)
        share = self.shares[k] if k < len(self.shares) else ()
        lease = self.leases.take(self.machine, among=share) if share else None
        if lease is None and share:  # taken since the plan: any free CPU
            lease = self.leases.take(self.machine)
        if lease is None:
            _log.debug("Thread %d is not pinned: no free CPU", tid)
            return ThreadPin(tid, None, None, (), previous, self)
        try:
            runtime = runtime_on((lease.cpu,))
            os.sched_setaffinity(0, {lease.cpu})
            # From here the C library closes the lease when the thread exits.
            compat.close_at_thread_exit(lease.fd)
        except BaseException:
            os.sched_setaffinity(0, previous)
            lease.release()
            raise
        lease.hand_over()
        share = (lease.cpu, *(c for c in share if c != lease.cpu))
        pin = ThreadPin(tid, lease.cpu, runtime, share, previous, self)
        self.pins.append(pin)
        _log.debug("Pinned thread %d to CPU %d", tid, lease.cpu)
        return pin

    def _resume(self, pin: ThreadPin) -> ThreadPin:
        """Take again, for this session, a thread an earlier session pinned."""
        if pin.cpu is None:
            return self._pin_new(pin.tid)
        os.sched_setaffinity(0, {pin.cpu})
        pin.runtime, pin.session = runtime_on((pin.cpu,)), self
        self.pins.append(pin)
        return pin

    def close(self) -> None:
        """The sampler is gone: its threads still alive get their affinity back.

        They keep their leases (and CPUs) until they exit or a later session
        takes them again.
        """
        if self.closed:
            return
        self.closed = True
        for pin in self.pins:
            if pin.session is not self or not _alive(pin.tid):
                continue
            pin.runtime = None
            with contextlib.suppress(OSError):  # it exited meanwhile
                os.sched_setaffinity(pin.tid, pin.previous)


def _pinned_threads() -> int:
    """Return how many live threads of this process hold a lease."""
    with _LOCK:
        return sum(1 for pin in _PINS.values() if pin.cpu is not None)


def _forget_dead_threads() -> None:
    """Drop the pins of threads that exited (the C library closed their leases)."""
    with _LOCK:
        for tid in [tid for tid in _PINS if not _alive(tid)]:
            del _PINS[tid]


def _alive(tid: int) -> bool:
    """Return whether this process has a thread ``tid`` (Linux's /proc)."""
    return os.path.exists(f"/proc/self/task/{tid}")


def _warn_once(error: Exception) -> None:
    message = (
        f"pytensor-jax-ofg could not pin a sampler thread to a CPU "
        f"({type(error).__name__}: {error}); its chains run unpinned, with the "
        "same draws. Set PYTENSOR_FLAGS=jax_ofg__pin_sampler_threads=False to "
        "silence this."
    )
    _log.debug(message, exc_info=True)
    with _LOCK:
        if _warned:
            return
        _warned.append(message)
    warnings.warn(message, RuntimeWarning, stacklevel=2)
