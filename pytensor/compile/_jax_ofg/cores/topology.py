"""What this process may run on: its cores, their SMT siblings, its CPU quota.

Read from Linux's ``/sys`` and ``/proc`` (under a root the tests replace): the
affinity mask of the process (its main thread's, which a pinned thread does
not change), the hardware threads that share a physical core, and the CPU
quota of the process's control group (cgroup v2 ``cpu.max``, v1
``cpu.cfs_quota_us``). Elsewhere a process may use what ``os.cpu_count``
says, one hardware thread per core, with no quota. Registers nothing.

Examples
--------
>>> machine = Topology(usable=(0, 1, 2, 3), siblings={0: (0, 2), 2: (0, 2),
...                    1: (1, 3), 3: (1, 3)}, quota=None)
>>> machine.physical_cores()
[(0, 2), (1, 3)]
>>> machine.preferred()  # one hardware thread of each core first
[0, 1, 2, 3]
>>> Topology(usable=(0, 1, 2), siblings={}, quota=1.5).busy_threads()
1
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path


__all__ = ["Topology", "parse_cpu_list", "read_topology"]


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Return the CPUs of a Linux CPU list such as ``"0-3,8,10-11"``, in order.

    >>> parse_cpu_list("0-2,8\\n")
    (0, 1, 2, 8)
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return tuple(cpus)


@dataclasses.dataclass(frozen=True)
class Topology:
    """The CPUs a process may use, how they group into cores, and its quota."""

    #: the CPUs of the process's affinity mask, in order
    usable: tuple[int, ...]
    #: each CPU's SMT group (every hardware thread of its physical core); a
    #: CPU missing here is a core of its own
    siblings: Mapping[int, tuple[int, ...]]
    #: the CPUs' worth of time the process's control group allows (None: no
    #: limit)
    quota: float | None

    def physical_cores(self) -> list[tuple[int, ...]]:
        """Return the usable CPUs grouped by physical core, in order of their first."""
        cores: dict[tuple[int, ...], list[int]] = {}
        for cpu in self.usable:
            cores.setdefault(self.siblings.get(cpu, (cpu,)), []).append(cpu)
        return [tuple(group) for group in cores.values()]

    def preferred(self) -> list[int]:
        """Return the usable CPUs in the order a new chain should take them.

        One hardware thread of each physical core first, then the second of
        each, and so on: two busy threads on SMT siblings of one core share
        its execution units, on two cores they do not.
        """
        cores = self.physical_cores()
        depth = max((len(group) for group in cores), default=0)
        return [group[k] for k in range(depth) for group in cores if k < len(group)]

    def busy_threads(self) -> int:
        """Return how many threads may be busy at once: the physical cores, capped
        by the quota (at least one).
        """
        count = len(self.physical_cores()) or 1
        if self.quota is not None:
            count = min(count, max(1, math.floor(self.quota + 1e-9)))
        return count


def read_topology(
    root: Path = Path("/"), mask: tuple[int, ...] | None = None
) -> Topology:
    """Return this process's :class:`Topology`, read under ``root``.

    ``mask``, if given, stands for the process's affinity mask (tests);
    otherwise it is the main thread's.
    """
    if mask is None:
        mask = _affinity_mask()
    cpu_folder = root / "sys/devices/system/cpu"
    siblings = {}
    for cpu in mask:
        text = _read(cpu_folder / f"cpu{cpu}/topology/thread_siblings_list")
        if text:
            siblings[cpu] = parse_cpu_list(text)
    return Topology(tuple(sorted(mask)), siblings, _cpu_quota(root))


def _affinity_mask() -> tuple[int, ...]:
    """Return the main thread's affinity mask (every CPU where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(os.getpid())))
    return tuple(range(os.cpu_count() or 1))


def _cpu_quota(root: Path) -> float | None:
    """Return the tightest CPU quota of this process's control group and its
    ancestors, in CPUs (cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us``).
    """
    quotas = []
    for version, relative in _cgroups(root):
        folder = root / "sys/fs/cgroup"
        if version == 1:
            folder = folder / "cpu"
            if not folder.is_dir():
                folder = folder.parent / "cpu,cpuacct"
        parts = [p for p in relative.split("/") if p]
        for depth in range(len(parts), -1, -1):
            quota = _quota_in(folder.joinpath(*parts[:depth]), version)
            if quota is not None:
                quotas.append(quota)
    return min(quotas, default=None)


def _cgroups(root: Path) -> list[tuple[int, str]]:
    """Return ``(version, path)`` of the control groups whose CPU quota applies."""
    found = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and not controllers:
            found.append((2, path))
        elif "cpu" in controllers.split(","):
            found.append((1, path))
    return found


def _quota_in(folder: Path, version: int) -> float | None:
    if version == 2:
        quota, _, period = (_read(folder / "cpu.max") or "max").partition(" ")
    else:
        quota = _read(folder / "cpu.cfs_quota_us") or "-1"
        period = _read(folder / "cpu.cfs_period_us") or "100000"
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:  # "max": no limit
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
