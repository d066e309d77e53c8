"""JAX linker: an :class:`~pytensor.compile.jax_ofg_op.OpFromJax` is its own inner function.

No host callback and no nested ``jit``: the inner function is traced into the
graph's single XLA computation, nested wrapped functions included. An error
raised while JAX traces it is noted with the op's name and marked as a
wrapped function's (:mod:`~pytensor.compile.jax_ofg_errors`); errors raised
later, by the compiled XLA program, cannot be traced back to one op.

A graph lowered as a whole (a :class:`~pytensor.compile.jax_ofg_island_op.JaxIsland`)
may pass :class:`~pytensor.compile.jax_ofg_transforms.SharedPullbacks`: an op
and its pullback on the same inputs then share one :func:`jax.vjp` in the
trace, so the value and the gradient cost one forward pass without packing
residuals.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`jax_funcify_OpFromJax` for ``OpFromJax`` with PyTensor's ``jax_funcify``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from pytensor.compile.jax_ofg_errors import RaisedWhile, mark
from pytensor.compile.jax_ofg_op import OpFromJax
from pytensor.compile.jax_ofg_transforms import (
    SharedPullbacks,
    VJPFunction,
    cast_cotangents,
    value_and_pullback,
)
from pytensor.graph.basic import Apply


__all__ = ["jax_funcify_OpFromJax"]


def _noted(op: OpFromJax, fn: Callable) -> Callable:
    def traced(*inputs):
        try:
            return fn(*inputs)
        except Exception as error:
            mark(
                error,
                RaisedWhile.TRACING_WRAPPED_FUNCTION,
                f"Raised while JAX traced the function in {op}.{op.traced_note()}",
            )
            raise

    return traced


def _lowering(op: OpFromJax, node: Apply | None, pairs: SharedPullbacks | None):
    """The traced function of ``node``: alone, or a part of a shared VJP."""
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
    """The traced function of an ``OpFromJax`` node (see the module docstring)."""
    traced_fn = _noted(op, _lowering(op, node, jax_ofg_pullbacks))

    if len(op.output_types) == 1:

        def opfromjax(*inputs):
            return traced_fn(*inputs)[0]

    else:

        def opfromjax(*inputs):
            return traced_fn(*inputs)

    return opfromjax
