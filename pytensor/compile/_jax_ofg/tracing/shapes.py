"""Output types of a JAX function, found by tracing it, never by running the graph.

Static dims as they are, then symbolic dims, then current lengths and
stand-in sizes; otherwise :class:`ShapeInferenceError`. Registers nothing.

Notes
-----
When the symbolic trace fails, the output types come from traces at the
current lengths or at stand-in sizes (:func:`fallback_shapes`). When none
succeeds, or only one stand-in trace does, inference fails with
:class:`ShapeInferenceError`, naming the inputs of unknown size.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax import export as jax_export

from pytensor.compile._jax_ofg.tracing.functions import OutputLayout, static_key
from pytensor.tensor.type import TensorType


if TYPE_CHECKING:
    from pytensor.compile._jax_ofg.tracing.dims import InputDims, Position


#: The stand-in sizes of step 3: a small one (to tell ``min(n, k)`` from
#: ``k``), and two with many divisors (so reshapes into groups still trace).
STAND_IN_SIZES = (3, 12, 60)

# The label of the trace at the current lengths, in error messages.
_CURRENT = "the current lengths"

OutputDims = tuple[tuple[int | str | None, ...], ...]


class ShapeInferenceError(ValueError):
    """The output types of a wrapped function could not be found by tracing.

    The message names the function, its input types and the shapes it was
    traced with, and says what to do (give an operation a static size, fix
    input shapes with ``pt.specify_shape``, or pass ``output_types=``).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import pytensor.tensor as pt
    >>> from pytensor.compile.jax_ofg import as_jax_op
    >>> @as_jax_op
    ... def positives(x):
    ...     return x[x > 0]  # the size depends on the values
    >>> try:
    ...     positives(pt.vector("x", shape=(3,)))
    ... except ShapeInferenceError as error:
    ...     print(str(error)[:70])
    The JAX function 'positives' called with inputs (Vector(float64, shape
    """


def symbol_name(input_index: int, dim: int) -> str:
    """Return the JAX symbolic dimension standing for
    ``inputs[input_index].shape[dim]``.
    """
    return f"s{input_index}_{dim}"


def symbolic_shapes(
    shapes: Sequence[tuple], same_as: Sequence[tuple] | None = None
) -> list[tuple]:
    """Return the shapes with every unknown (None) dim a JAX symbol named by
    :func:`symbol_name`.

    ``same_as`` (see :class:`~pytensor.compile._jax_ofg.tracing.dims.InputDims`) gives
    dims proven equal one symbol, named after the first of them.
    """
    reps = {
        (i, j): (same_as[i][j] if same_as else None) or (i, j)
        for i, shape in enumerate(shapes)
        for j, d in enumerate(shape)
        if d is None
    }
    names = list(dict.fromkeys(reps.values()))
    text = ", ".join(symbol_name(*p) for p in names)
    symbols = dict(zip(names, jax_export.symbolic_shape(text)))
    return [
        tuple(symbols[reps[i, j]] if d is None else d for j, d in enumerate(shape))
        for i, shape in enumerate(shapes)
    ]


def stand_in_shapes(shapes: Sequence[tuple], size: int) -> list[tuple]:
    """Return the shapes with every unknown (None) dim set to ``size``."""
    return [tuple(size if d is None else d for d in shape) for shape in shapes]


def _at_lengths(
    shapes: Sequence[tuple],
    lengths: Mapping[Position, int],
    same_as: Sequence[tuple] | None = None,
) -> list[tuple]:
    """Return the shapes with each unknown dim set to its length in ``lengths``, if any.

    ``lengths`` is keyed by the position of each dim's representative (see
    ``same_as`` in :func:`symbolic_shapes`); the other unknown dims stay None.
    """
    return [
        tuple(
            lengths.get(same_as[i][j] if same_as else (i, j), d) if d is None else d
            for j, d in enumerate(shape)
        )
        for i, shape in enumerate(shapes)
    ]


def fallback_shapes(
    shapes: Sequence[tuple],
    current: Mapping[Position, int],
    same_as: Sequence[tuple] | None = None,
) -> list[tuple[str, list[tuple]]]:
    """Return the input shapes to trace with when the symbolic trace fails, and their
    labels.

    In order: the ``current`` lengths (by representative position; the
    unknown dims without one stay symbolic), then each of
    :data:`STAND_IN_SIZES`. Empty when no dim is unknown.

    >>> fallback_shapes([(None, 2)], {(0, 0): 5})[:2]
    [('the current lengths', [(5, 2)]), ('stand-in size 3', [(3, 2)])]
    """
    if not any(None in shape for shape in shapes):
        return []
    shapes_to_try = []
    if current:
        at_current = _at_lengths(shapes, current, same_as)
        shapes_to_try.append((_CURRENT, symbolic_shapes(at_current, same_as)))
    shapes_to_try += [
        (f"stand-in size {size}", stand_in_shapes(shapes, size))
        for size in STAND_IN_SIZES
    ]
    return shapes_to_try


_SYMBOL = re.compile(r"\bs(\d+)_(\d+)\b")


class Lengths(Mapping):
    """An immutable, hashable mapping from dim symbols to lengths.

    Part of an op's identity (``traced_sizes``). Unlike PyTensor's
    ``frozendict`` it never pickles a hash: string hashes differ between
    processes.

    >>> Lengths({"s1_0": 8, "s0_0": 3}) == {"s0_0": 3, "s1_0": 8}
    True
    >>> hash(Lengths({"s0_0": 3})) == hash(Lengths([("s0_0", 3)]))
    True
    """

    __slots__ = ("_items",)

    def __init__(self, lengths: Mapping[str, int] | Sequence[tuple[str, int]] = ()):
        self._items = tuple(sorted(dict(lengths).items()))

    def __getitem__(self, symbol: str) -> int:
        return dict(self._items)[symbol]

    def __iter__(self):
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"Lengths({dict(self._items)})"

    def __reduce__(self):
        return type(self), (self._items,)


@dataclass(frozen=True)
class InputMap:
    """Where the inputs of an op sit in an op derived from it, for dim symbols.

    A derived op (a vmapped op, an op with constant inputs baked in) names
    its input dims by its own positions. Input ``i`` of the original op is
    input ``index[i]`` of the derived op (None: baked in, with the static
    shape ``shapes[i]``) and gained ``leading_dims[i]`` leading dims. Empty
    fields mean "unchanged". :meth:`rename` carries dim expressions (and
    traced lengths) over.

    Examples
    --------
    >>> InputMap(leading_dims=(2, 0)).rename("2*s0_0 + s1_0")
    '2*s0_2 + s1_0'
    >>> InputMap(index=(None, 0, 1), shapes=((4,), (None,), (2, None))).rename(
    ...     "s0_0 + s2_1"
    ... )
    '(4) + s1_1'
    """

    index: tuple[int | None, ...] = ()
    leading_dims: tuple[int, ...] = ()
    shapes: tuple[tuple[int | None, ...], ...] = ()

    def symbol(self, i: int, j: int) -> str:
        """Return the derived op's name for dim ``j`` of input ``i`` (a size if baked
        in).
        """
        new_index = self.index[i] if self.index else i
        if new_index is None:
            return f"({self.shapes[i][j]})"
        return symbol_name(
            new_index, j + (self.leading_dims[i] if self.leading_dims else 0)
        )

    def rename(self, expression: int | str | None) -> int | str | None:
        """Return a dim expression of the original op, in the derived op's symbols."""
        if not isinstance(expression, str):
            return expression
        return _SYMBOL.sub(lambda m: self.symbol(int(m[1]), int(m[2])), expression)

    def rename_sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """Lengths by symbol, for the derived op's symbols (baked inputs dropped)."""
        renamed = {self.rename(symbol): size for symbol, size in sizes.items()}
        return {new: size for new, size in renamed.items() if not new.startswith("(")}


#: The inputs of a derived op are the original op's, at the same positions
#: (followed by new ones: cotangents, tangents, residuals).
INPUTS_AT_SAME_POSITIONS = InputMap()


@dataclass(frozen=True)
class TraceResult:
    """What tracing a function tells about its outputs."""

    output_types: tuple[TensorType, ...]
    #: Per output dim: a static size, an expression over input-dim symbols
    #: (see :func:`symbol_name`), or None when only the runtime knows it.
    output_dims: OutputDims
    layout: OutputLayout
    #: The current lengths (by symbol) the result was found with, when it
    #: depends on them (symbolic tracing failed); empty otherwise.
    traced_sizes: Mapping[str, int] = field(default_factory=dict)


TraceFunction = Callable[..., tuple[list[Any], OutputLayout]]


def _eval_shape(
    trace: TraceFunction, shapes: Sequence[tuple], dtypes: Sequence[str]
) -> tuple[list[jax.ShapeDtypeStruct], OutputLayout]:
    found: dict[str, OutputLayout] = {}

    def array_outputs(*arrays):
        leaves, layout = trace(*arrays)
        found["layout"] = layout
        return [leaf for leaf, kind in zip(leaves, layout.kinds) if kind == "array"]

    specs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes)]
    outputs = jax.eval_shape(array_outputs, *specs)
    return outputs, found["layout"]


@dataclass
class _Attempt:
    """One trace of the function: with which shapes, and what came out."""

    label: str
    shapes: list[tuple]
    dims: OutputDims = ()
    dtypes: tuple[str, ...] = ()
    layout: OutputLayout | None = None
    error: Exception | None = None


def _attempt(
    label: str, trace: TraceFunction, shapes: list[tuple], dtypes: Sequence[str]
) -> _Attempt:
    try:
        outputs, layout = _eval_shape(trace, shapes, dtypes)
    except Exception as error:  # JAX code that needs other (concrete) sizes
        return _Attempt(label, shapes, error=error)
    dims = tuple(
        tuple(str(d) if jax_export.is_symbolic_dim(d) else int(d) for d in out.shape)
        for out in outputs
    )
    dtypes = tuple(np.dtype(out.dtype).name for out in outputs)
    return _Attempt(label, shapes, dims, dtypes, layout)


def _result(
    attempt: _Attempt,
    dims: OutputDims,
    traced_sizes: dict[str, int] | None = None,
) -> TraceResult:
    types = tuple(
        TensorType(
            dtype, shape=tuple(d if isinstance(d, int) else None for d in out_dims)
        )
        for dtype, out_dims in zip(attempt.dtypes, dims)
    )
    return TraceResult(types, dims, attempt.layout, traced_sizes or {})


def trace_output_types(
    trace: TraceFunction,
    input_types: Sequence[TensorType],
    dims: InputDims,
    describe_call: Callable[[], str],
) -> TraceResult:
    """Find the output types of ``trace`` for inputs of ``input_types``.

    Parameters
    ----------
    trace
        Takes one array per input; returns the output leaves and layout.
    input_types
        The input types (their dtypes are used).
    dims
        The input dims as far as PyTensor knows them: static lengths, dims
        proven equal, and which unknown lengths can be computed now.
    describe_call
        Names the function and its inputs in error messages.
    """
    dtypes = [t.dtype for t in input_types]
    label = "symbolic dims" if dims.unknown else "static shapes"
    first = _attempt(label, trace, symbolic_shapes(dims.shapes, dims.same_as), dtypes)
    if first.error is None:
        _check_statics_are_size_independent([first.layout], describe_call)
        output_dims = _checked_at_zero(first.dims, trace, dims.shapes, dtypes)
        return _result(first, output_dims)
    if not dims.unknown:
        raise _inference_error([first], dims, {}, describe_call)

    # Step 3: the current lengths and stand-in sizes.
    current = dims.current_sizes()
    attempts = [first] + [
        _attempt(label, trace, shapes, dtypes)
        for label, shapes in fallback_shapes(dims.shapes, current, dims.same_as)
    ]
    traced = [a for a in attempts[1:] if a.error is None]
    traced_sizes = {
        symbol_name(i, j): current[dims.same_as[i][j]]
        for i, j in dims.unknown
        if dims.same_as[i][j] in current
    }
    pinned = [a.label for a in traced] == [_CURRENT]
    if len(traced) < 2 and not pinned:
        raise _inference_error(attempts, dims, current, describe_call)
    _check_statics_are_size_independent([a.layout for a in traced], describe_call)
    if pinned:  # only the current lengths trace: the function pins them
        at_current = _at_lengths(dims.shapes, current, dims.same_as)
        output_dims = _checked_at_zero(traced[0].dims, trace, at_current, dtypes)
        return _result(traced[0], _pinned_dims(output_dims, current), traced_sizes)
    output_dims = tuple(
        tuple(
            sizes[0] if isinstance(sizes[0], int) and len(set(sizes)) == 1 else None
            for sizes in zip(*same_output, strict=True)
        )
        for same_output in zip(*(a.dims for a in traced), strict=True)
    )
    return _result(traced[0], output_dims, traced_sizes)


def _pinned_dims(
    dims: OutputDims, current: Mapping[tuple[int, int], int]
) -> OutputDims:
    """Output dims of a function that traces only at the ``current`` lengths.

    An output dim equal to the current length of one (class of equal) input
    dims is taken to be that length: an expression, checked at run time,
    not a static size that a new length would make wrong. Equal to several,
    it is left to the run time.
    """
    symbols_of: dict[int, list[str]] = {}
    for position, size in current.items():
        symbols_of.setdefault(size, []).append(symbol_name(*position))

    def pinned(d: int | str | None) -> int | str | None:
        if not isinstance(d, int) or d not in symbols_of:
            return d
        symbols = symbols_of[d]
        return symbols[0] if len(symbols) == 1 else None

    return tuple(tuple(pinned(d) for d in out) for out in dims)


def _checked_at_zero(
    dims: OutputDims,
    trace: TraceFunction,
    known_shapes: Sequence[tuple],
    dtypes: Sequence[str],
) -> OutputDims:
    """Drop symbolic dims that are wrong when the unknown input dims are 0."""
    if all(isinstance(d, int) for out in dims for d in out):
        return dims
    zero_shapes = stand_in_shapes(known_shapes, 0)
    try:
        outputs, _ = _eval_shape(trace, zero_shapes, dtypes)
    except Exception:
        # Fails for empty inputs at run time too: nothing to check against.
        return dims
    zeros = _symbol_env(zero_shapes)
    return tuple(
        tuple(
            d if isinstance(d, int) or _evaluate_int(d, zeros) == actual else None
            for d, actual in zip(out_dims, out.shape)
        )
        for out_dims, out in zip(dims, outputs)
    )


def _check_statics_are_size_independent(
    layouts: Sequence[OutputLayout], describe_call: Callable[[], str]
) -> None:
    first = layouts[0].statics
    symbolic = [v for v in first if jax_export.is_symbolic_dim(v)]
    differ = any(
        [static_key(v) for v in layout.statics] != [static_key(v) for v in first]
        for layout in layouts[1:]
    )
    if symbolic or differ:
        raise ShapeInferenceError(
            f"{describe_call()} returns a non-array value that depends on the "
            f"input sizes ({symbolic[0] if symbolic else first}); non-array outputs "
            "are fixed when the op is built. Return it as an array, e.g. "
            "`jnp.asarray(x.shape[0])`."
        )


def _inference_error(
    attempts: Sequence[_Attempt],
    dims: InputDims,
    current: Mapping[tuple[int, int], int],
    describe_call: Callable[[], str],
) -> ShapeInferenceError:
    """Return the error when no trace (or only one stand-in trace) succeeded.

    It reports the failure at the current lengths when they were tried (the
    sizes the model has), else the last one; names the inputs of unknown
    size with their current lengths; lists what was tried; says what to do.
    """
    failed = [a for a in attempts if a.error is not None]
    reported = next((a for a in failed if a.label == _CURRENT), failed[-1])
    error = reported.error
    if reported is not failed[0]:
        error.__context__ = failed[0].error
    shapes_text = ", ".join(str(tuple(s)) for s in reported.shapes)
    first_line = (str(error).strip().splitlines() or [""])[0]
    unknown = ""
    if dims.unknown:  # then the stand-in sizes were tried last
        tried = [a.label for a in attempts[: -len(STAND_IN_SIZES)]]
        sizes = ", ".join(map(str, STAND_IN_SIZES))
        unknown = (
            f"\nInputs of unknown size: {dims.describe_unknown(current)}. "
            f"Traced with {'; '.join(tried)}; stand-in sizes {sizes}."
        )
    if isinstance(error, jax.errors.JAXTypeError | jax.errors.JAXIndexError):
        message = (
            f"{describe_call()}: its output shape (or Python control flow) "
            f"depends on input values (traced with input shapes {shapes_text}), "
            "which JAX cannot trace. "
            "Give the operation a static size (e.g. `jnp.nonzero(x, size=n)`), "
            "or, when the sizes are known only to you, pass "
            "`output_types=` to `as_jax_op` and fix unknown input shapes with "
            "`pt.specify_shape`. JAX said: "
            f"{type(error).__name__}: {first_line}{unknown}"
        )
    else:
        message = (
            f"{describe_call()} raised {type(error).__name__} while its output "
            f"types were inferred (traced with input shapes {shapes_text}): "
            f"{first_line}{unknown}\n{_what_to_do(reported, dims, current)}"
        )
    result = ShapeInferenceError(message)
    result.__cause__ = error
    return result


def _what_to_do(
    reported: _Attempt, dims: InputDims, current: Mapping[tuple[int, int], int]
) -> str:
    if reported.label != _CURRENT:
        return (
            "If the function is correct but cannot be traced with these shapes, "
            "fix the input shapes with `pt.specify_shape` or pass `output_types=` "
            "to `as_jax_op`."
        )
    if all(dims.same_as[i][j] in current for i, j in dims.unknown):
        return (
            "It fails at the current lengths too: check that they agree with "
            "the function's other arguments (the model's coords, data shapes, "
            "fixed arrays). If they do, pass `output_types=` to `as_jax_op`."
        )
    return (
        "It fails at the current lengths too. Fix the input shapes that "
        "PyTensor cannot compute (`length unknown`) with `pt.specify_shape`, "
        "or pass `output_types=` to `as_jax_op`."
    )


# Output dims are kept as JAX prints them (a string is part of an op's
# identity, equal across processes), and evaluated here: JAX's public API
# parses them (``jax.export.symbolic_shape``, whose grammar is the one below)
# and bounds them (``symbolic_dim_bounds``), but evaluates none for given
# lengths. Its evaluator (``_DimExpr._evaluate``) is private; parsing with
# the lengths substituted leaves ``floordiv`` and ``mod`` of constants
# unevaluated, and the bounds of ``mod`` are not exact. Nor can JAX build a
# PyTensor graph of one.
#
# PyTensor's JAX backend keeps shape arithmetic made of + - * // static (Python
# ints), but computes maximum, minimum, mod and power with jnp: a shape built
# from those is traced, and an `Alloc` of it fails under the JAX linker. So
# every dim expression is built from + - * // alone.
_ABOVE_ANY_DIM = 2**40


def _clamp_at_zero(a):
    """Return ``max(a, 0)`` for integers ``|a| < 2**40``, with + - * // only."""
    if isinstance(a, int):
        return max(a, 0)
    return a * ((a + _ABOVE_ANY_DIM) // _ABOVE_ANY_DIM)


def _mod(a, b):
    return a - (a // b) * b


def _power(a, b):
    if not isinstance(b, int) or b < 0:
        raise ValueError(f"unsupported exponent {b!r} in a symbolic dimension")
    return math.prod([a] * b)


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: _mod,
    ast.BitXor: _power,  # JAX prints and parses powers as ``n^2``
}
_CALLS = {
    "max": lambda a, b: b + _clamp_at_zero(a - b),
    "min": lambda a, b: a - _clamp_at_zero(a - b),
    "floordiv": operator.floordiv,
    "mod": _mod,
}


def contradicted_dim(
    output_dims: Sequence[int | str | None],
    shape: Sequence[int],
    input_shapes: Sequence[Sequence[int]],
) -> tuple[int, int] | None:
    """Return the first dim of a computed output that contradicts the op's output dims.

    Returns ``(dim, expected)``, where ``expected`` is the declared size or
    the declared expression evaluated for ``input_shapes``; None when all
    agree (unknown dims and expressions this cannot evaluate always do).

    >>> contradicted_dim(["s0_0", 3], (4, 3), [(5,)])
    (0, 5)
    """
    if not all(isinstance(d, int) for s in (shape, *input_shapes) for d in s):
        return None  # traced abstractly: nothing to compare yet
    env = _symbol_env(input_shapes)
    for dim, (declared, actual) in enumerate(zip(output_dims, shape)):
        if isinstance(declared, str):
            declared = _evaluate_int(declared, env)  # -1: not understood
        if isinstance(declared, int) and declared >= 0 and declared != actual:
            return dim, declared
    return None


def _symbol_env(shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    return {symbol_name(i, j): d for i, s in enumerate(shapes) for j, d in enumerate(s)}


def describe_symbol(symbol: str) -> str:
    """Describe a dim symbol: ``"s1_0"`` -> ``"dim 0 of input 1"``."""
    match = _SYMBOL.fullmatch(symbol)
    return f"dim {match[2]} of input {match[1]}" if match else symbol


def dim_to_tensor(expression: int | str, env: Mapping[str, Any]) -> Any:
    """Turn a JAX symbolic dimension (as printed by JAX) into a PyTensor scalar.

    ``env`` maps symbol names to PyTensor integer scalars (input dims). The
    result is clamped at 0: JAX simplifies assuming every symbol is at least
    1, so ``x[1:]`` has length ``n - 1``, which is -1 for an empty ``x``.
    Raises ``ValueError`` for an expression this does not understand.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> n = pt.lscalar("n")
    >>> dim_to_tensor("floordiv(2*n + 1, 3)", {"n": n}).eval({n: 4})
    array(3)
    >>> dim_to_tensor("n - 1", {"n": n}).eval({n: 0})
    array(0)
    """
    if isinstance(expression, int):
        return expression
    return _clamp_at_zero(_evaluate(ast.parse(expression, mode="eval").body, env))


def _evaluate_int(expression: str, env: Mapping[str, int]) -> int:
    """Return the value of a JAX dim expression for integer symbols, clamped at 0."""
    try:
        return dim_to_tensor(expression, env)
    except ValueError:
        return -1  # unparsable: never equal to a real size


def _evaluate(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, env)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](
            _evaluate(node.left, env), _evaluate(node.right, env)
        )
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and len(node.args) == 2
        and not node.keywords
    ):
        left, right = (_evaluate(arg, env) for arg in node.args)
        return _CALLS[node.func.id](left, right)
    raise ValueError(f"unsupported symbolic dimension: {ast.unparse(node)}")
