"""The decorator: :func:`as_jax_op`, and the :class:`SymbolicCallable`\\ s it returns.

Registers nothing itself: :func:`pytensor.compile.jax_ofg.install` registers
:func:`not_a_tensor` for :class:`SymbolicCallable` with PyTensor's
``as_tensor_variable``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

import pytensor.tensor as pt
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax, describe_types
from pytensor.compile._jax_ofg.tracing.dims import input_dims
from pytensor.compile._jax_ofg.tracing.functions import (
    INPUT,
    FlatJaxFunction,
    Nested,
    OutputLayout,
    Static,
    shadowing_wrapper_name,
)
from pytensor.compile._jax_ofg.tracing.shapes import trace_output_types
from pytensor.graph.basic import Variable
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorVariable


__all__ = ["JaxOpWrapper", "SymbolicCallable", "as_jax_op", "not_a_tensor"]


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        wrapper = JaxOpWrapper(_call_symbolic, name=f"call({self.name})")
        return wrapper(self, *args, **kwargs)

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


def not_a_tensor(x: SymbolicCallable, *args, **kwargs):
    """PyTensor's ``as_tensor_variable`` of a :class:`SymbolicCallable`: an error."""
    raise TypeError(_not_a_tensor_message(x))


# Arithmetic with tensors would otherwise end in Python's bare "unsupported
# operand type(s)" message.
for _operator in ("add", "sub", "mul", "truediv", "floordiv", "pow", "matmul", "mod"):
    setattr(SymbolicCallable, f"__{_operator}__", not_a_tensor)
    setattr(SymbolicCallable, f"__r{_operator}__", not_a_tensor)
SymbolicCallable.__neg__ = not_a_tensor


# ---------------------------------------------------------------------------
# The decorator
# ---------------------------------------------------------------------------


class JaxOpWrapper:
    """A JAX function made callable with PyTensor variables (see :func:`as_jax_op`).

    Equal calls (the same static arguments and input types) give equal ops,
    which PyTensor merges; with the trace cache on (the default), they share
    one jitted program and their output types are traced once
    (:mod:`~pytensor.compile._jax_ofg.cache.traces`). A module-level wrapper
    pickles by name, like the function it replaces.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import pytensor.tensor as pt
    >>> scale = as_jax_op(lambda x, *, k: k * x, name="scale")
    >>> scale
    as_jax_op(scale)
    >>> x = pt.vector("x", shape=(2,))
    >>> scale(x, k=2.0).owner.op == scale(x, k=2.0).owner.op
    True
    """

    def __init__(
        self,
        fn: Callable,
        name: str | None = None,
        output_types: Any = None,
        gradient: str = "auto",
    ):
        # updated=(): the function's own attributes must not shadow ours
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or "jax_function"
        self.output_types = output_types
        self.gradient = gradient

    def __repr__(self) -> str:
        return f"as_jax_op({self.name})"

    def __reduce__(self):
        # A module-level wrapper pickles by name, like the function it replaced.
        if shadowing_wrapper_name(self.fn) is not None:
            return self.__qualname__
        return super().__reduce__()

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
        op = self._build_op(flat, tuple(v.type for v in inputs), inputs, args, kwargs)
        outputs = op(*inputs, return_list=True) if op.output_types else []
        return _rebuild_outputs(op.fn, outputs, inputs)

    def _build_op(self, flat, input_types, inputs, args, kwargs) -> OpFromJax:
        traced_sizes: Mapping[str, int] = {}
        if self.output_types is not None:
            layout, output_types, output_dims = self._explicit_types(args, kwargs)
        else:
            dims = input_dims(inputs)

            def describe_call() -> str:
                return (
                    f"The JAX function {flat.describe()!r} called with inputs "
                    f"({describe_types(input_types)})"
                )

            # Equal calls (the same model built again, a second wrapper of the
            # function, a later process) trace nothing new: the trace cache
            # keys the result by what the trace depends on, lengths included.
            sizes = tuple(sorted(dims.current_sizes().items()))
            traced = trace_cache.cached(
                "types",
                (flat, input_types, dims.key, sizes),
                lambda: trace_output_types(
                    flat.trace, input_types, dims, describe_call
                ),
                name=flat.describe(),
            )
            layout = traced.layout
            output_types, output_dims = traced.output_types, traced.output_dims
            traced_sizes = traced.traced_sizes
        flat = FlatJaxFunction(flat.fn, flat.treedef, flat.leaves, flat.name, layout)
        op = OpFromJax(
            flat,
            input_types,
            output_types,
            name=self.name,
            output_dims=output_dims,
            traced_sizes=traced_sizes,
            gradient=self.gradient,
        )
        # Equal calls give the very same op while it is in use.
        return _OPS.setdefault((type(op), compat.op_props(op)), op)

    def _explicit_types(self, args, kwargs):
        spec = self.output_types
        if callable(spec) and not isinstance(spec, TensorType):
            type_args, type_kwargs = jax.tree_util.tree_map(
                lambda leaf: leaf.type if isinstance(leaf, Variable) else leaf,
                (args, kwargs),
            )
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


#: Ops built by wrappers, by their identity (``__props__``), while alive.
_OPS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _rebuild_outputs(
    flat: FlatJaxFunction, outputs: Sequence[Variable], inputs: Sequence[Variable]
) -> Any:
    layout = flat.layout
    sources = {
        "array": iter(outputs),
        "static": iter(layout.statics),
        "callable": (SymbolicCallable(flat, i, inputs) for i in itertools.count()),
    }
    leaves = [next(sources[kind]) for kind in layout.kinds]
    return jax.tree_util.tree_unflatten(layout.treedef, leaves)


def as_jax_op(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    output_types: Any = None,
    gradient: str = "auto",
) -> JaxOpWrapper | Callable[[Callable], JaxOpWrapper]:
    """Make a JAX function callable with PyTensor variables: a :class:`JaxOpWrapper`.

    The function may take and return any pytree (dicts, lists, tuples,
    equinox modules...). Leaves that are PyTensor variables become the op's
    inputs; every other leaf (numbers, strings, None, callables, arrays) is a
    static argument, part of the op's identity. The wrapper returns the output
    pytree with PyTensor variables at its array leaves; callables in it are
    :class:`SymbolicCallable`\\ s, which other wrapped functions can take.

    Parameters
    ----------
    fn
        The JAX function. Without it, returns a decorator.
    name
        The op name shown in graphs (default: ``fn.__name__``).
    output_types
        When tracing cannot infer them: a pytree of output
        :class:`~pytensor.tensor.type.TensorType`, or a callable of the call's
        arguments (each PyTensor variable replaced by its type) returning one.
    gradient
        ``"reverse"`` (``jax.vjp``), ``"forward"`` (a ``vmap`` of the JVP over
        the input directions: it wins for few parameters and a costly, stiff
        solve) or ``"auto"`` (the default): reverse, unless only forward mode
        goes through the function (``adjoint=diffrax.ForwardMode()``).

    Returns
    -------
    JaxOpWrapper or Callable[[Callable], JaxOpWrapper]
        The wrapped function; without ``fn``, a decorator that returns one.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np, pytensor, pytensor.tensor as pt
    >>> @as_jax_op
    ... def model(params, x, *, kind="tanh"):
    ...     h = params["w"] @ x + params["b"]
    ...     h = jnp.tanh(h) if kind == "tanh" else h
    ...     return {"mean": h, "norm": jnp.sum(h**2)}
    >>> w, b = pt.matrix("w", shape=(2, 3)), pt.vector("b", shape=(2,))
    >>> x = pt.vector("x", shape=(3,))
    >>> out = model({"w": w, "b": b}, x, kind="linear")
    >>> out["mean"].type
    TensorType(float64, shape=(2,))
    >>> f = pytensor.function([w, b, x], pt.grad(out["norm"], b))
    >>> f(np.ones((2, 3)), np.zeros(2), np.ones(3))
    array([6., 6.])

    Unknown input lengths stay symbolic, constant output dims static:

    >>> @as_jax_op
    ... def running_mean(y):
    ...     return jnp.cumsum(y) / jnp.arange(1, y.shape[0] + 1), jnp.sum(y)
    >>> s, total = running_mean(pt.vector("y"))
    >>> s.type.shape, total.type.shape
    ((None,), ())

    Gradients in forward mode (the same values as reverse mode's):

    >>> @as_jax_op(gradient="forward")
    ... def decay(rate, y0):
    ...     return y0 * jnp.exp(-rate * jnp.arange(4.0))
    >>> rate, y0 = pt.scalar("rate"), pt.scalar("y0")
    >>> loss = pt.sum(decay(rate, y0) ** 2)
    >>> f = pytensor.function([rate, y0], pt.grad(loss, [rate, y0]))
    >>> [float(np.round(g, 6)) for g in f(0.5, 2.0)]
    [-6.30329, 6.212007]
    """
    if fn is None:
        return functools.partial(
            as_jax_op, name=name, output_types=output_types, gradient=gradient
        )
    return JaxOpWrapper(fn, name=name, output_types=output_types, gradient=gradient)
