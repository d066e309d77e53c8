"""Wrap JAX functions as PyTensor Ops: :class:`OpFromJax` and :func:`as_jax_op`.

:class:`OpFromJax` is an inner-graph Op in the spirit of
:class:`~pytensor.compile.builders.OpFromGraph`, except that its inner "graph"
is a JAX callable over flat arrays. It

* infers nothing itself: it is given its input and output types;
* runs a cached ``jax.jit`` of the inner function in the Python and C linkers
  (``perform``) and in Numba (object mode, see
  ``pytensor/link/numba/dispatch/jax_ofg.py``);
* becomes the inner function itself under the JAX linker, so the whole graph
  is one XLA computation;
* differentiates through ``jax.vjp`` / ``jax.jvp``; the derivative ops are
  again :class:`OpFromJax`, so higher orders work.

:func:`as_jax_op` is the user-facing decorator: it flattens pytree arguments,
bakes non-symbolic leaves in as static arguments, infers the output types by
tracing (see :mod:`pytensor.compile.jax_ofg_shapes`) and rebuilds the output
pytree with PyTensor variables at its array leaves. Callables in the output
become :class:`SymbolicCallable`\\ s, which other wrapped functions compose.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


try:
    import jax
    import jax.numpy as jnp
except ImportError as _error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "pytensor.compile.jax_ofg needs JAX, which is not installed. "
        "Install it with `pip install jax` (or `pip install pytensor-jax-ofg`, "
        "which depends on it)."
    ) from _error

import pytensor.tensor as pt
from pytensor import config
from pytensor.compile.jax_ofg_cache import configure_xla_cache
from pytensor.compile.jax_ofg_dims import InputDims, input_dims
from pytensor.compile.jax_ofg_functions import (
    INPUT,
    FlatJaxFunction,
    Nested,
    OutputLayout,
    Static,
    as_tuple_function,
    shadowing_wrapper_name,
)
from pytensor.compile.jax_ofg_host import BoundedCache, JaxHostOp
from pytensor.compile.jax_ofg_shapes import (
    OutputDims,
    ShapeInferenceError,
    contradicted_dim,
    describe_symbol,
    dim_to_tensor,
    sizes_by_symbol,
    symbol_name,
    trace_output_types,
)
from pytensor.compile.jax_ofg_transforms import JVPFunction, VJPFunction
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op
from pytensor.tensor.basic import _as_tensor_variable
from pytensor.tensor.exceptions import ShapeError
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorVariable


__all__ = ["OpFromJax", "ShapeInferenceError", "SymbolicCallable", "as_jax_op"]


def _differentiable(tensor_type: TensorType) -> bool:
    return tensor_type.dtype.startswith(("float", "complex"))


def _zero_gradient(integer_input: Variable) -> Variable:
    return integer_input.zeros_like(dtype=config.floatX)


def _describe_types(types: Sequence[TensorType]) -> str:
    return ", ".join(str(t) for t in types)


class OpFromJax(JaxHostOp, Op):
    """An Op whose computation is a JAX function of flat arrays.

    Parameters
    ----------
    fn
        A JAX-traceable function taking one array per input and returning a
        tuple (or list) of arrays, or a bare array when there is one output.
    input_types
        One :class:`~pytensor.tensor.type.TensorType` per input.
    output_types
        One :class:`~pytensor.tensor.type.TensorType` per output (or a single
        type). Every output the function returns is checked against them.
    name
        Shown in graphs; defaults to ``fn.__name__``.
    output_dims
        For :meth:`infer_shape`: per output, per dim, a static size or an
        expression over input dims named ``s{input}_{dim}`` (``"2*s0_0"``).
        Defaults to the static dims of ``output_types``.
    traced_sizes
        When the output types were found by tracing at the lengths some
        input dims had when the graph was built (symbolic tracing failed):
        those lengths, by symbol (``{"s1_0": 8}``). Named in errors; computed
        outputs are then checked against ``output_dims``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import pytensor
    >>> import pytensor.tensor as pt
    >>> from pytensor.compile.jax_ofg import OpFromJax
    >>> from pytensor.tensor.type import TensorType
    >>> op = OpFromJax(
    ...     lambda x: jnp.cumsum(x) ** 2,
    ...     [TensorType("float64", shape=(3,))],
    ...     [TensorType("float64", shape=(3,))],
    ...     name="cumsum_squared",
    ... )
    >>> x = pt.vector("x", shape=(3,))
    >>> f = pytensor.function([x], op(x))
    >>> f(np.array([1.0, 2.0, 3.0]))
    array([ 1.,  9., 36.])
    """

    __props__ = ("fn", "input_types", "output_types")

    def __init__(
        self,
        fn: Callable,
        input_types: Sequence[TensorType],
        output_types: Sequence[TensorType] | TensorType,
        name: str | None = None,
        *,
        output_dims: OutputDims | None = None,
        traced_sizes: Mapping[str, int] | None = None,
    ):
        if isinstance(output_types, TensorType):
            output_types = [output_types]
        self.name = name or getattr(fn, "__name__", None) or "jax_function"
        self.fn = as_tuple_function(fn)
        self.input_types = tuple(input_types)
        self.output_types = tuple(output_types)
        for kind, types in (("input", self.input_types), ("output", self.output_types)):
            for i, t in enumerate(types):
                if not isinstance(t, TensorType):
                    raise TypeError(
                        f"OpFromJax {self.name!r}: {kind} type {i} must be a "
                        f"TensorType (e.g. pt.tensor('float64', shape=(3,)).type), "
                        f"got {t!r}."
                    )
        if output_dims is None:
            output_dims = tuple(tuple(t.shape) for t in self.output_types)
        self.output_dims = output_dims
        self.traced_sizes = dict(traced_sizes or {})
        super().__init__()

    def __hash__(self) -> int:
        # Ops are immutable and hashing the inner function walks its fields:
        # compute once (lookups in the jitted-function cache use it).
        try:
            return self._hash
        except AttributeError:
            # As the hash PyTensor derives from __props__ (which defining
            # __hash__ here replaces).
            self._hash = hash((type(self), self._props()))
            return self._hash

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_hash", None)  # string hashes differ between processes
        return state

    def __str__(self) -> str:
        return f"{type(self).__name__}{{{self.describe()}}}"

    def describe(self) -> str:
        """The name, with the static arguments baked into the function."""
        describe = getattr(self.fn, "describe", None)
        if describe is None or self.name != self.fn.name:
            return self.name  # a derived op (vjp, vmap...) or a flat function
        return describe()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.describe()}, "
            f"inputs=[{_describe_types(self.input_types)}], "
            f"outputs=[{_describe_types(self.output_types)}])"
        )

    def make_node(self, *inputs: Any) -> Apply:
        if len(inputs) != len(self.input_types):
            raise TypeError(
                f"{self} takes {len(self.input_types)} inputs "
                f"({_describe_types(self.input_types)}), got {len(inputs)}."
            )
        filtered = []
        for i, (value, expected) in enumerate(zip(inputs, self.input_types)):
            try:
                filtered.append(expected.filter_variable(value))
            except TypeError as error:
                raise TypeError(
                    f"{self}: input {i} must be of type {expected}, got {value!r} "
                    f"of type {getattr(value, 'type', type(value))}."
                ) from error
        return Apply(self, filtered, [t() for t in self.output_types])

    # ----------------------------------------------------------------- running
    def traced_fn(self, *arrays: Any) -> tuple:
        """The inner function, checking its outputs against the declared types.

        The check runs while JAX traces (once per input shape signature), so
        it costs nothing per call.
        """
        # Under the JAX linker, 0-d constants arrive as Python scalars.
        arrays = [
            jnp.asarray(a, dtype=t.dtype) for a, t in zip(arrays, self.input_types)
        ]
        outputs = tuple(jnp.asarray(o) for o in self.fn(*arrays))
        if len(outputs) != len(self.output_types):
            raise TypeError(
                f"The JAX function {self.name!r} returned {len(outputs)} arrays, "
                f"but the op declares {len(self.output_types)} outputs "
                f"({_describe_types(self.output_types)})."
            )
        input_shapes = [tuple(a.shape) for a in arrays]
        for k, (output, expected) in enumerate(zip(outputs, self.output_types)):
            shape_ok = len(output.shape) == expected.ndim and all(
                s is None or s == d for s, d in zip(expected.shape, output.shape)
            )
            if np.dtype(output.dtype) != expected.dtype or not shape_ok:
                raise TypeError(
                    f"Output {k} of the JAX function {self.name!r} has dtype "
                    f"{np.dtype(output.dtype).name} and shape {tuple(output.shape)}, "
                    f"but the op declares {expected} (dtype {expected.dtype}, "
                    f"shape {expected.shape}). Make the function return the "
                    "declared type or pass matching `output_types=`."
                    + self._changed_sizes_note(input_shapes)
                )
            # Dims from one trace at the current lengths are taken, not
            # proven: check them (symbolic traces prove theirs).
            contradicted = self.traced_sizes and contradicted_dim(
                self.output_dims[k], output.shape, input_shapes
            )
            if contradicted:
                dim, size = contradicted
                raise TypeError(
                    f"Output {k} of the JAX function {self.name!r} has shape "
                    f"{tuple(output.shape)}, but its dim {dim} was inferred, "
                    f"when the graph was built, to be {self.output_dims[k][dim]}"
                    f" = {size} for these inputs (shapes "
                    f"{', '.join(map(str, input_shapes))}). Pass `output_types=` "
                    "to `as_jax_op`." + self._changed_sizes_note(input_shapes)
                )
        return outputs

    def _changed_sizes_note(self, input_shapes: Sequence[tuple]) -> str:
        """Names the input dims whose length changed since the types were traced."""
        now = {
            symbol_name(i, j): d
            for i, shape in enumerate(input_shapes)
            for j, d in enumerate(shape)
        }
        changed = [
            f"{describe_symbol(symbol)} was {size}, is {now[symbol]}"
            for symbol, size in self.traced_sizes.items()
            if now.get(symbol, size) != size
        ]
        if not changed:
            return ""
        return (
            " Its types were found by tracing it at the lengths its inputs had "
            f"when the graph was built, which changed ({'; '.join(changed)}): "
            "build the graph again after changing them."
        )

    def jax_callable(self) -> Callable[..., tuple]:
        return self.traced_fn

    def error_note(self) -> str:
        return f"Raised by the JAX function wrapped in {self}." + self.traced_note()

    def traced_note(self) -> str:
        """When the types hold only at traced lengths: says so, naming the dims."""
        if not self.traced_sizes:
            return ""
        sizes = "; ".join(
            f"{describe_symbol(symbol)}: {size}"
            for symbol, size in self.traced_sizes.items()
        )
        return (
            " Its output types were found by tracing it at the lengths its "
            f"inputs had when the graph was built ({sizes}); other lengths "
            "may not work."
        )

    # ------------------------------------------------------------------ shapes
    def infer_shape(self, node: Apply, input_shapes) -> list:
        env = {
            symbol_name(i, j): dim
            for i, shape in enumerate(input_shapes)
            if shape is not None
            for j, dim in enumerate(shape)
        }
        shapes = []
        for dims in self.output_dims:
            try:
                if any(d is None for d in dims):
                    raise ValueError("unknown output dim")
                shapes.append(tuple(dim_to_tensor(d, env) for d in dims))
            except (ValueError, KeyError):
                # Not expressible in input shapes: ShapeFeature reads it off
                # the computed output instead.
                shapes.append(None)
        if all(s is None for s in shapes) and shapes:
            raise ShapeError(f"{self}: output shapes are known only at run time")
        return shapes

    # --------------------------------------------------------------- gradients
    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        # Integer inputs count as connected (with zero gradient), as in
        # PyTensor's own ops, so `pt.grad(cost, int_input)` gives zeros.
        return [
            [_differentiable(o) for o in self.output_types] for _ in self.input_types
        ]

    def _input_dims(self, index: int) -> tuple[int | str, ...]:
        shape = self.input_types[index].shape
        return tuple(
            symbol_name(index, j) if d is None else d for j, d in enumerate(shape)
        )

    def pullback(self, inputs, outputs, cotangents) -> list[Variable]:
        wrt = tuple(_differentiable(t) for t in self.input_types)
        cotangent_outputs = tuple(
            k
            for k, (ct, t) in enumerate(zip(cotangents, self.output_types))
            if _differentiable(t) and not isinstance(ct.type, DisconnectedType)
        )
        if not cotangent_outputs:
            return [disconnected_type() for _ in inputs]
        if not any(wrt):
            return [_zero_gradient(x) for x in inputs]
        cotangent_types = [self.output_types[k] for k in cotangent_outputs]
        vjp_op = OpFromJax(
            VJPFunction(
                self.fn, wrt, cotangent_outputs, tuple(t.dtype for t in cotangent_types)
            ),
            [*self.input_types, *cotangent_types],
            [t for t, w in zip(self.input_types, wrt) if w],
            name=f"vjp({self.describe()})",
            output_dims=tuple(self._input_dims(i) for i, w in enumerate(wrt) if w),
            traced_sizes=self.traced_sizes,
        )
        cotangent_values = [
            t.filter_variable(pt.cast(cotangents[k], t.dtype))
            for k, t in zip(cotangent_outputs, cotangent_types)
        ]
        gradients = iter(vjp_op(*inputs, *cotangent_values, return_list=True))
        return [
            next(gradients) if w else _zero_gradient(x) for x, w in zip(inputs, wrt)
        ]

    def pushforward(self, inputs, outputs, tangents) -> list[Variable]:
        wrt = tuple(
            _differentiable(t) and not isinstance(tangent.type, DisconnectedType)
            for t, tangent in zip(self.input_types, tangents)
        )
        tangent_outputs = tuple(
            k for k, t in enumerate(self.output_types) if _differentiable(t)
        )
        if not any(wrt) or not tangent_outputs:
            return [disconnected_type() for _ in outputs]
        wrt_types = [t for t, w in zip(self.input_types, wrt) if w]
        jvp_op = OpFromJax(
            JVPFunction(self.fn, wrt, tangent_outputs),
            [*self.input_types, *wrt_types],
            [self.output_types[k] for k in tangent_outputs],
            name=f"jvp({self.describe()})",
            output_dims=tuple(self.output_dims[k] for k in tangent_outputs),
            traced_sizes=self.traced_sizes,
        )
        tangent_values = [
            t.filter_variable(pt.cast(tangent, t.dtype))
            for t, tangent, w in zip(self.input_types, tangents, wrt)
            if w
        ]
        output_tangents = iter(jvp_op(*inputs, *tangent_values, return_list=True))
        return [
            next(output_tangents) if k in tangent_outputs else disconnected_type()
            for k in range(len(outputs))
        ]


# ---------------------------------------------------------------------------
# Symbolic callables
# ---------------------------------------------------------------------------


class SymbolicCallable:
    """A callable returned by a wrapped function, held symbolically.

    It remembers the function that produced it and that function's symbolic
    inputs. Passed to another wrapped function (alone or inside a pytree), it
    is rebuilt inside that function's JAX trace, which takes the producer's
    inputs as extra inputs, so gradients flow back to them. Called with
    PyTensor variables, it gives PyTensor variables.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import pytensor.tensor as pt
    >>> @as_jax_op
    ... def line(slope):
    ...     return lambda t: slope * t
    >>> slope = pt.scalar("slope")
    >>> f = line(slope)
    >>> f
    SymbolicCallable(line)
    >>> f(pt.constant(2.0)).eval({slope: 3.0})
    array(6.)
    """

    def __init__(
        self, producer: FlatJaxFunction, index: int, inputs: Sequence[Variable]
    ):
        self.producer = producer
        self.index = index
        self.inputs = tuple(inputs)
        n_callables = producer.layout.kinds.count("callable")
        self.name = producer.name + (f"[{index}]" if n_callables > 1 else "")

    def __repr__(self) -> str:
        return f"SymbolicCallable({self.name})"

    @functools.cached_property
    def _call_wrapper(self) -> JaxOpWrapper:
        return JaxOpWrapper(_call_symbolic, name=f"call({self.name})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call_wrapper(self, *args, **kwargs)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_call_wrapper", None)
        return state

    def __getattr__(self, name: str) -> Any:
        # Tensor attributes (PyTensor's gradient asks for `.type`, `.tag`...)
        # get the clear message; `hasattr` stays False.
        if name in _TENSOR_ATTRIBUTES:
            raise _NotATensorError(_not_a_tensor_message(self))
        raise AttributeError(name)


class _NotATensorError(TypeError, AttributeError):
    """A symbolic callable was used where PyTensor expects a tensor."""


_TENSOR_ATTRIBUTES = frozenset(
    {"type", "tag", "owner", "ndim", "dtype", "shape", "broadcastable", "index"}
)


def _not_a_tensor_message(x: SymbolicCallable) -> str:
    return (
        f"{x!r} is a function, not a tensor: it cannot be used in a PyTensor "
        "expression. Call it with tensors (`f(t)`) to get a tensor, or pass it "
        "as an argument to another function wrapped with `as_jax_op`."
    )


def _call_symbolic(function: Callable, *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


def _not_a_tensor(x: SymbolicCallable, *args, **kwargs):
    raise TypeError(_not_a_tensor_message(x))


_as_tensor_variable.register(SymbolicCallable)(_not_a_tensor)
# Arithmetic with tensors would otherwise end in Python's bare "unsupported
# operand type(s)" message.
for _operator in ("add", "sub", "mul", "truediv", "floordiv", "pow", "matmul", "mod"):
    setattr(SymbolicCallable, f"__{_operator}__", _not_a_tensor)
    setattr(SymbolicCallable, f"__r{_operator}__", _not_a_tensor)
SymbolicCallable.__neg__ = _not_a_tensor


# ---------------------------------------------------------------------------
# The decorator
# ---------------------------------------------------------------------------


def _types_in_place_of_variables(tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda leaf: leaf.type if isinstance(leaf, Variable) else leaf, tree
    )


class JaxOpWrapper:
    """A JAX function made callable with PyTensor variables (see :func:`as_jax_op`).

    Ops are cached per call signature (static arguments and input types), so
    equal calls give the very same op, whose jitted function is shared. A
    module-level wrapper pickles by name, like the function it replaces.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import pytensor.tensor as pt
    >>> scale = as_jax_op(lambda x, *, k: k * x, name="scale")
    >>> scale
    as_jax_op(scale)
    >>> x = pt.vector("x", shape=(2,))
    >>> scale(x, k=2.0).owner.op is scale(x, k=2.0).owner.op
    True
    """

    def __init__(
        self,
        fn: Callable,
        name: str | None = None,
        output_types: Any = None,
    ):
        # updated=(): the function's own attributes must not shadow ours
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or "jax_function"
        self.output_types = output_types
        self._ops = BoundedCache(256)

    @property
    def cache_size(self) -> int:
        """How many distinct call signatures keep their op cached."""
        return self._ops.size

    @cache_size.setter
    def cache_size(self, size: int) -> None:
        self._ops.size = size

    def __repr__(self) -> str:
        return f"as_jax_op({self.name})"

    def __reduce__(self):
        # A module-level wrapper pickles by name, like the function it replaced.
        if shadowing_wrapper_name(self.fn) is not None:
            return self.__qualname__
        return super().__reduce__()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_ops"] = self.cache_size
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _ops=BoundedCache(state["_ops"]))

    def _check_arguments(self, args: tuple, kwargs: dict) -> None:
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(
                f"The JAX function {self.name!r}{signature} was called with "
                f"wrong arguments: {error}."
            ) from None

    def _inputs_and_leaf_specs(self, leaves: Sequence[Any]):
        inputs: list[TensorVariable] = []
        specs: list = []
        for leaf in leaves:
            if isinstance(leaf, SymbolicCallable):
                specs.append(Nested(leaf.producer, leaf.index))
                inputs.extend(leaf.inputs)
            elif isinstance(leaf, Variable):
                if not isinstance(leaf.type, TensorType):
                    try:
                        leaf = pt.as_tensor_variable(leaf)
                    except (TypeError, ValueError):
                        raise TypeError(
                            f"The JAX function {self.name!r} was given {leaf!r} of "
                            f"type {leaf.type}; only tensor variables (and "
                            "non-symbolic static values) can be arguments."
                        ) from None
                specs.append(INPUT)
                inputs.append(leaf)
            else:
                specs.append(Static(leaf))
        return inputs, tuple(specs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_arguments(args, kwargs)
        try:
            # SymbolicCallable is no pytree node, so it is a leaf. (An
            # `is_leaf` callback would make a too-deep pytree break the
            # interpreter instead of raising RecursionError.)
            leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        except (RecursionError, SystemError) as error:  # C-level recursion
            raise TypeError(
                f"The arguments of the JAX function {self.name!r} are nested too "
                "deeply to flatten; pass a flatter pytree."
            ) from error
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"The arguments of the JAX function {self.name!r} are not a valid "
                f"pytree: {error} (dict keys must be sortable, e.g. all strings)."
            ) from error
        inputs, specs = self._inputs_and_leaf_specs(leaves)
        flat = FlatJaxFunction(self.fn, treedef, specs, name=self.name)
        input_types = tuple(v.type for v in inputs)
        dims = input_dims(inputs)

        def build() -> OpFromJax:
            return self._build_op(flat, input_types, dims, args, kwargs)

        key = (flat, input_types, dims.key)
        op = self._ops.get(key, build)
        if op.traced_sizes:
            # Its types hold at the lengths it was traced with: other current
            # lengths (a new model, `set_dim`) get their own trace.
            sizes = sizes_by_symbol(dims, dims.current_sizes())
            if sizes != op.traced_sizes:
                op = self._ops.get((*key, tuple(sorted(sizes.items()))), build)
        flat = op.fn
        outputs = op(*inputs, return_list=True) if op.output_types else []
        return _rebuild_outputs(flat, outputs, inputs)

    def _build_op(self, flat, input_types, dims: InputDims, args, kwargs) -> OpFromJax:
        traced_sizes: Mapping[str, int] = {}
        if self.output_types is not None:
            layout, output_types, output_dims = self._explicit_types(args, kwargs)
        else:

            def describe_call() -> str:
                return (
                    f"The JAX function {flat.describe()!r} called with inputs "
                    f"({_describe_types(input_types)})"
                )

            # A second wrapper of the same function (or the same model built
            # again) traces nothing new.
            key = (
                flat,
                input_types,
                dims.key,
                tuple(sorted(dims.current_sizes().items())),
            )
            traced = _TRACES.get(
                key,
                lambda: trace_output_types(
                    flat.trace, input_types, dims, describe_call
                ),
            )
            layout = traced.layout
            output_types, output_dims = traced.output_types, traced.output_dims
            traced_sizes = traced.traced_sizes
        flat = FlatJaxFunction(flat.fn, flat.treedef, flat.leaves, flat.name, layout)
        return OpFromJax(
            flat,
            input_types,
            output_types,
            name=self.name,
            output_dims=output_dims,
            traced_sizes=traced_sizes,
        )

    def _explicit_types(self, args, kwargs):
        spec = self.output_types
        if callable(spec) and not isinstance(spec, TensorType):
            type_args, type_kwargs = _types_in_place_of_variables((args, kwargs))
            spec = spec(*type_args, **type_kwargs)
        types, treedef = jax.tree_util.tree_flatten(spec)
        for t in types:
            if not isinstance(t, TensorType):
                raise TypeError(
                    f"output_types of {self.name!r} must be a pytree of TensorTypes "
                    f"(e.g. pt.dvector().type), got a leaf {t!r}."
                )
        layout = OutputLayout(treedef, ("array",) * len(types), (), declared=True)
        return layout, tuple(types), tuple(tuple(t.shape) for t in types)


#: Traced output types by (function, input types, dims, current lengths),
#: shared by all wrappers in the process.
_TRACES = BoundedCache(256)


def _rebuild_outputs(
    flat: FlatJaxFunction, outputs: Sequence[Variable], inputs: Sequence[Variable]
) -> Any:
    layout = flat.layout
    arrays, statics = iter(outputs), iter(layout.statics)
    n_callables = 0
    leaves = []
    for kind in layout.kinds:
        if kind == "array":
            leaves.append(next(arrays))
        elif kind == "static":
            leaves.append(next(statics))
        else:
            leaves.append(SymbolicCallable(flat, n_callables, inputs))
            n_callables += 1
    return jax.tree_util.tree_unflatten(layout.treedef, leaves)


def as_jax_op(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    output_types: Any = None,
) -> Any:
    """Make a JAX function callable with PyTensor variables.

    The function may take and return any pytree (dicts, lists, tuples,
    namedtuples, equinox modules...). Leaves that are PyTensor variables become
    the op's inputs; every other leaf (numbers, strings, None, callables,
    NumPy/JAX arrays) is a static argument, baked into the op and part of its
    identity. Callables returned by the function become
    :class:`SymbolicCallable`\\ s that other wrapped functions can take.

    Parameters
    ----------
    fn
        The JAX function. Without it, returns a decorator.
    name
        The op name shown in graphs (default: ``fn.__name__``).
    output_types
        The output types, when JAX cannot infer them by tracing: a pytree of
        :class:`~pytensor.tensor.type.TensorType` shaped like the function's
        output, or a callable taking the call's arguments with every PyTensor
        variable replaced by its type and returning such a pytree.

    Returns
    -------
    JaxOpWrapper
        Calling it with PyTensor variables returns the function's output pytree
        with PyTensor variables at its array leaves.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import pytensor
    >>> import pytensor.tensor as pt
    >>> @as_jax_op
    ... def model(params, x, *, kind="tanh"):
    ...     h = params["w"] @ x + params["b"]
    ...     h = jnp.tanh(h) if kind == "tanh" else h
    ...     return {"mean": h, "norm": jnp.sum(h**2)}
    >>> w = pt.matrix("w", shape=(2, 3))
    >>> b = pt.vector("b", shape=(2,))
    >>> x = pt.vector("x", shape=(3,))
    >>> out = model({"w": w, "b": b}, x, kind="linear")
    >>> out["mean"].type
    TensorType(float64, shape=(2,))
    >>> f = pytensor.function([w, b, x], pt.grad(out["norm"], b))
    >>> f(np.ones((2, 3)), np.zeros(2), np.ones(3))
    array([6., 6.])

    Unknown input lengths stay symbolic; constant output dims stay static:

    >>> @as_jax_op
    ... def running_mean(y):
    ...     return jnp.cumsum(y) / jnp.arange(1, y.shape[0] + 1), jnp.sum(y)
    >>> s, total = running_mean(pt.vector("y"))
    >>> s.type.shape, total.type.shape
    ((None,), ())
    """
    if fn is None:
        return functools.partial(as_jax_op, name=name, output_types=output_types)
    return JaxOpWrapper(fn, name=name, output_types=output_types)


# Register the JAX and Numba dispatches, vectorization, graph rewrites and the
# safeguards for forked processes and PyMC's start method (jax_ofg_processes).
# The JAX dispatch module imports PyTensor's JAX backend, which sets
# ``jax_enable_x64`` from ``floatX`` when first imported; it is imported first
# so the setting below wins.
import pytensor.compile.jax_ofg_processes  # noqa: E402
import pytensor.link.jax.dispatch.jax_ofg  # noqa: E402
import pytensor.link.numba.dispatch.jax_ofg  # noqa: E402
import pytensor.tensor.rewriting.jax_ofg  # noqa: E402
import pytensor.tensor.rewriting.jax_ofg_islands  # noqa: E402, F401


# PyTensor types carry explicit dtypes: without x64, JAX would silently turn
# float64 into float32 and int64 into int32.
jax.config.update("jax_enable_x64", True)

configure_xla_cache()
