"""The trace cache's one door: all the rest of the package, its tests, benchmarks and examples use of it.

Code outside ``cache/`` imports this module only (a test checks it, for the
package and for ``tests/``, ``benchmarks/`` and ``examples/`` but the cache's
own unit tests). It gives:

* **look up and store**: :func:`cached` (a trace's result, from the cache or
  traced under the watch and kept), :func:`proven_trace` (a trace made
  outside the cache, and whether it may be reused in this process),
  :func:`unproven_traces`, :func:`uncached`, :func:`mode`; :class:`Entry`,
  what an entry holds;
* **what a key is made of**: the recipes of ``cache/keys``
  (:func:`program_key`, :func:`registry_key`, :func:`body_key`,
  :func:`array_key`), :class:`Undescribable`, and their parts:
  :func:`fingerprint` and :func:`describe` (a value), and
  :func:`environment_fingerprint` (everything else; this project's source:
  :func:`project_files`);
* **for code that runs JAX's tracing itself**: :func:`fresh_trace_context`
  (JAX reuses no earlier trace inside it) and :func:`unwatched` (what runs
  inside is no part of a watched trace);
* **its state in this process**: :data:`STATE`, one
  :class:`~pytensor.compile._jax_ofg.cache.storage.CacheState`, and
  :func:`reset`; :func:`trace_cache_dir`, :func:`trace_cache_dir_set_to` and
  :data:`TEMPORARY_PREFIX` (entries being written) for its folder on disk;
* **for the facade**: :func:`install`, :func:`trace_cache_info`,
  :func:`clear_trace_cache`; and :class:`MemoryStorage`, the store behind
  ``get``/``put`` that host calls also keep their programs in.

Registers nothing itself. The developer notes, "The trace cache".
"""

from __future__ import annotations

from pytensor.compile._jax_ofg.cache.environment import (
    environment_fingerprint,
    project_files,
)
from pytensor.compile._jax_ofg.cache.fingerprints import describe, fingerprint
from pytensor.compile._jax_ofg.cache.keys import (
    Undescribable,
    array_key,
    body_key,
    program_key,
    registry_key,
)
from pytensor.compile._jax_ofg.cache.storage import (
    STATE,
    TEMPORARY_PREFIX,
    MemoryStorage,
)
from pytensor.compile._jax_ofg.cache.traces import (
    Entry,
    StaleTraceError,
    cached,
    clear_trace_cache,
    install,
    mode,
    proven_trace,
    trace_cache_dir,
    trace_cache_dir_set_to,
    trace_cache_info,
    uncached,
    unproven_traces,
)
from pytensor.compile._jax_ofg.cache.watch import fresh_trace_context
from pytensor.compile._jax_ofg.cache.watch import paused as unwatched


__all__ = [
    "STATE",
    "TEMPORARY_PREFIX",
    "Entry",
    "MemoryStorage",
    "StaleTraceError",
    "Undescribable",
    "array_key",
    "body_key",
    "cached",
    "clear_trace_cache",
    "describe",
    "environment_fingerprint",
    "fingerprint",
    "fresh_trace_context",
    "install",
    "mode",
    "program_key",
    "project_files",
    "proven_trace",
    "registry_key",
    "reset",
    "trace_cache_dir",
    "trace_cache_dir_set_to",
    "trace_cache_info",
    "uncached",
    "unproven_traces",
    "unwatched",
]


def reset() -> None:
    """Forget everything the trace cache holds in this process; the disk is untouched.

    Its entries in memory and its memos (of modules' origins, code, source
    files, C callables) are dropped, as in a new process: the next lookup
    reads the disk, or traces. What cannot or must not be undone stays: the
    counts and reasons :func:`trace_cache_info` reports (the process's
    record), the installed distributions the process started with, and the
    watch's process-wide hooks with what they instrument
    (:meth:`~pytensor.compile._jax_ofg.cache.storage.CacheState.reset`).
    :func:`clear_trace_cache` empties the memory and the disk.

    Examples
    --------
    >>> kept = cached("reset-example", ("x",), lambda: 1.0, name="f", persist=False)
    >>> reset()
    >>> cached("reset-example", ("x",), lambda: 2.0, name="f", persist=False)
    2.0
    """
    STATE.reset()
