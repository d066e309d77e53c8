"""How many chains sampled at once, and on which cores: read, not assumed.

nutpie names its sampler threads ``nutpie-worker-<i>``. A :class:`ThreadWatch`
reads ``/proc/<pid>/task/*`` of the processes it watches, every ``interval``
seconds from a thread of its own, while they sample: each such thread's cores
(``Cpus_allowed_list``: one when it is pinned), the core it last ran on and
its CPU time. Between two reads a thread *sampled* if its CPU time grew; its
*home* is its one allowed core, else the core it last ran on.

:func:`chains_recorded` adds what ``pm.sample`` passed on: ``cores`` to
``nutpie.sample``, or PyMC's own "N chains in M jobs". Linux only (``/proc``).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import os
import re
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


#: The key of a fit's result under which it stores what :func:`chains_recorded`
#: (or :func:`stan_at_once`) found.
KEY = "chains_at_once"


@dataclass(frozen=True)
class ChainThread:
    """One of nutpie's sampler threads, as one read of ``/proc`` saw it."""

    pid: int
    tid: int
    allowed: tuple[int, ...]
    cpu: int
    ticks: int

    @property
    def home(self) -> int:
        return self.allowed[0] if len(self.allowed) == 1 else self.cpu


def cpu_list(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` as ``(0, 1, 2, 5)``."""
    cpus = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return tuple(cpus)


def chain_threads(pid: int) -> list[ChainThread]:
    """nutpie's sampler threads of process ``pid`` now (none once it has ended)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if not (task / "comm").read_text().startswith("nutpie-worker"):
                continue
            status, stat = (task / "status").read_text(), (task / "stat").read_text()
        except OSError:  # a thread (or the process) that ended
            continue
        allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[11]) + int(fields[12])
        found.append(
            ChainThread(pid, int(task.name), cpu_list(allowed), int(fields[36]), ticks)
        )
    return found


class ThreadWatch:
    """Reads the sampler threads of ``pids`` until it is left (a context manager)."""

    def __init__(self, pids: list[int], interval: float = 0.1):
        self.pids, self.interval = list(pids), interval
        self.reads: list[list[ChainThread]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ThreadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.reads.append([t for pid in self.pids for t in chain_threads(pid)])

    def sampling(self) -> list[list[ChainThread]]:
        """Per read, the threads whose CPU time grew since the read before."""
        before: dict[int, int] = {}
        out = []
        for read in self.reads:
            out.append([t for t in read if t.ticks > before.get(t.tid, t.ticks)])
            before.update((t.tid, t.ticks) for t in read)
        return [threads for threads in out if threads]

    def at_once(self) -> int:
        """The most frequent number of threads sampling at once (0: none seen)."""
        counts = [len(threads) for threads in self.sampling()]
        return statistics.mode(counts) if counts else 0

    def crowding(self, cores: list[int]) -> dict:
        """Reads in which a core held two sampling chains while one of ``cores``
        held none, out of the reads with chains sampling; each process's homes."""
        crowded, homes = 0, collections.defaultdict(set)
        for threads in self.sampling():
            held = collections.Counter(t.home for t in threads)
            crowded += max(held.values()) > 1 and any(held[c] == 0 for c in cores)
            for t in threads:
                homes[self.pids.index(t.pid)].add(t.home)
        return {
            "reads": len(self.sampling()),
            "crowded": crowded,
            "homes": {str(k): sorted(v) for k, v in sorted(homes.items())},
        }


class _JobsLog(logging.Handler):
    """PyMC's "Multiprocess sampling (4 chains in 2 jobs)" (or "Sequential ...")."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.jobs: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"chains in (\d+) jobs?", record.getMessage())
        self.jobs = int(found.group(1)) if found else self.jobs


@contextlib.contextmanager
def chains_recorded(found: dict, nutpie: bool = True) -> Iterator[None]:
    """Record into ``found`` how many chains the fit run inside sampled at once.

    ``found["passed"]``: what ``pm.sample`` passed on (``cores`` to
    ``nutpie.sample``, recorded when ``nutpie``: that imports it; PyMC's
    jobs); ``found["threads"]``: nutpie's threads seen sampling at once;
    ``found["at once"]``: the threads seen, else the jobs.
    """
    module = importlib.import_module("nutpie") if nutpie else None
    sample, log = getattr(module, "sample", None), _JobsLog()

    def recorded(*args, **kwargs):
        found["passed"] = f"nutpie.sample(cores={kwargs.get('cores')})"
        return sample(*args, **kwargs)

    if module is not None:
        module.sample = recorded
    logger = logging.getLogger("pymc")
    level = logger.level  # PyMC's own is INFO, unless logging was set up before
    logger.setLevel(min(level or logging.INFO, logging.INFO))
    logger.addHandler(log)
    try:
        with ThreadWatch([os.getpid()]) as watch:
            yield
    finally:
        if module is not None:
            module.sample = sample
        logger.removeHandler(log)
        logger.setLevel(level)
    if log.jobs is not None:
        found["passed"] = f"PyMC: {log.jobs} job(s)"
    found["threads"] = watch.at_once()
    found["at once"] = found["threads"] or log.jobs


def stan_at_once(chains: int) -> dict:
    """How many of Stan's chains httpstan ran at once: one per worker process of
    its pool (``httpstan.services_stub.executor``), at most ``chains``."""
    import httpstan.services_stub

    workers = httpstan.services_stub.executor._max_workers
    passed = f"httpstan: {workers} worker processes"
    return {"passed": passed, "at once": min(chains, workers)}


def at_once(runs: list[dict]) -> str:
    """How many chains ``runs`` sampled at once (each its ``"chains_at_once"``)."""
    seen = {str(r.get(KEY, {}).get("at once", "not recorded")) for r in runs}
    return ", ".join(sorted(seen))
