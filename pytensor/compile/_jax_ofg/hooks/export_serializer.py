"""A hook in ``jax.export``'s serializer: the trace cache's programs exported as
``jax.jit`` lowers them, for this jaxlib.

Changes
-------
Inside :func:`for_this_jaxlib`, in the calling thread only, ``jax.export``
lowers without its forward-compatible rules (JAX's thread-local
``jax_export_ignore_forward_compatibility``) and serializes the module at
this jaxlib's own StableHLO version. For the latter, jax.export's serializer
(``_module_to_bytecode``, through ``compat.export_serializer``) is wrapped,
the first time the context is entered (by the trace cache's first export),
by one that defers to JAX's own in every other thread and outside the
context: exports made by anyone else stay as portable as JAX makes them.

Why
---
``jax.export`` lowers for consumers up to a month older than the producer:
it swaps the CPU kernels of ``lgamma`` and ``digamma`` for polynomial
approximations, a fused multiply-add for a multiply and an add, and so on,
and writes StableHLO of a version four weeks old (which has no ``fma``, so
lowering as ``jax.jit`` does needs both changes). The trace cache's entries
are read back only by the same jax and jaxlib (their versions are in every
key), so the portability buys nothing, and costs: the SIR case study's
program (a diffrax solve and its VJP, with the likelihood's ``gammaln``
fused in) compiled to 2.0 MB of HLO in 1.6-1.8 s, against 0.9 MB in 0.9 s
lowered for this jaxlib, as ``jax.jit``'s own lowering compiles -- the first
gradient of every cold process, and a smaller executable for each core's
runtime to load. The program now also computes what ``mode="JAX"``
computes, kernel for kernel.

Upstream
--------
No upstream issue. Draft: "``jax.export`` for a local cache: an option of
``jax.export.export`` (or of ``Exported.serialize``) to lower and serialize
for the running jaxlib only, as ``jax.jit`` lowers, for callers that store
exports next to a key holding the jax and jaxlib versions." With it, this
module would be unnecessary.

Checked with
------------
JAX and jaxlib 0.12.1 (``jax._src.export._export._module_to_bytecode``
and the names it serializes with; ``jax._src.config.export_ignore_forward_compatibility``).

Off switch
----------
``jax_ofg__trace_cache=off``: nothing is exported. Where JAX's private names
have moved, the context does nothing: exports are portable, as before.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pytensor.compile._jax_ofg import compat


__all__ = ["for_this_jaxlib"]

_local = threading.local()
_LOCK = threading.Lock()
_MARKER = "_jax_ofg_for_this_jaxlib"


@contextlib.contextmanager
def for_this_jaxlib() -> Iterator[bool]:
    """Export, in this block and thread, as ``jax.jit`` lowers, for this jaxlib only.

    Yields whether it can (False: JAX's private names moved; the exports are
    then portable, as JAX makes them).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> def log_gamma(x):
    ...     return jax.lax.lgamma(x)
    >>> spec = jax.ShapeDtypeStruct((3,), jnp.float64)
    >>> with for_this_jaxlib() as local:
    ...     exported = jax.export.export(jax.jit(log_gamma))(spec)
    >>> local, "cpu_lgamma_ffi" in exported.mlir_module()
    (True, True)
    >>> "cpu_lgamma_ffi" in jax.export.export(jax.jit(log_gamma))(spec).mlir_module()
    False
    """
    ignored = compat.forward_compatibility_ignored()
    if ignored is None or not _install():
        yield False
        return
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        with ignored:
            yield True
    finally:
        _local.depth = depth


def _install() -> bool:
    """Put the serializer in place, once; whether it is."""
    found = compat.export_serializer()
    if found is None:
        return False
    module, name = found
    with _LOCK:  # two threads' first exports at once wrap it once
        return compat.patch_method(module, name, _MARKER, _serializer)


def _serializer(portable: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    @functools.wraps(portable)
    def serialize(module: Any) -> bytes:
        if getattr(_local, "depth", 0):
            return compat.serialize_at_current_version(module)
        return portable(module)

    return serialize
