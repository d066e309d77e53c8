"""Output types of a JAX function, found by tracing it, never by running the graph.

The steps, in order (each only when the one before cannot answer):

1. Input dims that are static in the PyTensor types, or that PyTensor's static
   shape inference proves constant, are traced as they are.
2. Unknown dims are traced as JAX *symbolic* dimensions, one symbol per input
   dim, named ``s{input}_{dim}``. Output dims come back as integers or as
   expressions over those symbols (``2*s0_0``, ``min(s0_0, 3)``); the
   expressions let :meth:`OpFromJax.infer_shape` give output shapes in terms of
   input shapes.
   JAX assumes symbolic dims are at least 1, so the expressions are clamped
   at 0 and checked against one more trace with every unknown dim set to 0;
   an expression that disagrees there is dropped (the dim is then read off
   the computed output at run time).
3. Some JAX code needs concrete sizes. It is then traced with every unknown
   dim set to each of several stand-in sizes: output dims equal in all the
   traces that succeed (at least two) are static, the others unknown.
4. Otherwise a :class:`ShapeInferenceError` says what to do.

Non-array outputs are returned to the caller as they were when traced, so an
output that depends on input sizes (``x.shape[0]``) must be an array: that is
an error here rather than a silently frozen value.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax import export as jax_export

from pytensor.compile.jax_ofg_functions import OutputLayout, static_key
from pytensor.tensor.type import TensorType


#: The stand-in sizes of step 3: a small one (to tell ``min(n, k)`` from
#: ``k``), and two with many divisors (so reshapes into groups still trace).
STAND_IN_SIZES = (3, 12, 60)

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
    """The JAX symbolic dimension standing for ``inputs[input_index].shape[dim]``."""
    return f"s{input_index}_{dim}"


def symbolic_shapes(shapes: Sequence[tuple]) -> list[tuple]:
    """The shapes with every unknown (None) dim a JAX symbol named by :func:`symbol_name`."""
    unknown = [
        (i, j) for i, s in enumerate(shapes) for j, d in enumerate(s) if d is None
    ]
    if not unknown:
        return [tuple(shape) for shape in shapes]
    names = ", ".join(symbol_name(i, j) for i, j in unknown)
    symbol_of = dict(zip(unknown, jax_export.symbolic_shape(names)))
    return [
        tuple(symbol_of.get((i, j), d) for j, d in enumerate(shape))
        for i, shape in enumerate(shapes)
    ]


def stand_in_shapes(shapes: Sequence[tuple], size: int) -> list[tuple]:
    """The shapes with every unknown (None) dim set to ``size``."""
    return [tuple(size if d is None else d for d in shape) for shape in shapes]


_SYMBOL = re.compile(r"\bs(\d+)_(\d+)\b")


def shift_symbols(expression: int | str | None, offsets: Sequence[int]) -> Any:
    """Rename the symbols of a dim expression when input ``i`` gains ``offsets[i]``
    leading dims (``s0_0`` becomes ``s0_2`` for two batch dims).

    >>> shift_symbols("2*s0_0 + s1_0", [2, 0])
    '2*s0_2 + s1_0'
    """
    if not isinstance(expression, str):
        return expression
    return _SYMBOL.sub(
        lambda m: symbol_name(int(m[1]), int(m[2]) + offsets[int(m[1])]), expression
    )


def renumber_symbols(
    expression: int | str | None,
    new_index: Sequence[int | None],
    shapes: Sequence[tuple[int | None, ...]],
) -> Any:
    """Rename the symbols of a dim expression when inputs are dropped or moved.

    Input ``i`` becomes input ``new_index[i]``; a dropped input (None) has a
    static shape in ``shapes``, whose sizes replace its symbols.

    >>> renumber_symbols("s0_0 + s2_1", [None, 0, 1], [(4,), (None,), (2, None)])
    '(4) + s1_1'
    """
    if not isinstance(expression, str):
        return expression

    def rename(match: re.Match) -> str:
        i, j = int(match[1]), int(match[2])
        if new_index[i] is None:
            return f"({shapes[i][j]})"
        return symbol_name(new_index[i], j)

    return _SYMBOL.sub(rename, expression)


@dataclass(frozen=True)
class TraceResult:
    """What tracing a function tells about its outputs."""

    output_types: tuple[TensorType, ...]
    #: Per output dim: a static size, an expression over input-dim symbols
    #: (see :func:`symbol_name`), or None when only the runtime knows it.
    output_dims: OutputDims
    layout: OutputLayout


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


def _result(
    outputs: Sequence[jax.ShapeDtypeStruct],
    layout: OutputLayout,
    dims: OutputDims,
) -> TraceResult:
    types = tuple(
        TensorType(
            np.dtype(out.dtype).name,
            shape=tuple(d if isinstance(d, int) else None for d in out_dims),
        )
        for out, out_dims in zip(outputs, dims)
    )
    return TraceResult(types, dims, layout)


def _symbolic_dims(shape: tuple) -> tuple[int | str, ...]:
    return tuple(str(d) if jax_export.is_symbolic_dim(d) else int(d) for d in shape)


def trace_output_types(
    trace: TraceFunction,
    input_types: Sequence[TensorType],
    known_shapes: Sequence[tuple[int | None, ...]],
    describe_call: Callable[[], str],
) -> TraceResult:
    """Find the output types of ``trace`` for inputs of ``input_types``.

    Parameters
    ----------
    trace
        Takes one array per input; returns the output leaves and layout.
    input_types
        The input types (their dtypes are used).
    known_shapes
        The input shapes as far as they are known (static type shape refined
        by PyTensor's static shape inference); None marks an unknown dim.
    describe_call
        Names the function and its inputs in error messages.
    """
    dtypes = [t.dtype for t in input_types]
    unknown = [
        (i, j)
        for i, shape in enumerate(known_shapes)
        for j, dim in enumerate(shape)
        if dim is None
    ]
    if not unknown:
        try:
            outputs, layout = _eval_shape(trace, known_shapes, dtypes)
        except Exception as error:
            raise _tracing_error(error, describe_call, known_shapes) from error
        dims = tuple(tuple(int(d) for d in out.shape) for out in outputs)
        return _result(outputs, layout, dims)

    try:
        outputs, layout = _eval_shape(trace, symbolic_shapes(known_shapes), dtypes)
    except Exception as error:
        # JAX code that needs concrete sizes: fall back to stand-in sizes.
        symbolic_error = error
    else:
        _check_statics_are_size_independent([layout], describe_call)
        dims = tuple(_symbolic_dims(out.shape) for out in outputs)
        dims = _checked_at_zero(dims, trace, known_shapes, dtypes)
        return _result(outputs, layout, dims)

    traces, errors = [], []
    for size in STAND_IN_SIZES:
        shapes = stand_in_shapes(known_shapes, size)
        try:
            traces.append(_eval_shape(trace, shapes, dtypes))
        except Exception as error:
            errors.append((error, shapes))
    if len(traces) < 2:
        error, shapes = errors[-1]
        error.__context__ = symbolic_error
        raise _tracing_error(error, describe_call, shapes) from error
    _check_statics_are_size_independent([layout for _, layout in traces], describe_call)
    all_outputs = [outputs for outputs, _ in traces]
    dims = tuple(
        tuple(
            int(sizes[0]) if len(set(sizes)) == 1 else None
            for sizes in zip(*(out.shape for out in same_output), strict=True)
        )
        for same_output in zip(*all_outputs, strict=True)
    )
    return _result(all_outputs[0], traces[0][1], dims)


def _checked_at_zero(
    dims: OutputDims,
    trace: TraceFunction,
    known_shapes: Sequence[tuple],
    dtypes: Sequence[str],
) -> OutputDims:
    """Drop symbolic dims that are wrong when the unknown input dims are 0."""
    if all(isinstance(d, int) for out in dims for d in out):
        return dims
    zero_shapes = [
        tuple(0 if d is None else d for d in shape) for shape in known_shapes
    ]
    try:
        outputs, _ = _eval_shape(trace, zero_shapes, dtypes)
    except Exception:
        # Fails for empty inputs at run time too: nothing to check against.
        return dims
    zeros = {
        symbol_name(i, j): 0
        for i, shape in enumerate(known_shapes)
        for j, d in enumerate(shape)
        if d is None
    }
    checked = []
    for out_dims, out in zip(dims, outputs):
        checked.append(
            tuple(
                d if isinstance(d, int) or _evaluate_int(d, zeros) == actual else None
                for d, actual in zip(out_dims, out.shape)
            )
        )
    return tuple(checked)


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


def _tracing_error(
    error: Exception, describe_call: Callable[[], str], shapes: Sequence[tuple]
) -> ShapeInferenceError:
    shapes_text = ", ".join(str(tuple(s)) for s in shapes)
    if isinstance(error, jax.errors.JAXTypeError | jax.errors.JAXIndexError):
        return ShapeInferenceError(
            f"{describe_call()}: its output shape (or Python control flow) "
            f"depends on input values (traced with input shapes {shapes_text}), "
            "which JAX cannot trace. "
            "Give the operation a static size (e.g. `jnp.nonzero(x, size=n)`), "
            "or, when the sizes are known only to you, pass "
            "`output_types=` to `as_jax_op` and fix unknown input shapes with "
            "`pt.specify_shape`. JAX said: "
            f"{type(error).__name__}: {_first_line(error)}"
        )
    return ShapeInferenceError(
        f"{describe_call()} raised {type(error).__name__} while its output "
        f"types were inferred (traced with input shapes {shapes_text}): "
        f"{_first_line(error)}\nIf the function is correct but cannot be traced "
        "with these shapes, fix the input shapes with `pt.specify_shape` or "
        "pass `output_types=` to `as_jax_op`."
    )


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


# PyTensor's JAX backend keeps shape arithmetic made of + - * // static (Python
# ints), but computes maximum, minimum, mod and power with jnp: a shape built
# from those is traced, and an `Alloc` of it fails under the JAX linker. So
# every dim expression is built from + - * // alone.
_ABOVE_ANY_DIM = 2**40


def _clamp_at_zero(a):
    """``max(a, 0)`` for integers ``|a| < 2**40``, with + - * // only."""
    if isinstance(a, int):
        return max(a, 0)
    return a * ((a + _ABOVE_ANY_DIM) // _ABOVE_ANY_DIM)


def _maximum(a, b):
    return b + _clamp_at_zero(a - b)


def _minimum(a, b):
    return a - _clamp_at_zero(a - b)


def _floordiv(a, b):
    return a // b


def _mod(a, b):
    return a - (a // b) * b


def _power(a, b):
    if not isinstance(b, int) or b < 0:
        raise ValueError(f"unsupported exponent {b!r} in a symbolic dimension")
    return functools.reduce(operator.mul, [a] * b, 1)


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.BitXor: _power,  # JAX prints squares as ``n^2``
}
_CALLS = {
    "max": _maximum,
    "min": _minimum,
    "floordiv": _floordiv,
    "mod": _mod,
}


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
    """The value of a JAX dim expression for integer symbols, clamped at 0."""
    try:
        return max(_evaluate(ast.parse(expression, mode="eval").body, env), 0)
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
