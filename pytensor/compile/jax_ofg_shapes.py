"""Output types of a JAX function, found by tracing it, never by running the graph.

The steps, in order (each only when the one before cannot answer):

1. Input dims that are static in the PyTensor types, or that PyTensor's static
   shape inference proves constant, are traced as they are.
2. Unknown dims are traced as JAX *symbolic* dimensions, one symbol per input
   dim, named ``s{input}_{dim}``. Output dims come back as integers or as
   expressions over those symbols (``2*s0_0``, ``min(s0_0, 3)``); the
   expressions let :meth:`OpFromJax.infer_shape` give output shapes in terms of
   input shapes.
3. Some JAX code needs concrete sizes. It is then traced twice with every
   unknown dim set to a stand-in size (a different one each time): output dims
   equal in both traces are static, the others unknown.
4. Otherwise a :class:`ShapeInferenceError` says what to do.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax import export as jax_export

import pytensor.tensor as pt
from pytensor.compile.jax_ofg_functions import OutputLayout
from pytensor.tensor.type import TensorType


#: The stand-in sizes of step 3: even, so reshapes into pairs still trace.
STAND_IN_SIZES = (8, 12)

OutputDims = tuple[tuple[int | str | None, ...], ...]


class ShapeInferenceError(ValueError):
    """The output types of a wrapped function could not be found by tracing."""


def symbol_name(input_index: int, dim: int) -> str:
    """The JAX symbolic dimension standing for ``inputs[input_index].shape[dim]``."""
    return f"s{input_index}_{dim}"


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

    symbols = jax_export.symbolic_shape(
        ", ".join(symbol_name(i, j) for i, j in unknown)
    )
    symbol_of = dict(zip(unknown, symbols))
    symbolic_shapes = [
        tuple(symbol_of.get((i, j), dim) for j, dim in enumerate(shape))
        for i, shape in enumerate(known_shapes)
    ]
    try:
        outputs, layout = _eval_shape(trace, symbolic_shapes, dtypes)
    except Exception:
        # JAX code that needs concrete sizes: fall back to stand-in sizes.
        pass
    else:
        dims = tuple(_symbolic_dims(out.shape) for out in outputs)
        return _result(outputs, layout, dims)

    traces = []
    for size in STAND_IN_SIZES:
        shapes = [
            tuple(size if dim is None else dim for dim in shape)
            for shape in known_shapes
        ]
        try:
            traces.append(_eval_shape(trace, shapes, dtypes))
        except Exception as error:
            raise _tracing_error(error, describe_call, shapes) from error
    (first, layout), (second, _) = traces
    dims = tuple(
        tuple(
            int(d1) if d1 == d2 else None
            for d1, d2 in zip(out1.shape, out2.shape, strict=True)
        )
        for out1, out2 in zip(first, second, strict=True)
    )
    return _result(first, layout, dims)


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


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: lambda a, b: pt.floor_div(a, b),
    ast.Mod: lambda a, b: pt.mod(a, b),
}
_CALLS = {
    "max": lambda a, b: pt.maximum(a, b),
    "min": lambda a, b: pt.minimum(a, b),
    "floordiv": lambda a, b: pt.floor_div(a, b),
    "mod": lambda a, b: pt.mod(a, b),
}


def dim_to_tensor(expression: int | str, env: Mapping[str, Any]) -> Any:
    """Turn a JAX symbolic dimension (as printed by JAX) into a PyTensor scalar.

    ``env`` maps symbol names to PyTensor integer scalars (input dims).
    Raises ``ValueError`` for an expression this does not understand.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> n = pt.lscalar("n")
    >>> dim_to_tensor("floordiv(2*n + 1, 3)", {"n": n}).eval({n: 4})
    array(3)
    """
    if isinstance(expression, int):
        return expression
    return _evaluate(ast.parse(expression, mode="eval").body, env)


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
