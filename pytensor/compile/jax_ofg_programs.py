"""The jitted program of a host call, traced once across processes.

A :class:`~pytensor.compile.jax_ofg_host.JaxHostOp` runs one ``jax.jit``
program per input signature. :func:`jit_through_trace_cache` builds it so
that JAX, when it traces the program for a signature, first asks the trace
cache (:mod:`~pytensor.compile.jax_ofg_trace_cache`):

* **hit**: the exported program (serialized StableHLO) is deserialized and
  inlined -- the wrapped functions are not traced, and XLA finds the compiled
  program in its persistent cache;
* **miss**: the function is traced once, exported and stored, and the export
  is inlined, so this process compiles the very program later ones will ask
  XLA's cache for;
* **not exportable** (host callbacks, see the trace cache): the function's
  own jitted trace is inlined, as without a cache, and a marker spares later
  processes the attempt.

Either way calls take JAX's compiled fast path: nothing is added per call.

Registers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from pytensor.compile import jax_ofg_trace_cache as trace_cache


__all__ = ["holds_host_callbacks", "jit_through_trace_cache"]

#: Stored in place of a program that cannot be exported.
NOT_EXPORTABLE = "not exportable"


def jit_through_trace_cache(
    packed: Callable,
    static_argnums: Sequence[int],
    op_print: str | None,
    signature: Callable[[Sequence[Any]], tuple],
    traced_shapes: dict[tuple, tuple],
) -> Callable:
    """``jax.jit(packed, static_argnums)``, whose traces go through the trace cache.

    Parameters
    ----------
    packed
        The op's function of its inputs, returning packed buffers; while
        traced it records its output shapes in ``traced_shapes``.
    static_argnums
        Positions of the static (Python integer) inputs.
    op_print
        The op's fingerprint (None: undescribable, so no cache).
    signature
        The key of ``traced_shapes`` for some inputs.
    traced_shapes
        Output shapes by signature: filled from the cache on a hit, where
        ``packed`` is not traced.
    """
    static = tuple(static_argnums)
    jitted = jax.jit(packed, static_argnums=static)
    if op_print is None or trace_cache.trace_cache_dir() is None:
        return jitted

    def traced_or_loaded(*inputs: Any) -> Any:
        if jax.config.jax_disable_jit:  # eager: other shapes than traced
            return jitted(*inputs)
        dynamic = [x for i, x in enumerate(inputs) if i not in static]
        try:
            avals = [(tuple(x.shape), np.dtype(x.dtype).name) for x in dynamic]
        except (AttributeError, TypeError):  # not arrays: JAX says what is wrong
            return jitted(*inputs)
        statics = [inputs[i] for i in static]
        key = trace_cache.key_of_prints(
            "program", op_print, trace_cache.fingerprint((avals, statics))
        )
        entry = trace_cache.load(key, "program")
        if entry == NOT_EXPORTABLE:
            return jitted(*inputs)
        if entry is not None:
            try:
                exported = jax.export.deserialize(bytearray(entry["exported"]))
                outputs = exported.call(*dynamic)
            except Exception:  # damaged, or from a JAX that cannot read it
                pass
            else:
                traced_shapes[signature(inputs)] = entry["output_shapes"]
                return outputs
        specs = [
            x if i in static else jax.ShapeDtypeStruct(x.shape, x.dtype)
            for i, x in enumerate(inputs)
        ]
        # JAX's own jit trace, cached: the export and the call below reuse it.
        # A program with host callbacks cannot be exported: found here, in
        # the trace, before the export lowers it for nothing.
        if holds_host_callbacks(jitted.trace(*specs).jaxpr):
            trace_cache.store(key, "program", NOT_EXPORTABLE)
            return jitted(*inputs)
        try:
            exported = jax.export.export(jitted)(*specs)
            blob = exported.serialize()
        except Exception:  # another refusal, or no flatbuffers to serialize
            trace_cache.store(key, "program", NOT_EXPORTABLE)
            return jitted(*inputs)
        trace_cache.store(
            key,
            "program",
            {
                "exported": bytes(blob),
                "output_shapes": traced_shapes[signature(inputs)],
            },
        )
        return exported.call(*dynamic)

    return jax.jit(traced_or_loaded, static_argnums=static)


def _primitives(jaxpr: Any) -> Iterator[str]:
    """The names of the primitives of a (closed) jaxpr, sub-jaxprs included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for equation in jaxpr.eqns:
        yield equation.primitive.name
        for parameter in equation.params.values():
            for value in (
                parameter if isinstance(parameter, tuple | list) else (parameter,)
            ):
                if hasattr(value, "eqns") or hasattr(
                    getattr(value, "jaxpr", None), "eqns"
                ):
                    yield from _primitives(value)


def holds_host_callbacks(jaxpr: Any) -> bool:
    """Whether a jaxpr calls back into Python (which :mod:`jax.export` refuses).

    ``jax.pure_callback``, ``io_callback``, ``jax.debug.callback`` and
    ``jax.debug.print``; equinox's runtime checks are pure callbacks.

    >>> import jax.numpy as jnp
    >>> def checked(x):
    ...     jax.debug.print("x = {}", x)
    ...     return 2 * x
    >>> holds_host_callbacks(jax.make_jaxpr(checked)(1.0))
    True
    >>> holds_host_callbacks(jax.make_jaxpr(jnp.sin)(1.0))
    False
    """
    return any(
        "callback" in name or name == "debug_print" for name in _primitives(jaxpr)
    )
