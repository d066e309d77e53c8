"""The ``jax_islands`` rewrite: one XLA program per connected JAX part of a graph.

Under the Python, C VM and Numba linkers, a graph holding
:class:`~pytensor.compile.jax_ofg.OpFromJax` nodes calls into JAX once per
such node, and the PyTensor nodes between them run outside XLA. This rewrite
finds **islands**: connected, convex sets of nodes holding at least one
``OpFromJax`` together with neighbouring nodes that PyTensor's JAX backend
lowers, and replaces each by one
:class:`~pytensor.compile.jax_ofg_island.JaxIsland`.

A node may join an island only if

* PyTensor's JAX backend lowers it (``jax_funcify`` succeeds for it);
* it is no random variable, no assertion (JAX's lowering drops those) and
  destroys none of its inputs;
* its inputs and outputs are tensors (constants of other types stay inside);

and an island stays *convex*: no path leaves it and comes back, so replacing
it by one node cannot create a cycle. A node that must stay out splits the
island. Islands with a single node are left alone.

The rewrite is registered in ``fast_run`` under the names ``jax_islands`` and
``fusion`` (JAX and the other functional backends exclude ``fusion``: there
the whole graph is one program already); ``mode.excluding("jax_islands")``
turns it off.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

from pytensor.compile.jax_ofg import OpFromJax
from pytensor.compile.jax_ofg_island import ISLANDS_REWRITE, JaxIsland
from pytensor.compile.mode import optdb
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, get_active_mode
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.graph.traversal import graph_inputs
from pytensor.link.jax.linker import JAXLinker
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.type import TensorType


__all__ = ["find_islands", "form_jax_islands", "islands_enabled", "joins_islands"]


def joins_islands(node: Apply) -> bool:
    """Whether ``node`` may be part of a JAX island."""
    op = node.op
    if isinstance(op, OpFromJax):
        return True
    if isinstance(op, RandomVariable | CheckAndRaise) or getattr(op, "destroy_map", {}):
        return False
    if not all(isinstance(out.type, TensorType) for out in node.outputs):
        return False
    if not all(
        isinstance(inp.type, TensorType) or isinstance(inp, Constant)
        for inp in node.inputs
    ):
        return False
    return _has_jax_lowering(node)


def _has_jax_lowering(node: Apply) -> bool:
    from pytensor.link.jax.dispatch import jax_funcify

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a lowering that warns is not faithful
            jax_funcify(node.op, node=node)
    except Exception:
        return False
    return True


def find_islands(
    nodes: Sequence[Apply], can_join: Iterable[bool], seeds: Iterable[bool]
) -> list[list[Apply]]:
    """Group ``nodes`` (in topological order) into convex, connected islands.

    Each island grows from a seed through the edges of the graph, over nodes
    that ``can_join`` (and into other islands, which it then absorbs), as long
    as it stays convex: no node outside it is both a descendant and an
    ancestor of it. Sets of nodes are bitsets over topological positions, so
    each check is a few integer operations.

    Returns the islands of two nodes or more, each in topological order.
    """
    position = {node: i for i, node in enumerate(nodes)}
    joinable = list(can_join)
    parents: list[list[int]] = [[] for _ in nodes]
    children: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for inp in node.inputs:
            j = position.get(inp.owner)
            if j is not None and j not in parents[i]:
                parents[i].append(j)
                children[j].append(i)
    ancestors = [0] * len(nodes)
    for i in range(len(nodes)):
        for j in parents[i]:
            ancestors[i] |= ancestors[j] | (1 << j)
    descendants = [0] * len(nodes)
    for i in reversed(range(len(nodes))):
        for k in children[i]:
            descendants[i] |= descendants[k] | (1 << k)

    island_of: dict[int, int] = {}
    members: dict[int, int] = {}  # island id -> bitset of its nodes
    for seed, is_seed in enumerate(seeds):
        if not is_seed or seed in island_of or not joinable[seed]:
            continue
        island = seed
        inside, above, below = 1 << seed, ancestors[seed], descendants[seed]
        grown = True
        while grown:
            grown = False
            for candidate in _neighbours(inside, parents, children):
                if inside >> candidate & 1:
                    continue  # absorbed with another island meanwhile
                other = island_of.get(candidate)
                if other is not None:
                    added = members[other]
                elif joinable[candidate]:
                    added = 1 << candidate
                else:
                    continue
                new_above, new_below = above, below
                for k in _bits(added):
                    new_above |= ancestors[k]
                    new_below |= descendants[k]
                new_inside = inside | added
                if new_above & new_below & ~new_inside:
                    continue  # a path would leave the island and come back
                inside, above, below = new_inside, new_above, new_below
                if other is not None:
                    del members[other]
                grown = True
            for k in _bits(inside):
                island_of[k] = island
            members[island] = inside
    return [
        [nodes[k] for k in _bits(bits)]
        for _, bits in sorted(members.items())
        if bits & (bits - 1)  # two nodes or more
    ]


def _bits(bitset: int) -> list[int]:
    positions = []
    while bitset:
        low = bitset & -bitset
        positions.append(low.bit_length() - 1)
        bitset ^= low
    return positions


def _neighbours(inside: int, parents, children) -> list[int]:
    """Nodes one edge away from the set ``inside``, in topological order."""
    found = set()
    for k in _bits(inside):
        found.update(parents[k])
        found.update(children[k])
    return sorted(k for k in found if not inside >> k & 1)


def island_boundary(
    fgraph: FunctionGraph, island: Sequence[Apply]
) -> tuple[list[Variable], list[Variable]]:
    """The variables an island takes from, and gives to, the rest of ``fgraph``."""
    inside = set(island)
    produced = {out for node in island for out in node.outputs}
    inputs: dict[Variable, None] = {}
    for node in island:
        for inp in node.inputs:
            if inp not in produced and not isinstance(inp, Constant):
                inputs[inp] = None
    outputs = [
        out
        for node in island
        for out in node.outputs
        if any(client not in inside for client, _ in fgraph.clients[out])
    ]
    return list(inputs), outputs


def _fixed_length(variable: Variable) -> bool:
    """Whether ``variable`` is an integer scalar computed from constants and
    shared variables alone: a length, which changes only when the user sets it."""
    if variable.type.ndim != 0 or not variable.type.dtype.startswith(("int", "uint")):
        return False
    return all(
        isinstance(x, Constant)
        or (isinstance(x, SharedVariable) and isinstance(x.type, TensorType))
        for x in graph_inputs([variable])
    )


def islands_enabled(mode) -> bool:
    """Whether compiling with ``mode`` runs this rewrite."""
    if isinstance(mode.linker, JAXLinker):
        return False
    query = mode.provided_optimizer
    if not isinstance(query, RewriteDatabaseQuery):
        return False
    return "fast_run" in query.include and not (
        {ISLANDS_REWRITE, "fusion"} & set(query.exclude)
    )


class FormJaxIslands(GraphRewriter):
    """Replace each JAX island of a graph by one :class:`JaxIsland`."""

    def apply(self, fgraph: FunctionGraph) -> None:
        if isinstance(get_active_mode(fgraph).linker, JAXLinker):
            return  # the whole graph is one XLA program already
        nodes = fgraph.toposort()
        seeds = [isinstance(node.op, OpFromJax) for node in nodes]
        if not any(seeds):
            return
        islands = find_islands(nodes, map(joins_islands, nodes), seeds)
        for island in islands:
            inputs, outputs = island_boundary(fgraph, island)
            if not outputs:
                continue
            static = [i for i, x in enumerate(inputs) if _fixed_length(x)]
            island_op = JaxIsland(inputs, outputs, static_inputs=static)
            new_outputs = island_op(*inputs, return_list=True)
            fgraph.replace_all_validate(
                list(zip(outputs, new_outputs)), reason=ISLANDS_REWRITE
            )


form_jax_islands = FormJaxIslands()

# After value+grad fusion (48.5) and lazy-ifelse extraction (48.9), before
# elemwise fusion (49) and in-place rewrites (49.5): island members are plain
# PyTensor nodes, and what stays outside is fused and made in-place as usual.
optdb.register(ISLANDS_REWRITE, form_jax_islands, "fast_run", "fusion", position=48.95)
