"""Calling a jitted JAX function from PyTensor's host linkers.

Two kinds of ops hold a JAX computation: :class:`~pytensor.compile.jax_ofg.OpFromJax`
(one wrapped function) and :class:`~pytensor.compile.jax_ofg_island.JaxIsland`
(a connected part of a PyTensor graph lowered by PyTensor's JAX backend). In the
Python, C VM and Numba linkers both are called the same way, through the
:class:`JaxHostOp` mixin: one ``jax.jit`` of :meth:`JaxHostOp.jax_callable`,
shared by equal ops, whose outputs are handed back as owned NumPy arrays.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from pytensor.compile import jax_ofg_processes
from pytensor.graph.basic import Apply
from pytensor.graph.op import is_thunk_type


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


class JaxHostOp:
    """Mixin for ops computed by one jitted JAX function, called from the host.

    Subclasses define :meth:`jax_callable` (flat arrays in, tuple of arrays
    out) and :meth:`error_note`; this gives them ``perform``, a lean
    ``make_py_thunk`` and the host function the Numba dispatch calls.
    """

    def jax_callable(self) -> Callable[..., tuple]:
        """The JAX function of the op's inputs, returning a tuple of outputs."""
        raise NotImplementedError

    def error_note(self) -> str:
        """Added to errors raised while the op runs, naming it."""
        return f"Raised by {self}."

    @property
    def jitted(self) -> Callable:
        """``jax.jit`` of :meth:`jax_callable`, shared by equal ops.

        Kept in a bounded cache, not on the op: PyTensor's rewriters keep
        every op they have seen, and a jitted function holds its compiled
        executables. Compiled PyTensor functions hold their own reference.
        """
        return JITTED.get(self, lambda: jax.jit(self.jax_callable()))

    def host_function(self) -> Callable[..., list[np.ndarray]]:
        """The jitted function on host arrays, returning owned, writeable arrays.

        JAX buffers are read-only and may alias inputs or constants, so every
        output is copied: a downstream in-place op may write into it. Thunks
        (Python, C VM and Numba linkers) hold this function for their lifetime.
        """
        jitted, note = self.jitted, self.error_note()

        def host_call(*inputs: np.ndarray) -> list[np.ndarray]:
            if jax_ofg_processes.forked_after_jax_started:  # JAX would deadlock
                jax_ofg_processes.refuse_call_after_fork(str(self))
            try:
                outputs = jitted(*inputs)
            except Exception as error:
                add_note_once(error, note)
                raise
            return [np.array(output) for output in outputs]

        return host_call

    def host_call(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the op once on host arrays (see :meth:`host_function`)."""
        return self.host_function()(*inputs)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage) -> None:
        for storage, value in zip(output_storage, self.host_call(*inputs)):
            storage[0] = value

    def make_py_thunk(self, node, storage_map, compute_map, no_recycling, debug=False):
        # As Op.make_py_thunk, with the host function looked up once, here.
        host_call = self.host_function()
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
