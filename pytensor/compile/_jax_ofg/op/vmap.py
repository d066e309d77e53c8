"""Vectorization of :class:`~pytensor.compile._jax_ofg.op.from_jax.OpFromJax`: ``jax.vmap``, not a loop.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`vectorize_op_from_jax` for ``OpFromJax`` with PyTensor's
``_vectorize_node``, and :func:`vmap_blockwise` in ``optdb`` as
``jax_ofg_vmap_blockwise``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.transforms import VmapFunction
from pytensor.compile._jax_ofg.tracing.shapes import InputMap, symbol_name
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.rewriting.basic import copy_stack_trace, node_rewriter
from pytensor.tensor.blockwise import Blockwise, vectorize_node_fallback
from pytensor.tensor.shape import shape_padleft


__all__ = ["vectorize_op_from_jax", "vmap_blockwise", "vmap_node"]


def vmap_node(blockwise_node: Apply) -> list[Variable]:
    """Return the outputs of a ``Blockwise(OpFromJax)`` node, computed by a vmapped op.

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
    batch_dims = [
        _batch_dim(d, output_types[0].shape[d], inputs, batched)
        for d in range(batch_ndim)
    ]
    vmapped = core_op.derive(
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
        label="vmap",
        output_dims=core_op.output_dims,
        inputs=InputMap(leading_dims=tuple(batch_ndim if b else 0 for b in batched)),
        leading_dims=tuple(batch_dims),
    )
    return vmapped(*inputs, return_list=True)


def _batch_dim(
    dim: int, static: int | None, inputs: Sequence[Variable], batched: Sequence[bool]
) -> int | str | None:
    """Return a batch dim of the outputs: static, or the same dim of a batched input.

    Runtime broadcasting is an error (:meth:`VmapFunction.batch_shape`), so
    every input that does not have length 1 there has the output's length.
    """
    if static is not None:
        return static
    for i, (x, b) in enumerate(zip(inputs, batched)):
        if b and not x.type.broadcastable[dim]:
            return symbol_name(i, dim)
    return None


def vectorize_op_from_jax(op: OpFromJax, node: Apply, *batched_inputs) -> list:
    """Return ``vectorize_graph`` of an :class:`OpFromJax` node: one vmapped op."""
    return vmap_node(vectorize_node_fallback(op, node, *batched_inputs))


@node_rewriter([Blockwise])
def vmap_blockwise(fgraph, node: Apply) -> list[Variable] | None:
    """Rewrite ``Blockwise(OpFromJax)`` into one vmapped :class:`OpFromJax`."""
    if not isinstance(node.op.core_op, OpFromJax):
        return None
    outputs = vmap_node(node)
    copy_stack_trace(node.outputs, outputs)
    return outputs
