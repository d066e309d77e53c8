"""What PyTensor's shape graphs tell about the unknown dims of a call's inputs.

Which dims fold to constants, which are equal (one JAX symbol), which are
*fixed* (computed from constants and shared variables alone, as PyMC's
``dim_lengths``). Registers nothing.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytensor import config
from pytensor.compile.maker import function
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import ancestors, graph_inputs, toposort
from pytensor.tensor.basic import infer_shape_db
from pytensor.tensor.rewriting.basic import topo_constant_folding
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.type import TensorType


#: A dim position: ``(input index, dim index)``.
Position = tuple[int, int]


#: Memo entry for a dim whose shape graph is ``Shape_i(variable)`` itself,
#: stored instead of the graph, which would keep the memo's key alive.
_OWN_SHAPE = object()

#: Folded shape graphs per variable (an int for a dim known to be constant).
_folded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fold(variable: Variable, dims: Sequence[int]) -> list[Variable]:
    """Return the shape graphs of ``variable.shape[d]``, simplified as far as PyTensor
    can.

    The two passes of :func:`~pytensor.tensor.basic.infer_static_shape`
    (``infer_shape_db``, then constant folding), which cannot be called
    instead: it returns only the static sizes, and its graph clones the
    inputs. The dims need the folded graphs, rooted at the original inputs,
    so that shared variables keep their identity (two dims over one PyMC
    ``dim_lengths`` entry compare equal, and a computable length is evaluated
    from the live shared value).
    """
    graph = FunctionGraph(
        outputs=[variable.shape[d] for d in dims],
        features=[ShapeFeature()],
        clone=True,
        copy_inputs=False,
        copy_orphans=False,
    )
    with config.change_flags(optdb__max_use_ratio=10, cxx=""):
        infer_shape_db.default_query.rewrite(graph)
        if not all(isinstance(s, Constant) for s in graph.outputs):
            topo_constant_folding.rewrite(graph)
    return list(graph.outputs)


def dim_graphs(variable: Variable) -> tuple[int | Variable, ...]:
    """Per dim of ``variable``: its static length, or its folded shape graph.

    Memoized per variable: folding is a rewrite pass over the variable's
    shape graph, too slow to repeat at every call.
    """
    shape = variable.type.shape
    if None not in shape:
        return tuple(shape)
    memo = _folded.get(variable)
    if memo is None:
        unknown = [d for d, s in enumerate(shape) if s is None]
        folded = dict(zip(unknown, _fold(variable, unknown)))
        memo = tuple(
            _memo_entry(variable, d, folded[d]) if s is None else s
            for d, s in enumerate(shape)
        )
        if any(entry is None for entry in memo):
            return tuple(folded.get(d, s) for d, s in enumerate(shape))
        _folded[variable] = memo
    return tuple(
        Shape_i(d)(variable) if entry is _OWN_SHAPE else entry
        for d, entry in enumerate(memo)
    )


def _memo_entry(variable: Variable, dim: int, graph: Variable) -> Any:
    """Return what the memo keeps for one folded dim (None: not memoizable)."""
    if isinstance(graph, Constant):
        return int(graph.data)
    node = graph.owner
    if (
        node is not None
        and isinstance(node.op, Shape_i)
        and node.op.i == dim
        and node.inputs[0] is variable
    ):
        return _OWN_SHAPE
    if variable in ancestors([graph]):
        return None  # it would keep the memo's key alive
    return graph


def is_computable(graph: Variable) -> bool:
    """Return whether ``graph`` is cheap integer arithmetic on constants and shared
    data.

    Its inputs must be constants or shared tensors (not random generators),
    and every value it computes an integer (or boolean) of at most one dim; a larger
    input may only have its shape read. So evaluating it never runs the
    model, a random draw or a wrapped function.
    """
    for root in graph_inputs([graph]):
        if not isinstance(root, Constant) and not (
            isinstance(root, SharedVariable) and isinstance(root.type, TensorType)
        ):
            return False
    for node in toposort([graph]):
        if isinstance(node.op, Shape | Shape_i):
            continue
        for variable in (*node.inputs, *node.outputs):
            if not _small_integer(variable):
                return False
    return True


def is_fixed(variable: Variable) -> bool:
    """Return whether ``variable`` is a small integer (or boolean) computable now.

    A length or a check of lengths, of at most one dim, computed from
    constants and shared variables alone (:func:`is_computable`): it changes
    only when the user sets it (``pm.set_data``, ``model.set_dim``).

    >>> import pytensor
    >>> import pytensor.tensor as pt
    >>> n = pytensor.shared(np.int64(4))
    >>> is_fixed(n * 2), is_fixed(pt.eq(n, 4)), is_fixed(pt.lscalar() + n)
    (True, True, False)
    """
    return _small_integer(variable) and is_computable(variable)


def _small_integer(variable: Variable) -> bool:
    """Return an integer (or boolean) tensor or scalar (a Subtensor index) of at most
    one dim.
    """
    dtype = getattr(variable.type, "dtype", "")
    return (
        isinstance(dtype, str)
        and (dtype.startswith(("int", "uint")) or dtype == "bool")
        and getattr(variable.type, "ndim", 2) <= 1
    )


def evaluate_values(graphs: Sequence[Variable]) -> list[np.ndarray]:
    """Return the current values of small integer graphs (see :func:`is_computable`).

    Compiled without rewrites and run in Python: cheap for a few integer
    operations, and nothing else is in these graphs.
    """
    evaluate = function([], list(graphs), mode=Mode(linker="py", optimizer=None))
    return [np.asarray(value) for value in evaluate()]


def _pymc_dims(variable: Variable) -> tuple | None:
    """Return the ``dims`` of ``variable`` in the PyMC model being built, if any."""
    pymc = sys.modules.get("pymc")  # never import PyMC just to ask
    if pymc is None or variable.name is None:
        return None
    try:
        model = pymc.Model.get_context(error_if_none=False)
    except Exception:  # e.g. while PyMC blocks model access
        return None
    if not isinstance(model, pymc.Model):
        return None
    if model.named_vars.get(variable.name) is not variable:
        return None
    return model.named_vars_to_dims.get(variable.name)


def _dim_label(graph: Variable, variable: Variable) -> str:
    """Return a short name for a dim's shape graph: a named root, or ``X.shape[1]``.

    ``?`` when it has none, or when it only reads ``variable``'s own shape.
    """
    if graph.owner is None and graph.name and graph is not variable:
        return graph.name
    node = graph.owner
    if (
        node is not None
        and isinstance(node.op, Shape_i)
        and node.inputs[0].name
        and node.inputs[0] is not variable
    ):
        return f"{node.inputs[0].name}.shape[{node.op.i}]"
    return "?"


@dataclass(frozen=True)
class InputDims:
    """The dims of a call's inputs, as far as PyTensor knows them.

    Attributes
    ----------
    shapes
        Per input, per dim: a static length, or None when unknown.
    same_as
        Per input, per dim: None when known, else the first position
        ``(input, dim)`` proven equal to it (its own position when none
        before it is). The traces give each such representative one symbol.
    computable
        The representatives whose current length PyTensor computes from
        constants and shared variables alone.
    """

    shapes: tuple[tuple[int | None, ...], ...]
    same_as: tuple[tuple[Position | None, ...], ...]
    computable: frozenset[Position]
    graphs: dict[Position, Variable] = field(compare=False, repr=False)
    variables: tuple[Variable, ...] = field(compare=False, repr=False)

    @property
    def key(self) -> tuple:
        """What the traces depend on (besides current lengths)."""
        return (self.shapes, self.same_as, self.computable)

    @property
    def unknown(self) -> list[Position]:
        return [
            (i, j)
            for i, shape in enumerate(self.same_as)
            for j, rep in enumerate(shape)
            if rep is not None
        ]

    def current_sizes(self) -> dict[Position, int]:
        """Return the current lengths of the computable representatives.

        Empty when there are none, or when evaluating them fails (a shape
        check in the graph, say): they are then only traced symbolically and
        with stand-in sizes.
        """
        if not self.computable:
            return {}
        positions = sorted(self.computable)
        try:
            values = evaluate_values([self.graphs[p] for p in positions])
        except Exception:
            return {}
        return {p: int(value) for p, value in zip(positions, values)}

    def describe_unknown(self, current: dict[Position, int] | None = None) -> str:
        """Return the inputs with unknown dims, by name and PyMC dims, with current
        lengths.

        ``k (dims ('knot',), length 8 now)``; ``x (shape (?,), length unknown)``.
        """
        if current is None:
            current = self.current_sizes()
        parts = []
        for i, (variable, reps) in enumerate(zip(self.variables, self.same_as)):
            if all(rep is None for rep in reps):
                continue
            dims = _pymc_dims(variable)
            if dims is not None:
                where = f"dims {tuple(dims)!r}"
            else:
                labels = [
                    str(size) if rep is None else _dim_label(self.graphs[rep], variable)
                    for size, rep in zip(self.shapes[i], reps)
                ]
                where = f"shape ({', '.join(labels)}{',' if len(labels) == 1 else ''})"
            now = [
                size if rep is None else current.get(rep)
                for size, rep in zip(self.shapes[i], reps)
            ]
            if len(now) == 1:
                size = "length unknown" if now[0] is None else f"length {now[0]} now"
            elif all(n is None for n in now):
                size = "shape unknown"
            else:
                dims_now = ", ".join("?" if n is None else str(n) for n in now)
                size = f"shape ({dims_now}) now"
            parts.append(f"{variable.name or f'input {i}'} ({where}, {size})")
        return ", ".join(parts)


def input_dims(variables: Sequence[Variable]) -> InputDims:
    """Return what PyTensor knows about the dims of ``variables`` (see
    :class:`InputDims`).

    Cheap when every dim is static: nothing is folded.
    """
    graphs = [dim_graphs(v) for v in variables]
    shapes = tuple(
        tuple(g if isinstance(g, int) else None for g in dims) for dims in graphs
    )
    rep_graphs: dict[Position, Variable] = {}
    same_as = []
    for i, dims in enumerate(graphs):
        row: list[Position | None] = []
        for j, graph in enumerate(dims):
            if isinstance(graph, int):
                row.append(None)
                continue
            rep = next(
                (p for p, g in rep_graphs.items() if equal_computations([g], [graph])),
                (i, j),
            )
            rep_graphs.setdefault(rep, graph)
            row.append(rep)
        same_as.append(tuple(row))
    computable = frozenset(p for p, g in rep_graphs.items() if is_computable(g))
    return InputDims(shapes, tuple(same_as), computable, rep_graphs, tuple(variables))
