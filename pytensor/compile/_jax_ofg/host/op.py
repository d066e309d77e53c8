"""Calling a jitted JAX function from PyTensor's host linkers.

:class:`JaxHostOp`, the mixin of ``OpFromJax`` and ``JaxIsland``: one
``jax.jit`` of :meth:`JaxHostOp.jax_callable`, shared by equal ops, its
outputs packed; :func:`graph_holds_jax_ops` finds such ops. Registers
nothing.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.errors import report, runtime_error_counts
from pytensor.compile._jax_ofg.host import fork_guard
from pytensor.compile._jax_ofg.host.packing import DtypePacking, Plan
from pytensor.compile._jax_ofg.host.placement import host_device_name
from pytensor.compile._jax_ofg.host.programs import Program
from pytensor.graph.basic import Apply, Constant
from pytensor.graph.op import HasMultipleInnerGraph, is_thunk_type
from pytensor.graph.traversal import apply_ancestors
from pytensor.tensor.type import TensorType


#: Programs of recently used ops (see :attr:`JaxHostOp.program`).
PROGRAMS = trace_cache.MemoryStorage(64)

HostFunction = Callable[..., list[np.ndarray]]

#: The host functions ``perform`` calls, while their ops live.
_PERFORMING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class JaxHostOp:
    """Mixin for ops computed by one jitted JAX function, called from the host.

    Subclasses define :meth:`jax_callable` (flat arrays in, tuple of arrays
    out) and :meth:`wrapped_function_names`; this gives them ``perform``, a lean
    ``make_py_thunk`` and the host function the Numba dispatch calls.
    """

    output_types: Sequence[TensorType]

    #: Per output: whether the host call hands it on as a private, writeable
    #: copy (None: every output is copied). Set by the last rewrite,
    #: ``jax_ofg_readonly_outputs`` (:meth:`with_copied_outputs`); part of
    #: the op's identity, not of its program's.
    copied_outputs: tuple[bool, ...] | None = None

    #: Positions of inputs passed to ``jax.jit`` as static Python integers, or
    #: tuples of them (lengths the XLA program needs as constants; a new value
    #: retraces). See :func:`static_value`.
    static_inputs: tuple[int, ...] = ()

    def jax_callable(self) -> Callable[..., tuple]:
        """Return the JAX function of the op's inputs, returning a tuple of outputs."""
        raise NotImplementedError

    def wrapped_function_names(self) -> list[str]:
        """Return the wrapped JAX functions the op runs, for error messages."""
        return [str(self)]

    def error_hint(self) -> str:
        """More for error messages about the op (a sentence with a leading space)."""
        return ""

    @property
    def runtime_errors(self) -> int:
        """How many calls of this op (and of ops equal to it) raised in this process."""
        return runtime_error_counts().get(str(self), 0)

    def with_copied_outputs(self, copied: Sequence[bool] | None) -> JaxHostOp:
        """This op, handing on only the outputs flagged in ``copied`` as copies."""
        copied = None if copied is None or all(copied) else tuple(copied)
        if copied == self.copied_outputs:
            return self
        op = copy.copy(self)
        op.__dict__.pop("_hash", None)
        op.copied_outputs = copied
        return op

    @property
    def packing(self) -> DtypePacking:
        """How the outputs leave XLA: one buffer per dtype."""
        return DtypePacking.of([t.dtype for t in self.output_types])

    @property
    def program(self) -> Program:
        """The jitted program (through the trace cache), shared by equal ops.

        Looked up when a function is compiled, never per call: by the op
        without :attr:`copied_outputs` (how the host call hands outputs on)
        and what its wrapped functions compute now (a global edited since
        gives another program), the device it runs on (the flag
        ``jax_ofg__host_device``) and the trace cache's mode (a program made
        with the cache on is not served with it off). The op stays in the key:
        two functions that describe alike may still hold different objects (a
        callback's target). A program with a trace the trace cache did not
        keep is replaced: what that trace depended on was not seen.
        """
        base = self.with_copied_outputs(None)
        try:
            op_print = trace_cache.program_key(base)
        except trace_cache.Undescribable as error:
            names = ", ".join(self.wrapped_function_names())
            trace_cache.uncached(names, "program", str(error))
            return self._new_program(None)
        key = (base, op_print, host_device_name(), trace_cache.mode())
        program = PROGRAMS.get(key)
        if program is None or not program.is_current():
            program = self._new_program(base)
            PROGRAMS.put(key, program)
        return program

    def _new_program(self, base: JaxHostOp | None) -> Program:
        name = ", ".join(self.wrapped_function_names())
        return Program(
            self.jax_callable(), self.packing, self.static_inputs, base, name
        )

    def _program(self, program: Program) -> Callable[..., list[np.ndarray]]:
        """Return ``program`` on host arrays, returning its buffers as (read-only) NumPy
        arrays.

        The one place a host call enters JAX: it refuses to run in a process
        forked after JAX started (JAX would deadlock), and names this op and
        its wrapped functions in any error (XLA's runtime errors surface when
        a buffer is read; see :func:`~pytensor.compile._jax_ofg.errors.report`).
        """
        what = str(self)

        def call(*inputs: np.ndarray) -> list[np.ndarray]:
            if fork_guard.forked_after_jax_started:
                fork_guard.refuse_call_after_fork(what)
            try:
                return program(*inputs)
            except Exception as error:
                report(error, what, self.wrapped_function_names(), self.error_hint())
                raise

        return call

    def _shapes_of_outputs(self, program: Program) -> Callable[..., tuple]:
        """Return the output shapes for some inputs, from the trace that served them."""
        static = tuple(tuple(t.shape) for t in self.output_types)
        if not any(None in shape for shape in static):
            return lambda *inputs: static
        seen: dict[tuple, tuple] = {}

        def output_shapes(*inputs: Any) -> tuple:
            key = program.signature(inputs)
            if jax.config.jax_disable_jit:  # ran eagerly just now: other shapes
                return program.output_shapes[key]
            shapes = seen.get(key)
            if shapes is None:
                shapes = seen[key] = program.shapes_for(inputs)
            return shapes

        return output_shapes

    def host_function(self) -> HostFunction:
        """Return the jitted function on host arrays (thunks hold it for their
        lifetime).

        JAX buffers are read-only and may alias inputs or constants. Outputs
        flagged in :attr:`copied_outputs` (default: all) are private, writeable
        copies, for outputs that a downstream in-place op may write into or
        that the compiled function returns; the others are read-only views of
        the buffers JAX returned (see
        :mod:`pytensor.compile._jax_ofg.host.readonly_outputs`).
        """
        compiled = self.program
        program, packing = self._program(compiled), self.packing
        dtypes = [t.dtype for t in self.output_types]
        copied = self.copied_outputs or (True,) * len(dtypes)
        output_shapes = self._shapes_of_outputs(compiled)
        static = all(None not in t.shape for t in self.output_types)
        static_plan = packing.plan(output_shapes(), dtypes) if static else None
        if static_plan is not None and len(static_plan) == 1:
            # One output of static shape: the common case, kept lean.
            ((_, _, _, shape),), (copy,) = static_plan, copied

            def single_output_call(*inputs: np.ndarray) -> list[np.ndarray]:
                (buffer,) = program(*inputs)
                view = buffer.reshape(shape)
                return [view.copy() if copy else view]

            return single_output_call
        if static_plan is not None:  # a value and its gradient, say
            return _static_outputs_call(program, static_plan, copied)

        plans: dict[tuple, Plan] = {}

        def plan_for(inputs: Sequence[Any]) -> Plan:
            shapes = output_shapes(*inputs)
            plan = plans.get(shapes)
            if plan is None:
                plan = plans[shapes] = packing.plan(shapes, dtypes)
            return plan

        def host_call(*inputs: np.ndarray) -> list[np.ndarray]:
            buffers = program(*inputs)
            outputs = []
            for (buffer, start, stop, shape), copy in zip(plan_for(inputs), copied):
                view = buffers[buffer][start:stop].reshape(shape)
                outputs.append(view.copy() if copy else view)
            return outputs

        return host_call

    def buffers_function(self) -> Callable[..., tuple]:
        """Return the jitted function's packed buffers on host arrays, for compiled
        unpacking.

        Returns one read-only 1-d NumPy array per dtype of :attr:`packing`,
        then, when some output's shape is not static, an ``int64`` vector of
        every output's dims, output after output: the Numba dispatch slices
        the outputs out of the buffers in compiled code.
        """
        compiled = self.program
        program = self._program(compiled)
        if all(None not in t.shape for t in self.output_types):
            return lambda *inputs: tuple(program(*inputs))
        output_shapes = self._shapes_of_outputs(compiled)

        def buffers_and_dims(*inputs: np.ndarray) -> tuple:
            buffers = program(*inputs)
            dims = np.fromiter(
                (d for shape in output_shapes(*inputs) for d in shape), dtype=np.int64
            )
            return (*buffers, dims)

        return buffers_and_dims

    def host_call(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the op once on host arrays, returning writeable arrays."""
        return self.with_copied_outputs(None).host_function()(*inputs)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage) -> None:
        # Per call: the host function is looked up once per op (and equal ops),
        # as make_py_thunk's thunk does once per compiled function.
        host_call = _PERFORMING.get(self)
        if host_call is None:
            host_call = _PERFORMING.setdefault(self, self.host_function())
        for storage, value in zip(output_storage, host_call(*inputs)):
            storage[0] = value

    def make_py_thunk(self, node, storage_map, compute_map, no_recycling, debug=False):
        # As Op.make_py_thunk, with the host function looked up once, here.
        host_call = self.host_function()
        inputs = input_cells(node, storage_map)
        outputs = [storage_map[v] for v in node.outputs]
        computed = [compute_map[v] for v in node.outputs] if compute_map else []

        @is_thunk_type
        def thunk():
            for storage, value in zip(outputs, host_call(*[s[0] for s in inputs])):
                storage[0] = value
            for flag in computed:
                flag[0] = True

        thunk.inputs, thunk.outputs, thunk.lazy = inputs, outputs, False
        thunk.perform = self.perform
        return thunk


def _static_outputs_call(
    program: Callable[..., list[np.ndarray]], plan: Plan, copied: Sequence[bool]
) -> HostFunction:
    """Return the host function of outputs of static shapes, packed as ``plan`` says.

    Where each output lies is known once: per output, its buffer, its slice
    of it, the shape to give the slice (None: it has it already) and whether
    it is copied; a call only slices, reshapes where needed and copies.
    """
    picks = [
        (buffer, slice(start, stop), None if shape == (stop - start,) else shape, copy)
        for (buffer, start, stop, shape), copy in zip(plan, copied)
    ]

    def static_outputs_call(*inputs: np.ndarray) -> list[np.ndarray]:
        buffers = program(*inputs)
        outputs = []
        for buffer, where, shape, private in picks:
            view = buffers[buffer][where]
            if shape is not None:
                view = view.reshape(shape)
            outputs.append(view.copy() if private else view)
        return outputs

    return static_outputs_call


def writable_outputs(node: Apply) -> tuple[bool, ...]:
    """Per output of a :class:`JaxHostOp` node: whether it is handed on as a copy."""
    return node.op.copied_outputs or (True,) * len(node.outputs)


def input_cells(node: Apply, storage_map) -> list[list]:
    """Return the storage cells a thunk of ``node`` reads its inputs from.

    A constant's value (an island's data) is put on JAX's device once, here,
    not copied there at every call.
    """
    return [
        [jax.device_put(x.data)] if isinstance(x, Constant) else storage_map[x]
        for x in node.inputs
    ]


def one_jax_op(fgraph) -> Apply | None:
    """Return the graph's one node when it is a :class:`JaxHostOp` over the graph's
    inputs.

    The node's inputs are the graph's, in any order (an island takes its
    inputs in the order it found them; PyMC's unraveled ``logp_dlogp`` lists
    its value variables in another), and constants (an island's data); every
    output of the graph is one of the node's: calling the op's host function
    is then the whole graph (the Numba linker's direct thunk, nutpie's host
    callbacks), its inputs and outputs matched by variable.
    """
    if len(fgraph.apply_nodes) != 1:
        return None
    (node,) = fgraph.apply_nodes
    graph_inputs = set(fgraph.inputs)
    if not (
        isinstance(node.op, JaxHostOp)
        and all(isinstance(x, Constant) or x in graph_inputs for x in node.inputs)
        and all(out.owner is node for out in fgraph.outputs)
    ):
        return None
    return node


def graph_holds_jax_ops(outputs: Iterable[Any]) -> bool:
    """Return whether the graph of ``outputs`` holds an op that runs JAX code.

    :class:`JaxHostOp` nodes count, also inside the inner graphs of other ops
    (``OpFromGraph``, ``Scan``, PyMC's symbolic random variables).
    """
    for node in apply_ancestors(list(outputs)):
        if isinstance(node.op, JaxHostOp):
            return True
        if isinstance(node.op, HasMultipleInnerGraph) and any(
            graph_holds_jax_ops(inner.outputs)
            for inner in node.op.inner_graphs.values()
        ):
            return True
    return False


def wrapped_functions_in(outputs: Iterable[Any]) -> list[str]:
    """Return the wrapped JAX functions the graph of ``outputs`` runs, in graph order."""
    names: dict[str, None] = {}
    for node in apply_ancestors(list(outputs)):
        if isinstance(node.op, JaxHostOp):
            names.update(dict.fromkeys(node.op.wrapped_function_names()))
    return list(names)
