"""The one door to the cores room: what samplers and host calls use of it.

The room knows the machine (:mod:`~.topology`: CPUs, SMT siblings, CPU
quota), holds machine-wide leases on CPUs (:mod:`~.leases`), makes XLA CPU
runtimes on cores and loads executables into them (:mod:`~.runtimes`), and
pins sampler threads to free CPUs for their lives (:mod:`~.threads`). The
rest of the package imports only this module. Registers nothing.

* A sampler about to start threads calls :func:`start_session`; each of its
  threads calls the session's ``pin_calling_thread`` at its first call;
  host calls ask :func:`thread_pin` which runtime runs them. Work its first
  chain would do holding the GIL goes to :func:`beside_next_compile`.
* ``pm.sample``'s default ``cores`` comes from :func:`default_cores`.
* :func:`~pytensor.compile._jax_ofg.samplers.chain_processes.sample_in_processes`
  pins its workers with :func:`worker_leases` and :func:`pinned_while`.

Examples
--------
>>> from pytensor.compile._jax_ofg.cores.topology import Topology
>>> default_cores(Topology(usable=(0, 1, 2, 3, 4, 5, 6, 7), quota=None,
...     siblings={c: (c % 4, c % 4 + 4) for c in range(8)}))  # 4 cores x 2
4
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pytensor.compile._jax_ofg.cores.leases import (
    FOLDER,
    Lease,
    Leases,
    forget_in_child,
)
from pytensor.compile._jax_ofg.cores.runtimes import (
    CompiledPerRuntime,
    Runtime,
    beside_next_compile,
)
from pytensor.compile._jax_ofg.cores.threads import (
    SamplerSession,
    ThreadPin,
    thread_pin,
)
from pytensor.compile._jax_ofg.cores.topology import Topology, read_topology
from pytensor.compile._jax_ofg.flags import CPU_LEASES, PIN_SAMPLER_THREADS


__all__ = [
    "CompiledPerRuntime",
    "Lease",
    "Runtime",
    "SamplerSession",
    "ThreadPin",
    "beside_next_compile",
    "default_cores",
    "forget_in_child",
    "lease_folder",
    "pinned_while",
    "pinning_applies",
    "start_session",
    "thread_pin",
    "usable_cpus",
    "worker_leases",
]


def lease_folder() -> Path:
    """Return the folder of the machine-wide CPU leases (the flag
    ``jax_ofg__cpu_leases``, read when a sampler starts)."""
    return Path(CPU_LEASES.value or FOLDER)


def pinning_applies() -> bool:
    """Whether sampler threads are pinned: the flag
    ``jax_ofg__pin_sampler_threads`` (read when a sampler starts), on Linux."""
    return bool(PIN_SAMPLER_THREADS.value) and hasattr(os, "sched_setaffinity")


def start_session(threads: int) -> SamplerSession | None:
    """Plan a sampler's ``threads`` threads' CPUs; None when pinning does not apply."""
    if not pinning_applies():
        return None
    return SamplerSession(max(threads, 1), leases=Leases(lease_folder()))


def default_cores(machine: Topology | None = None) -> int:
    """Return how many chains may run at once: the physical cores this process may
    use, capped by its CPU quota (at least one)."""
    return (machine or read_topology()).busy_threads()


def usable_cpus(machine: Topology | None = None) -> int:
    """Return how many CPUs this process may run on (its affinity mask)."""
    return len((machine or read_topology()).usable)


def worker_leases(workers: int, machine: Topology | None = None) -> list[Lease | None]:
    """Take a lease on a free CPU for each of ``workers`` worker processes, or None
    for a worker left where the OS puts it.

    The free CPUs in order of preference (distinct physical cores first);
    workers beyond them, and every worker where threads cannot be pinned,
    get None: never two chains on one CPU while the OS could spread them. A
    worker started with its lease's descriptor (``pass_fds``) holds the
    lease as long as it lives; the caller then releases its own.
    """
    if not hasattr(os, "sched_setaffinity"):
        return [None] * workers
    machine, leases = machine or read_topology(), Leases(lease_folder())
    taken = []
    for _ in range(workers):
        lease = leases.take(machine)
        if lease is None:
            break
        taken.append(lease)
    return taken + [None] * (workers - len(taken))


@contextlib.contextmanager
def pinned_while(cpu: int | None) -> Iterator[None]:
    """Confine the calling thread to ``cpu`` for the block (no change if None).

    A process started inside the block inherits the confinement from its
    first instruction, before its interpreter starts any thread pool.
    """
    if cpu is None:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)
