"""The trace cache's audit hook: file, OS and other events a watched trace causes.

Changes
-------
Adds one audit hook (:func:`sys.addaudithook`) to the process, the first time
the trace cache watches a trace. Audit hooks cannot be removed; outside a
watched trace (every other thread, and this one between traces) the hook
returns at once.

Why
---
A trace may be kept only if everything it ran is described by its key
(``cache/watch``, the allowlist). Reads of files, the environment, the clock
and other OS state reach C without a Python frame the watch's
:mod:`sys.monitoring` tool sees; audit events are where CPython reports them.

Upstream
--------
No upstream issue. It would be unnecessary if JAX recorded what a trace
depends on, or kept traces across processes itself: the closest request is
https://github.com/jax-ml/jax/issues/22281 (a persistent compilation cache
hit is still a tracing cache miss); a hook would be a JAX trace context that
reports the Python-level reads of a trace.

Checked with
------------
CPython 3.12 and 3.13 (audit hooks since 3.8; the events raised by ``open``,
``os.*``, ``time`` and ``socket``).

Off switch
----------
``jax_ofg__trace_cache=off``: no trace is watched, and the hook is never added.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable


__all__ = ["install"]

_installed = False
_lock = threading.Lock()


def install(hook: Callable[[str, tuple], None]) -> None:
    """Add ``hook`` as an audit hook, once per process (later calls do nothing)."""
    global _installed
    with _lock:
        if not _installed:
            _installed = True
            sys.addaudithook(hook)
