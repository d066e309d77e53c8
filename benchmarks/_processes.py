"""Fresh Python processes for the benchmarks: start a script, wait, read its result.

Every benchmark that measures a process from its start (cold and second
processes, a child per variant or route) runs it with :func:`run_python`: the
child prints one JSON object on its last line of output, the parent gets it
back with the wall time of the process. A failure (a non-zero exit, a
timeout, no JSON line) raises :class:`ChildFailed`, whose message ends with
the line that tells most (the child's exception, or the timeout).

Every process it starts, and every worker process those start, begins as a
benchmark does (:func:`startup_env`); :func:`cache_env` gives a child caches
of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from _room import STARTUP


#: How much of a failed child's stderr an error keeps.
STDERR_TAIL = 3000


class ChildFailed(RuntimeError):
    """A child process exited non-zero, timed out, or printed no JSON object."""


@dataclass(frozen=True)
class Finished:
    """A child process that exited 0."""

    #: The JSON object on its last line of output (``None`` if not asked for).
    result: dict | None
    #: ``time.time()`` just before it started: a child that records its own at
    #: its first line gives its interpreter's start-up.
    started_at: float
    #: Wall time from its start to its exit.
    seconds: float
    #: What it printed (when its output was piped).
    output: str = ""


@dataclass(frozen=True)
class Started:
    """A child process started by :func:`start_python`, not yet waited for."""

    process: subprocess.Popen
    started_at: float
    start: float


def start_python(
    arguments: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = True,
) -> Started:
    """Start ``sys.executable *arguments`` (see :func:`run_python`)."""
    pipe = subprocess.PIPE if capture else None
    started_at, start = time.time(), time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *map(str, arguments)],
        env={**os.environ, **startup_env(), **(env or {})},
        cwd=cwd,
        stdout=pipe,
        stderr=pipe,
        text=True,
        start_new_session=True,  # its own process group: killed as a whole
    )
    return Started(process, started_at, start)


def wait_python(
    started: Started, *, timeout: float | None = None, result: bool = True
) -> Finished:
    """Wait for a child of :func:`start_python` (see :func:`run_python`)."""
    process = started.process
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise ChildFailed(f"timed out after {timeout:.0f} s") from None
    except BaseException:  # e.g. Ctrl-C: leave no child behind
        _kill(process)
        raise
    seconds = time.perf_counter() - started.start
    stdout, stderr = stdout or "", stderr or ""
    if process.returncode != 0:
        raise ChildFailed(stderr.strip()[-STDERR_TAIL:] or f"exit {process.returncode}")
    if not result:
        return Finished(None, started.started_at, seconds, stdout)
    lines = stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        tail = stderr.strip()[-STDERR_TAIL:]
        raise ChildFailed(f"{tail}\nno JSON object on the last line of its output")
    return Finished(json.loads(lines[-1]), started.started_at, seconds, stdout)


def run_python(
    arguments: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    capture: bool = True,
    result: bool = True,
) -> Finished:
    """Run ``sys.executable *arguments`` and wait for it.

    The child starts as a benchmark does (:func:`startup_env`); ``env`` adds
    to (or overrides) that and this process's environment; ``cwd`` is the
    child's working folder; after ``timeout`` seconds the child's whole
    process group (its workers too) is killed. ``capture`` pipes its output
    (else it shows on this process's); ``result`` parses the JSON object on
    the last line of that output. Raises :class:`ChildFailed` on a non-zero
    exit (with the end of its stderr), a timeout, or no JSON object.
    """
    started = start_python(arguments, env=env, cwd=cwd, capture=capture)
    return wait_python(started, timeout=timeout, result=capture and result)


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def cache_env(folder: Path, *, stan: Path | None = None) -> dict[str, str]:
    """Environment variables that give a process caches of its own in ``folder``.

    PyTensor's ``base_compiledir`` (with this package's XLA and trace caches
    in it), Numba's cache, and ``XDG_CACHE_HOME``, where httpstan keeps
    Stan's builds (in ``stan``, when given).
    """
    return {
        "PYTENSOR_FLAGS": f"base_compiledir={folder / 'pytensor'}",
        "NUMBA_CACHE_DIR": str(folder / "numba"),
        "XDG_CACHE_HOME": str(stan or folder / "xdg"),
    }


@functools.cache
def startup_env() -> dict[str, str]:
    """``PYTHONPATH`` that makes a process start as a benchmark does.

    Its folders: one holding a ``sitecustomize.py`` that runs
    :data:`_room.STARTUP` (the checkout's modules, the examples'), which
    Python runs in every process at start-up, the workers that ``spawn``,
    ``forkserver`` and Dask's nannies start included; then ``benchmarks/``
    (the room's helpers, :mod:`_models` and the rest, for scripts run from
    elsewhere); then the ``PYTHONPATH`` this process had.
    """
    folder = Path(tempfile.mkdtemp(prefix="benchmark-startup-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # its children first
    (folder / "sitecustomize.py").write_text(STARTUP)
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    here = str(Path(__file__).resolve().parent)
    return {"PYTHONPATH": os.pathsep.join([str(folder), here, *existing])}
