"""The ``jax_islands`` rewrite: one XLA program per connected JAX part of a graph.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:data:`form_jax_islands` in ``optdb`` as ``jax_islands`` and ``fusion``.

Notes
-----
* A node joins only if ``jax_funcify`` lowers it without a warning once its
  fixed inputs are constants; a node that must stay out splits the island,
  and an island of a single node is not formed.
* An island's inputs and outputs are tensors (or fixed values such as a
  length); an island whose boundary would carry another type is not formed.
* Selection runs once per graph, in time linear in its size (bitsets aside).
"""

from __future__ import annotations

import operator
import warnings
import weakref
from collections.abc import Iterable, Sequence

import pytensor.tensor as pt
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.islands.op import ISLANDS_REWRITE, JaxIsland, jax_backend
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.tracing.dims import evaluate_values, is_fixed
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, get_active_mode
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.graph.traversal import ancestors
from pytensor.link.jax.linker import JAXLinker
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.type import TensorType


__all__ = [
    "FormJaxIslands",
    "decides_shapes",
    "find_islands",
    "form_jax_islands",
    "is_data",
    "islands_enabled",
    "joinable_nodes",
    "joins_islands",
    "select_islands",
]


def joins_islands(node: Apply) -> bool:
    """Return whether ``node`` may be part of a JAX island."""
    op = node.op
    if isinstance(op, OpFromJax):
        return True
    if isinstance(op, RandomVariable) or getattr(op, "destroy_map", {}):
        return False
    if isinstance(op, CheckAndRaise):
        return isinstance(node.inputs[0].type, TensorType) and all(
            is_fixed(condition) for condition in node.inputs[1:]
        )
    tensors = all(isinstance(out.type, TensorType) for out in node.outputs) and all(
        isinstance(inp.type, TensorType) or isinstance(inp, Constant)
        for inp in node.inputs
    )
    # Scalar-typed nodes (ScalarFromTensor of a dim length...) only when what
    # they compute is fixed: specialization folds them away.
    if not tensors and not all(is_fixed(out) for out in node.outputs):
        return False
    return _has_jax_lowering(node)


def is_data(node: Apply, x: Variable) -> bool:
    """Return whether the input ``x`` of ``node`` is a constant array an island takes as
    input.

    A constant of two values or more whose values decide none of ``node``'s
    output shapes (:func:`decides_shapes`): observed data, an index vector;
    not a ``Reshape``'s shape.

    >>> import numpy as np
    >>> data = pt.constant(np.arange(6.0))
    >>> is_data((pt.vector("mu") - data).owner, data)
    True
    >>> shape = pt.constant(np.array([2, 3]))
    >>> is_data(pt.reshape(data, shape).owner, shape)
    False
    """
    return (
        isinstance(x, Constant)
        and isinstance(x.type, TensorType)
        and x.data.size >= 2
        and not decides_shapes(node, x)
    )


def decides_shapes(node: Apply, x: Variable) -> bool:
    """Return whether the values of ``node``'s input ``x`` may decide its output shapes.

    Asked of the op's ``infer_shape``, with a variable in place of a constant
    ``x`` and the inputs' unknown lengths as free symbols: the shapes depend
    on ``x`` or not. True when the op cannot say.
    """
    variable = x.type() if isinstance(x, Constant) else x
    try:
        probe = node.op.make_node(*(variable if i is x else i for i in node.inputs))
        shapes = [
            tuple(d if d is not None else pt.lscalar() for d in i.type.shape)
            if isinstance(i.type, TensorType)
            else None
            for i in probe.inputs
        ]
        output_shapes = probe.op.infer_shape(probe, shapes)
    except Exception:
        return True
    dims = [
        d for shape in output_shapes for d in (shape or ()) if isinstance(d, Variable)
    ]
    return variable in set(ancestors(dims))


def _static(island: Sequence[Apply], x: Variable) -> bool:
    """Return whether the island takes its input ``x`` as a static value.

    A fixed integer (:func:`~pytensor.compile._jax_ofg.tracing.dims.is_fixed`): a
    length, or a vector that decides a shape in the island. A fixed vector
    used as data only (counts observed through ``pm.Data``) is an ordinary
    input: a new value is no new program.
    """
    if isinstance(x, Constant) or not is_fixed(x):
        return False
    return x.type.ndim == 0 or any(
        decides_shapes(node, x) for node in island if x in node.inputs
    )


def joinable_nodes(fgraph: FunctionGraph, nodes: Sequence[Apply]) -> list[bool]:
    """Return :func:`joins_islands` for each of ``nodes`` (``fgraph.toposort()``).

    Kept in the trace cache by the graph's structure: probing the lowerings
    needs PyTensor's JAX backend (about a second to import), which a later
    process that compiles the same graph -- and is served its programs --
    then never imports.
    """
    return trace_cache.cached(
        "joinable",
        _structure(fgraph, nodes),
        lambda: list(map(joins_islands, nodes)),
        name="the island selection of a graph",
    )


def _structure(fgraph: FunctionGraph, nodes: Sequence[Apply]) -> list[tuple]:
    """Return what :func:`joins_islands` reads of a graph: ops, types, sources,
    constants.

    Constants that are data (:func:`is_data`) by their types: the lowering
    is probed with a variable in their place.
    """
    source: dict[Variable, tuple] = {
        x: ("input", i, isinstance(x, SharedVariable), x.type)
        for i, x in enumerate(fgraph.inputs)
    }
    rows = []
    for k, node in enumerate(nodes):
        inputs = tuple(
            source.get(x)
            or (("data", x.type) if is_data(node, x) else ("constant", x.type, x.data))
            for x in node.inputs
        )
        rows.append((node.op, inputs, tuple(out.type for out in node.outputs)))
        source.update({out: ("node", k, j) for j, out in enumerate(node.outputs)})
    return rows


#: Per node: its inputs when its lowering was probed, and the answer (the
#: fusion rewrite and this one both ask, about mostly the same nodes).
_LOWERING_PROBES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _has_jax_lowering(node: Apply) -> bool:
    inputs = tuple(node.inputs)
    probed = _LOWERING_PROBES.get(node)
    if probed is not None and probed[0] == inputs:
        return probed[1]
    # Lowered as an island lowers it: data constants are variables there.
    data = [is_data(node, x) for x in inputs]
    as_in_island = node
    if any(data):
        as_in_island = node.op.make_node(
            *(x.type() if d else x for x, d in zip(inputs, data))
        )
    lowers = _lowers(as_in_island) or _lowers_specialized(as_in_island)
    _LOWERING_PROBES[node] = (inputs, lowers)
    return lowers


def _lowers(node: Apply) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a lowering that warns is not faithful
            jax_backend().jax_funcify(node.op, node=node)
    except Exception:
        return False
    return True


def _lowers_specialized(node: Apply) -> bool:
    """Return whether ``node`` lowers with its fixed inputs as constants of their
    values.

    An island specializes its lowering to them (``Split`` by dim lengths,
    ``Alloc`` of a dim length). False when no input is fixed, or they cannot
    be evaluated.
    """
    fixed = [x for x in node.inputs if not isinstance(x, Constant) and is_fixed(x)]
    if not fixed:
        return False
    try:
        values = dict(zip(fixed, evaluate_values(fixed)))
        specialized = node.op.make_node(
            *(
                pt.constant(values[x], dtype=x.type.dtype) if x in values else x
                for x in node.inputs
            )
        )
    except Exception:
        return False
    return _lowers(specialized)


def find_islands(
    fgraph: FunctionGraph,
    nodes: Sequence[Apply],
    can_join: Iterable[bool],
    seeds: Iterable[bool],
) -> list[list[Apply]]:
    """Group the nodes of ``fgraph`` into convex, connected islands.

    Each island grows from a seed through the edges of the graph, over nodes
    that ``can_join`` (and into other islands, which it then absorbs), as long
    as it stays convex: no node outside it is both a descendant and an
    ancestor of it. Sets of nodes are bitsets over the topological positions
    of ``nodes`` (``fgraph.toposort()``), so each check is a few integer
    operations, and an island's frontier (its neighbours) is kept as it grows.

    Returns the islands of two nodes or more, each in topological order.
    """
    ancestors_of, _ = compat.ancestor_bitsets(fgraph, nodes)
    joinable = list(can_join)
    position = {node: i for i, node in enumerate(nodes)}
    # Reachability, each set including its node.
    ancestors = [ancestors_of[node] for node in nodes]
    adjacent = [0] * len(nodes)
    descendants = [1 << i for i in range(len(nodes))]
    # In reverse topological order: a node's descendants are complete when
    # they are passed on to its inputs' nodes.
    for i in reversed(range(len(nodes))):
        for inp in nodes[i].inputs:
            j = position.get(inp.owner)
            if j is not None:
                adjacent[i] |= 1 << j
                adjacent[j] |= 1 << i
                descendants[j] |= descendants[i]

    island_of: dict[int, int] = {}
    members: dict[int, int] = {}  # island id -> bitset of its nodes
    for seed, is_seed in enumerate(seeds):
        if not is_seed or seed in island_of or not joinable[seed]:
            continue
        inside, above, below = 1 << seed, ancestors[seed], descendants[seed]
        frontier = adjacent[seed]
        grown = True
        while grown:
            grown = False
            for candidate in _bits(frontier & ~inside):
                if inside >> candidate & 1:
                    continue  # absorbed with another island meanwhile
                other = island_of.get(candidate)
                if other is not None:
                    added = members[other]
                elif joinable[candidate]:
                    added = 1 << candidate
                else:
                    frontier &= ~(1 << candidate)  # never joins
                    continue
                new_above, new_below, neighbours = above, below, 0
                for k in _bits(added):
                    new_above |= ancestors[k]
                    new_below |= descendants[k]
                    neighbours |= adjacent[k]
                new_inside = inside | added
                if new_above & new_below & ~new_inside:
                    continue  # a path would leave the island and come back
                inside, above, below = new_inside, new_above, new_below
                frontier = (frontier | neighbours) & ~inside
                if other is not None:
                    del members[other]
                grown = True
        for k in _bits(inside):
            island_of[k] = seed
        members[seed] = inside
    return [
        [nodes[k] for k in _bits(bits)]
        for _, bits in sorted(members.items())
        if bits & (bits - 1)  # two nodes or more
    ]


def _bits(bitset: int) -> list[int]:
    """Return the positions of the set bits, ascending."""
    positions = []
    while bitset:
        low = bitset & -bitset
        positions.append(low.bit_length() - 1)
        bitset ^= low
    return positions


def island_boundary(
    fgraph: FunctionGraph, island: Sequence[Apply]
) -> tuple[list[Variable], list[Variable]]:
    """Return the variables an island takes from, and gives to, the rest of ``fgraph``.

    Its inputs include the constants that are data to every node of the
    island using them (:func:`is_data`).
    """
    inside = set(island)
    produced = {out for node in island for out in node.outputs}
    inputs: dict[Variable, None] = {}
    baked = set()
    for node in island:
        for inp in node.inputs:
            if isinstance(inp, Constant) and not is_data(node, inp):
                baked.add(inp)
            elif inp not in produced:
                inputs[inp] = None
    outputs = [
        out
        for node in island
        for out in node.outputs
        if any(client not in inside for client, _ in fgraph.clients[out])
    ]
    return [x for x in inputs if x not in baked], outputs


#: Per graph: what it was when its islands were last selected, and those
#: islands (the fusion rewrite asks first, this rewrite again, usually of the
#: same graph).
_SELECTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def select_islands(fgraph: FunctionGraph) -> list[list[Apply]]:
    """Return the islands of ``fgraph``: :func:`find_islands` seeded by its
    ``OpFromJax`` nodes.

    Selected once per state of the graph: asked again of a graph whose
    inputs, nodes and their inputs are the same, it gives the same islands
    without describing the graph again for the trace cache.
    """
    nodes = fgraph.toposort()
    state = _graph_state(fgraph, nodes)
    selected = _SELECTED.get(fgraph)
    if selected is not None and _same_objects(selected[0], state):
        return [list(island) for island in selected[1]]
    seeds = [isinstance(node.op, OpFromJax) for node in nodes]
    islands = (
        find_islands(fgraph, nodes, joinable_nodes(fgraph, nodes), seeds)
        if any(seeds)
        else []
    )
    _SELECTED[fgraph] = (state, [tuple(island) for island in islands])
    return islands


def _graph_state(fgraph: FunctionGraph, nodes: Sequence[Apply]) -> tuple:
    """Return what the selection depends on: the graph's inputs, its nodes in order
    and each node's inputs (the objects themselves)."""
    state: list = [len(fgraph.inputs), *fgraph.inputs]
    for node in nodes:
        state += (node, len(node.inputs), *node.inputs)
    return tuple(state)


def _same_objects(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def islands_enabled(mode) -> bool:
    """Return whether compiling with ``mode`` runs this rewrite."""
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
        islands = select_islands(fgraph)
        _SELECTED.pop(fgraph, None)  # the graph changes now: keep none of it
        for island in islands:
            inputs, outputs = island_boundary(fgraph, island)
            if not outputs or not all(
                isinstance(x.type, TensorType) for x in (*inputs, *outputs)
            ):
                continue  # a scalar-typed value would cross the host call
            static = [i for i, x in enumerate(inputs) if _static(island, x)]
            island_op = JaxIsland(inputs, outputs, static_inputs=static)
            new_outputs = island_op(*inputs, return_list=True)
            fgraph.replace_all_validate(
                list(zip(outputs, new_outputs)), reason=ISLANDS_REWRITE
            )


#: The rewrite's instance, registered as ``jax_islands``.
form_jax_islands = FormJaxIslands()
