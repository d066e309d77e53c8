"""Graph rewrites and vectorization for :class:`~pytensor.compile.jax_ofg.OpFromJax`.

* **Vectorization**: ``vectorize_graph`` of an :class:`OpFromJax` gives one op
  whose inner function is ``jax.vmap``-ed (:func:`vmap_node`), not a
  :class:`~pytensor.tensor.blockwise.Blockwise` looping in Python; a
  ``Blockwise(OpFromJax)`` built by another route is rewritten the same way.
* **Value and gradient in one pass**: when a graph holds an op and its
  pullback on the same inputs (every ``logp_dlogp`` function PyMC compiles),
  :func:`fuse_value_and_vjp` makes the forward op also return the VJP
  residuals and the pullback consume them, so the forward JAX computation
  runs once per call instead of twice; when the cotangents do not depend on
  the forward outputs, both become one ``jax.value_and_grad``-like op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytensor.compile.aliasing import alias_root, view_tree_set
from pytensor.compile.jax_ofg import OpFromJax
from pytensor.compile.jax_ofg_functions import BakedInputs, Static
from pytensor.compile.jax_ofg_host import WRITABLE_TAG, JaxHostOp
from pytensor.compile.jax_ofg_shapes import renumber_symbols, shift_symbols, symbol_name
from pytensor.compile.jax_ofg_transforms import (
    ValueAndVJP,
    VJPForward,
    VJPFunction,
    VmapFunction,
    residual_dtypes,
)
from pytensor.compile.mode import optdb
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import Output
from pytensor.graph.replace import _vectorize_node
from pytensor.graph.rewriting.basic import (
    GraphRewriter,
    copy_stack_trace,
    dfs_rewriter,
    get_active_mode,
    node_rewriter,
)
from pytensor.graph.traversal import ancestors
from pytensor.tensor.blockwise import Blockwise, vectorize_node_fallback
from pytensor.tensor.rewriting.jax_ofg_islands import (
    find_islands,
    islands_enabled,
    joins_islands,
)
from pytensor.tensor.shape import shape_padleft
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorConstant


__all__ = ["fuse_value_and_vjp", "vmap_blockwise", "vmap_node"]


# ------------------------------------------------------------------ vmap
def vmap_node(blockwise_node: Apply) -> list[Variable]:
    """The outputs of a ``Blockwise(OpFromJax)`` node, computed by a vmapped op.

    Inputs whose batch dims are all broadcastable (length 1 in their type)
    are squeezed and passed whole to every call (``in_axes=None``) rather
    than copied along the batch.
    """
    blockwise: Blockwise = blockwise_node.op
    core_op: OpFromJax = blockwise.core_op
    core_ndims = [len(signature) for signature in blockwise.inputs_sig]
    input_batch_ndims = [
        x.type.ndim - ndim for x, ndim in zip(blockwise_node.inputs, core_ndims)
    ]
    batch_ndim = max(input_batch_ndims)

    inputs, batched = [], []
    for x, ndim in zip(blockwise_node.inputs, input_batch_ndims):
        if all(x.type.broadcastable[:ndim]):
            inputs.append(x.squeeze(axis=tuple(range(ndim))) if ndim else x)
            batched.append(False)
        else:
            inputs.append(shape_padleft(x, batch_ndim - ndim))
            batched.append(True)

    if not any(batched):
        outputs = core_op(*inputs, return_list=True)
        return [shape_padleft(out, batch_ndim) for out in outputs]

    output_types = [out.type for out in blockwise_node.outputs]
    offsets = [batch_ndim if b else 0 for b in batched]
    batch_dims = [
        _batch_dim(d, output_types[0].shape[d], inputs, batched)
        for d in range(batch_ndim)
    ]
    output_dims = tuple(
        (*batch_dims, *(shift_symbols(d, offsets) for d in core_dims))
        for core_dims in core_op.output_dims
    )
    vmapped = OpFromJax(
        VmapFunction(
            core_op.fn,
            batch_ndim,
            tuple(batched),
            tuple(
                tuple(x.type.broadcastable[:batch_ndim]) if b else ()
                for x, b in zip(inputs, batched)
            ),
        ),
        [x.type for x in inputs],
        output_types,
        name=f"vmap({core_op.describe()})",
        output_dims=output_dims,
    )
    return vmapped(*inputs, return_list=True)


def _batch_dim(
    dim: int, static: int | None, inputs: Sequence[Variable], batched: Sequence[bool]
) -> int | str | None:
    """A batch dim of the outputs: static, or the same dim of a batched input.

    Runtime broadcasting is an error (:meth:`VmapFunction.batch_shape`), so
    every input that does not have length 1 there has the output's length.
    """
    if static is not None:
        return static
    for i, (x, b) in enumerate(zip(inputs, batched)):
        if b and not x.type.broadcastable[dim]:
            return symbol_name(i, dim)
    return None


@_vectorize_node.register(OpFromJax)
def _vectorize_op_from_jax(op: OpFromJax, node: Apply, *batched_inputs) -> list:
    return vmap_node(vectorize_node_fallback(op, node, *batched_inputs))


@node_rewriter([Blockwise])
def vmap_blockwise(fgraph, node: Apply) -> list[Variable] | None:
    """Rewrite ``Blockwise(OpFromJax)`` into one vmapped :class:`OpFromJax`."""
    if not isinstance(node.op.core_op, OpFromJax):
        return None
    outputs = vmap_node(node)
    copy_stack_trace(node.outputs, outputs)
    return outputs


# ------------------------------------------------------- value + gradient
def _is_vjp_node(node: Apply) -> bool:
    return isinstance(node.op, OpFromJax) and isinstance(node.op.fn, VJPFunction)


def _find_forward(
    fgraph, primals: Sequence[Variable], matches: Callable[[Any], bool]
) -> Apply | None:
    """A node applying an :class:`OpFromJax` whose function ``matches`` to ``primals``."""
    if not primals:
        return None
    for client, _ in fgraph.clients[primals[0]]:
        if (
            isinstance(client, Apply)
            and isinstance(client.op, OpFromJax)
            and matches(client.op.fn)
            and list(client.inputs) == list(primals)
        ):
            return client
    return None


def _depends_on(variables: Sequence[Variable], outputs: Sequence[Variable]) -> bool:
    return not set(outputs).isdisjoint(ancestors(variables))


def _value_and_vjp(forward: Apply, vjp_node: Apply) -> dict[Variable, Variable]:
    forward_op: OpFromJax = forward.op
    vjp_op: OpFromJax = vjp_node.op
    combined = OpFromJax(
        ValueAndVJP(vjp_op.fn),
        vjp_op.input_types,
        [*forward_op.output_types, *vjp_op.output_types],
        name=f"value_and_vjp({forward_op.describe()})",
        output_dims=(*forward_op.output_dims, *vjp_op.output_dims),
    )
    outputs = combined(*vjp_node.inputs, return_list=True)
    n_outputs = len(forward_op.output_types)
    values, gradients = outputs[:n_outputs], outputs[n_outputs:]
    copy_stack_trace(forward.outputs, values)
    copy_stack_trace(vjp_node.outputs, gradients)
    return dict(zip([*forward.outputs, *vjp_node.outputs], [*values, *gradients]))


@node_rewriter([OpFromJax])
def fuse_value_and_vjp(fgraph, node: Apply) -> dict | None:
    """Share one forward pass between an op and its pullback on the same inputs.

    ``f(x)`` and ``vjp(f)(x, ct)`` become ``f_with_residuals(x)``, whose extra
    outputs (the VJP residuals, one vector per dtype) feed
    ``vjp(f)(x, *residuals, ct)``. A second pullback of the same kind reuses
    the residuals. When the cotangents do not depend on ``f(x)`` (a cost
    computed inside the wrapped function), both become one
    ``value_and_vjp(f)(x, ct)``, which is :func:`jax.value_and_grad`. A
    pullback alone
    (no forward node on the same inputs) is left as it is: it then has to run
    the forward anyway, and residuals would only cost memory.
    """
    if not _is_vjp_node(node):
        return None
    vjp_op: OpFromJax = node.op
    vjp: VJPFunction = vjp_op.fn
    n_primals = len(vjp.wrt)
    primals, cotangents = node.inputs[:n_primals], node.inputs[n_primals:]
    forward = _find_forward(fgraph, primals, lambda fn: fn == vjp.forward)
    fused = _find_forward(
        fgraph,
        primals,
        lambda fn: isinstance(fn, VJPForward) and fn.split_of(vjp),
    )
    replacements: dict[Variable, Variable] = {}
    if fused is not None:
        forward_fn, backward_fn = vjp.split(fused.op.fn.residual_dtypes)
        residuals = fused.outputs[
            len(fused.outputs) - len(forward_fn.residual_dtypes) :
        ]
    elif forward is not None and not _depends_on(cotangents, forward.outputs):
        # The cotangents are known before the forward runs: one program.
        return _value_and_vjp(forward, node)
    elif forward is not None and shares_an_island(fgraph, forward, node):
        # Both will be lowered in one XLA program, sharing one jax.vjp
        # (SharedPullbacks): no residuals to trace for, nor to pack.
        return None
    elif forward is not None:
        forward_op: OpFromJax = forward.op
        try:
            dtypes = residual_dtypes(
                vjp,
                [t.shape for t in vjp_op.input_types[:n_primals]],
                [t.dtype for t in vjp_op.input_types[:n_primals]],
                forward_op.traced_sizes,
            )
        except Exception:  # cannot be traced abstractly: keep the two passes
            return None
        forward_fn, backward_fn = vjp.split(dtypes)
        fused_op = OpFromJax(
            forward_fn,
            forward_op.input_types,
            [
                *forward_op.output_types,
                *(TensorType(dtype, shape=(None,)) for dtype in dtypes),
            ],
            name=f"{forward_op.describe()}+residuals",
            output_dims=(*forward_op.output_dims, *((None,) for _ in dtypes)),
        )
        outputs = fused_op(*primals, return_list=True)
        n_outputs = len(forward_op.output_types)
        outputs, residuals = outputs[:n_outputs], outputs[n_outputs:]
        copy_stack_trace(forward.outputs, outputs)
        replacements.update(zip(forward.outputs, outputs))
    else:
        return None

    backward_op = OpFromJax(
        backward_fn,
        [
            *vjp_op.input_types[:n_primals],
            *(r.type for r in residuals),
            *vjp_op.input_types[n_primals:],
        ],
        vjp_op.output_types,
        name=vjp_op.name,
        output_dims=vjp_op.output_dims,
    )
    gradients = backward_op(*primals, *residuals, *cotangents, return_list=True)
    copy_stack_trace(node.outputs, gradients)
    replacements.update(zip(node.outputs, gradients))
    return replacements


def shares_an_island(fgraph, forward: Apply, backward: Apply) -> bool:
    """Whether the ``jax_islands`` rewrite will put both nodes in one island."""
    if not islands_enabled(get_active_mode(fgraph)):
        return False
    nodes = fgraph.toposort()
    seeds = [isinstance(n.op, OpFromJax) for n in nodes]
    islands = find_islands(nodes, map(joins_islands, nodes), seeds)
    return any(forward in island and backward in island for island in islands)


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
    new_index = [
        None if i in positions else kept.index(i) for i in range(len(node.inputs))
    ]
    shapes = [
        x.type.shape if i not in positions else x.data.shape
        for i, x in enumerate(node.inputs)
    ]
    baked_op = OpFromJax(
        BakedInputs(op.fn, baked),
        [op.input_types[i] for i in kept],
        op.output_types,
        name=op.describe(),
        output_dims=tuple(
            tuple(renumber_symbols(d, new_index, shapes) for d in dims)
            for dims in op.output_dims
        ),
    )
    outputs = baked_op(*[node.inputs[i] for i in kept], return_list=True)
    copy_stack_trace(node.outputs, outputs)
    return outputs


# ------------------------------------------------ read-only outputs
def _buffer_users(fgraph, variable: Variable) -> list[tuple[Apply, int]]:
    """The clients of ``variable``'s buffer: of it and of every view of it."""
    views: set[Variable] = set()
    view_tree_set(fgraph, alias_root(variable), views)
    return [client for view in views for client in fgraph.clients[view]]


def _written(fgraph, variable: Variable) -> bool:
    """Whether an in-place node (``destroy_map``) writes into ``variable``'s buffer."""
    return any(
        position in inputs
        for client, position in _buffer_users(fgraph, variable)
        for inputs in client.op.destroy_map.values()
    )


def _returned(fgraph, variable: Variable) -> bool:
    """Whether the compiled function returns ``variable``'s buffer (callers may write)."""
    return any(isinstance(c.op, Output) for c, _ in _buffer_users(fgraph, variable))


def writable_flags(fgraph, node: Apply) -> tuple[bool, ...]:
    """Per output of a host-called JAX node: whether it must be a writeable copy.

    An output that the function returns, or that an in-place node may write
    into, must be. So must every output when an input may be written later:
    the read-only view could then alias memory that changes.
    """
    if any(_written(fgraph, x) for x in node.inputs):
        return (True,) * len(node.outputs)
    return tuple(_written(fgraph, o) or _returned(fgraph, o) for o in node.outputs)


class ReadOnlyOutputs(GraphRewriter):
    """Note which outputs of host-called JAX ops must be writeable copies.

    JAX returns read-only buffers; copying every output costs time on every
    call. After all other rewrites (in-place ones included), each
    :class:`~pytensor.compile.jax_ofg_host.JaxHostOp` node of the compiled
    graph gets ``node.tag.jax_ofg_writable`` (:func:`writable_flags`); its
    other outputs are handed on as read-only views.
    """

    def apply(self, fgraph) -> None:
        for node in fgraph.apply_nodes:
            if isinstance(node.op, JaxHostOp):
                setattr(node.tag, WRITABLE_TAG, writable_flags(fgraph, node))


# Before canonicalization, so that later rewrites see the vmapped op.
optdb.register(
    "jax_ofg_vmap_blockwise",
    dfs_rewriter(vmap_blockwise, ignore_newtrees=True),
    "fast_run",
    "fast_compile",
    position=0.95,
)
# After the graph is merged and simplified (equal forward ops are one node by
# then), before in-place rewrites.
optdb.register(
    "jax_ofg_fuse_value_and_vjp",
    dfs_rewriter(fuse_value_and_vjp, ignore_newtrees=True),
    "fast_run",
    "fast_compile",
    position=48.5,
)
# After value+grad fusion, which matches the ops' functions as they were, and
# after islands, inside which constants are part of the XLA program anyway.
optdb.register(
    "jax_ofg_bake_constant_inputs",
    dfs_rewriter(bake_constant_inputs, ignore_newtrees=True),
    "fast_run",
    "fast_compile",
    position=48.97,
)
# Last: the graph is final (in-place rewrites are at 50-110).
optdb.register(
    "jax_ofg_readonly_outputs",
    ReadOnlyOutputs(),
    "fast_run",
    "fast_compile",
    position=150,
)
