"""Pullbacks of the inputs asked for, value and gradient in one pass, and
constants baked into the JAX function.

Registered by :func:`pytensor.compile.jax_ofg.install` in ``optdb``:
:func:`prune_pullback_inputs` as ``jax_ofg_prune_pullback_inputs``,
:class:`FuseValueAndVJP` as ``jax_ofg_fuse_value_and_vjp``, and
:func:`bake_constant_inputs` as ``jax_ofg_bake_constant_inputs``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from pytensor.compile._jax_ofg.islands.selection import islands_enabled, select_islands
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.transforms import (
    ValueAndVJP,
    VJPForward,
    VJPFunction,
    find_forward,
    pullback_primals,
    residual_dtypes,
)
from pytensor.compile._jax_ofg.tracing.functions import BakedInputs, Static
from pytensor.compile._jax_ofg.tracing.shapes import InputMap
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.rewriting.basic import (
    GraphRewriter,
    copy_stack_trace,
    get_active_mode,
    node_rewriter,
)
from pytensor.graph.traversal import ancestors
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorConstant


__all__ = [
    "FuseValueAndVJP",
    "bake_constant_inputs",
    "fuse_value_and_vjp",
    "prune_pullback_inputs",
]


def _is_vjp_node(node: Apply) -> bool:
    return isinstance(node.op, OpFromJax) and isinstance(node.op.fn, VJPFunction)


@node_rewriter([OpFromJax])
def prune_pullback_inputs(fgraph, node: Apply) -> dict[Variable, Variable] | None:
    """Differentiate a pullback only in the inputs whose gradients are used.

    ``pt.grad(cost, theta)`` asks an op for the gradients of all its float
    inputs (the pullback cannot know which ones are wanted), data included.
    The unused ones are dropped here, and the :class:`VJPFunction` holds
    those inputs constant: forward mode then spends no JVP on them, and a
    non-finite derivative in them (``sqrt`` of a data point 0) cannot turn
    the gradients asked for into NaN.
    """
    if not _is_vjp_node(node):
        return None
    used = [bool(fgraph.clients[output]) for output in node.outputs]
    if all(used) or not any(used):
        return None
    op: OpFromJax = node.op
    vjp: VJPFunction = op.fn
    kept = iter(used)  # one output per input flagged in wrt, in order
    wrt = tuple(next(kept) if w else False for w in vjp.wrt)
    pruned_op = op.derive(
        replace(vjp, wrt=wrt),
        op.input_types,
        [t for t, u in zip(op.output_types, used) if u],
        name=op.name,
        output_dims=tuple(d for d, u in zip(op.output_dims, used) if u),
    )
    gradients = iter(pruned_op(*node.inputs, return_list=True))
    replacements = {o: next(gradients) for o, u in zip(node.outputs, used) if u}
    for old, new in replacements.items():
        copy_stack_trace(old, new)
    return replacements


class IslandPlan:
    """Which nodes the ``jax_islands`` rewrite will group, found once per graph.

    Selecting islands probes every node's JAX lowering: it is done at the
    first question and reused for every pullback of the pass (a graph with
    one wrapped ODE solve per patient has hundreds). The answer may be stale
    for nodes replaced since; it only decides whether a pair is fused with
    residuals or left to share a ``jax.vjp`` in its island, never a result.
    """

    def __init__(self, fgraph):
        self.fgraph = fgraph

    @cached_property
    def _island_of(self) -> dict[Apply, int]:
        if not islands_enabled(get_active_mode(self.fgraph)):
            return {}
        islands = select_islands(self.fgraph)
        return {node: k for k, island in enumerate(islands) for node in island}

    def share_an_island(self, forward: Apply, backward: Apply) -> bool:
        island = self._island_of.get(forward)
        return island is not None and island == self._island_of.get(backward)


def _value_and_vjp(forward: Apply, vjp_node: Apply) -> dict[Variable, Variable]:
    forward_op: OpFromJax = forward.op
    vjp_op: OpFromJax = vjp_node.op
    combined = vjp_op.derive(
        ValueAndVJP(vjp_op.fn),
        vjp_op.input_types,
        [*forward_op.output_types, *vjp_op.output_types],
        name=f"value_and_vjp({forward_op.describe()})",
        output_dims=(*forward_op.output_dims, *vjp_op.output_dims),
    )
    outputs = combined(*vjp_node.inputs, return_list=True)
    n_outputs = len(forward_op.output_types)
    copy_stack_trace(forward.outputs, outputs[:n_outputs])
    copy_stack_trace(vjp_node.outputs, outputs[n_outputs:])
    return dict(zip([*forward.outputs, *vjp_node.outputs], outputs))


def _with_residuals(forward: Apply, vjp: VJPFunction, primal_types: list):
    """The split of ``vjp`` (forward and backward functions) and the forward op that
    also returns its residuals, one vector per dtype; None when the residuals'
    dtypes cannot be traced abstractly."""
    forward_op: OpFromJax = forward.op
    try:
        dtypes = residual_dtypes(
            vjp,
            [t.shape for t in primal_types],
            [t.dtype for t in primal_types],
            forward_op.traced_sizes,
        )
    except Exception:
        return None
    forward_fn, backward_fn = vjp.split(dtypes)
    fused_op = forward_op.derive(
        forward_fn,
        forward_op.input_types,
        [
            *forward_op.output_types,
            *(TensorType(dtype, shape=(None,)) for dtype in dtypes),
        ],
        name=f"{forward_op.describe()}+residuals",
        output_dims=(*forward_op.output_dims, *((None,) for _ in dtypes)),
    )
    return forward_fn, backward_fn, fused_op


def fuse_value_and_vjp(
    fgraph, node: Apply, plan: IslandPlan | None = None
) -> dict[Variable, Variable] | None:
    """Share one forward pass between an op and its pullback on the same inputs.

    ``f(x)`` and ``vjp(f)(x, ct)`` become ``f_with_residuals(x)``, whose extra
    outputs (the VJP residuals, one vector per dtype) feed
    ``vjp(f)(x, *residuals, ct)``. A second pullback of the same kind reuses
    the residuals. When the cotangents do not depend on ``f(x)`` (a cost
    computed inside the wrapped function), both become one
    ``value_and_vjp(f)(x, ct)``, which is :func:`jax.value_and_grad`. A
    pullback alone (no forward node on the same inputs) is left as it is: it
    then has to run the forward anyway, and residuals would only cost memory.
    So is a pair that ``plan`` puts in one JAX island.

    Returns the replacements for ``node`` (a pullback) and its forward.
    """
    if not _is_vjp_node(node):
        return None
    vjp_op: OpFromJax = node.op
    vjp: VJPFunction = vjp_op.fn
    primals = pullback_primals(node)
    if not primals:
        return None
    cotangents = node.inputs[len(primals) :]
    clients = [c for c, _ in fgraph.clients[primals[0]] if isinstance(c.op, OpFromJax)]
    forward = find_forward(node, clients)
    fused = find_forward(
        node, clients, lambda op: isinstance(op.fn, VJPForward) and op.fn.split_of(vjp)
    )
    replacements: dict[Variable, Variable] = {}
    if fused is not None:
        forward_fn, backward_fn = vjp.split(fused.op.fn.residual_dtypes)
        residuals = fused.outputs[
            len(fused.outputs) - len(forward_fn.residual_dtypes) :
        ]
    elif forward is None:
        return None
    elif set(forward.outputs).isdisjoint(ancestors(cotangents)):
        # The cotangents are known before the forward runs: one program.
        return _value_and_vjp(forward, node)
    elif (plan or IslandPlan(fgraph)).share_an_island(forward, node):
        # Both will be lowered in one XLA program, sharing one jax.vjp
        # (SharedPullbacks): no residuals to trace for, nor to pack.
        return None
    else:
        split = _with_residuals(forward, vjp, vjp_op.input_types[: len(primals)])
        if split is None:  # cannot be traced abstractly: keep the two passes
            return None
        forward_fn, backward_fn, fused_op = split
        outputs = fused_op(*primals, return_list=True)
        n_outputs = len(forward.op.output_types)
        outputs, residuals = outputs[:n_outputs], outputs[n_outputs:]
        copy_stack_trace(forward.outputs, outputs)
        replacements.update(zip(forward.outputs, outputs))

    backward_op = vjp_op.derive(
        backward_fn,
        [
            *vjp_op.input_types[: len(primals)],
            *(r.type for r in residuals),
            *vjp_op.input_types[len(primals) :],
        ],
        vjp_op.output_types,
        name=vjp_op.name,
        output_dims=vjp_op.output_dims,
    )
    gradients = backward_op(*primals, *residuals, *cotangents, return_list=True)
    copy_stack_trace(node.outputs, gradients)
    replacements.update(zip(node.outputs, gradients))
    return replacements


class FuseValueAndVJP(GraphRewriter):
    """:func:`fuse_value_and_vjp` for every pullback of a graph, in one pass."""

    def apply(self, fgraph) -> None:
        plan = IslandPlan(fgraph)
        for node in fgraph.toposort():
            if node not in fgraph.apply_nodes or not _is_vjp_node(node):
                continue  # replaced earlier in this pass, or not a pullback
            replacements = fuse_value_and_vjp(fgraph, node, plan)
            if replacements:
                fgraph.replace_all_validate(
                    list(replacements.items()), reason="jax_ofg_fuse_value_and_vjp"
                )


# ------------------------------------------------------ baked constants
#: Constant inputs of at most this many elements are baked into the JAX
#: function: XLA folds them (a cotangent of 1.0, say), and they are no
#: longer passed at every call.
BAKED_CONSTANT_SIZE = 1024


@node_rewriter([OpFromJax])
def bake_constant_inputs(fgraph, node: Apply) -> list[Variable] | None:
    """Bake small constant inputs of an :class:`OpFromJax` into its function.

    ``pt.grad`` of a scalar cost gives the cotangent ``1.0``: the fused
    ``value_and_vjp`` op then becomes exactly :func:`jax.value_and_grad`.
    """
    op: OpFromJax = node.op
    baked = tuple(
        (i, Static(x.data))
        for i, x in enumerate(node.inputs)
        if isinstance(x, TensorConstant) and x.data.size <= BAKED_CONSTANT_SIZE
    )
    if not baked or len(baked) == len(node.inputs):  # all constant: folded
        return None
    positions = {i for i, _ in baked}
    kept = [i for i in range(len(node.inputs)) if i not in positions]
    baked_op = op.derive(
        BakedInputs(op.fn, baked),
        [op.input_types[i] for i in kept],
        op.output_types,
        output_dims=op.output_dims,
        inputs=InputMap(
            index=tuple(
                None if i in positions else kept.index(i)
                for i in range(len(node.inputs))
            ),
            shapes=tuple(
                x.data.shape if i in positions else x.type.shape
                for i, x in enumerate(node.inputs)
            ),
        ),
    )
    outputs = baked_op(*[node.inputs[i] for i in kept], return_list=True)
    copy_stack_trace(node.outputs, outputs)
    return outputs
