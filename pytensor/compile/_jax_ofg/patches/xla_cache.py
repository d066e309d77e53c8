"""Compiled XLA programs cached on disk, next to PyTensor's own cache.

Changes
-------
Sets JAX's persistent compilation cache directory to
``compiledir/jax_ofg_xla`` (``jax_compilation_cache_dir``) and, unless
``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` is set, its
``jax_persistent_cache_min_compile_time_secs`` to :data:`MIN_COMPILE_SECONDS`
-- only when the user configured neither JAX's cache directory nor turned
JAX's cache off. Then every JAX program compiled in the process, ours or not,
is cached there.

Why
---
A second process then loads the XLA programs of a model instead of compiling
them (seconds for an ODE solve and its derivative), with nothing to set up:
PyTensor's ``compiledir`` is already where compiled code lives.

Upstream
--------
No upstream issue: JAX leaves the cache off unless told where it goes, by
design. PyTensor configuring JAX's cache under its ``compiledir`` for its
JAX backend would make this module unnecessary.

Checked with
------------
JAX 0.12.0 and 0.12.1 (the options ``jax_compilation_cache_dir``,
``jax_enable_compilation_cache``, ``jax_persistent_cache_min_compile_time_secs``).

Off switch
----------
``jax_ofg__xla_cache=False``, or configuring JAX's cache directory yourself.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from pytensor import config
from pytensor.compile._jax_ofg.flags import XLA_CACHE


__all__ = ["MIN_COMPILE_SECONDS", "install", "xla_cache_dir"]

#: JAX's ``jax_persistent_cache_min_compile_time_secs`` when this package
#: configures the cache. Measured on the CI box (XLA's compile and retrieval
#: times, from ``jax.monitoring``): the JAX island of an SIR model (diffrax
#: solve and its VJP) compiles in 3.5 s and is read back in 0.15 s; the value
#: and gradient of a small function compile in 30 ms; the programs of JAX's
#: eager operations (``jit_convert_element_type``...) in about 6 ms each. Every
#: program that costs more than a cache read is kept; JAX's default of 1 s
#: would also leave out programs compiling in 0.1-1 s.
MIN_COMPILE_SECONDS = 0.1


def xla_cache_dir() -> Path:
    """Return where this package keeps compiled XLA programs when it configures the
    cache.
    """
    return Path(config.compiledir) / "jax_ofg_xla"


def install() -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`xla_cache_dir`.

    Returns the directory, or None when the user configured JAX's cache
    themselves or turned it or ours off.
    """
    if (
        not XLA_CACHE.value
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
