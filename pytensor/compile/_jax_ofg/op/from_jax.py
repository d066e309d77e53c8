"""The Op: :class:`OpFromJax`, a JAX function of flat arrays as a PyTensor Op.

Given its types and output dim expressions (it infers nothing), it makes every
derived op (derivatives, vmapped, fused) with :meth:`OpFromJax.derive`.
Registers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import pytensor.tensor as pt
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.host.op import JaxHostOp
from pytensor.compile._jax_ofg.op.transforms import (
    GRADIENT_MODES,
    ChosenGradient,
    JVPFunction,
    VJPFunction,
)
from pytensor.compile._jax_ofg.tracing.functions import InnerFunction, as_tuple_function
from pytensor.compile._jax_ofg.tracing.shapes import (
    INPUTS_AT_SAME_POSITIONS,
    InputMap,
    Lengths,
    OutputDims,
    contradicted_dim,
    describe_symbol,
    dim_to_tensor,
    symbol_name,
)
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op
from pytensor.tensor.exceptions import ShapeError
from pytensor.tensor.type import TensorType


__all__ = ["OpFromJax"]


def differentiable(tensor_type: TensorType) -> bool:
    return tensor_type.dtype.startswith(("float", "complex"))


def describe_types(types: Sequence[TensorType]) -> str:
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
        Shown in graphs; defaults to ``fn.__name__`` (else ``"jax_function"``).
    output_dims
        For :meth:`infer_shape`: per output, per dim, a static size or an
        expression over input dims named ``s{input}_{dim}`` (``"2*s0_0"``).
        Defaults to the static dims of ``output_types``.
    traced_sizes
        When the output types were found by tracing at the lengths some
        input dims had when the graph was built (symbolic tracing failed):
        those lengths, by symbol (``{"s1_0": 8}``). Named in errors; computed
        outputs are then checked against ``output_dims``.
    gradient
        How PyTensor's gradient (the pullback, and ``jax.grad`` of a graph
        compiled with ``mode="JAX"``) differentiates ``fn``: ``"reverse"``
        (``jax.vjp``), ``"forward"`` (the Jacobians from a ``vmap`` of the JVP
        over the input directions, contracted with the cotangents: cheaper
        for few inputs and a costly solve, and the only way through a
        forward-only loop such as diffrax's ``ForwardMode`` adjoint) or
        ``"auto"`` (forward only when reverse mode fails; see the guide's
        "Forward or reverse mode").

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

    #: Everything that changes what the op computes or says: its identity, so
    #: equal ops merge and share their jitted function.
    __props__ = (
        "fn",
        "input_types",
        "output_types",
        "output_dims",
        "traced_sizes",
        "copied_outputs",
        "gradient",
    )

    def __init__(
        self,
        fn: Callable,
        input_types: Sequence[TensorType],
        output_types: Sequence[TensorType] | TensorType,
        name: str | None = None,
        *,
        output_dims: OutputDims | None = None,
        traced_sizes: Mapping[str, int] | None = None,
        gradient: str = "auto",
    ):
        if gradient not in GRADIENT_MODES:
            raise ValueError(
                f"gradient must be one of {', '.join(map(repr, GRADIENT_MODES))}, "
                f"got {gradient!r}."
            )
        self.gradient = gradient
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
        self.output_dims = tuple(tuple(dims) for dims in output_dims)
        self.traced_sizes = Lengths(traced_sizes or {})
        super().__init__()

    def derive(
        self,
        fn: InnerFunction,
        input_types: Sequence[TensorType],
        output_types: Sequence[TensorType],
        *,
        output_dims: OutputDims,
        label: str | None = None,
        name: str | None = None,
        inputs: InputMap = INPUTS_AT_SAME_POSITIONS,
        leading_dims: tuple[int | str | None, ...] = (),
    ) -> OpFromJax:
        """Return an op computed from this one: a derivative, a vmap, a fused or baked
        form.

        Parameters
        ----------
        fn
            The derived op's inner function (built from ``self.fn``).
        input_types, output_types
            The derived op's types.
        label, name
            Its name is ``name``, else ``label(description of this op)``
            (``vjp(f(k=2))``), else this op's description.
        output_dims
            Its output dims, as static sizes or expressions over *this* op's
            input dims; ``inputs`` says where those inputs sit in the derived
            op, and the expressions (and the lengths this op was traced at)
            are renamed accordingly.
        leading_dims
            Dims put before every output's, already in the derived op's
            symbols (a vmap's batch dims).
        """
        return OpFromJax(
            fn,
            input_types,
            output_types,
            name=name or (f"{label}({self.describe()})" if label else self.describe()),
            output_dims=tuple(
                (*leading_dims, *(inputs.rename(d) for d in dims))
                for dims in output_dims
            ),
            traced_sizes=inputs.rename_sizes(self.traced_sizes),
            gradient=self.gradient,
        )

    @property
    def differentiated_fn(self) -> ChosenGradient:
        """The inner function, differentiated in this op's ``gradient`` mode."""
        return ChosenGradient(self.fn, self.gradient, self.describe())

    def __hash__(self) -> int:
        # Ops are immutable and hashing the inner function walks its fields:
        # compute once (lookups in the jitted-function cache use it).
        try:
            return self._hash
        except AttributeError:
            # As the hash PyTensor derives from __props__ (which defining
            # __hash__ here replaces).
            self._hash = hash((type(self), compat.op_props(self)))
            return self._hash

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_hash", None)  # string hashes differ between processes
        return state

    def __str__(self) -> str:
        return f"{type(self).__name__}{{{self.describe()}}}"

    def describe(self) -> str:
        """Return the name, with the static arguments baked into the function."""
        describe = getattr(self.fn, "describe", None)
        if describe is None or self.name != self.fn.name:
            return self.name  # a derived op (vjp, vmap...) or a flat function
        return describe()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.describe()}, "
            f"inputs=[{describe_types(self.input_types)}], "
            f"outputs=[{describe_types(self.output_types)}])"
        )

    def make_node(self, *inputs: Any) -> Apply:
        if len(inputs) != len(self.input_types):
            raise TypeError(
                f"{self} takes {len(self.input_types)} inputs "
                f"({describe_types(self.input_types)}), got {len(inputs)}."
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
        """Return the inner function, checking its outputs against the declared types.

        The check runs while JAX traces (once per input shape signature), so
        it costs nothing per call.
        """
        # Under the JAX linker, 0-d constants arrive as Python scalars.
        arrays = [
            jnp.asarray(a, dtype=t.dtype) for a, t in zip(arrays, self.input_types)
        ]
        outputs = tuple(jnp.asarray(o) for o in self.differentiated_fn(*arrays))
        if len(outputs) != len(self.output_types):
            raise TypeError(
                f"The JAX function {self.name!r} returned {len(outputs)} arrays, "
                f"but the op declares {len(self.output_types)} outputs "
                f"({describe_types(self.output_types)})."
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

    def wrapped_function_names(self) -> list[str]:
        return [self.describe()]

    def error_hint(self) -> str:
        # When the types hold only at traced lengths: says so, naming the dims.
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
        # Integer and boolean inputs are disconnected, as in `pytensor.wrap_jax`
        # (JAX's float0 cotangents have no PyTensor type): `pt.grad(cost, n)`
        # raises DisconnectedInputError. So are integer and boolean outputs.
        return [
            [differentiable(i) and differentiable(o) for o in self.output_types]
            for i in self.input_types
        ]

    def input_dims(self, index: int) -> tuple[int | str, ...]:
        """Return the dims of input ``index``: static sizes, else its symbols."""
        shape = self.input_types[index].shape
        return tuple(
            symbol_name(index, j) if d is None else d for j, d in enumerate(shape)
        )

    def pullback(self, inputs, outputs, cotangents) -> list[Variable]:
        wrt = tuple(differentiable(t) for t in self.input_types)
        cotangent_outputs = tuple(
            k
            for k, (ct, t) in enumerate(zip(cotangents, self.output_types))
            if differentiable(t) and not isinstance(ct.type, DisconnectedType)
        )
        if not cotangent_outputs or not any(wrt):
            return [disconnected_type() for _ in inputs]
        cotangent_types = [self.output_types[k] for k in cotangent_outputs]
        vjp_op = self.derive(
            VJPFunction(
                self.differentiated_fn,
                wrt,
                cotangent_outputs,
                tuple(t.dtype for t in cotangent_types),
            ),
            [*self.input_types, *cotangent_types],
            [t for t, w in zip(self.input_types, wrt) if w],
            label="vjp",
            output_dims=tuple(self.input_dims(i) for i, w in enumerate(wrt) if w),
        )
        cotangent_values = [
            t.filter_variable(pt.cast(cotangents[k], t.dtype))
            for k, t in zip(cotangent_outputs, cotangent_types)
        ]
        gradients = iter(vjp_op(*inputs, *cotangent_values, return_list=True))
        return [next(gradients) if w else disconnected_type() for w in wrt]

    def pushforward(self, inputs, outputs, tangents) -> list[Variable]:
        wrt = tuple(
            differentiable(t) and not isinstance(tangent.type, DisconnectedType)
            for t, tangent in zip(self.input_types, tangents)
        )
        tangent_outputs = tuple(
            k for k, t in enumerate(self.output_types) if differentiable(t)
        )
        if not any(wrt) or not tangent_outputs:
            return [disconnected_type() for _ in outputs]
        wrt_types = [t for t, w in zip(self.input_types, wrt) if w]
        jvp_op = self.derive(
            JVPFunction(self.fn, wrt, tangent_outputs),
            [*self.input_types, *wrt_types],
            [self.output_types[k] for k in tangent_outputs],
            label="jvp",
            output_dims=tuple(self.output_dims[k] for k in tangent_outputs),
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
