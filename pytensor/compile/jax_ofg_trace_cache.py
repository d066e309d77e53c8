"""Traces on disk: what a later process would otherwise trace again.

JAX's persistent cache keeps *compiled* programs, but every process still
traces the wrapped functions: their output types when a graph is built, and
each host-called program (an island, a lone op) at its first call -- seconds
for a diffrax solve and its VJP. This module keeps the results of those
traces under PyTensor's ``compiledir`` (``compiledir/jax_ofg_traces``), next
to the XLA cache:

* **programs**: the jitted program of a host call, exported with
  :mod:`jax.export` (serialized StableHLO) with the shapes of its outputs. A
  later process deserializes it and runs it without tracing; XLA then finds
  its compiled form in the persistent cache. A program with host callbacks
  cannot be exported (``jax.pure_callback``, ``jax.debug.print``, and
  equinox's runtime checks -- diffrax's included -- unless ``EQX_ON_ERROR`` is
  ``nan`` or ``off``): it is traced as before, without warning, and a marker
  says so, so that the next process does not try again;
* **values**: small picklable results of abstract traces (the output types of
  a wrapped call, the dtypes of VJP residuals).

Every entry is found by a key that is never stale: a digest of what the
trace depends on, from :func:`~pytensor.compile.jax_ofg_fingerprints.fingerprint`
(code, closures, the globals the code reads, library versions, static
arguments) and :func:`~pytensor.compile.jax_ofg_fingerprints.environment_fingerprint`
(JAX and this package's versions, x64, the platform). A value that cannot be
described gives no key: nothing is read or written.

Writes are atomic (a temporary file in the same folder, then
:func:`os.replace`), so processes filling the cache at once all work; an
entry that cannot be read is a miss. The folder is kept under
:data:`MAX_BYTES` by removing the least recently written entries.
``jax_ofg__trace_cache=False`` (a PyTensor flag) turns the cache off;
:func:`trace_cache_info` reports where it is and its size, :func:`clear_trace_cache`
empties it.

Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` adds the
flag (:func:`add_config_flag`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytensor import config
from pytensor.compile.jax_ofg_fingerprints import (
    digest,
    environment_fingerprint,
    fingerprint,
)
from pytensor.configparser import BoolParam


__all__ = [
    "MAX_BYTES",
    "clear_trace_cache",
    "content_key",
    "key_of_prints",
    "load",
    "memoized",
    "store",
    "trace_cache_dir",
    "trace_cache_info",
]

#: The cache's size at most; the oldest entries go first beyond it.
MAX_BYTES = 512 * 2**20

#: Changes when what an entry holds changes.
FORMAT = 1


def add_config_flag() -> None:
    """Add the PyTensor flag ``jax_ofg__trace_cache`` (default True)."""
    if not hasattr(config, "jax_ofg__trace_cache"):
        config.add(
            "jax_ofg__trace_cache",
            "Keep traces of pytensor-jax-ofg's wrapped functions on disk, in "
            "compiledir/jax_ofg_traces: exported programs and output types, "
            "reused by later processes instead of tracing again.",
            BoolParam(True),
            in_c_key=False,
        )


def trace_cache_dir() -> Path | None:
    """Where traces are kept; None when the cache is off."""
    if not getattr(config, "jax_ofg__trace_cache", False):
        return None
    return Path(config.compiledir) / "jax_ofg_traces"


def content_key(kind: str, *parts: Any) -> str | None:
    """The key of an entry of ``kind`` for what ``parts`` describe, or None.

    Each part is fingerprinted (:func:`~pytensor.compile.jax_ofg_fingerprints.fingerprint`);
    the environment is always part of the key. None when the cache is off or
    a part cannot be described.
    """
    if trace_cache_dir() is None:
        return None
    return key_of_prints(kind, *(fingerprint(part) for part in parts))


def key_of_prints(kind: str, *prints: str | None) -> str | None:
    """As :func:`content_key`, for parts already fingerprinted (None: undescribable)."""
    if trace_cache_dir() is None or any(p is None for p in prints):
        return None
    return digest(f"{FORMAT}|{kind}|{'|'.join(prints)}|{environment_fingerprint()}")


def _path(key: str, kind: str) -> Path | None:
    folder = trace_cache_dir()
    return None if folder is None else folder / f"{key}.{kind}"


def load(key: str | None, kind: str) -> Any | None:
    """The entry under ``key``, or None (a miss, also for an unreadable entry)."""
    path = None if key is None else _path(key, kind)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return pickle.loads(data)
    except Exception:  # written by an incompatible version, or damaged
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def store(key: str | None, kind: str, value: Any) -> bool:
    """Write ``value`` under ``key`` atomically; whether it was written.

    A value that cannot be pickled, or a folder that cannot be written, is
    not an error: the trace is just not kept.
    """
    path = None if key is None else _path(key, kind)
    if path is None:
        return False
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError:
        return False
    _prune(path.parent)
    return True


def memoized(key: str | None, kind: str, compute: Callable[[], Any]) -> Any:
    """The entry under ``key``, else ``compute()``, stored for next time."""
    found = load(key, kind)
    if found is not None:
        return found
    value = compute()
    store(key, kind, value)
    return value


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return [e for e in entries if e.is_file() and not e.name.startswith(".")]
    except OSError:
        return []


def _prune(folder: Path, max_bytes: int | None = None) -> None:
    """Remove the oldest entries until the folder holds at most ``max_bytes``."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = _entries(folder)
    total = sum(e.stat().st_size for e in entries)
    if total <= limit:
        return
    for entry in sorted(entries, key=lambda e: e.stat().st_mtime):
        with contextlib.suppress(OSError):
            size = entry.stat().st_size
            os.unlink(entry.path)
            total -= size
        if total <= limit:
            return


def trace_cache_info() -> dict[str, Any]:
    """Where the trace cache is, how many entries it holds and their size in bytes.

    >>> sorted(trace_cache_info())
    ['bytes', 'entries', 'path']
    """
    folder = trace_cache_dir()
    entries = [] if folder is None else _entries(folder)
    return {
        "path": None if folder is None else str(folder),
        "entries": len(entries),
        "bytes": sum(e.stat().st_size for e in entries),
    }


def clear_trace_cache() -> None:
    """Remove every entry of the trace cache (``rm -r compiledir/jax_ofg_traces``)."""
    folder = trace_cache_dir()
    for entry in [] if folder is None else _entries(folder):
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
