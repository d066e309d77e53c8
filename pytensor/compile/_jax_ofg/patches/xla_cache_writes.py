"""JAX's persistent cache writes each entry whole or not at all.

Changes
-------
Replaces ``put`` of JAX's on-disk compilation cache class
(``jax._src.lru_cache.LRUCache``, through ``compat.persistent_cache_class``):
an entry is written to a temporary file in the cache folder and renamed into
place; a write that fails (``OSError``) leaves nothing behind, the program
runs uncached and the reason goes to the debug log of
``pytensor.compile.jax_ofg``. With JAX's size-bounded eviction on, JAX's own
``put`` runs, and what it wrote of a failed entry is removed. Written over
rather than skipped, an entry that could not be read is replaced by the
freshly compiled one.

Why
---
JAX writes an entry in place: a full disk, a quota or a process killed
mid-write (Ctrl-C during a compile) leaves a truncated entry, which every
later process fails to read (a warning) and, since JAX never writes over an
entry, never replaces.

Upstream
--------
No issue asks for atomic writes; https://github.com/jax-ml/jax/issues/39880
(an orphaned ``-cache`` file disables every write once a size cap is set)
shows the same two-step write going wrong. It would be unnecessary if
``LRUCache.put`` wrote through a temporary file and :func:`os.replace`.

Checked with
------------
JAX 0.12.0 and 0.12.1 (``LRUCache.put``, ``path``, ``eviction_enabled``,
``_CACHE_SUFFIX``).

Off switch
----------
``jax_ofg__xla_cache_atomic_writes=False``: JAX's own writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.files import remove_orphans, write_whole
from pytensor.compile._jax_ofg.flags import XLA_CACHE_ATOMIC_WRITES


__all__ = ["TEMPORARY_PREFIX", "install"]

LOGGER = logging.getLogger("pytensor.compile.jax_ofg")
#: Names of entries being written: JAX reads entries by key, never these.
TEMPORARY_PREFIX = ".jax_ofg-"


def install() -> bool:
    """Make JAX's persistent cache write each entry whole or not at all; whether the
    patch is in place (not when switched off, or when JAX's cache class moved:
    JAX's own writes then)."""
    if not XLA_CACHE_ATOMIC_WRITES.value:
        return False
    found = compat.persistent_cache_class()
    if found is None:
        return False
    cls, suffix = found
    return compat.patch_method(
        cls, "put", "_jax_ofg_atomic", lambda put: _atomic_put(put, suffix)
    )


def _atomic_put(put: Callable, suffix: str) -> Callable:
    @functools.wraps(put)
    def atomic_put(self, key: str, value: bytes) -> None:
        if getattr(self, "eviction_enabled", True) or not key:
            # JAX's size-bounded cache keeps its own bookkeeping under a lock.
            _guarded_put(put, self, key, value, suffix)
            return
        folder = Path(self.path)
        try:
            write_whole(folder / f"{key}{suffix}", value, prefix=TEMPORARY_PREFIX)
        except OSError as error:
            _not_written(key, folder, error)
        remove_orphans(folder, TEMPORARY_PREFIX)

    return atomic_put


def _guarded_put(put: Callable, cache, key: str, value: bytes, suffix: str) -> None:
    """JAX's own write; if it fails, remove what it wrote of the entry."""
    try:
        put(cache, key, value)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(Path(cache.path) / f"{key}{suffix}")
        _not_written(key, Path(cache.path), error)


def _not_written(key: str, folder: Path, error: OSError) -> None:
    LOGGER.debug(
        "XLA cache: the compiled program %s was not written to %s (%s: %s); "
        "it runs, and a later process compiles it again",
        key,
        folder,
        type(error).__name__,
        error,
    )
