"""Arrays packed into one flat vector per dtype, and unpacked again.

For the outputs of host calls (one buffer per dtype leaves XLA) and the VJP
residuals of value+grad fusion (their number and shapes are unknown when the
graph is rewritten). Registers nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


#: Per array: ``(buffer, start, stop, shape)``, where it lies in the packed buffers.
Plan = list[tuple[int, int, int, tuple[int, ...]]]


def dtype_name(array: Any) -> str:
    return np.dtype(array.dtype).name


class DtypePacking:
    """Arrays packed into one flat vector per dtype, in the order of ``dtypes``.

    Examples
    --------
    >>> packing = DtypePacking(("float64", "int64"))
    >>> vectors = packing.pack([jnp.ones((2, 2)), jnp.arange(3), jnp.zeros(1)])
    >>> [v.shape for v in vectors]
    [(5,), (3,)]
    >>> like = [jnp.ones((2, 2)), jnp.arange(3), jnp.zeros(1)]
    >>> [x.shape for x in packing.unpack(vectors, like)]
    [(2, 2), (3,), (1,)]
    """

    def __init__(self, dtypes: Sequence[str]):
        self.dtypes = tuple(dtypes)
        self._buffer_of = {dtype: k for k, dtype in enumerate(self.dtypes)}

    @classmethod
    def of(cls, dtypes: Sequence[str]) -> DtypePacking:
        """One buffer per distinct dtype, in the order they first appear."""
        return cls(tuple(dict.fromkeys(dtypes)))

    def buffer_of(self, dtype: str) -> int:
        try:
            return self._buffer_of[dtype]
        except KeyError:
            raise TypeError(
                f"An array of dtype {dtype} cannot be packed: the packing was "
                f"planned for dtypes {self.dtypes}."
            ) from None

    def pack(self, arrays: Sequence[Any]) -> tuple:
        """Return the (traced) arrays, raveled and concatenated by dtype."""
        groups: list[list] = [[] for _ in self.dtypes]
        for array in arrays:
            groups[self.buffer_of(dtype_name(array))].append(jnp.ravel(array))
        if any(len(group) > 1 for group in groups):
            # Without the barrier XLA fuses every array's producers into the
            # concatenation's loop and computes them again per element: 32
            # chained calls (value and gradient) took 41 us instead of 20.
            groups = jax.lax.optimization_barrier(groups)
        return tuple(
            jnp.zeros((0,), dtype)
            if not group
            else group[0]
            if len(group) == 1
            else jnp.concatenate(group)
            for dtype, group in zip(self.dtypes, groups)
        )

    def plan(self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> Plan:
        """Return where arrays of ``shapes`` and ``dtypes`` lie in the packed buffers."""
        offsets = [0] * len(self.dtypes)
        plan = []
        for shape, dtype in zip(shapes, dtypes):
            buffer = self.buffer_of(dtype)
            start = offsets[buffer]
            offsets[buffer] = stop = start + math.prod(shape)
            plan.append((buffer, start, stop, tuple(shape)))
        return plan

    def packs(self, arrays: Sequence[Any]) -> bool:
        """Return whether every array's dtype has a buffer."""
        return {dtype_name(array) for array in arrays} <= set(self.dtypes)

    def fits(self, vectors: Sequence[Any], like: Sequence[Any]) -> bool:
        """Return whether arrays shaped and typed ``like`` pack into exactly
        ``vectors``.
        """
        if not self.packs(like):
            return False
        lengths = [0] * len(self.dtypes)
        for array in like:
            lengths[self.buffer_of(dtype_name(array))] += math.prod(array.shape)
        return [v.shape[0] for v in vectors] == lengths

    def unpack(self, vectors: Sequence[Any], like: Sequence[Any]) -> list[Any]:
        """Return the arrays packed into ``vectors``, shaped and typed ``like``."""
        plan = self.plan([a.shape for a in like], [dtype_name(a) for a in like])
        return [
            vectors[buffer][start:stop].reshape(shape)
            for buffer, start, stop, shape in plan
        ]
