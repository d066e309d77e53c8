"""What the trace cache keeps, and where: entries behind ``get`` and ``put``, and its state.

As JAX's persistent compilation cache keeps programs, every store here is a
:class:`Storage`: ``get(key)`` returns what ``put(key, value)`` kept (or
None), and nothing else about it matters to the cache (``cache/traces``).
:class:`MemoryStorage` keeps the most recently used entries of this process;
:class:`DiskStorage` keeps pickled entries in a folder, each written whole or
not at all (``files``), the folder under :data:`MAX_BYTES`.

Everything else the cache holds in this process -- its entries in memory,
the record of its lookups, its memos, the watch's state -- is one object,
:data:`STATE` (a :class:`CacheState`), with :meth:`CacheState.reset`; the
other modules of ``cache/`` keep no state of their own. Registers nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import threading
import types
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Protocol

from pytensor.compile._jax_ofg.files import remove_orphans, write_whole


__all__ = [
    "MAX_BYTES",
    "STATE",
    "TEMPORARY_PREFIX",
    "CacheState",
    "DiskStorage",
    "MemoryStorage",
    "Storage",
]

#: A folder's size on disk at most; the oldest entries go first beyond it.
MAX_BYTES = 512 * 2**20
#: Names of entries being written (readers skip names starting with a dot).
TEMPORARY_PREFIX = ".tmp-"

LOGGER = logging.getLogger("pytensor.compile.jax_ofg")


class Storage(Protocol):
    """What the trace cache needs of a store."""

    def get(self, key: str) -> Any:
        """Return the value kept under ``key``, or None."""

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` (a store may drop it; it never raises)."""


class MemoryStorage:
    """A thread-safe LRU mapping: the least recently used entry goes first.

    Examples
    --------
    >>> cache = MemoryStorage(2)
    >>> cache.put("a", 1); cache.put("b", 2); cache.get("a")
    1
    >>> cache.put("c", 3)  # "b" is the least recently used
    >>> len(cache), cache.get("b"), cache.get("a")
    (2, None, 1)
    """

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
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


class DiskStorage:
    """Pickled entries, one file per key, in the folder ``folder()`` names (None:
    nothing on disk); written whole, the folder kept under :data:`MAX_BYTES`."""

    def __init__(self, folder: Callable[[], Path | None]):
        self.folder = folder

    def get(self, key: str) -> Any:
        folder = self.folder()
        if folder is None:
            return None
        path = folder / key
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

    def put(self, key: str, value: Any) -> None:
        folder = self.folder()
        if folder is None:
            return
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_whole(folder / key, data, prefix=TEMPORARY_PREFIX)
        except OSError as error:  # a full disk, a quota, a folder removed meanwhile
            LOGGER.debug(
                "trace cache: entry %s not written to %s (%s: %s); the run goes on "
                "with it in memory only",
                key,
                folder,
                type(error).__name__,
                error,
            )
            return
        self._prune(folder)

    def stats(self) -> list[tuple[os.DirEntry, os.stat_result]]:
        """Return the entries with their stats, but for those another process removed
        meanwhile."""
        found = []
        for entry in self._entries():
            with contextlib.suppress(OSError):
                found.append((entry, entry.stat()))
        return found

    def clear(self) -> None:
        for entry in self._entries():
            with contextlib.suppress(OSError):
                os.unlink(entry.path)

    def _entries(self) -> list[os.DirEntry]:
        folder = self.folder()
        if folder is None:
            return []
        try:
            with os.scandir(folder) as entries:
                return [
                    e for e in entries if e.is_file() and not e.name.startswith(".")
                ]
        except OSError:
            return []

    def _prune(self, folder: Path) -> None:
        """Remove the oldest entries until the folder holds at most :data:`MAX_BYTES`,
        and the temporary files of writers killed mid-write."""
        remove_orphans(folder, TEMPORARY_PREFIX)
        entries = self.stats()
        total = sum(stat.st_size for _, stat in entries)
        if total <= MAX_BYTES:
            return
        for entry, stat in sorted(entries, key=lambda e: e[1].st_mtime):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                total -= stat.st_size
            if total <= MAX_BYTES:
                return


def _memory() -> MemoryStorage:
    return MemoryStorage(1024)


@dataclasses.dataclass(eq=False, slots=True)
class CacheState:
    """Everything the trace cache holds in this process: one instance, :data:`STATE`.

    Its containers are made once and never replaced, only emptied (the
    watch's callbacks hold them, bound as defaults: a local is the cheapest
    lookup). :meth:`reset` forgets what the cache holds in memory.
    """

    # ------------------------------------------------ entries (``cache/traces``)
    #: entries of this process, by ``"{key}.{kind}"``
    entries: MemoryStorage = dataclasses.field(default_factory=_memory)
    #: lookups so far: ``hits``, ``misses``, ``verified``, ``uncached``
    counts: Counter = dataclasses.field(default_factory=Counter)
    #: functions left uncached in this process: name -> the latest reason
    uncached: dict[str, str] = dataclasses.field(default_factory=dict)
    #: per thread, the logs of the ``unproven_traces`` blocks under way
    unproven: threading.local = dataclasses.field(default_factory=threading.local)
    #: where entries go on disk instead of ``compiledir/jax_ofg_traces``
    #: (``trace_cache_dir_set_to``), or None
    folder: Path | None = None
    # ---------------------------------------- what the process started with
    #: whether the cache was on when the package was installed (else no
    #: trace is kept)
    started_on: bool = False
    #: the installed distributions as this process first saw them, per
    #: ``sys.path`` (``cache/environment``)
    distributions: dict[tuple[str, ...], tuple[str, ...]] = dataclasses.field(
        default_factory=dict
    )
    # ------------------------------------------------------------------ memos
    #: module name -> (its file, where its code comes from) (``cache/code_origin``)
    module_kinds: dict[str, tuple[Any, tuple[str, str]]] = dataclasses.field(
        default_factory=dict
    )
    #: id of a code object -> (a weak reference to it, what describes it)
    #: (``cache/fingerprints``)
    code_info: dict[int, tuple[weakref.ref, Any]] = dataclasses.field(
        default_factory=dict
    )
    #: class -> how to describe its instances (``cache/fingerprints``)
    describers: weakref.WeakKeyDictionary = dataclasses.field(
        default_factory=weakref.WeakKeyDictionary
    )
    #: source file -> (its stat signature, the digest of its content)
    #: (``cache/environment``)
    source_digests: dict[str, tuple[tuple[int, ...], str]] = dataclasses.field(
        default_factory=dict
    )
    #: a C callable (or its type) -> what calling it does (``cache/watch``)
    callable_verdicts: dict[Any, tuple[int, str]] = dataclasses.field(
        default_factory=dict
    )
    # ---------------------------------------------------- the watch's hooks
    #: the watching threads' states, by thread id
    threads: dict[int, Any] = dataclasses.field(default_factory=dict)
    #: the ``sys.monitoring`` tool id the watch holds, once it claimed one
    tool_id: int | None = None
    #: code objects seen, by id, with the verdict on each (kept alive, so that
    #: no id is reused)
    code_verdicts: dict[int, tuple[types.CodeType, int]] = dataclasses.field(
        default_factory=dict
    )
    #: code objects whose calls the watch checks, by id
    instrumented: dict[int, types.CodeType] = dataclasses.field(default_factory=dict)

    def reset(self) -> None:
        """Forget what the cache holds in memory: its entries and its memos.

        The disk is untouched (``clear_trace_cache`` empties both). Kept: the
        record of lookups (``trace_cache_info``'s counts and reasons), what
        the process started with (the installed distributions, whether the
        cache was on), a folder set by ``trace_cache_dir_set_to``, and the
        watch -- its process-wide hooks cannot be removed, and ``sys.monitoring``
        turns an event off for good for each code it judged, so its verdicts
        on code stay with them -- and the watches under way.
        """
        self.entries.clear()
        for memo in (
            self.module_kinds,
            self.code_info,
            self.describers,
            self.source_digests,
            self.callable_verdicts,
        ):
            memo.clear()


#: The trace cache's state in this process.
STATE = CacheState()
