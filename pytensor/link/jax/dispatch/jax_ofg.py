"""JAX linker: an :class:`OpFromJax` is its own inner function.

No host callback and no nested ``jit``: the inner function is traced into the
graph's single XLA computation, nested wrapped functions included. An error
raised while JAX traces it is noted with the op's name (errors raised later,
by the compiled XLA program, cannot be traced back to one op).

A graph lowered as a whole (a :class:`~pytensor.compile.jax_ofg_island.JaxIsland`)
may pass :class:`SharedPullbacks`: an op and its pullback on the same inputs
then share one :func:`jax.vjp` in the trace, so the value and the gradient
cost one forward pass without packing residuals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import jax.numpy as jnp

from pytensor.compile.jax_ofg import OpFromJax
from pytensor.compile.jax_ofg_host import TRACED_FUNCTION_NOTE, add_note_once
from pytensor.compile.jax_ofg_transforms import (
    VJPFunction,
    cast_cotangents,
    value_and_pullback,
)
from pytensor.graph.basic import Apply
from pytensor.link.jax.dispatch.basic import jax_funcify


class SharedPullbacks:
    """Forward nodes and their pullback nodes in one graph, lowered together.

    A forward node's lowering computes its outputs with :func:`jax.vjp` and
    leaves the pullback here; its pullback nodes' lowerings, later in the same
    trace, apply it to their cotangents instead of running the forward again.
    The forward's VJP covers every input and output that any of its pullback
    nodes needs (a pullback is linear: outputs it has no cotangent for get
    zeros).

    Parameters
    ----------
    nodes
        The graph's nodes. A pullback node (an :class:`OpFromJax` of a
        :class:`~pytensor.compile.jax_ofg_transforms.VJPFunction`) pairs with a
        node applying its forward function to the same inputs.
    """

    def __init__(self, nodes: Sequence[Apply]):
        jax_nodes = [n for n in nodes if isinstance(n.op, OpFromJax)]
        self.forward_of: dict[Apply, Apply] = {}
        #: per forward node: the inputs (wrt) and outputs its shared VJP covers
        self.coverage: dict[Apply, tuple[tuple[bool, ...], tuple[int, ...]]] = {}
        for backward in jax_nodes:
            vjp_fn = backward.op.fn
            if not isinstance(vjp_fn, VJPFunction):
                continue
            primals = backward.inputs[: len(vjp_fn.wrt)]
            forward = next(
                (
                    n
                    for n in jax_nodes
                    if n.op.fn == vjp_fn.forward and n.inputs == primals
                ),
                None,
            )
            if forward is None:
                continue
            self.forward_of[backward] = forward
            wrt, outputs = self.coverage.get(forward, (vjp_fn.wrt, ()))
            self.coverage[forward] = (
                tuple(a or b for a, b in zip(wrt, vjp_fn.wrt)),
                tuple(sorted({*outputs, *vjp_fn.cotangent_outputs})),
            )
        self._traced = threading.local()  # what the trace under way computed

    def __bool__(self) -> bool:
        return bool(self.forward_of)

    def start_trace(self) -> None:
        """Forget what an earlier trace computed (its tracers are dead)."""
        vars(self._traced).clear()

    def put(self, forward: Apply, outputs: tuple, pullback: Callable) -> None:
        vars(self._traced)[forward] = (outputs, pullback)

    def get(self, forward: Apply) -> tuple[tuple, Callable] | None:
        return vars(self._traced).get(forward)


def _noted(op: OpFromJax, fn: Callable) -> Callable:
    def traced(*inputs):
        try:
            return fn(*inputs)
        except Exception as error:
            add_note_once(error, f"{TRACED_FUNCTION_NOTE}{op}.{op.traced_note()}")
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


@jax_funcify.register(OpFromJax)
def jax_funcify_OpFromJax(
    op: OpFromJax, node=None, jax_ofg_pullbacks: SharedPullbacks | None = None, **kwargs
):
    traced_fn = _noted(op, _lowering(op, node, jax_ofg_pullbacks))

    if len(op.output_types) == 1:

        def opfromjax(*inputs):
            return traced_fn(*inputs)[0]

    else:

        def opfromjax(*inputs):
            return traced_fn(*inputs)

    return opfromjax
