"""JAX transformations of inner functions: derivatives and ``vmap``.

Each class wraps an inner function into another, so a derivative or batched
op is again an ``OpFromJax``; :class:`ChosenGradient` makes every route take
the op's gradient mode. Registers nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.host.packing import DtypePacking, dtype_name
from pytensor.compile._jax_ofg.tracing.functions import (
    ArrayTuple,
    InnerFunction,
    static_key,
)
from pytensor.compile._jax_ofg.tracing.shapes import (
    fallback_shapes,
    symbol_name,
    symbolic_shapes,
)
from pytensor.graph.basic import Apply


def _restrict(
    fn: Callable, primals: Sequence[Any], wrt: Sequence[bool]
) -> tuple[Callable, list[Any]]:
    """Return ``fn`` as a function of the primals flagged in ``wrt``, and those primals."""

    def restricted(*differentiable):
        varying = iter(differentiable)
        return fn(*(next(varying) if w else p for p, w in zip(primals, wrt)))

    return restricted, [p for p, w in zip(primals, wrt) if w]


def value_and_pullback(
    forward: Callable[..., ArrayTuple],
    wrt: tuple[bool, ...],
    cotangent_outputs: tuple[int, ...],
    primals: Sequence[Any],
) -> tuple[ArrayTuple, Callable]:
    """All outputs of ``forward``, and the pullback of the selected ones.

    The one place that builds a pullback to run: :class:`VJPForward` and
    :class:`VJPFromResiduals` must build the very same one.
    """

    restricted, wrt_primals = _restrict(forward, primals, wrt)

    def selected(*differentiable):
        outputs = restricted(*differentiable)
        return tuple(outputs[i] for i in cotangent_outputs), outputs

    _, pullback, outputs = jax.vjp(selected, *wrt_primals, has_aux=True)
    return outputs, pullback


def cast_cotangents(cotangents: Sequence[Any], dtypes: Sequence[str]) -> tuple:
    return tuple(jnp.asarray(ct, dtype) for ct, dtype in zip(cotangents, dtypes))


# ------------------------------------------------------------ gradient mode
GRADIENT_MODES = ("auto", "forward", "reverse")

#: The texts of JAX's errors for a function that supports only one mode.
_REVERSE_FAILS = "Reverse-mode differentiation does not work"
_FORWARD_FAILS = "can't apply forward-mode autodiff (jvp) to a custom_vjp"


class GradientModeError(ValueError):
    """A wrapped function cannot be differentiated in the mode asked for."""


def _differentiated(primals: Sequence[Any]) -> list[bool]:
    return [jnp.issubdtype(p.dtype, jnp.inexact) for p in primals]


def _zero_cotangent(output: Any) -> Any:
    if jnp.issubdtype(output.dtype, jnp.inexact):
        return jnp.zeros_like(output)
    return np.zeros(output.shape, jax.dtypes.float0)


def _reverse_error(fn: Callable, primals: Sequence[Any]) -> str | None:
    """JAX's error when reverse mode cannot go through ``fn``, else None.

    Reverse mode transposes the linearized function, and the one transpose
    rule that fails so is a ``while`` loop's (a loop of tangents: its trip
    count is a traced value). So the linearized function is traced first,
    abstractly, and searched for a loop; only where it holds one is the
    transpose traced too (the error comes when the JVP is transposed). The
    transpose costs as much as the linearization again: seconds, for an ODE
    solve's adjoint, in every process that traces it.
    """
    specs = [jax.ShapeDtypeStruct(p.shape, p.dtype) for p in primals]
    if not _linearized_holds_a_loop(fn, specs):
        return None

    def pulled_back(*arrays):
        outputs, pullback = jax.vjp(fn, *arrays)
        return pullback(tuple(_zero_cotangent(o) for o in outputs))

    try:
        jax.eval_shape(pulled_back, *specs)
    except Exception as error:
        if _REVERSE_FAILS in str(error):
            return str(error).splitlines()[0]
        raise
    return None


def _linearized_holds_a_loop(fn: Callable, specs: Sequence[Any]) -> bool:
    """Whether the linearized function of ``fn`` (in its inexact inputs) at ``specs``
    holds a ``while`` loop."""
    differentiated = _differentiated(specs)
    if not any(differentiated):
        return False
    linear_jaxprs = []

    def linearized(*arrays):
        restricted, inputs = _restrict(fn, arrays, differentiated)
        outputs, linear = jax.linearize(lambda *a: tuple(restricted(*a)), *inputs)
        linear_jaxprs.append(jax.make_jaxpr(linear)(*inputs))
        return outputs

    jax.eval_shape(linearized, *specs)
    return _holds_a_loop(linear_jaxprs[0].jaxpr, set())


def _holds_a_loop(jaxpr: Any, seen: set[int]) -> bool:
    """Whether ``jaxpr``, or one it calls, holds a ``while`` loop."""
    seen.add(id(jaxpr))
    for equation in jaxpr.eqns:
        if equation.primitive.name == "while":
            return True
        for value in equation.params.values():
            for item in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(item, "jaxpr", item)  # a ClosedJaxpr's, or a Jaxpr
                if (
                    isinstance(inner, jax_core.Jaxpr)
                    and id(inner) not in seen
                    and _holds_a_loop(inner, seen)
                ):
                    return True
    return False


def _as_jaxpr_function(fn: Callable, primals: Sequence[Any]) -> Callable:
    """Return ``fn`` traced once at the shapes of ``primals``, as a function of arrays."""
    # A new function object: ``make_jaxpr`` is ``jit``'s trace, whose cache
    # would serve an earlier trace of ``fn`` without running it again (the
    # trace cache decides whether a trace is current, not JAX's).
    closed = jax.make_jaxpr(lambda *arrays: fn(*arrays))(*primals)
    traced = jax_core.jaxpr_as_fun(closed)
    return lambda *arrays: tuple(traced(*arrays))


def _forward_jvp(
    fn: Callable, primals: Sequence[Any], tangents: Sequence[Any], wrt: Sequence[bool]
):
    """Outputs and output tangents of ``fn`` from its Jacobians (forward mode).

    Only the primals flagged in ``wrt`` are differentiated: one basis
    direction per element of those, none for the others (data, say).
    """
    restricted, inputs = _restrict(fn, primals, wrt)
    sizes = [math.prod(p.shape) for p in inputs]
    offsets = np.cumsum([0, *sizes])
    eye = jnp.eye(int(offsets[-1]))  # made by XLA: no constant of n**2 numbers
    basis = [
        eye[:, a:b].reshape(-1, *p.shape).astype(p.dtype)
        for p, a, b in zip(inputs, offsets, offsets[1:])
    ]
    outputs, linear = jax.linearize(lambda *a: tuple(restricted(*a)), *inputs)
    jacobians = jax.vmap(linear)(*basis)  # per output: (directions, *shape)
    flat = jnp.concatenate([jnp.ravel(t) for t, w in zip(tangents, wrt) if w])
    return outputs, tuple(
        jnp.tensordot(flat.astype(output.dtype), jacobian, axes=1)
        if jnp.issubdtype(output.dtype, jnp.inexact)
        else _zero_cotangent(output)
        for output, jacobian in zip(outputs, jacobians)
    )


def _reverse_jvp(
    fn: Callable, primals: Sequence[Any], tangents: Sequence[Any], wrt: Sequence[bool]
):
    """JAX's own JVP of ``fn`` in the primals flagged in ``wrt``."""
    restricted, inputs = _restrict(fn, primals, wrt)
    return jax.jvp(
        restricted, tuple(inputs), tuple(t for t, w in zip(tangents, wrt) if w)
    )


@dataclass(frozen=True)
class ChosenGradient(InnerFunction):
    """``fn``, differentiated (by any JAX transformation) in the mode ``gradient``.

    Either mode differentiates only the inputs a tangent reaches: JAX passes
    symbolic zeros for the others (data, constants, inputs whose gradient
    nobody asked for: see ``jax_ofg_prune_pullback_inputs``), which are held
    constant. ``"reverse"``: JAX's own JVP, so ``jax.vjp`` and ``jax.grad``
    run reverse mode as they would on ``fn``. ``"forward"``: the Jacobians,
    from one ``vmap`` of the linearized function over the basis of the
    differentiated input directions, contracted with the tangents; reverse
    mode transposes only the contraction. ``"auto"``: forward when ``fn``'s
    ``jax.vjp`` fails as on a forward-only loop (diffrax's ``ForwardMode``
    adjoint), reverse otherwise, never by size: the one-hot JVPs of forward
    mode turn a NaN or infinite derivative of one differentiated element into
    NaN gradients of every differentiated element (``0 * nan``), where
    reverse mode keeps them apart. A non-finite derivative in an input held
    constant reaches no gradient in either mode.
    Integer inputs are held constant; complex ones need reverse mode.
    """

    fn: Callable[..., ArrayTuple]
    gradient: str
    name: str = field(default="", compare=False)

    def __call__(self, *arrays: Any) -> ArrayTuple:
        differentiated = jax.custom_jvp(lambda *a: tuple(self.fn(*a)))
        differentiated.defjvp(self._jvp, symbolic_zeros=True)
        return differentiated(*arrays)

    def _jvp(self, primals: tuple, tangents: tuple):
        # JAX passes a SymbolicZero for every input no tangent reaches (data,
        # constants, inputs of a gradient not asked for): those are held
        # constant, so forward mode spends no JVP on them, and a non-finite
        # derivative in them cannot meet a zero tangent (0 * inf = nan).
        wrt = [
            w and not isinstance(t, SymbolicZero)
            for w, t in zip(_differentiated(primals), tangents)
        ]
        if not any(wrt):
            outputs = tuple(self.fn(*primals))
            return outputs, tuple(_zero_cotangent(o) for o in outputs)
        mode, fn = self.mode(primals)
        if mode == "reverse":
            return _reverse_jvp(fn, primals, tangents, wrt)
        try:
            return _forward_jvp(fn, primals, tangents, wrt)
        except Exception as error:
            if _FORWARD_FAILS not in str(error):
                raise
            if self.gradient == "auto":
                return _reverse_jvp(fn, primals, tangents, wrt)
            raise GradientModeError(
                f"The JAX function {self.name!r} cannot be differentiated in "
                "forward mode (gradient='forward'): it holds a jax.custom_vjp "
                "function, which only reverse mode goes through. Pass "
                "gradient='reverse' or 'auto' to as_jax_op (or OpFromJax)."
            ) from error

    def mode(self, primals: Sequence[Any]) -> tuple[str, Callable]:
        """Return ``"forward"`` or ``"reverse"`` at these inputs (raises for a forced
        mode the function cannot do), and ``fn`` to differentiate.

        Where ``"auto"`` must find out whether reverse mode goes through
        ``fn``, ``fn`` is traced once, to a jaxpr, and both that question and
        the JVP use the jaxpr: the wrapped Python function runs once per trace.
        """
        wrt = _differentiated(primals)
        if not any(wrt):
            return "reverse", self.fn  # nothing to differentiate: JAX's own JVP
        if any(jnp.issubdtype(p.dtype, jnp.complexfloating) for p in primals):
            if self.gradient == "forward":
                raise GradientModeError(
                    f"The JAX function {self.name!r} has complex inputs, which "
                    "forward-mode gradients (gradient='forward') do not cover: "
                    "pass gradient='reverse' or 'auto'."
                )
            return "reverse", self.fn
        if self.gradient == "forward":
            return "forward", self.fn
        traced: list[Callable] = []

        def probe() -> str | None:
            traced.append(_as_jaxpr_function(self.fn, primals))
            return _reverse_error(traced[-1], primals)

        shapes = tuple((str(p.shape), dtype_name(p)) for p in primals)
        failure = trace_cache.cached(
            "reverse_mode_error", (self.fn, shapes), probe, name=self.name
        )
        fn = traced[-1] if traced else self.fn
        if failure is None:
            return "reverse", fn
        if self.gradient == "auto":
            return "forward", fn
        raise GradientModeError(
            f"The JAX function {self.name!r} cannot be differentiated in reverse "
            f"mode (gradient='reverse'): {failure} (e.g. diffrax's "
            "adjoint=diffrax.ForwardMode()). Pass gradient='forward' or 'auto' to "
            "as_jax_op (or OpFromJax)."
        )


@dataclass(frozen=True)
class VJPFunction(InnerFunction):
    """Reverse mode of ``forward``: ``(*primals, *cotangents) -> input cotangents``.

    Only the inputs flagged in ``wrt`` are differentiated (integer inputs are
    held constant) and only the outputs listed in ``cotangent_outputs``
    receive a cotangent, cast to that output's dtype.
    """

    forward: Callable[..., ArrayTuple]
    wrt: tuple[bool, ...]
    cotangent_outputs: tuple[int, ...]
    cotangent_dtypes: tuple[str, ...]

    def __call__(self, *args: Any) -> ArrayTuple:
        return self.value_and_gradients(args)[1]

    def value_and_gradients(self, args: Sequence[Any]) -> tuple[ArrayTuple, tuple]:
        """Return ``(*primals, *cotangents) -> (outputs, input cotangents)``."""
        n_primals = len(self.wrt)
        primals, cotangents = args[:n_primals], args[n_primals:]
        outputs, pullback = value_and_pullback(
            self.forward, self.wrt, self.cotangent_outputs, primals
        )
        cotangents = cast_cotangents(cotangents, self.cotangent_dtypes)
        return outputs, tuple(pullback(cotangents))

    def split(
        self, residual_dtypes: tuple[str, ...]
    ) -> tuple[VJPForward, VJPFromResiduals]:
        """Return the forward and backward halves sharing one forward pass."""
        return (
            VJPForward(self.forward, self.wrt, self.cotangent_outputs, residual_dtypes),
            VJPFromResiduals(self, residual_dtypes),
        )


# ----------------------------------------------------------------- residuals
def _abstract_pullback(vjp: VJPFunction, primals: Sequence[Any]) -> Any:
    """The pullback of ``vjp`` at ``primals``, traced abstractly.

    ``jax.vjp`` stores a residual that is one of its primals by reference,
    found by tracer identity, and bakes concrete (constant) primals in. So
    the abstract trace must see the same tracer passed at the same positions
    (one PyTensor variable given twice, under the JAX linker) and the same
    constants as the forward trace did. Primals may also be
    ``jax.ShapeDtypeStruct``\\ s (when the graph is rewritten).
    """
    positions: dict[int, int] = {}
    traced, index, signature = [], [], []
    for primal in primals:
        if isinstance(primal, jax.core.Tracer | jax.ShapeDtypeStruct):
            index.append(positions.setdefault(id(primal), len(traced)))
            if index[-1] == len(traced):
                traced.append(primal)
            signature.append((index[-1], primal.shape, dtype_name(primal)))
        else:
            index.append(None)
            signature.append(("constant", static_key(primal)))

    def pullback(*unique):
        rebuilt = [p if k is None else unique[k] for p, k in zip(primals, index)]
        _, pullback = value_and_pullback(
            vjp.forward, vjp.wrt, vjp.cotangent_outputs, rebuilt
        )
        return pullback

    # The forward's residual rebuild traces it once more at every call: once
    # per signature is enough (a shape trace of an ODE solve takes a second).
    return trace_cache.cached(
        "pullback_structure",
        (vjp, tuple(signature)),
        lambda: jax.eval_shape(pullback, *traced),
        name=_name(vjp.forward),
        persist=False,
        differs=_structures_differ,
    )


def _name(fn: Any) -> str:
    return getattr(fn, "name", None) or type(fn).__name__


def _structures_differ(cached: Any, fresh: Any) -> str | None:
    """Return whether two abstract pullbacks differ in their residuals' shapes and
    dtypes.
    """

    def layout(tree: Any) -> list:
        return [(tuple(x.shape), str(x.dtype)) for x in jax.tree_util.tree_leaves(tree)]

    if layout(cached) == layout(fresh):
        return None
    return f"residuals {layout(cached)} and {layout(fresh)}"


def residual_dtypes(
    vjp: VJPFunction,
    input_shapes: Sequence[tuple],
    input_dtypes: Sequence[str],
    traced_sizes: Mapping[str, int] | None = None,
) -> tuple[str, ...]:
    """Return the dtypes of the residuals of ``vjp``, found by an abstract trace.

    Traced with the shapes the forward op's types are found with (symbolic
    dims, then the lengths it was traced at, ``traced_sizes`` by symbol, then
    stand-in sizes: :func:`~pytensor.compile._jax_ofg.tracing.shapes.fallback_shapes`),
    up to the first that traces; raises the tracing error when none does. A
    later process reads them from the trace cache.
    """
    traced_sizes = traced_sizes or {}

    def trace() -> tuple[str, ...]:
        current = {
            (i, j): traced_sizes[symbol_name(i, j)]
            for i, shape in enumerate(input_shapes)
            for j, d in enumerate(shape)
            if d is None and symbol_name(i, j) in traced_sizes
        }
        attempts = [symbolic_shapes(input_shapes)] + [
            shapes for _, shapes in fallback_shapes(input_shapes, current)
        ]
        for shapes in attempts:
            specs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, input_dtypes)]
            try:
                leaves = jax.tree_util.tree_leaves(_abstract_pullback(vjp, specs))
            except Exception as error:  # JAX code that needs concrete sizes
                failure = error
                continue
            return tuple(sorted({dtype_name(leaf) for leaf in leaves}))
        raise failure

    return trace_cache.cached(
        "residual_dtypes",
        (vjp, tuple(input_shapes), tuple(input_dtypes), dict(traced_sizes)),
        trace,
        name=_name(vjp.forward),
    )


@dataclass(frozen=True)
class VJPForward(InnerFunction):
    """``forward``'s outputs, then its VJP residuals: one vector per dtype."""

    forward: Callable[..., ArrayTuple]
    wrt: tuple[bool, ...]
    cotangent_outputs: tuple[int, ...]
    residual_dtypes: tuple[str, ...]

    def split_of(self, vjp: VJPFunction) -> bool:
        """Return whether this is the forward half of ``vjp`` (its residuals fit it)."""
        return self == vjp.split(self.residual_dtypes)[0]

    def __call__(self, *primals: Any) -> ArrayTuple:
        empty = tuple(jnp.zeros((0,), dtype) for dtype in self.residual_dtypes)
        if jax.config.jax_disable_jit:
            # Run eagerly, jax.vjp keeps other residuals than it does when
            # traced (a `lax.cond` runs one branch): hand on none, and let
            # VJPFromResiduals recompute them.
            return (*self.forward(*primals), *empty)
        outputs, pullback = value_and_pullback(
            self.forward, self.wrt, self.cotangent_outputs, primals
        )
        residuals = jax.tree_util.tree_leaves(pullback)
        packing = DtypePacking(self.residual_dtypes)
        if not packing.packs(residuals):
            # Dtypes traced at other lengths (``gradient="auto"`` may choose
            # another mode there): none either.
            return (*outputs, *empty)
        return (*outputs, *packing.pack(residuals))


@dataclass(frozen=True)
class VJPFromResiduals(InnerFunction):
    """``vjp``, taking the residuals of :class:`VJPForward` instead of recomputing.

    Arguments: ``(*primals, *residual_vectors, *cotangents)``. The primals
    only give shapes: the pullback's structure is found by tracing the forward
    abstractly (``jax.eval_shape``), which costs nothing at run time.
    """

    vjp: VJPFunction
    residual_dtypes: tuple[str, ...]

    def __call__(self, *args: Any) -> ArrayTuple:
        vjp = self.vjp
        n_primals, n_vectors = len(vjp.wrt), len(self.residual_dtypes)
        primals = args[:n_primals]
        vectors = args[n_primals : n_primals + n_vectors]
        cotangents = args[n_primals + n_vectors :]
        like, treedef = jax.tree_util.tree_flatten(_abstract_pullback(vjp, primals))
        packing = DtypePacking(self.residual_dtypes)
        if not packing.fits(vectors, like):
            # Not the traced layout (VJPForward ran under `jax.disable_jit`,
            # or the residual dtypes were traced at other lengths).
            return vjp(*primals, *cotangents)
        residuals = packing.unpack(vectors, like)
        pullback = jax.tree_util.tree_unflatten(treedef, residuals)
        return tuple(pullback(cast_cotangents(cotangents, vjp.cotangent_dtypes)))


@dataclass(frozen=True)
class ValueAndVJP(InnerFunction):
    """``forward``'s outputs and ``vjp``'s input cotangents, in one JAX program.

    Arguments: ``(*primals, *cotangents)``. For a pullback whose cotangents do
    not depend on the forward outputs (``pt.grad`` of a cost computed inside
    the wrapped function), this is :func:`jax.value_and_grad`.
    """

    vjp: VJPFunction

    def __call__(self, *args: Any) -> ArrayTuple:
        outputs, gradients = self.vjp.value_and_gradients(args)
        return (*outputs, *gradients)


@dataclass(frozen=True)
class JVPFunction(InnerFunction):
    """Forward mode of ``forward``: ``(*primals, *tangents) -> output tangents``.

    Tangents are given for the inputs flagged in ``wrt``; the result holds the
    tangents of the outputs listed in ``tangent_outputs``.
    """

    forward: Callable[..., ArrayTuple]
    wrt: tuple[bool, ...]
    tangent_outputs: tuple[int, ...]

    def __call__(self, *args: Any) -> ArrayTuple:
        n_primals = len(self.wrt)
        primals, tangents = args[:n_primals], args[n_primals:]
        restricted, wrt_primals = _restrict(self.forward, primals, self.wrt)
        tangents = [jnp.asarray(t, p.dtype) for t, p in zip(tangents, wrt_primals)]
        _, output_tangents = jax.jvp(restricted, tuple(wrt_primals), tuple(tangents))
        return tuple(output_tangents[i] for i in self.tangent_outputs)


# ---------------------------------------------------------------------- vmap
@dataclass(frozen=True)
class VmapFunction(InnerFunction):
    """``core`` mapped with ``jax.vmap`` over ``batch_ndim`` leading dims.

    Inputs flagged in ``batched`` have those leading dims; the others are
    passed whole to every call. Batch dims broadcast as in
    :class:`~pytensor.tensor.blockwise.Blockwise`: a batch dim of length 1
    stretches only where ``broadcastable`` (the input's static type) says so.

    Examples
    --------
    >>> from pytensor.compile._jax_ofg.tracing.functions import TupleOutputs
    >>> outer = VmapFunction(
    ...     TupleOutputs(lambda x, y: x * y),
    ...     batch_ndim=1,
    ...     batched=(True, False),
    ...     broadcastable=((False,), ()),
    ... )
    >>> outer(jnp.arange(3.0), jnp.ones(2))[0].shape
    (3, 2)
    """

    core: Callable[..., ArrayTuple]
    batch_ndim: int
    batched: tuple[bool, ...]
    #: per input, which batch dims the static type says have length 1
    broadcastable: tuple[tuple[bool, ...], ...]

    def batch_shape(self, arrays: Sequence[Any]) -> tuple[int, ...]:
        """Return the broadcast batch shape; an error for runtime broadcasting."""
        shape = []
        for d in range(self.batch_ndim):
            lengths = [
                (a.shape[d], bcast[d])
                for a, bcast, batched in zip(arrays, self.broadcastable, self.batched)
                if batched
            ]
            stretched = {n for n, _ in lengths if n != 1}
            if len(stretched) > 1:
                raise ValueError(
                    f"Batch dim {d} has incompatible lengths {sorted(stretched)}."
                )
            if stretched and (1, False) in lengths:
                raise ValueError(
                    f"Batch dim {d} has length 1 in an input whose type does not "
                    f"mark it broadcastable, and length {stretched.pop()} in "
                    "another. Runtime broadcasting is not allowed, as in "
                    "Blockwise: use `pt.specify_broadcastable` if it is intended."
                )
            shape.append(stretched.pop() if stretched else 1)
        return tuple(shape)

    def __call__(self, *arrays: Any) -> ArrayTuple:
        batch_shape = self.batch_shape(arrays)
        arrays = [
            jnp.broadcast_to(a, batch_shape + a.shape[self.batch_ndim :])
            if batched
            else a
            for a, batched in zip(arrays, self.batched)
        ]
        mapped = self.core
        in_axes = tuple(0 if batched else None for batched in self.batched)
        for _ in range(self.batch_ndim):
            mapped = jax.vmap(mapped, in_axes=in_axes)
        return tuple(mapped(*arrays))


# ------------------------------------------------- pairing forward and pullback
def pullback_primals(vjp_node: Apply) -> list:
    """Return the primal inputs of a node applying a :class:`VJPFunction`."""
    return list(vjp_node.inputs[: len(vjp_node.op.fn.wrt)])


def find_forward(
    vjp_node: Apply,
    candidates: Iterable[Any],
    is_forward: Callable[[Any], bool] | None = None,
) -> Apply | None:
    """Return the first of ``candidates`` applying the forward of ``vjp_node`` to its
    primals.

    ``vjp_node`` applies a :class:`VJPFunction`; ``candidates`` are nodes
    applying ops with an inner function (``OpFromJax``). A candidate is the
    forward when the VJP's forward is its op's inner function in its gradient
    mode (or its op passes ``is_forward``) and it takes the very same primal
    variables.
    """
    forward = vjp_node.op.fn.forward
    if is_forward is None:

        def is_forward(op: Any) -> bool:
            return op.differentiated_fn == forward

    primals = pullback_primals(vjp_node)
    for node in candidates:
        if is_forward(node.op) and list(node.inputs) == primals:
            return node
    return None


class SharedPullbacks:
    """Forward nodes and their pullback nodes in one graph, lowered together.

    A forward node's lowering computes its outputs with :func:`jax.vjp` and
    leaves the pullback here; its pullback nodes' lowerings, later in the same
    trace, apply it to their cotangents instead of running the forward again.
    The forward's VJP covers every input and output that any of its pullback
    nodes needs (a pullback is linear: outputs it has no cotangent for get
    zeros). See ``jax_funcify`` of :class:`~pytensor.compile._jax_ofg.op.from_jax.OpFromJax`.

    Parameters
    ----------
    jax_nodes
        The graph's nodes applying an ``OpFromJax``. A pullback node (of a
        :class:`VJPFunction`) pairs with a node applying its forward function
        to the same inputs (:func:`find_forward`).
    """

    def __init__(self, jax_nodes: Sequence[Apply]):
        self.forward_of: dict[Apply, Apply] = {}
        #: per forward node: the inputs (wrt) and outputs its shared VJP covers
        self.coverage: dict[Apply, tuple[tuple[bool, ...], tuple[int, ...]]] = {}
        for backward in jax_nodes:
            vjp_fn = backward.op.fn
            if not isinstance(vjp_fn, VJPFunction):
                continue
            forward = find_forward(backward, jax_nodes)
            if forward is None:
                continue
            self.forward_of[backward] = forward
            wrt, outputs = self.coverage.get(forward, (vjp_fn.wrt, ()))
            self.coverage[forward] = (
                tuple(a or b for a, b in zip(wrt, vjp_fn.wrt)),
                tuple(sorted({*outputs, *vjp_fn.cotangent_outputs})),
            )
        self._traced = threading.local()  # what the trace under way computed

    def start_trace(self) -> None:
        """Forget what an earlier trace computed (its tracers are dead)."""
        vars(self._traced).clear()

    def put(self, forward: Apply, outputs: tuple, pullback: Callable) -> None:
        vars(self._traced)[forward] = (outputs, pullback)

    def get(self, forward: Apply) -> tuple[tuple, Callable] | None:
        return vars(self._traced).get(forward)
