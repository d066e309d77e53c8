"""The trace cache's one door: all the rest of the package uses of it.

Code outside ``cache/`` imports this module only (a test checks it). It
gives:

* **look up and store**: :func:`cached` (a trace's result, from the cache or
  traced under the watch and kept), :func:`proven_trace` (a trace made
  outside the cache, and whether it may be reused in this process),
  :func:`unproven_traces`, :func:`uncached`, :func:`mode`;
* **what a key is made of**: the recipes of ``cache/keys``
  (:func:`program_key`, :func:`registry_key`, :func:`body_key`,
  :func:`array_key`), and :class:`Undescribable`;
* **for code that runs JAX's tracing itself**: :func:`fresh_trace_context`
  (JAX reuses no earlier trace inside it) and :func:`unwatched` (what runs
  inside is no part of a watched trace);
* **for the facade**: :func:`install`, :func:`trace_cache_info`,
  :func:`clear_trace_cache`; and :class:`MemoryStorage`, the store behind
  ``get``/``put`` that host calls also keep their programs in.

Registers nothing itself. The developer notes, "The trace cache".
"""

from __future__ import annotations

from pytensor.compile._jax_ofg.cache.keys import (
    Undescribable,
    array_key,
    body_key,
    program_key,
    registry_key,
)
from pytensor.compile._jax_ofg.cache.storage import MemoryStorage
from pytensor.compile._jax_ofg.cache.traces import (
    StaleTraceError,
    cached,
    clear_trace_cache,
    install,
    mode,
    proven_trace,
    trace_cache_info,
    uncached,
    unproven_traces,
)
from pytensor.compile._jax_ofg.cache.watch import fresh_trace_context
from pytensor.compile._jax_ofg.cache.watch import paused as unwatched


__all__ = [
    "MemoryStorage",
    "StaleTraceError",
    "Undescribable",
    "array_key",
    "body_key",
    "cached",
    "clear_trace_cache",
    "fresh_trace_context",
    "install",
    "mode",
    "program_key",
    "proven_trace",
    "registry_key",
    "trace_cache_info",
    "uncached",
    "unproven_traces",
    "unwatched",
]
