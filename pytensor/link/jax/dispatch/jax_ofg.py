"""JAX linker: an :class:`~pytensor.compile._jax_ofg.op.from_jax.OpFromJax` is its own inner function.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`jax_funcify_OpFromJax` with PyTensor's ``jax_funcify``. The JAX
linker's functions holding wrapped functions check for a fork:
``patches/jax_linker_check``.
"""

from __future__ import annotations

import jax.numpy as jnp

from pytensor.compile._jax_ofg.cache.api import fresh_trace_context
from pytensor.compile._jax_ofg.errors import RaisedWhile, mark
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.transforms import (
    SharedPullbacks,
    VJPFunction,
    cast_cotangents,
    value_and_pullback,
)
from pytensor.graph.basic import Apply


__all__ = ["jax_funcify_OpFromJax"]


def _lowering(op: OpFromJax, node: Apply | None, pairs: SharedPullbacks | None):
    """Return the traced function of ``node``: alone, or a part of a shared VJP."""
    if pairs is None or node is None:
        return op.traced_fn
    if node in pairs.coverage:  # a forward: keep the pullback
        wrt, covered = pairs.coverage[node]

        def forward_and_pullback(*primals):
            outputs, pullback = value_and_pullback(op.traced_fn, wrt, covered, primals)
            pairs.put(node, outputs, pullback)
            return outputs

        return forward_and_pullback
    forward = pairs.forward_of.get(node)
    if forward is None:
        return op.traced_fn
    vjp_fn: VJPFunction = op.fn
    wrt, covered = pairs.coverage[forward]

    def pullback_of_forward(*args):
        shared = pairs.get(forward)
        if shared is None:  # not traced with its forward: on its own
            return op.traced_fn(*args)
        outputs, pullback = shared
        given = dict(
            zip(
                vjp_fn.cotangent_outputs,
                cast_cotangents(args[len(wrt) :], vjp_fn.cotangent_dtypes),
            )
        )
        cotangents = tuple(
            given[k] if k in given else jnp.zeros_like(outputs[k]) for k in covered
        )
        gradients = iter(pullback(cotangents))
        by_input = [next(gradients) if w else None for w in wrt]
        return tuple(g for g, w in zip(by_input, vjp_fn.wrt) if w)

    return pullback_of_forward


def jax_funcify_OpFromJax(
    op: OpFromJax, node=None, jax_ofg_pullbacks: SharedPullbacks | None = None, **kwargs
):
    """Return the traced function of an ``OpFromJax`` node (see the module docstring)."""
    traced_fn = _lowering(op, node, jax_ofg_pullbacks)
    single_output = len(op.output_types) == 1

    def opfromjax(*inputs):
        try:
            # The user's function runs anew at every trace, nested jitted
            # helpers included: what they read when traced is read now.
            with fresh_trace_context():
                outputs = traced_fn(*inputs)
        except Exception as error:
            mark(
                error,
                RaisedWhile.TRACING_WRAPPED_FUNCTION,
                f"Raised while JAX traced the function in {op}.{op.error_hint()}",
            )
            raise
        return outputs[0] if single_output else outputs

    return opfromjax
