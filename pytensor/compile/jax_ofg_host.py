"""Calling a jitted JAX function from PyTensor's host linkers.

Two kinds of ops hold a JAX computation: :class:`~pytensor.compile.jax_ofg.OpFromJax`
(one wrapped function) and :class:`~pytensor.compile.jax_ofg_island.JaxIsland`
(a connected part of a PyTensor graph lowered by PyTensor's JAX backend). In the
Python, C VM and Numba linkers both are called the same way, through the
:class:`JaxHostOp` mixin: one ``jax.jit`` of :meth:`JaxHostOp.jax_callable`,
shared by equal ops, whose outputs are handed back as owned NumPy arrays.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pytensor.compile import jax_ofg_processes
from pytensor.graph.basic import Apply
from pytensor.graph.op import is_thunk_type
from pytensor.tensor.type import TensorType


class BoundedCache:
    """A thread-safe LRU mapping; values are built on a miss."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, build: Callable[[], Any]) -> Any:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
                return value
        value = build()
        with self._lock:
            value = self._entries.setdefault(key, value)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)


#: Jitted functions of recently used ops (see :attr:`JaxHostOp.jitted`).
JITTED = BoundedCache(64)


#: Starts the note on errors raised while JAX traces a wrapped function (see
#: the JAX dispatch of OpFromJax).
TRACED_FUNCTION_NOTE = "Raised while JAX traced the function in "


def add_note_once(error: BaseException, note: str) -> None:
    """Add ``note`` to ``error`` unless it has it (JAX re-raises cached errors)."""
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)


class OutputPacking:
    """How an op's outputs leave XLA: packed into one flat buffer per dtype.

    Every output of a JAX executable is a buffer of its own, with its own
    Python object and readiness check on the host (about 4 µs each on CPU).
    Packed inside the XLA program, the outputs cross in one buffer per dtype
    and the host takes each as a view of it.

    Parameters
    ----------
    output_types
        The op's output types.
    """

    def __init__(self, output_types: Sequence[TensorType]):
        self.dtypes = tuple(dict.fromkeys(t.dtype for t in output_types))
        self.buffer_of = tuple(self.dtypes.index(t.dtype) for t in output_types)
        self.static_shapes = tuple(
            None if None in t.shape else tuple(t.shape) for t in output_types
        )

    def pack(self, outputs: Sequence[Any]) -> tuple:
        """The traced outputs, raveled and concatenated by dtype."""
        groups: list[list] = [[] for _ in self.dtypes]
        for output, buffer in zip(outputs, self.buffer_of):
            groups[buffer].append(jnp.ravel(output))
        return tuple(
            group[0] if len(group) == 1 else jnp.concatenate(group) for group in groups
        )

    def plan(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple]:
        """Per output: ``(buffer, start, stop, shape)`` for outputs of ``shapes``."""
        offsets = [0] * len(self.dtypes)
        plan = []
        for shape, buffer in zip(shapes, self.buffer_of):
            start = offsets[buffer]
            offsets[buffer] = stop = start + math.prod(shape)
            plan.append((buffer, start, stop, tuple(shape)))
        return plan


class JaxHostOp:
    """Mixin for ops computed by one jitted JAX function, called from the host.

    Subclasses define :meth:`jax_callable` (flat arrays in, tuple of arrays
    out) and :meth:`error_note`; this gives them ``perform``, a lean
    ``make_py_thunk`` and the host function the Numba dispatch calls.
    """

    output_types: Sequence[TensorType]

    def jax_callable(self) -> Callable[..., tuple]:
        """The JAX function of the op's inputs, returning a tuple of outputs."""
        raise NotImplementedError

    def error_note(self) -> str:
        """Added to errors raised while the op runs, naming it."""
        return f"Raised by {self}."

    #: Positions of inputs passed to ``jax.jit`` as static Python integers
    #: (lengths the XLA program needs as constants; a new value retraces).
    static_inputs: tuple[int, ...] = ()

    @property
    def jitted(self) -> Callable:
        """``jax.jit`` of :meth:`jax_callable`, shared by equal ops.

        Kept in a bounded cache, not on the op: PyTensor's rewriters keep
        every op they have seen, and a jitted function holds its compiled
        executables. Compiled PyTensor functions hold their own reference.
        """
        return JITTED.get(self, lambda: jax.jit(self.jax_callable()))

    def _packed(self) -> tuple[Callable, dict]:
        """``jax.jit`` of the function with packed outputs (see :class:`OutputPacking`),
        and the output shapes it was traced with, by input shapes."""

        def build() -> tuple[Callable, dict]:
            fn, packing = self.jax_callable(), OutputPacking(self.output_types)
            traced_shapes: dict[tuple, tuple] = {}

            def packed(*inputs):
                outputs = fn(*inputs)
                traced_shapes[self._signature(inputs)] = tuple(
                    tuple(o.shape) for o in outputs
                )
                return packing.pack(outputs)

            static = self.static_inputs
            jitted = jax.jit(packed, static_argnums=static)
            if not static:
                return jitted, traced_shapes

            def with_static_integers(*inputs):
                return jitted(
                    *(int(x) if i in static else x for i, x in enumerate(inputs))
                )

            return with_static_integers, traced_shapes

        return JITTED.get((self, "packed"), build)

    def _output_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
        """The output shapes for ``inputs``, by an abstract trace."""
        static = {i: int(inputs[i]) for i in self.static_inputs}
        fn = self.jax_callable()

        def with_statics(*traced):
            values = iter(traced)
            return fn(
                *(
                    static[i] if i in static else next(values)
                    for i in range(len(inputs))
                )
            )

        traced = [x for i, x in enumerate(inputs) if i not in static]
        return tuple(tuple(s.shape) for s in jax.eval_shape(with_statics, *traced))

    def _signature(self, inputs: Sequence[Any]) -> tuple:
        """What the output shapes depend on: input shapes, static input values."""
        return (
            tuple(jnp.shape(x) for x in inputs),
            tuple(int(inputs[i]) for i in self.static_inputs),
        )

    def host_function(
        self, writable: Sequence[bool] | None = None
    ) -> Callable[..., list[np.ndarray]]:
        """The jitted function on host arrays (thunks hold it for their lifetime).

        JAX buffers are read-only and may alias inputs or constants. Outputs
        flagged in ``writable`` (default: all) are private, writeable copies,
        for outputs that a downstream in-place op may write into or that the
        compiled function returns; the others are read-only views of the
        buffers JAX returned (see ``jax_ofg_readonly_outputs`` in
        :mod:`pytensor.tensor.rewriting.jax_ofg`).
        """
        packed, traced_shapes = self._packed()
        packing, note = OutputPacking(self.output_types), self.error_note()
        n_outputs = len(packing.buffer_of)
        copied = tuple(writable) if writable is not None else (True,) * n_outputs
        if n_outputs == 1 and packing.static_shapes[0] is not None:
            return _single_output_call(
                self, packed, packing.static_shapes[0], copied[0], note
            )
        static_plan = (
            None
            if None in packing.static_shapes
            else packing.plan(packing.static_shapes)
        )
        plans: dict[tuple, list] = {}

        def plan_for(inputs: Sequence[Any]) -> list[tuple]:
            key = self._signature(inputs)
            if jax.config.jax_disable_jit:  # ran eagerly just now: other shapes
                return packing.plan(traced_shapes[key])
            plan = plans.get(key)
            if plan is None:
                shapes = traced_shapes.get(key)
                if shapes is None:  # not traced through `packed` (never seen)
                    shapes = self._output_shapes(inputs)
                plan = plans[key] = packing.plan(shapes)
            return plan

        def host_call(*inputs: np.ndarray) -> list[np.ndarray]:
            if jax_ofg_processes.forked_after_jax_started:  # JAX would deadlock
                jax_ofg_processes.refuse_call_after_fork(str(self))
            try:
                buffers = [np.asarray(b) for b in packed(*inputs)]
            except Exception as error:
                add_note_once(error, note)
                raise
            plan = static_plan or plan_for(inputs)
            outputs = []
            for (buffer, start, stop, shape), copy in zip(plan, copied):
                view = buffers[buffer][start:stop].reshape(shape)
                outputs.append(view.copy() if copy else view)
            return outputs

        return host_call

    def host_call(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the op once on host arrays, returning writeable arrays."""
        return JITTED.get((self, "host"), self.host_function)(*inputs)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage) -> None:
        for storage, value in zip(output_storage, self.host_call(*inputs)):
            storage[0] = value

    def make_py_thunk(self, node, storage_map, compute_map, no_recycling, debug=False):
        # As Op.make_py_thunk, with the host function looked up once, here.
        host_call = self.host_function(writable_outputs(node))
        inputs = [storage_map[v] for v in node.inputs]
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


def _single_output_call(
    op: JaxHostOp, packed: Callable, shape: tuple[int, ...], copy: bool, note: str
) -> Callable[..., list[np.ndarray]]:
    """The host call of an op with one output of static shape: the common case."""

    def host_call(*inputs: np.ndarray) -> list[np.ndarray]:
        if jax_ofg_processes.forked_after_jax_started:  # JAX would deadlock
            jax_ofg_processes.refuse_call_after_fork(str(op))
        try:
            (buffer,) = packed(*inputs)
            view = np.asarray(buffer).reshape(shape)
        except Exception as error:
            add_note_once(error, note)
            raise
        return [view.copy() if copy else view]

    return host_call


#: Where the rewrite ``jax_ofg_readonly_outputs`` notes, on a node, which of
#: its outputs must be writeable.
WRITABLE_TAG = "jax_ofg_writable"


def writable_outputs(node: Apply) -> tuple[bool, ...]:
    """Per output of ``node``: whether it must be a private, writeable array.

    All of them unless the rewrite ``jax_ofg_readonly_outputs`` proved
    otherwise for this node of the compiled graph.
    """
    return getattr(node.tag, WRITABLE_TAG, (True,) * len(node.outputs))
