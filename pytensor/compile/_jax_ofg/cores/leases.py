"""Leases on CPUs, machine-wide: which CPUs hold a chain of ours, in any process.

A lease is an exclusive :func:`fcntl.flock` on a file per CPU, in a folder
that every process of the machine sees (:data:`FOLDER`, under the temporary
directory). The kernel drops the lock when the last descriptor of its open
file is closed: when its holder closes it, or dies, however it dies. No
process has to clean up after another, and a killed worker leaves nothing
behind. The descriptors are not inherited by programs a process starts
(``O_CLOEXEC``), and a forked child closes its copies of those this module
holds (:func:`forget_in_child`), which leaves the parent's locks in place;
a child forked while a chain thread is pinned keeps that thread's lease
until it exits or starts a program.

Processes that do not share the folder (containers with their own
``/tmp``, or a ``TMPDIR`` of their own) do not see each other's leases.
Registers nothing: ``hooks/at_fork`` calls :func:`forget_in_child`.

Examples
--------
>>> import tempfile
>>> from pytensor.compile._jax_ofg.cores.topology import Topology
>>> machine = Topology(usable=(0, 1), siblings={}, quota=None)
>>> leases = Leases(Path(tempfile.mkdtemp()))
>>> first, second = leases.take(machine), leases.take(machine)
>>> first.cpu, second.cpu, leases.take(machine)
(0, 1, None)
>>> first.release()
>>> leases.free(machine)
[0]
>>> second.release()
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from pytensor.compile._jax_ofg.cores.topology import Topology


__all__ = ["FOLDER", "Lease", "Leases", "forget_in_child"]

#: Where the lease files live: one per CPU, named after it. Sticky and open
#: to every user, as ``/tmp`` is, so that processes of several users agree.
FOLDER = Path(tempfile.gettempdir()) / "pytensor-jax-ofg-cpus"

#: The descriptors of this process's leases, closed in a forked child.
_OPEN: set[int] = set()
_LOCK = threading.Lock()


@dataclasses.dataclass(eq=False)
class Lease:
    """This process's hold on ``cpu``: a locked file descriptor, until released."""

    cpu: int
    #: the descriptor that holds the lock (None once released or handed on)
    fd: int | None

    def release(self) -> None:
        """Drop the lease (close its descriptor); releasing again does nothing."""
        fd, self.fd = self.fd, None
        if fd is not None:
            with _LOCK:
                _OPEN.discard(fd)
            os.close(fd)

    def hand_over(self) -> int:
        """Return the descriptor and forget it: whoever takes it closes it.

        For a descriptor closed by the C library when its thread exits
        (:mod:`~pytensor.compile._jax_ofg.cores.threads`), which this process
        must then never close itself: its number may be reused by then.
        """
        fd, self.fd = self.fd, None
        with _LOCK:
            _OPEN.discard(fd)
        return fd


class Leases:
    """The lease files of one folder: take a lease on a free CPU, find free ones."""

    def __init__(self, folder: Path = FOLDER):
        self.folder = folder

    def take(
        self, machine: Topology, among: Iterable[int] | None = None
    ) -> Lease | None:
        """Take a lease on a free CPU of ``machine`` (of ``among``, if given, in its
        order); None if every one is held.

        A CPU whose SMT siblings are all free comes first: it is a physical
        core of its own. Then any free CPU.
        """
        order = list(machine.preferred() if among is None else among)
        for cpu in order:
            group = [
                c for c in machine.siblings.get(cpu, (cpu,)) if c in machine.usable
            ]
            lease = self._lock_core(cpu, group)
            if lease is not None:
                return lease
        for cpu in order:
            lease = self._lock(cpu)
            if lease is not None:
                return lease
        return None

    def free(self, machine: Topology) -> list[int]:
        """Return the CPUs of ``machine`` no process holds a lease on, in its order of
        preference (a moment's answer: another process may take one next).
        """
        free = []
        for cpu in machine.preferred():
            lease = self._lock(cpu)
            if lease is not None:
                lease.release()
                free.append(cpu)
        return free

    def _lock_core(self, cpu: int, group: list[int]) -> Lease | None:
        """Take ``cpu`` if no other CPU of its core (``group``) is held either."""
        taken = []
        try:
            for other in group or [cpu]:
                lease = self._lock(other)
                if lease is None:
                    return None
                taken.append(lease)
            mine = next(lease for lease in taken if lease.cpu == cpu)
            taken.remove(mine)
            return mine
        finally:
            for lease in taken:
                lease.release()

    def _lock(self, cpu: int) -> Lease | None:
        """Lock ``cpu``'s file without waiting; None if another holder has it."""
        fd = _open(self.folder / f"cpu{cpu}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        _remember(fd)
        return Lease(cpu, fd)


def _open(path: Path) -> int:
    """Open (creating) a lease file, its folder made first if need be."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        return _at_least_three(os.open(path, flags, 0o644))
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(parents=True)
            path.parent.chmod(0o1777)  # umask aside: every user's processes
        return _at_least_three(os.open(path, flags, 0o644))


def _at_least_three(fd: int) -> int:
    """Return ``fd`` moved past 0, 1 and 2 (a C library closing it by a zero value
    would read no descriptor at all: see ``cores/threads``)."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _remember(fd: int) -> None:
    with _LOCK:
        _OPEN.add(fd)


def forget_in_child() -> None:
    """In a forked child: close the copies of the parent's lease descriptors.

    Closing a copy leaves the lock with the parent's descriptor; keeping it
    would hold the parent's leases as long as the child lives.
    """
    for fd in list(_OPEN):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN.clear()
