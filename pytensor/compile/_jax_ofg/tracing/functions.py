"""JAX callables over flat arrays: the inner functions of :class:`OpFromJax`.

:class:`FlatJaxFunction` (the decorator's: pytrees, static arguments, symbolic
callables) and :class:`TupleOutputs` (a user's function of flat arrays):
frozen dataclasses, so equal fields give equal ops, which merge. Registers
nothing.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pytensor.compile._jax_ofg.cache.api import array_key


ArrayTuple = tuple[Any, ...]


class _InputLeaf:
    """Marks a leaf of the call's pytree that is one input array of the op."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<input>"

    def __reduce__(self):
        return "INPUT"


INPUT = _InputLeaf()


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


def _short(value: Any, width: int = 40) -> str:
    """Return a short, stable description of a static value for op names."""
    if _is_array(value):
        array = np.asarray(value)
        dims = ",".join(map(str, array.shape))
        return f"{array.dtype.name}[{dims}]"
    if callable(value):
        return getattr(value, "__name__", None) or type(value).__name__
    if type(value).__repr__ is object.__repr__:
        return type(value).__name__  # not the default repr's address
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def static_key(value: Any) -> Hashable:
    """Return the identity of a static leaf: equal keys mean interchangeable values.

    Arrays are compared by dtype, shape and content; hashable values by type
    and value (so ``1``, ``1.0`` and ``True`` differ); anything unhashable by
    object identity (the leaf is kept alive by the :class:`Static` holding it).
    """
    if _is_array(value):
        return array_key(np.asarray(value))
    if isinstance(value, float):
        return (float, value.hex())
    try:
        hash(value)
    except Exception:  # unhashable, or a __hash__ that fails otherwise
        return ("id", id(value))
    return (type(value), value)


@dataclass(frozen=True, eq=False)
class Static:
    """A leaf of the call that is baked into the inner function."""

    value: Any
    key: Hashable = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "key", static_key(self.value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Static) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return _short(self.value)

    def __reduce__(self):
        value = self.value
        if callable(value) and not _is_array(value):
            value = _picklable_function(value)
        return Static, (value,)


@dataclass(frozen=True)
class Nested:
    """A leaf that is a callable returned by another wrapped function.

    Inside the outer function's trace the callable is rebuilt by running
    ``producer`` on the producer's own inputs (which the outer op takes as
    extra inputs) and picking its ``index``-th callable output.
    """

    producer: FlatJaxFunction
    index: int

    def __repr__(self) -> str:
        return self.producer.name


LeafSpec = _InputLeaf | Static | Nested


def _lookup(module: str, qualname: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def shadowing_wrapper_name(fn: Callable) -> tuple[str, str] | None:
    """Return ``(module, qualname)`` of the decorator that replaced ``fn`` in its
    module.

    ``@as_jax_op`` at module level rebinds the function's name to the wrapper,
    so ``pickle`` can no longer find the function by name ("not the same
    object"). The wrapper can be found, and it holds the function as
    ``__wrapped__``. ``__main__`` is left alone: its functions are not
    importable from another process, and ``cloudpickle`` pickles them by value.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module in (None, "__main__") or "<locals>" in qualname:
        return None
    try:
        found = _lookup(module, qualname)
    except (ImportError, AttributeError):
        return None
    if found is not fn and getattr(found, "__wrapped__", None) is fn:
        return module, qualname
    return None


def wrapped_function(module: str, qualname: str) -> Callable:
    """Unpickle a function through the wrapper that shadows it (see above)."""
    return _lookup(module, qualname).__wrapped__


def _picklable_function(fn: Callable) -> Any:
    """Return what pickles in place of ``fn``: a reference through its wrapper if
    shadowed.
    """
    name = shadowing_wrapper_name(fn)
    return fn if name is None else _PickledAs(wrapped_function, name)


@dataclass(frozen=True)
class _PickledAs:
    """Pickles as the call ``rebuild(*args)``, which unpickling makes."""

    rebuild: Callable
    args: tuple

    def __reduce__(self):
        return self.rebuild, self.args


def picklable_treedef(treedef: Any) -> Any:
    """Return what pickles in place of ``treedef``: its nodes, rebuilt on unpickling.

    A pickled ``PyTreeDef`` keeps its nodes' auxiliary data by value, which
    breaks node types that compare it by identity (equinox modules keep a
    ``MISSING`` sentinel there, and a copy of it is no longer ``MISSING``).
    A skeleton (the tree with :data:`INPUT` leaves, as a placeholder)
    pickles its nodes as ordinary objects, and flattening it again on the
    other side makes fresh auxiliary data.
    """
    try:
        skeleton = jax.tree_util.tree_unflatten(treedef, [INPUT] * treedef.num_leaves)
    except Exception:  # a node type that validates its leaves
        return treedef
    return _PickledAs(jax.tree_util.tree_structure, (skeleton,))


@dataclass(frozen=True)
class OutputLayout:
    """How the flat array outputs sit in the function's output pytree.

    ``kinds`` holds, for every leaf of ``treedef`` (with callables taken as
    leaves), ``"array"``, ``"callable"`` or ``"static"``; ``statics`` holds the
    values of the static leaves, returned to the caller unchanged.
    """

    treedef: Any
    kinds: tuple[str, ...]
    statics: tuple[Any, ...]
    #: True when the layout comes from explicit ``output_types``: then only
    #: the number of arrays is checked, not the containers holding them.
    declared: bool = False

    def __reduce__(self):
        treedef = picklable_treedef(self.treedef)
        return type(self), (treedef, self.kinds, self.statics, self.declared)


def _leaf_kind(leaf: Any) -> str:
    if _is_array(leaf):
        return "array"
    if callable(leaf):
        return "callable"
    return "static"


class OutputStructureError(TypeError):
    """A wrapped function returned another pytree than at trace time."""


class InnerFunction:
    """Base of the inner functions of :class:`OpFromJax`: flat arrays -> tuple."""

    __slots__ = ()


@dataclass(frozen=True)
class FlatJaxFunction(InnerFunction):
    """A pytree function, its static arguments and its call structure, over flat arrays.

    Parameters
    ----------
    fn
        The user's JAX function.
    treedef
        The tree structure of the call's ``(args, kwargs)``.
    leaves
        One entry per leaf of ``treedef``: :data:`INPUT` (the next input
        array), :class:`Static` (a baked-in value) or :class:`Nested` (a
        callable rebuilt from the next ``n_inputs`` arrays).
    name
        The name shown in graphs (not part of the identity).
    layout
        The output layout found when tracing; once set, every later trace
        checks the function still returns that structure.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> def scale(x, *, factor):
    ...     return {"y": factor * x}
    >>> args = ((INPUT,), {"factor": 2.0})
    >>> leaves, treedef = jax.tree_util.tree_flatten(args)
    >>> flat = FlatJaxFunction(
    ...     scale, treedef, (INPUT, Static(2.0)), name="scale"
    ... )
    >>> flat(jnp.ones(2))
    (Array([2., 2.], dtype=float64),)
    """

    fn: Callable
    treedef: Any
    leaves: tuple[LeafSpec, ...]
    name: str = field(default="", compare=False)
    layout: OutputLayout | None = field(default=None, compare=False, repr=False)
    # Tree structures compare their nodes' static data with ``==``, so
    # ``eqx.field(static=True)`` values 2 and 2.0 would look equal; their
    # printed form tells them apart.
    treedef_text: str = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "treedef_text", str(self.treedef))

    def __reduce__(self):
        fn, treedef = _picklable_function(self.fn), picklable_treedef(self.treedef)
        return type(self), (fn, treedef, self.leaves, self.name, self.layout)

    @property
    def n_inputs(self) -> int:
        return sum(
            1 if leaf is INPUT else leaf.producer.n_inputs
            for leaf in self.leaves
            if not isinstance(leaf, Static)
        )

    def call_pytree(self, *arrays: Any) -> Any:
        """Call the function with the arrays put back in their pytree places."""
        remaining = iter(arrays)
        values = []
        for leaf in self.leaves:
            if leaf is INPUT:
                values.append(next(remaining))
            elif isinstance(leaf, Static):
                values.append(leaf.value)
            else:  # Nested: the producer's callable, from its own inputs
                own = [next(remaining) for _ in range(leaf.producer.n_inputs)]
                values.append(leaf.producer.callables(*own)[leaf.index])
        args, kwargs = jax.tree_util.tree_unflatten(self.treedef, values)
        return self.fn(*args, **kwargs)

    def trace(self, *arrays: Any) -> tuple[list[Any], OutputLayout]:
        """Call the function; its output leaves (callables kept whole) and layout."""
        leaves, treedef = jax.tree_util.tree_flatten(
            self.call_pytree(*arrays),
            is_leaf=lambda x: callable(x) and not _is_array(x),
        )
        kinds = tuple(_leaf_kind(leaf) for leaf in leaves)
        statics = tuple(leaf for leaf, kind in zip(leaves, kinds) if kind == "static")
        return leaves, OutputLayout(treedef, kinds, statics)

    def _checked_leaves(self, kind: str, arrays: Sequence[Any]) -> list[Any]:
        """Return the output leaves of ``kind``, once the output structure is checked."""
        leaves, layout = self.trace(*arrays)
        expected = self.layout
        if expected is not None and expected.declared:
            if layout.kinds != expected.kinds:
                raise OutputStructureError(
                    f"The JAX function {self.name!r} returned {len(layout.kinds)} "
                    f"leaves of kinds {layout.kinds}, but `output_types=` declares "
                    f"{expected.kinds.count('array')} arrays."
                )
        elif expected is not None and (
            layout.treedef != expected.treedef or layout.kinds != expected.kinds
        ):
            raise OutputStructureError(
                f"The JAX function {self.name!r} returned an output of structure "
                f"{layout.treedef} (leaf kinds {layout.kinds}), but it returned "
                f"{expected.treedef} (leaf kinds {expected.kinds}) when its "
                "output types were inferred. A wrapped function must return the "
                "same pytree structure for every input value."
            )
        return [leaf for leaf, k in zip(leaves, layout.kinds) if k == kind]

    def __call__(self, *arrays: Any) -> ArrayTuple:
        """Return the array outputs, in pytree order (what the op outputs)."""
        return tuple(self._checked_leaves("array", arrays))

    def callables(self, *arrays: Any) -> list[Callable]:
        """Return the callable outputs, in pytree order (what symbolic callables hold)."""
        return self._checked_leaves("callable", arrays)

    def describe(self) -> str:
        """Return ``name(argument=static, ...)``: what the function bakes in.

        >>> def scale(x, y, *, factor):
        ...     return factor * x
        >>> args = ((INPUT, {"w": 1}), {"factor": 2.0})
        >>> leaves, treedef = jax.tree_util.tree_flatten(args)
        >>> specs = (INPUT, Static(1), Static(2.0))
        >>> FlatJaxFunction(scale, treedef, specs, name="scale").describe()
        "scale(y['w']=1, factor=2.0)"
        """
        parts = [f"{label}={leaf!r}" for label, leaf in self._labelled_leaves()]
        return f"{self.name}({', '.join(parts)})" if parts else self.name

    def _labelled_leaves(self) -> list[tuple[str, LeafSpec]]:
        """Return the baked-in leaves, labelled by argument name and pytree path."""
        try:
            parameters = inspect.signature(self.fn).parameters
            args, kwargs = jax.tree_util.tree_unflatten(self.treedef, self.leaves)
        except Exception:  # no signature, or a node type that checks its leaves
            return [(f"[{i}]", leaf) for i, leaf in enumerate(self.leaves)]
        positional = [
            name
            for name, p in parameters.items()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        labelled = []
        for (group, top, *rest), leaf in jax.tree_util.tree_flatten_with_path(
            (args, kwargs)
        )[0]:
            if leaf is INPUT:
                continue
            if group.idx == 0:
                index = top.idx
                name = positional[index] if index < len(positional) else f"*[{index}]"
            else:
                name = top.key
            labelled.append((name + jax.tree_util.keystr(tuple(rest)), leaf))
        return labelled


def as_tuple_function(fn: Callable) -> Callable[..., ArrayTuple]:
    """Normalize a function returning a tuple, a list or a bare array."""
    if isinstance(fn, InnerFunction):
        return fn
    return TupleOutputs(fn)


@dataclass(frozen=True)
class TupleOutputs(InnerFunction):
    """A user's flat function whose result may be a bare array."""

    fn: Callable

    def __call__(self, *arrays: Any) -> ArrayTuple:
        result = self.fn(*arrays)
        if isinstance(result, tuple | list):
            return tuple(result)
        return (result,)


@dataclass(frozen=True)
class BakedInputs(InnerFunction):
    """``fn`` with some of its inputs baked in as constants.

    ``baked`` holds ``(position, value)`` pairs, by increasing position in
    ``fn``'s arguments; the other arguments are this function's, in order.

    >>> import jax.numpy as jnp
    >>> scaled = BakedInputs(TupleOutputs(lambda x, k: x * k), ((1, Static(3.0)),))
    >>> scaled(jnp.ones(2))
    (Array([3., 3.], dtype=float64),)
    """

    fn: Callable[..., ArrayTuple]
    baked: tuple[tuple[int, Static], ...]

    def __call__(self, *arrays: Any) -> ArrayTuple:
        values = list(arrays)
        for position, constant in self.baked:
            values.insert(position, jnp.asarray(constant.value))
        return self.fn(*values)
