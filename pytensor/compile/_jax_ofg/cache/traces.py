"""The trace cache: results of JAX traces, kept in memory and on disk, never stale.

:func:`cached` keeps a trace's result only when its key describes everything
the trace ran (:mod:`~pytensor.compile._jax_ofg.cache.watch` watches it: an
allowlist); what cannot be keyed, or ran anything else, is not cached.
Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` adds the
flag ``jax_ofg__trace_cache`` (:func:`add_config_flag`).

Notes
-----
The cache fails closed: a key that cannot be described, or a trace that ran
what its key does not describe, leaves the function uncached (its reason in
:func:`trace_cache_info` and in a debug log), and so does any trace made
after packages were installed or upgraded in this process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import threading
import types
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pytensor import config
from pytensor.compile._jax_ofg.cache.environment import (
    environment_fingerprint,
    installed_distributions_changed,
)
from pytensor.compile._jax_ofg.cache.files import remove_orphans, write_whole
from pytensor.compile._jax_ofg.cache.fingerprints import (
    Undescribable,
    describe_with_code,
    digest,
)
from pytensor.compile._jax_ofg.cache.watch import paused, watching
from pytensor.configparser import ConfigParam


__all__ = [
    "MAX_BYTES",
    "StaleTraceError",
    "add_config_flag",
    "cached",
    "clear_trace_cache",
    "mode",
    "proven_trace",
    "trace_cache_dir",
    "trace_cache_info",
    "unproven_traces",
]

T = TypeVar("T")

#: The cache's size on disk at most; the oldest entries go first beyond it.
MAX_BYTES = 512 * 2**20
#: Names of entries being written (readers skip names starting with a dot).
TEMPORARY_PREFIX = ".tmp-"

#: Changes when what an entry holds changes.
FORMAT = 3

LOGGER = logging.getLogger("pytensor.compile.jax_ofg")


class StaleTraceError(AssertionError):
    """``jax_ofg__trace_cache=verify`` found an entry that differs from a fresh trace."""


# ------------------------------------------------------------------- the flag
_MODES = {"on": "on", "true": "on", "1": "on", "off": "off", "false": "off", "0": "off"}


def _mode_value(value: Any) -> str:
    text = str(value).strip().lower()
    if text == "verify":
        return "verify"
    if text in _MODES:
        return _MODES[text]
    raise ValueError(
        f"jax_ofg__trace_cache must be 'on', 'off' or 'verify' (or True/False), "
        f"got {value!r}."
    )


def add_config_flag() -> None:
    """Add the PyTensor flag ``jax_ofg__trace_cache`` (default ``on``)."""
    if not hasattr(config, "jax_ofg__trace_cache"):
        config.add(
            "jax_ofg__trace_cache",
            "Keep traces of pytensor-jax-ofg's wrapped functions (exported "
            "programs, output types) in memory and in compiledir/jax_ofg_traces, "
            "reused instead of tracing again: 'on', 'off', or 'verify' (trace "
            "anyway and check every hit).",
            ConfigParam("on", apply=_mode_value),
            in_c_key=False,
        )


def mode() -> str:
    """Return ``"on"``, ``"off"`` or ``"verify"`` (the flag)."""
    return _mode_value(getattr(config, "jax_ofg__trace_cache", "off"))


def trace_cache_dir() -> Path | None:
    """Return where traces are kept on disk; None when that is off."""
    if mode() == "off":
        return None
    return Path(config.compiledir) / "jax_ofg_traces"


# ----------------------------------------------------------------- statistics
_COUNTS: Counter = Counter()
#: Functions left uncached in this process: name -> why.
_UNCACHED: dict[str, str] = {}
_LOCK = threading.Lock()


def _count(event: str) -> None:
    with _LOCK:
        _COUNTS[event] += 1


_UNPROVEN = threading.local()


def uncached(name: str, kind: str, reason: str) -> None:
    """Note that ``name``'s ``kind`` trace is not cached, and why (logged once per
    reason; :func:`trace_cache_info` keeps the latest).

    The :func:`unproven_traces` under way in this thread note it too.
    """
    with _LOCK:
        _COUNTS["uncached"] += 1
        first = _UNCACHED.get(name) != reason
        _UNCACHED[name] = reason
    for log in getattr(_UNPROVEN, "logs", ()):
        log.append(f"{name} ({kind}): {reason}")
    if first:
        LOGGER.debug("trace cache: %s is not cached (%s): %s", name, kind, reason)


@contextlib.contextmanager
def unproven_traces() -> Iterator[list[str]]:
    """Yield the traces of this block (in this thread) that were not cached, and why.

    An object built from such a trace (a host call's program) may not be
    reused later in the process either: what it depended on was not seen.
    """
    logs = getattr(_UNPROVEN, "logs", None)
    if logs is None:
        logs = _UNPROVEN.logs = []
    log: list[str] = []
    logs.append(log)
    try:
        yield log
    finally:
        logs.remove(log)


# ---------------------------------------------------------------------- keys
def key_of(kind: str, parts: Any) -> tuple[str, tuple[types.CodeType, ...]]:
    """Return the key of a ``kind`` entry for what ``parts`` describe, and the user code
    the key covers; raises Undescribable.
    """
    text, codes = describe_with_code(parts)
    return digest(f"{FORMAT}|{kind}|{text}|{environment_fingerprint()}"), codes


# --------------------------------------------------------------------- entries
@dataclasses.dataclass(frozen=True)
class Entry:
    """A trace's result (a value of its own: the result may be None)."""

    value: Any


class BoundedCache:
    """A thread-safe LRU mapping: the least recently used entry goes first.

    Examples
    --------
    >>> cache = BoundedCache(2)
    >>> cache.put("a", 1); cache.put("b", 2); cache.peek("a")
    1
    >>> cache.put("c", 3)  # "b" is the least recently used
    >>> len(cache), cache.peek("b"), cache.peek("a")
    (2, None, 1)
    """

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def peek(self, key: Hashable) -> Any:
        """Return the value under ``key``, or None (marks it recently used)."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key``, replacing what was there."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def pop(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


#: Entries of this process, by (kind, key).
_MEMORY = BoundedCache(1024)


def cached[T](
    kind: str,
    parts: Any,
    compute: Callable[[], T],
    *,
    name: str,
    persist: bool = True,
    differs: Callable[[T, T], str | None] | None = None,
) -> T:
    """Return what ``compute()`` traces, from the cache when an entry for ``parts``
    exists.

    A miss runs ``compute()`` under :func:`~pytensor.compile._jax_ofg.cache.watch.watching`
    and keeps the result only when the watch saw nothing the key does not
    describe, the key is the same after the trace as before (nothing it
    describes changed meanwhile) and no package was installed since the
    process started; otherwise the function is counted as uncached, with
    the reason.

    A ``cached`` call inside another's ``compute`` must key parts of the outer
    one's parts (the outer entry, once kept, is served without running it).

    Parameters
    ----------
    kind
        What is cached (``"types"``, ``"program"``...): part of the key.
    parts
        What the result depends on (a wrapped function, input types...), for
        the key. Undescribable parts leave the result uncached.
    compute
        Runs the trace.
    name
        The wrapped function, for logs and errors.
    persist
        Also keep the entry on disk (the value must pickle).
    differs
        For ``verify``: a description of how a cached and a fresh value
        differ, or None when they do not (default: ``!=``).
    """
    current = mode()
    on_disk = persist and current != "off"
    with paused():
        try:
            key, covered = key_of(kind, parts)
        except Undescribable as error:
            uncached(name, kind, str(error))
            key = None
        entry = None if key is None else _lookup(kind, key, on_disk)
    if key is None:
        return compute()
    if entry is None:
        _count("misses")
        value, refusal = _watched(compute, covered)
        if refusal is None:
            with paused():
                refusal = _changed_meanwhile(kind, parts, key)
        if refusal is not None:
            uncached(name, kind, refusal)
        else:
            with paused():
                _store(kind, key, Entry(value), on_disk)
        return value
    _count("hits")
    if current == "verify":
        fresh, _ = _watched(compute, covered)
        difference = (differs or _not_equal)(entry.value, fresh)
        if difference is not None:
            raise StaleTraceError(
                f"The trace cache served a stale {kind} entry for {name}: a fresh "
                f"trace gives another result ({difference}). Please report this; "
                "set jax_ofg__trace_cache=off to work around it."
            )
        _count("verified")
    return entry.value


def _not_equal(cached_value: Any, fresh: Any) -> str | None:
    if cached_value == fresh:
        return None
    return f"cached {cached_value!r:.300}, fresh {fresh!r:.300}"


def proven_trace[R](compute: Callable[[], R], parts: Any) -> tuple[R, str | None]:
    """Return ``compute()``, a trace of what ``parts`` describe made outside the cache
    (``jax.jit`` tracing a program), and why it is unproven (None: the watch saw only
    what the key of ``parts`` describes, so it may be reused in this process).
    """
    with paused():
        try:
            key, covered = key_of("proven", parts)
        except Undescribable as error:
            return compute(), str(error)
    value, refusal = _watched(compute, covered)
    if refusal is None:
        with paused():
            refusal = _changed_meanwhile("proven", parts, key)
    return value, refusal


def _watched[R](
    compute: Callable[[], R], covered: tuple[types.CodeType, ...]
) -> tuple[R, str | None]:
    """Return ``compute()``, and why its trace may not be kept (None: it may)."""
    with watching(covered) as watch:
        value = compute()
    return value, watch.refusal


def _changed_meanwhile(kind: str, parts: Any, key: str) -> str | None:
    """Return why an entry traced under ``key`` may not be kept after all, or None."""
    try:
        now, _ = key_of(kind, parts)
    except Undescribable as error:
        return f"after its trace, {error}"
    if now != key:
        return "what its key describes changed while it was traced"
    if installed_distributions_changed():
        return "packages were installed or upgraded since this process started"
    return None


def _lookup(kind: str, key: str, persist: bool) -> Entry | None:
    entry = _MEMORY.peek((kind, key))
    if entry is None and persist:
        entry = _load(key, kind)
        if entry is not None:
            _MEMORY.put((kind, key), entry)
    return entry


def _store(kind: str, key: str, entry: Entry, persist: bool) -> None:
    _MEMORY.put((kind, key), entry)
    if persist:
        _write(key, kind, entry)


# ----------------------------------------------------------------------- disk
def _path(key: str, kind: str) -> Path | None:
    folder = trace_cache_dir()
    return None if folder is None else folder / f"{key}.{kind}"


def _load(key: str, kind: str) -> Entry | None:
    path = _path(key, kind)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        entry = pickle.loads(data)
    except Exception:  # written by an incompatible version, or damaged
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return entry if isinstance(entry, Entry) else None


def _write(key: str, kind: str, entry: Entry) -> bool:
    """Write ``entry`` atomically; whether it was written (never an error)."""
    path = _path(key, kind)
    if path is None:
        return False
    try:
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, data, prefix=TEMPORARY_PREFIX)
    except OSError as error:  # a full disk, a quota, a folder removed meanwhile
        LOGGER.debug(
            "trace cache: %s entry %s not written to %s (%s: %s); the run goes on "
            "with it in memory only",
            kind,
            key,
            path.parent,
            type(error).__name__,
            error,
        )
        return False
    _prune(path.parent)
    return True


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return [e for e in entries if e.is_file() and not e.name.startswith(".")]
    except OSError:
        return []


def _stats(folder: Path) -> list[tuple[os.DirEntry, os.stat_result]]:
    """Return the folder's entries with their stats, but for those another
    process removed meanwhile."""
    found = []
    for entry in _entries(folder):
        with contextlib.suppress(OSError):
            found.append((entry, entry.stat()))
    return found


def _prune(folder: Path) -> None:
    """Remove the oldest entries until the folder holds at most :data:`MAX_BYTES`,
    and the temporary files of writers killed mid-write."""
    remove_orphans(folder, TEMPORARY_PREFIX)
    entries = _stats(folder)
    total = sum(stat.st_size for _, stat in entries)
    if total <= MAX_BYTES:
        return
    for entry, stat in sorted(entries, key=lambda e: e[1].st_mtime):
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            total -= stat.st_size
        if total <= MAX_BYTES:
            return


def trace_cache_info() -> dict[str, Any]:
    """Return the cache's state: where it is, its size, and what it did in this process.

    ``path``, ``entries`` and ``bytes`` describe the disk folder (None, 0, 0
    when the cache is off); ``hits``, ``misses``, ``verified`` (hits checked
    against a fresh trace) and ``uncached`` (lookups whose result was not
    kept: an undescribable key, or a trace that ran what its key does not
    describe) count lookups of this process; ``uncached_functions`` maps each
    function left uncached to the latest reason.

    >>> sorted(trace_cache_info())  # doctest: +NORMALIZE_WHITESPACE
    ['bytes', 'entries', 'hits', 'misses', 'mode', 'path', 'uncached',
     'uncached_functions', 'verified']
    """
    folder = trace_cache_dir()
    entries = [] if folder is None else _stats(folder)
    with _LOCK:
        counts = {k: _COUNTS[k] for k in ("hits", "misses", "verified")}
        counts["uncached"] = _COUNTS["uncached"]
        reasons = dict(_UNCACHED)
    return {
        "mode": mode(),
        "path": None if folder is None else str(folder),
        "entries": len(entries),
        "bytes": sum(stat.st_size for _, stat in entries),
        **counts,
        "uncached_functions": reasons,
    }


def clear_trace_cache() -> None:
    """Empty the trace cache, in memory and on disk (``rm -r compiledir/jax_ofg_traces``)."""
    _MEMORY.clear()
    folder = trace_cache_dir()
    for entry in [] if folder is None else _entries(folder):
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
