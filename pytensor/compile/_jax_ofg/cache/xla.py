"""Compiled XLA programs cached on disk, next to PyTensor's own cache.

JAX's persistent compilation cache, in ``compiledir/jax_ofg_xla`` unless the
user configured JAX's cache or switched it or ``jax_ofg__xla_cache`` off.
Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` adds the
flag (:func:`add_config_flag`), calls :func:`configure_xla_cache` and
:func:`write_entries_atomically`. The docs, "Start-up and caches"
and "Ctrl-C and faults".
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path

import jax

from pytensor import config
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.files import remove_orphans, write_whole
from pytensor.configparser import BoolParam


LOGGER = logging.getLogger("pytensor.compile.jax_ofg")
#: Names of entries being written: JAX reads entries by key, never these.
TEMPORARY_PREFIX = ".jax_ofg-"


#: JAX's ``jax_persistent_cache_min_compile_time_secs`` when this package
#: configures the cache. Measured on the CI box (XLA's compile and retrieval
#: times, from ``jax.monitoring``): the JAX island of an SIR model (diffrax
#: solve and its VJP) compiles in 3.5 s and is read back in 0.15 s; the value
#: and gradient of a small function compile in 30 ms; the programs of JAX's
#: eager operations (``jit_convert_element_type``...) in about 6 ms each. Every
#: program that costs more than a cache read is kept; JAX's default of 1 s
#: would also leave out programs compiling in 0.1-1 s.
MIN_COMPILE_SECONDS = 0.1


def add_config_flag() -> None:
    """Add the PyTensor flag ``jax_ofg__xla_cache`` (default True)."""
    if not hasattr(config, "jax_ofg__xla_cache"):
        config.add(
            "jax_ofg__xla_cache",
            "Cache the XLA programs of pytensor-jax-ofg's ops on disk, in "
            "compiledir/jax_ofg_xla, unless JAX's own cache directory is "
            "configured.",
            BoolParam(True),
            in_c_key=False,
        )


def xla_cache_dir() -> Path:
    """Return where this package keeps compiled XLA programs when it configures the
    cache.
    """
    return Path(config.compiledir) / "jax_ofg_xla"


def configure_xla_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`xla_cache_dir`.

    Returns the directory, or None when the user configured JAX's cache
    themselves or turned it or ours off.
    """
    if (
        not config.jax_ofg__xla_cache
        or not jax.config.jax_enable_compilation_cache
        or jax.config.jax_compilation_cache_dir
    ):
        return None
    path = xla_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS
        )
    return path


def write_entries_atomically() -> bool:
    """Make JAX's persistent cache write each entry whole or not at all.

    JAX writes an entry in place: a full disk, a quota or a process killed
    mid-write leaves a truncated entry, which every later process fails to
    read (a warning) and, since JAX never writes over an entry, never
    replaces. Patched, an entry is written to a temporary file in the cache
    folder and renamed into place; a write that fails (``OSError``) leaves
    nothing behind, and the program runs uncached, the reason in the debug
    log of ``pytensor.compile.jax_ofg``. Written over rather than skipped, an
    entry that could not be read is replaced by the freshly compiled one.
    Returns whether the patch is in place (not when JAX's cache class moved:
    JAX's own writes then).
    """
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
