"""Start-up: compiled XLA programs are cached on disk, next to PyTensor's own cache.

PyTensor keeps compiled C and Numba code under ``config.compiledir``, so a
model's second process starts fast. The XLA programs of wrapped JAX functions
(and of JAX islands) would be compiled again in every process: this module
turns on JAX's persistent compilation cache in ``compiledir/jax_ofg_xla``
when this package is imported, unless

* the user configured a cache directory for JAX (``jax_compilation_cache_dir``
  or ``JAX_COMPILATION_CACHE_DIR``): theirs wins; or
* the PyTensor flag ``jax_ofg__xla_cache`` is off
  (``PYTENSOR_FLAGS=jax_ofg__xla_cache=False``).

Programs that took at least :data:`MIN_COMPILE_SECONDS` to compile are kept
(JAX's default is one second, which leaves out most single wrapped functions).
"""

from __future__ import annotations

from pathlib import Path

import jax

from pytensor import config
from pytensor.configparser import BoolParam


#: JAX's ``jax_persistent_cache_min_compile_time_secs`` when this package
#: configures the cache. Chosen by measurement (``benchmarks/cold_start.py``):
#: reading a cached program costs milliseconds, compiling even a small one
#: tens of milliseconds.
MIN_COMPILE_SECONDS = 0.0

if not hasattr(config, "jax_ofg__xla_cache"):
    config.add(
        "jax_ofg__xla_cache",
        "Cache the XLA programs of pytensor-jax-ofg's ops on disk, in "
        "compiledir/jax_ofg_xla, unless JAX's own cache directory is configured.",
        BoolParam(True),
        in_c_key=False,
    )


def xla_cache_dir() -> Path:
    """Where this package keeps compiled XLA programs when it configures the cache."""
    return Path(config.compiledir) / "jax_ofg_xla"


def configure_xla_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`xla_cache_dir`.

    Returns the directory, or None when the user configured JAX's cache
    themselves or turned ours off.
    """
    if not config.jax_ofg__xla_cache or jax.config.jax_compilation_cache_dir:
        return None
    path = xla_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
