"""The trace cache's :mod:`sys.monitoring` tool: what Python and C code a watched trace runs.

Changes
-------
Claims one of :mod:`sys.monitoring`'s tool ids (4, else 3: ids no standard
tool uses; 0-2 and 5 are the debugger's, coverage's, the profiler's and the
optimizer's) and registers its callbacks, the first time the trace cache
watches a trace. Its events are on only while a trace is watched (then the
tool also brackets :data:`gc.callbacks`, so that a collection is no part of
the trace); between traces the tool costs nothing. When both ids are taken,
no trace is kept.

Why
---
A trace may be kept only if everything it ran is described by its key
(``cache/watch``, the allowlist): Python code starting, calls of C functions
and imports during the trace are what the watch checks.

Upstream
--------
No upstream issue. As for the audit hook (``hooks/audit_hook``): it would be
unnecessary if JAX recorded what a trace depends on (closest:
https://github.com/jax-ml/jax/issues/22281).

Checked with
------------
CPython 3.12 and 3.13 (:pep:`669`'s ``sys.monitoring``).

Off switch
----------
``jax_ofg__trace_cache=off``: no trace is watched, and no tool id is claimed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping


__all__ = ["TOOL_IDS", "claim"]

#: The tool ids tried, in order.
TOOL_IDS = (4, 3)

_claimed: int | None = None


def claim(name: str, callbacks: Mapping[int, Callable]) -> int | None:
    """Return the tool id claimed for ``name``, registering ``callbacks`` (event ->
    function) the first time; None when every id of :data:`TOOL_IDS` is taken.

    Not thread-safe: the caller holds its lock.
    """
    global _claimed
    if _claimed is not None:
        return _claimed
    monitoring = sys.monitoring
    for candidate in TOOL_IDS:
        try:
            monitoring.use_tool_id(candidate, name)
        except ValueError:
            continue
        for event, callback in callbacks.items():
            monitoring.register_callback(candidate, event, callback)
        _claimed = candidate
        return candidate
    return None
