"""Read-only outputs: only outputs that may be written are copied out of JAX.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:class:`ReadOnlyOutputs` in ``optdb`` as ``jax_ofg_readonly_outputs``, after
all other rewrites.
"""

from __future__ import annotations

from pytensor.compile._jax_ofg.host.op import JaxHostOp
from pytensor.compile.aliasing import alias_root, view_tree_set
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import Output
from pytensor.graph.rewriting.basic import GraphRewriter


__all__ = ["ReadOnlyOutputs", "writable_flags"]


def _buffer_users(fgraph, variable: Variable) -> list[tuple[Apply, int]]:
    """Return the clients of ``variable``'s buffer: of it and of every view of it."""
    views: set[Variable] = set()
    view_tree_set(fgraph, alias_root(variable), views)
    return [client for view in views for client in fgraph.clients[view]]


def _written(fgraph, variable: Variable) -> bool:
    """Return whether an in-place node (``destroy_map``) writes into ``variable``'s
    buffer.
    """
    return any(
        position in inputs
        for client, position in _buffer_users(fgraph, variable)
        for inputs in client.op.destroy_map.values()
    )


def _returned(fgraph, variable: Variable) -> bool:
    """Return whether the compiled function returns ``variable``'s buffer (callers may
    write).
    """
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
    """Copy out of JAX only the outputs that may be written.

    After all other rewrites (in-place ones included), each
    :class:`~pytensor.compile._jax_ofg.host.op.JaxHostOp` node of the compiled
    graph whose outputs need not all be writeable copies is replaced by the
    same computation with ``copied_outputs`` set (:func:`writable_flags`); its
    other outputs are handed on as read-only views.
    """

    def apply(self, fgraph) -> None:
        nodes = [n for n in fgraph.toposort() if isinstance(n.op, JaxHostOp)]
        flags = [writable_flags(fgraph, node) for node in nodes]
        for node, copied in zip(nodes, flags):
            op = node.op.with_copied_outputs(copied)
            if op is not node.op:
                outputs = op.make_node(*node.inputs).outputs
                fgraph.replace_all(
                    list(zip(node.outputs, outputs)), reason="jax_ofg_readonly_outputs"
                )
