"""The JAX island Op: a connected part of a PyTensor graph run as one XLA program.

:class:`JaxIsland` runs ``jax.jit`` of PyTensor's own JAX lowering of its
inner graph (which needs ``OpFromJax``'s JAX dispatch); the ``jax_islands``
rewrite forms it. Registers nothing.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.api import unwatched
from pytensor.compile._jax_ofg.errors import RaisedWhile, mark, raised_while
from pytensor.compile._jax_ofg.host.op import JaxHostOp
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.transforms import SharedPullbacks
from pytensor.compile.mode import get_default_mode, optdb
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.shape import specify_shape


__all__ = ["JaxIsland", "JaxIslandFallbackWarning"]

#: The rewrite's name: ``mode.excluding(ISLANDS_REWRITE)`` turns islands off.
ISLANDS_REWRITE = "jax_islands"

#: What specializes an island's graph to its static inputs and input shapes:
#: PyTensor's canonicalization (constant folding, shape inference, removal of
#: assertions that hold), without in-place rewrites.
_SPECIALIZATION = optdb.query(
    RewriteDatabaseQuery(include=["canonicalize"], exclude=["inplace"])
)


class JaxIslandFallbackWarning(UserWarning):
    """An island could not be traced by JAX and runs through PyTensor instead."""


class JaxIsland(JaxHostOp, compat.op_from_graph_base()):
    """A PyTensor subgraph holding wrapped JAX functions, run as one XLA program.

    Built by the ``jax_islands`` rewrite, never by hand. Its inner graph holds
    one or more :class:`~pytensor.compile.jax_ofg.OpFromJax` nodes and the
    PyTensor nodes around them that PyTensor's JAX backend lowers; the host
    linkers call ``jax.jit`` of that lowering once per evaluation, so values
    flowing between the nodes never leave XLA.

    Parameters
    ----------
    inputs, outputs
        The boundary of the subgraph in the outer graph.
    static_inputs
        Positions of the integer inputs that XLA gets as constants: values
        computed from constants and shared variables alone (PyMC's
        ``dim_lengths``) that are scalars, or vectors that decide a shape in
        the island, which JAX needs concrete to build arrays of that shape.
        A new value (``pm.set_data``) retraces the program.
    """

    def __init__(
        self,
        inputs: Sequence[Variable],
        outputs: Sequence[Variable],
        static_inputs: Sequence[int] = (),
    ):
        inner = compat.nominal_fgraph(list(inputs), list(outputs))
        compat.prepare_for_jax_lowering(inner)
        super().__init__(
            list(inputs), list(outputs), fgraph=inner.freeze(), name="JaxIsland"
        )
        self.static_inputs = tuple(static_inputs)

    def __eq__(self, other: object) -> bool:
        return (
            super().__eq__(other)
            and self.static_inputs == other.static_inputs
            and self.copied_outputs == other.copied_outputs
        )

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.static_inputs, self.copied_outputs))

    # ----------------------------------------------------------- readability
    def wrapped_functions(self) -> list[str]:
        """Return the names of the wrapped JAX functions inside, in graph order."""
        return [
            node.op.describe()
            for node in self.fgraph.toposort()
            if isinstance(node.op, OpFromJax)
        ]

    wrapped_function_names = wrapped_functions

    def __str__(self) -> str:
        functions = self.wrapped_functions()
        others = len(self.fgraph.apply_nodes) - len(functions)
        return f"JaxIsland{{{', '.join(functions)}, +{others} PyTensor nodes}}"

    # --------------------------------------------------------------- running
    def jax_callable(self) -> Callable[..., tuple]:
        output_types = self.output_types
        static = self.static_inputs
        specialized = static or any(
            isinstance(node.op, CheckAndRaise) for node in self.fgraph.apply_nodes
        )
        lowerings: dict[tuple, Callable] = {}

        def lowering(inputs: Sequence[Any]) -> Callable:
            if not specialized:
                key: tuple = ()
            else:
                key = tuple(
                    x if i in static else jnp.shape(x) for i, x in enumerate(inputs)
                )
            found = lowerings.get(key)
            if found is None:
                # Built while JAX traces, and kept for later traces: its
                # constants must be concrete arrays, not this trace's tracers.
                with jax.ensure_compile_time_eval():
                    fgraph = self.fgraph if not specialized else self.specialize(key)
                    found = lowerings[key] = _lowering(fgraph)
            return found

        def jax_island(*inputs: Any) -> tuple:
            lowered = lowering(inputs)  # a failed length check raises here
            try:
                outputs = lowered(*(x for i, x in enumerate(inputs) if i not in static))
            except Exception as error:
                mark(
                    error,
                    RaisedWhile.TRACING_ISLAND,
                    f"Raised while JAX traced the island {self}.",
                )
                raise
            checked = []
            for k, (output, expected) in enumerate(zip(outputs, output_types)):
                output = jnp.asarray(output, dtype=expected.dtype)
                if output.ndim != expected.ndim:
                    raise TypeError(
                        f"{self}: PyTensor's JAX lowering gave output {k} the shape "
                        f"{output.shape}, but its type is {expected}."
                    )
                checked.append(output)
            return tuple(checked)

        return jax_island

    def specialize(self, key: Sequence[Any]) -> FunctionGraph:
        """The inner graph for static inputs and input shapes ``key``.

        ``key`` holds, per input, its static value (a length: an integer or a
        tuple of them) or its shape. Static inputs become constants, the
        others get their shapes, and PyTensor's canonicalization folds what
        that decides: the lengths PyMC's dims machinery computes, the
        ``Split``\\ s of a raveled point by them, and shape assertions, which
        are removed when they hold. One that fails raises PyTensor's own
        error, here, once per specialization (never a silently wrong
        result); one that cannot be decided is an error of the island's
        tracing, so the island falls back to PyTensor.
        """
        inner = self.fgraph.unfreeze()
        inputs, replace = [], {}
        for i, (x, value) in enumerate(zip(inner.inputs, key)):
            if i in self.static_inputs:
                replace[x] = pt.constant(np.asarray(value, dtype=x.type.dtype))
            else:
                new = x.type()
                inputs.append(new)
                replace[x] = specify_shape(new, tuple(value))
        outputs = graph_replace(list(inner.outputs), replace, strict=False)
        specialized = FunctionGraph(inputs, outputs, clone=False)
        _SPECIALIZATION.rewrite(specialized)
        compat.prepare_for_jax_lowering(specialized)
        for node in specialized.toposort():
            if isinstance(node.op, CheckAndRaise):
                conditions = node.inputs[1:]
                if any(
                    isinstance(c, Constant) and not c.data.all() for c in conditions
                ):
                    raise node.op.exc_type(node.op.msg)
                raise NotImplementedError(
                    f"{self}: the assertion {node.op} could not be decided from the "
                    "static lengths and input shapes."
                )
        return specialized

    def host_function(self) -> Callable[..., list[np.ndarray]]:
        """As :meth:`JaxHostOp.host_function`, with a PyTensor fallback.

        PyTensor's JAX lowering cannot trace every graph it can build (shapes
        computed at run time, for one). When tracing the island fails for a
        reason that is not a wrapped function's own error, the island warns
        once and runs its inner graph through PyTensor from then on: slower,
        never wrong.
        """
        return self._falling_back(
            lambda: JaxHostOp.host_function(self), lambda outputs: outputs
        )

    def buffers_function(self) -> Callable[..., tuple]:
        """As :meth:`JaxHostOp.buffers_function`, with the same fallback."""
        dtypes = self.packing.dtypes
        dynamic = any(None in t.shape for t in self.output_types)

        def packed_on_host(outputs: Sequence[np.ndarray]) -> tuple:
            buffers = []
            for dtype in dtypes:
                parts = [np.ravel(o) for o in outputs if o.dtype == dtype]
                buffer = np.concatenate(parts).astype(dtype, copy=False)
                buffer.flags.writeable = False  # as JAX's buffers are
                buffers.append(buffer)
            if dynamic:
                dims = [d for o in outputs for d in np.shape(o)]
                buffers.append(np.asarray(dims, dtype=np.int64))
            return tuple(buffers)

        return self._falling_back(
            lambda: JaxHostOp.buffers_function(self), packed_on_host
        )

    def _falling_back(
        self, make_jax_call: Callable[[], Callable], from_outputs: Callable
    ) -> Callable:
        """Return ``make_jax_call()``, or the inner graph through PyTensor once JAX
        cannot.
        """
        fallback: Callable | None = None
        try:
            jax_call = make_jax_call()
        except NotImplementedError as error:  # no JAX lowering after all
            fallback = self._fallback(error)

        def call(*inputs: np.ndarray) -> Any:
            nonlocal fallback
            if fallback is None:
                try:
                    return jax_call(*inputs)
                except Exception as error:
                    # Only an error raised while JAX traced the lowering of
                    # the island's own PyTensor nodes: not a wrapped function's
                    # (traced inside it), nor the XLA program's, nor one of a
                    # bad input that jax.jit refused before tracing.
                    traced = raised_while(error) is RaisedWhile.TRACING_ISLAND
                    if not (traced and self._fits(inputs)):
                        raise
                    fallback = self._fallback(error)
            return from_outputs(fallback(*inputs))

        return call

    def _fits(self, inputs: Sequence[Any]) -> bool:
        """Return whether ``inputs`` are arrays (NumPy's, or JAX's for its data) of its
        dtypes and ranks.
        """
        return len(inputs) == len(self.input_types) and all(
            isinstance(x, np.ndarray | np.generic | jax.Array)
            and x.dtype == t.dtype
            and x.ndim == t.ndim
            for x, t in zip(inputs, self.input_types)
        )

    def _fallback(self, error: Exception) -> Callable[..., list[np.ndarray]]:
        first_line = (str(error).strip().splitlines() or [""])[0]
        warnings.warn(
            f"{self} could not be traced by JAX ({type(error).__name__}: "
            f"{first_line}); its nodes run through PyTensor instead, each wrapped "
            "function as its own XLA program. Exclude the rewrite with "
            f"`mode.excluding({ISLANDS_REWRITE!r})` to skip islands.",
            JaxIslandFallbackWarning,
            stacklevel=3,
        )
        inner = self.fgraph.unfreeze()
        function = pytensor.function(
            list(inner.inputs),
            list(inner.outputs),
            mode=get_default_mode().excluding(ISLANDS_REWRITE),
            on_unused_input="ignore",
        )
        function.trust_input = True

        def run(*inputs: np.ndarray) -> list[np.ndarray]:
            return list(function(*map(np.asarray, inputs)))  # data: device arrays

        return run

    # ---------------------------------------------------------------- shapes
    def infer_shape(self, node, input_shapes) -> list:
        # Static dims, else the computed output's: never a shape graph that
        # would run part of the island outside it.
        return [
            tuple(
                d if d is not None else out.shape[i]
                for i, d in enumerate(out.type.shape)
            )
            for out in node.outputs
        ]


def jax_backend() -> ModuleType:
    """PyTensor's JAX backend, imported on first use (about a second; what importing
    it runs is no part of a trace the cache watches)."""
    module = sys.modules.get(compat.JAX_BACKEND)
    if module is None:
        with unwatched():
            module = importlib.import_module(compat.JAX_BACKEND)
    return module


def _lowering(fgraph: FunctionGraph) -> Callable[..., Sequence[Any]]:
    """PyTensor's JAX lowering of one (specialized) inner graph of an island.

    An op and its pullback inside share one ``jax.vjp``: one forward pass
    (:class:`~pytensor.compile._jax_ofg.op.transforms.SharedPullbacks`).
    """
    pullbacks = SharedPullbacks(
        [n for n in fgraph.toposort() if isinstance(n.op, OpFromJax)]
    )
    function = jax_backend().jax_funcify(
        fgraph, fgraph_name="jax_island", jax_ofg_pullbacks=pullbacks
    )

    def lowered(*inputs: Any) -> Sequence[Any]:
        pullbacks.start_trace()
        return function(*inputs)

    return lowered
