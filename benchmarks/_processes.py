"""Fresh Python processes for the benchmarks: start a script, wait, read its result.

Every benchmark that measures a process from its start (cold and second
processes, a child per variant or route) runs it with :func:`run_python`: the
child prints one JSON object on its last line of output, the parent gets it
back with the wall time of the process. A failure (a non-zero exit, a
timeout, no JSON line) raises :class:`ChildFailed`, whose message ends with
the line that tells most (the child's exception, or the timeout).

:func:`cache_env` gives a child caches of its own, :func:`checkout_startup`
makes every process (and the workers it starts) import this checkout's
modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
#: Inside the checkout (not an installed copy): its root conftest.py makes a
#: process import the checkout's modules.
IN_CHECKOUT = (ROOT / "conftest.py").exists()

#: Run at start-up by a process whose ``PYTHONPATH`` starts with the folder of
#: :func:`checkout_startup`, including the workers that ``spawn`` and
#: ``forkserver`` (and Dask's nannies) start.
SITECUSTOMIZE = f"""
import importlib.util
_spec = importlib.util.spec_from_file_location("checkout", {str(ROOT / "conftest.py")!r})
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
"""

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

    ``env`` adds to (or overrides) this process's environment; ``cwd`` is the
    child's working folder; after ``timeout`` seconds the child's whole
    process group (its workers too) is killed. ``capture`` pipes its output
    (else it shows on this process's); ``result`` parses the JSON object on
    the last line of that output. Raises :class:`ChildFailed` on a non-zero
    exit (with the end of its stderr), a timeout, or no JSON object.
    """
    pipe = subprocess.PIPE if capture else None
    started_at, start = time.time(), time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *map(str, arguments)],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdout=pipe,
        stderr=pipe,
        text=True,
        start_new_session=True,  # its own process group: killed as a whole
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise ChildFailed(f"timed out after {timeout:.0f} s") from None
    except BaseException:  # e.g. Ctrl-C: leave no child behind
        _kill(process)
        raise
    seconds = time.perf_counter() - start
    stdout, stderr = stdout or "", stderr or ""
    if process.returncode != 0:
        raise ChildFailed(stderr.strip()[-STDERR_TAIL:] or f"exit {process.returncode}")
    if not (capture and result):
        return Finished(None, started_at, seconds)
    lines = stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        tail = stderr.strip()[-STDERR_TAIL:]
        raise ChildFailed(f"{tail}\nno JSON object on the last line of its output")
    return Finished(json.loads(lines[-1]), started_at, seconds)


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


def checkout_startup(folder: Path) -> dict[str, str]:
    """``PYTHONPATH`` that makes every process import this checkout's modules.

    Writes a ``sitecustomize.py`` running :data:`SITECUSTOMIZE` into
    ``folder``; outside the checkout, nothing (an empty environment).
    """
    if not IN_CHECKOUT:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join([str(folder), *existing])}
