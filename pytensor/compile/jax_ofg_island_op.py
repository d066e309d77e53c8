"""The JAX island Op: a connected part of a PyTensor graph run as one XLA program.

Under the Python, C VM and Numba linkers every :class:`~pytensor.compile.jax_ofg_op.OpFromJax`
is its own XLA program, and the PyTensor nodes between them (a likelihood
computed from an ODE trajectory, its gradient) run outside XLA. The
``jax_islands`` rewrite (:mod:`pytensor.tensor.rewriting.jax_ofg_form_islands`)
groups such a part into one :class:`JaxIsland`: an
:class:`~pytensor.compile.builders.OpFromGraph` whose inner graph is run
through ``jax.jit`` of PyTensor's own JAX lowering (``jax_funcify``), the same
code ``mode="JAX"`` runs. Lowering the island needs the JAX dispatch of
``OpFromJax``, which :func:`pytensor.compile.jax_ofg.install` registers.

Registers nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import pytensor
from pytensor.compile.builders import FinalizedOpFromGraph, construct_nominal_fgraph
from pytensor.compile.jax_ofg_errors import RaisedWhile, mark, raised_while
from pytensor.compile.jax_ofg_host import JaxHostOp
from pytensor.compile.jax_ofg_keys import stable_key
from pytensor.compile.jax_ofg_op import OpFromJax
from pytensor.compile.jax_ofg_transforms import SharedPullbacks
from pytensor.compile.mode import get_default_mode, optdb
from pytensor.graph.basic import Variable
from pytensor.link.jax.dispatch import jax_funcify


__all__ = ["JaxIsland", "JaxIslandFallbackWarning"]

#: The rewrite's name: ``mode.excluding(ISLANDS_REWRITE)`` turns islands off.
ISLANDS_REWRITE = "jax_islands"

#: PyTensor's own preparation of a graph for its JAX lowering (registered
#: under the "jax" tag, which only ``mode="JAX"`` includes): shape arguments
#: as static tuples, boolean indexing JAX can trace.
_JAX_LOWERING_REWRITES = (
    "jax_shape_parameter_as_tuple",
    "jax_boolean_indexing_set_or_inc",
    "jax_boolean_indexing_sum",
)


class JaxIslandFallbackWarning(UserWarning):
    """An island could not be traced by JAX and runs through PyTensor instead."""


class JaxIsland(JaxHostOp, FinalizedOpFromGraph):
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
        Positions of integer scalar inputs that XLA gets as constants: lengths
        computed from constants and shared variables alone (PyMC's
        ``dim_lengths``), which JAX needs concrete to build arrays of that
        length. A new value (``pm.set_data``) retraces the program.
    """

    def __init__(
        self,
        inputs: Sequence[Variable],
        outputs: Sequence[Variable],
        static_inputs: Sequence[int] = (),
    ):
        inner = construct_nominal_fgraph(list(inputs), list(outputs))
        for name in _JAX_LOWERING_REWRITES:
            optdb[name].rewrite(inner)
        super().__init__(
            list(inputs), list(outputs), fgraph=inner.freeze(), name="JaxIsland"
        )
        self.static_inputs = tuple(static_inputs)

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self.static_inputs == other.static_inputs

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.static_inputs))

    # ----------------------------------------------------------- readability
    def wrapped_functions(self) -> list[str]:
        """The names of the wrapped JAX functions inside, in graph order."""
        return [
            node.op.describe()
            for node in self.fgraph.toposort()
            if isinstance(node.op, OpFromJax)
        ]

    def __str__(self) -> str:
        functions = self.wrapped_functions()
        others = len(self.fgraph.apply_nodes) - len(functions)
        return f"JaxIsland{{{', '.join(functions)}, +{others} PyTensor nodes}}"

    def stable_key(self) -> str:
        """What the island computes, equal across processes (see :mod:`~pytensor.compile.jax_ofg_keys`)."""
        fgraph = self.fgraph
        position = {v: ("in", i) for i, v in enumerate(fgraph.inputs)}
        nodes = []
        for k, node in enumerate(fgraph.toposort()):
            sources = [position.get(x) or stable_key(x) for x in node.inputs]
            nodes.append(f"{stable_key(node.op)}{sources}")
            position.update({out: (k, j) for j, out in enumerate(node.outputs)})
        outputs = [position.get(out) or stable_key(out) for out in fgraph.outputs]
        types = [str(x.type) for x in fgraph.inputs]
        return (
            f"JaxIsland(inputs={types}, nodes={nodes}, outputs={outputs}, "
            f"static={self.static_inputs})"
        )

    def error_note(self) -> str:
        return f"Raised by {self} (the rewrite `jax_islands`)."

    # --------------------------------------------------------------- running
    def jax_callable(self) -> Callable[..., tuple]:
        # An op and its pullback inside share one jax.vjp: one forward pass.
        pullbacks = SharedPullbacks(
            [n for n in self.fgraph.toposort() if isinstance(n.op, OpFromJax)]
        )
        inner = jax_funcify(
            self.fgraph,
            fgraph_name="jax_island",
            jax_ofg_pullbacks=pullbacks if pullbacks else None,
        )
        output_types = self.output_types

        def jax_island(*inputs: Any) -> tuple:
            if pullbacks:
                pullbacks.start_trace()
            try:
                outputs = inner(*inputs)
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

    def host_function(
        self, writable: Sequence[bool] | None = None
    ) -> Callable[..., list[np.ndarray]]:
        """As :meth:`JaxHostOp.host_function`, with a PyTensor fallback.

        PyTensor's JAX lowering cannot trace every graph it can build (shapes
        computed at run time, for one). When tracing the island fails for a
        reason that is not a wrapped function's own error, the island warns
        once and runs its inner graph through PyTensor from then on: slower,
        never wrong.
        """
        fallback: Callable | None = None
        try:
            jax_call = super().host_function(writable)
        except NotImplementedError as error:  # no JAX lowering after all
            fallback = self._fallback(error)

        def host_call(*inputs: np.ndarray) -> list[np.ndarray]:
            nonlocal fallback
            if fallback is None:
                try:
                    return jax_call(*inputs)
                except Exception as error:
                    if not (_island_could_not_trace(error) and self._fits(inputs)):
                        raise
                    fallback = self._fallback(error)
            return fallback(*inputs)

        return host_call

    def _fits(self, inputs: Sequence[Any]) -> bool:
        """Whether ``inputs`` are arrays of the island's input dtypes and ranks."""
        return len(inputs) == len(self.input_types) and all(
            isinstance(x, np.ndarray | np.generic)
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
            return list(function(*inputs))

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


def _island_could_not_trace(error: Exception) -> bool:
    """Whether ``error`` is the island's tracing failure, not the user's error.

    Only an error raised while JAX traced the lowering of the island's
    PyTensor nodes counts (see :mod:`~pytensor.compile.jax_ofg_errors`): not
    one of a wrapped function's own (traced inside it), not one of the
    running XLA program, not a bad input that ``jax.jit`` refused before
    tracing.
    """
    return raised_while(error) is RaisedWhile.TRACING_ISLAND
