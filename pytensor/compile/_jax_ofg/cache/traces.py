"""The trace cache: results of JAX traces, kept in memory and on disk, never stale.

:func:`cached` keeps a trace's result only when its key describes everything
the trace ran (:mod:`~pytensor.compile._jax_ofg.cache.watch` watches it: an
allowlist); what cannot be keyed, or ran anything else, is not cached.
Its entries are kept behind two methods, ``get`` and ``put``
(``cache/storage``), under keys made in ``cache/keys``. Registers nothing
itself: :func:`install` is run by :func:`pytensor.compile.jax_ofg.install`.
With the flag ``jax_ofg__trace_cache`` ``off``, nothing of the cache runs: no
key, no watch (and none of its process-wide hooks), no entry.

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
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pytensor import config
from pytensor.compile._jax_ofg.cache.environment import (
    installed_distributions,
    installed_distributions_changed,
)
from pytensor.compile._jax_ofg.cache.keys import Undescribable, trace_key
from pytensor.compile._jax_ofg.cache.storage import STATE, DiskStorage
from pytensor.compile._jax_ofg.cache.watch import paused, watching
from pytensor.compile._jax_ofg.flags import TRACE_CACHE


__all__ = [
    "Entry",
    "StaleTraceError",
    "cached",
    "clear_trace_cache",
    "install",
    "mode",
    "proven_trace",
    "trace_cache_dir",
    "trace_cache_dir_set_to",
    "trace_cache_info",
    "unproven_traces",
]

T = TypeVar("T")

LOGGER = logging.getLogger("pytensor.compile.jax_ofg")


class StaleTraceError(AssertionError):
    """``jax_ofg__trace_cache=verify`` found an entry that differs from a fresh trace."""


# ------------------------------------------------------------------- the flag
def mode() -> str:
    """Return ``"on"``, ``"off"`` or ``"verify"``: the flag ``jax_ofg__trace_cache``
    (``"off"`` before the package is installed), read at import and at every
    lookup."""
    return TRACE_CACHE.value


def trace_cache_dir() -> Path | None:
    """Return where traces are kept on disk (``compiledir/jax_ofg_traces``, or the
    folder :func:`trace_cache_dir_set_to` set); None when that is off."""
    if mode() == "off":
        return None
    return STATE.folder or Path(config.compiledir) / "jax_ofg_traces"


@contextlib.contextmanager
def trace_cache_dir_set_to(folder: Path) -> Iterator[None]:
    """Keep entries on disk in ``folder`` inside the block (a test run's own
    folder: what earlier runs left in ``compiledir`` is not seen)."""
    previous, STATE.folder = STATE.folder, Path(folder)
    try:
        yield
    finally:
        STATE.folder = previous


# ----------------------------------------------------------------- statistics
#: Guards the record of lookups (``STATE.counts``, ``STATE.uncached``).
_LOCK = threading.Lock()


def _count(event: str) -> None:
    with _LOCK:
        STATE.counts[event] += 1


def uncached(name: str, kind: str, reason: str) -> None:
    """Note that ``name``'s ``kind`` trace is not cached, and why (logged once per
    reason; :func:`trace_cache_info` keeps the latest).

    The :func:`unproven_traces` under way in this thread note it too.
    """
    with _LOCK:
        STATE.counts["uncached"] += 1
        first = STATE.uncached.get(name) != reason
        STATE.uncached[name] = reason
    for log in getattr(STATE.unproven, "logs", ()):
        log.append(f"{name} ({kind}): {reason}")
    if first:
        LOGGER.debug("trace cache: %s is not cached (%s): %s", name, kind, reason)


@contextlib.contextmanager
def unproven_traces() -> Iterator[list[str]]:
    """Yield the traces of this block (in this thread) that were not cached, and why.

    An object built from such a trace (a host call's program) may not be
    reused later in the process either: what it depended on was not seen.
    """
    logs = getattr(STATE.unproven, "logs", None)
    if logs is None:
        logs = STATE.unproven.logs = []
    log: list[str] = []
    logs.append(log)
    try:
        yield log
    finally:
        logs.remove(log)


# --------------------------------------------------------------------- entries
@dataclasses.dataclass(frozen=True)
class Entry:
    """A trace's result (a value of its own: the result may be None)."""

    value: Any


#: Entries on disk, by ``"{key}.{kind}"`` (in memory: ``STATE.entries``).
_DISK = DiskStorage(lambda: trace_cache_dir())


def install() -> None:
    """With the cache on, take the installed distributions as the process starts
    (part of every key). With it off, nothing of the cache runs."""
    if mode() != "off":
        installed_distributions()
        STATE.started_on = True


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
    the reason. With the cache off, ``compute()`` runs, unwatched, and nothing
    is kept.

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
    if current == "off":  # nothing of the cache runs: no key, no watch, no entry
        return compute()
    with paused():
        try:
            key, covered = trace_key(kind, parts)
        except Undescribable as error:
            uncached(name, kind, str(error))
            key = None
        entry = None if key is None else _lookup(f"{key}.{kind}", persist)
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
                _store(f"{key}.{kind}", Entry(value), persist)
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
    With the cache off nothing is watched, so nothing is proven.
    """
    if mode() == "off":
        return compute(), "the trace cache is off (jax_ofg__trace_cache)"
    with paused():
        try:
            key, covered = trace_key("proven", parts)
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
        now, _ = trace_key(kind, parts)
    except Undescribable as error:
        return f"after its trace, {error}"
    if now != key:
        return "what its key describes changed while it was traced"
    if not STATE.started_on:
        return "the trace cache was off when this process started"
    if installed_distributions_changed():
        return "packages were installed or upgraded since this process started"
    return None


def _lookup(name: str, persist: bool) -> Entry | None:
    entry = STATE.entries.get(name)
    if entry is None and persist:
        entry = _DISK.get(name)
        if not isinstance(entry, Entry):
            return None
        STATE.entries.put(name, entry)
    return entry


def _store(name: str, entry: Entry, persist: bool) -> None:
    STATE.entries.put(name, entry)
    if persist:
        _DISK.put(name, entry)


def trace_cache_info() -> dict[str, Any]:
    """Return the cache's state: where it is, its size, and what it did in this process.

    ``path``, ``entries`` and ``bytes`` describe the disk folder (None, 0, 0
    when the cache is off); ``hits``, ``misses``, ``verified`` (hits checked
    against a fresh trace) and ``uncached`` (lookups whose result was not
    kept: an undescribable key, or a trace that ran what its key does not
    describe) count lookups of this process (none when the cache is off);
    ``uncached_functions`` maps each function left uncached to the latest
    reason.

    >>> sorted(trace_cache_info())  # doctest: +NORMALIZE_WHITESPACE
    ['bytes', 'entries', 'hits', 'misses', 'mode', 'path', 'uncached',
     'uncached_functions', 'verified']
    """
    folder = trace_cache_dir()
    entries = _DISK.stats()
    with _LOCK:
        counts = {k: STATE.counts[k] for k in ("hits", "misses", "verified")}
        counts["uncached"] = STATE.counts["uncached"]
        reasons = dict(STATE.uncached)
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
    STATE.entries.clear()
    _DISK.clear()
