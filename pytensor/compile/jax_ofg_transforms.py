"""JAX transformations of inner functions: derivatives and ``vmap``.

Each class here wraps an inner function of
:class:`~pytensor.compile.jax_ofg.OpFromJax` (flat arrays in, tuple of arrays
out) into another one, so the derivative or batched op is again an
:class:`~pytensor.compile.jax_ofg.OpFromJax`:

* :class:`VJPFunction` and :class:`JVPFunction`: reverse and forward mode.
* :class:`VJPForward` and :class:`VJPFromResiduals`: reverse mode split in
  two, so value and gradient share one forward pass. The forward also returns
  the residuals of ``jax.vjp`` (what the pullback needs), packed into one byte
  vector; the backward unpacks them instead of running the forward again.
* :class:`VmapFunction`: the function mapped over leading batch dims.

All are frozen dataclasses: equal fields make equal functions, hence equal
ops that PyTensor merges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pytensor.compile.jax_ofg_functions import ArrayTuple, InnerFunction


def _merge(
    fixed: Sequence[Any], varying: Sequence[Any], mask: Sequence[bool]
) -> list[Any]:
    """Put ``varying`` into the positions of ``fixed`` where ``mask`` is true."""
    values = list(fixed)
    varying_iter = iter(varying)
    for i, selected in enumerate(mask):
        if selected:
            values[i] = next(varying_iter)
    return values


def _vjp(
    forward: Callable[..., ArrayTuple],
    wrt: tuple[bool, ...],
    cotangent_outputs: tuple[int, ...],
    primals: Sequence[Any],
) -> tuple[ArrayTuple, Callable]:
    """All outputs of ``forward``, and the pullback of the selected ones.

    The one place that calls ``jax.vjp``: :class:`VJPForward` and
    :class:`VJPFromResiduals` must build the very same pullback.
    """

    def restricted(*differentiable):
        outputs = forward(*_merge(primals, differentiable, wrt))
        return tuple(outputs[i] for i in cotangent_outputs), outputs

    wrt_primals = [p for p, selected in zip(primals, wrt) if selected]
    _, pullback, outputs = jax.vjp(restricted, *wrt_primals, has_aux=True)
    return outputs, pullback


def _cast_cotangents(cotangents: Sequence[Any], dtypes: Sequence[str]) -> tuple:
    return tuple(jnp.asarray(ct, dtype) for ct, dtype in zip(cotangents, dtypes))


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
        n_primals = len(self.wrt)
        primals, cotangents = args[:n_primals], args[n_primals:]
        _, pullback = _vjp(self.forward, self.wrt, self.cotangent_outputs, primals)
        return tuple(pullback(_cast_cotangents(cotangents, self.cotangent_dtypes)))

    def split(self) -> tuple[VJPForward, VJPFromResiduals]:
        """The forward and backward halves sharing one forward pass."""
        return (
            VJPForward(self.forward, self.wrt, self.cotangent_outputs),
            VJPFromResiduals(self),
        )


# ----------------------------------------------------------------- residuals
def _as_bytes(leaf: Any) -> Any:
    leaf = jnp.asarray(leaf)
    if leaf.dtype == jnp.bool_:
        leaf = leaf.astype(jnp.uint8)
    elif jnp.issubdtype(leaf.dtype, jnp.complexfloating):
        leaf = jnp.stack([leaf.real, leaf.imag], axis=-1)
    return jax.lax.bitcast_convert_type(leaf, jnp.uint8).reshape(-1)


def _n_bytes(like: jax.ShapeDtypeStruct) -> int:
    return math.prod(like.shape) * np.dtype(like.dtype).itemsize


def _from_bytes(data: Any, like: jax.ShapeDtypeStruct) -> Any:
    dtype = np.dtype(like.dtype)
    if dtype == np.bool_:
        return data.reshape(like.shape).astype(jnp.bool_)
    if dtype.kind == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        pairs = _from_bytes(data, jax.ShapeDtypeStruct((*like.shape, 2), part))
        return jax.lax.complex(pairs[..., 0], pairs[..., 1])
    if dtype.itemsize == 1:
        return jax.lax.bitcast_convert_type(data.reshape(like.shape), dtype)
    return jax.lax.bitcast_convert_type(
        data.reshape((*like.shape, dtype.itemsize)), dtype
    )


def pack_residuals(leaves: Sequence[Any]) -> Any:
    """Every leaf as bytes, in one ``uint8`` vector.

    One output of a fixed type, whatever the number, dtypes and shapes of the
    residuals (which may depend on input sizes unknown when the graph is
    rewritten).
    """
    if not leaves:
        return jnp.zeros((0,), jnp.uint8)
    return jnp.concatenate([_as_bytes(leaf) for leaf in leaves])


def unpack_residuals(data: Any, like: Sequence[jax.ShapeDtypeStruct]) -> list[Any]:
    """The inverse of :func:`pack_residuals`, given the leaves' shapes and dtypes."""
    leaves, offset = [], 0
    for leaf in like:
        size = _n_bytes(leaf)
        leaves.append(_from_bytes(data[offset : offset + size], leaf))
        offset += size
    return leaves


@dataclass(frozen=True)
class VJPForward(InnerFunction):
    """``forward``'s outputs, then its VJP residuals packed into one byte vector."""

    forward: Callable[..., ArrayTuple]
    wrt: tuple[bool, ...]
    cotangent_outputs: tuple[int, ...]

    def __call__(self, *primals: Any) -> ArrayTuple:
        # Under an outer trace (the JAX linker), one variable passed twice is
        # one tracer, and jax.vjp stores a residual that is a primal by its
        # position among equal tracers. The jit boundary gives every position
        # its own tracer, exactly as the backward's `jax.eval_shape` does, so
        # both find the same residual structure.
        return jax.jit(self._with_residuals)(*primals)

    def _with_residuals(self, *primals: Any) -> ArrayTuple:
        outputs, pullback = _vjp(
            self.forward, self.wrt, self.cotangent_outputs, primals
        )
        residuals = jax.tree_util.tree_leaves(pullback)
        return (*outputs, pack_residuals(residuals))


@dataclass(frozen=True)
class VJPFromResiduals(InnerFunction):
    """``vjp``, taking the residuals of :class:`VJPForward` instead of recomputing.

    Arguments: ``(*primals, residual_bytes, *cotangents)``. The primals only
    give shapes: the pullback's structure is found by tracing the forward
    abstractly (``jax.eval_shape``), which costs nothing at run time.
    """

    vjp: VJPFunction

    def __call__(self, *args: Any) -> ArrayTuple:
        vjp = self.vjp
        n_primals = len(vjp.wrt)
        primals, residual_bytes = args[:n_primals], args[n_primals]
        cotangents = args[n_primals + 1 :]
        abstract = jax.eval_shape(
            lambda *p: _vjp(vjp.forward, vjp.wrt, vjp.cotangent_outputs, p)[1],
            *primals,
        )
        like, treedef = jax.tree_util.tree_flatten(abstract)
        residuals = unpack_residuals(residual_bytes, like)
        pullback = jax.tree_util.tree_unflatten(treedef, residuals)
        return tuple(pullback(_cast_cotangents(cotangents, vjp.cotangent_dtypes)))


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

        def restricted(*differentiable):
            return self.forward(*_merge(primals, differentiable, self.wrt))

        wrt_primals = [p for p, selected in zip(primals, self.wrt) if selected]
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
    >>> from pytensor.compile.jax_ofg_functions import TupleOutputs
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
        """The broadcast batch shape; an error for runtime broadcasting."""
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
