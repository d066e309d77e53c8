"""At-fork handlers: a process forked after JAX started refuses to run JAX.

Changes
-------
Registers a pair of handlers with :func:`os.register_at_fork`: before a fork,
the parent notes whether JAX's backends are initialised; in the child, that
note becomes ``host/fork_guard``'s flag, which every host call and every
``mode="JAX"`` function holding wrapped functions checks, raising
:class:`~pytensor.compile._jax_ofg.host.fork_guard.ForkedAfterJaxError`
instead of running JAX; and the child closes its copies of the parent's
CPU leases (``cores/leases``), which would otherwise keep the parent's CPUs
taken as long as the child lives.

Why
---
XLA's threads do not survive a fork: JAX in a process forked after it
started deadlocks (multiprocessing's ``fork`` start method, PyMC's default
on Linux). A clear error, naming the way out, beats a hang.

Upstream
--------
JAX warns at a fork since https://github.com/jax-ml/jax/pull/18989 (made
lazier by https://github.com/jax-ml/jax/pull/20734) but still runs, and
hangs, in the child; it would be unnecessary if JAX refused to run in a
forked child itself.

Checked with
------------
JAX 0.12.0 and 0.12.1 (``jax._src.xla_bridge.backends_are_initialized``,
through ``compat.jax_started``); CPython 3.12 and 3.13 on Linux.

Off switch
----------
``jax_ofg__fork_guard=False``: no handlers; a forked child runs JAX (and may
hang).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pytensor.compile._jax_ofg.flags import FORK_GUARD


__all__ = ["install"]


def install(before: Callable[[], None], after_in_child: Callable[[], None]) -> bool:
    """Register the handlers (Unix: elsewhere there is no fork); whether they are."""
    if not hasattr(os, "register_at_fork") or not FORK_GUARD.value:
        return False
    os.register_at_fork(before=before, after_in_child=after_in_child)
    return True
