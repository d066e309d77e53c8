"""The Numba linker runs a graph that is one JAX op without Numba.

Changes
-------
Wraps ``NumbaLinker.create_jitable_thunk`` (PyTensor's
``pytensor.link.numba.linker``): when the compiled graph is a single
:class:`~pytensor.compile._jax_ofg.host.op.JaxHostOp` node, the function's
thunk calls the op's host function itself instead of the Numba function
around it. The linker's ``jit_fn`` stays the Numba function, for callers
that take it (nutpie compiles it into its own C callback). Every other graph
is linked as PyTensor links it.

Why
---
A model's whole ``logp_dlogp`` is often one
:class:`~pytensor.compile._jax_ofg.islands.op.JaxIsland`: a Numba function
around it would only enter object mode to call the island's host function --
a few microseconds per call, and its compilation at the first call.

Upstream
--------
No upstream issue. PyTensor would need a way for an op to give the linker
its own thunk when a graph is that one op (related: the per-call overhead
work of https://github.com/pymc-devs/pytensor/pull/1101).

Checked with
------------
PyTensor 3.3.8 (``NumbaLinker.create_jitable_thunk``, ``raise_with_op``).

Off switch
----------
``jax_ofg__numba_direct_thunk=False``: the graph runs its Numba function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import NUMBA_DIRECT_THUNK
from pytensor.compile._jax_ofg.host.op import input_cells, one_jax_op
from pytensor.link.utils import raise_with_op


__all__ = ["install"]


def install() -> bool:
    """Make the Numba linker run a graph that is one JAX op from a Python thunk;
    whether it is installed (not when switched off, or when PyTensor's
    ``JITLinker`` has moved)."""
    from pytensor.link.numba.linker import NumbaLinker

    if not NUMBA_DIRECT_THUNK.value:
        return False

    def wrap(create: Callable) -> Callable:
        @functools.wraps(create)
        def create_jitable_thunk(
            self, compute_map, order, input_storage, output_storage, storage_map
        ):
            thunks, output_nodes, jit_fn = create(
                self, compute_map, order, input_storage, output_storage, storage_map
            )
            direct = _direct_thunk(self.fgraph, list(order), storage_map, thunks)
            return ([direct] if direct is not None else thunks), output_nodes, jit_fn

        return create_jitable_thunk

    return compat.patch_method(
        NumbaLinker, "create_jitable_thunk", "runs_one_jax_op_directly", wrap
    )


def _direct_thunk(fgraph, order, storage_map, thunks) -> Callable | None:
    """Return a thunk calling the host function of the graph's one JAX op, or None."""
    node = one_jax_op(fgraph)
    if node is None or len(order) != 1 or len(thunks) != 1:
        return None
    host_call = node.op.host_function()
    inputs = input_cells(node, storage_map)
    outputs = [storage_map[out] for out in node.outputs]
    (numba_thunk,) = thunks

    def thunk():
        try:
            values = host_call(*[cell[0] for cell in inputs])
        except Exception:
            raise_with_op(fgraph, node, thunk)
        for cell, value in zip(outputs, values):
            cell[0] = value

    thunk.inputs, thunk.outputs = numba_thunk.inputs, numba_thunk.outputs
    thunk.lazy = False
    return thunk
