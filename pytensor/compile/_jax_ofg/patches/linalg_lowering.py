"""Small dense factorisations lowered as a few XLA operations instead of LAPACK calls.

Changes
-------
Wraps JAX's CPU lowering rules of four primitives -- ``lu``,
``lu_pivots_to_permutation``, ``triangular_solve`` and ``cholesky`` (through
``compat.wrap_cpu_lowering``, JAX's ``register_lowering``) -- so that, for
square matrices of real floating dtype up to ``jax_ofg__small_linalg_max_size``
rows, they emit the unrolled algorithms of
:mod:`~pytensor.compile._jax_ofg.small_linalg`; every other call lowers as
JAX does (LAPACK). It is process-wide: every JAX program lowered for the CPU
afterwards uses it, not only this package's. JAX's derivative and batching
rules are untouched; the results equal LAPACK's to rounding.

Why
---
On the tiny systems of a stiff ODE solver's Newton steps (2 x 2 for a
two-state model), LAPACK's custom calls cost far more than their arithmetic,
leave XLA's fused loop, and serialise chains on threads (jaxlib's LAPACK
through SciPy's OpenBLAS ran no faster from two threads than from one).
``benchmarks/small_linalg.py`` measures the threshold.

Upstream
--------
https://github.com/jax-ml/jax/issues/11321 (``jnp.linalg.inv`` is
surprisingly slow on small matrices; open), with
https://github.com/jax-ml/jax/issues/1139 (slow small solves): it would be
unnecessary if JAX's CPU lowering of these primitives unrolled small static
sizes itself.

Checked with
------------
JAX and jaxlib 0.12.0 and 0.12.1 (``mlir._platform_specific_lowerings``,
``mlir._lowerings``, ``register_lowering``, ``lower_fun``; ``lax.linalg``'s
primitives).

Off switch
----------
``jax_ofg__small_linalg_max_size=0``: every size lowers to LAPACK (read when a
program is lowered; programs compiled before keep what they were compiled
with).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from pytensor.compile._jax_ofg import compat, small_linalg


__all__ = ["install"]

#: The dtypes lowered without LAPACK.
REAL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _small(aval: Any) -> bool:
    shape = aval.shape
    return (
        len(shape) >= 2
        and all(isinstance(d, int) for d in shape)
        and shape[-1] == shape[-2]
        and 0 < shape[-1] <= small_linalg.max_size()
        and np.dtype(aval.dtype) in REAL_FLOATS
    )


def _small_permutation(aval: Any, permutation_size: Any) -> bool:
    return (
        all(isinstance(d, int) for d in aval.shape)
        and isinstance(permutation_size, int)
        and permutation_size <= small_linalg.max_size()
    )


def _lu_rule(original: Callable, ctx: Any, operand: Any) -> Sequence[Any]:
    if not _small(ctx.avals_in[0]):
        return original(ctx, operand)
    return compat.lower_function(small_linalg.lu, multiple_results=True)(ctx, operand)


def _triangular_solve_rule(
    original: Callable, ctx: Any, a: Any, b: Any, **params: Any
) -> Sequence[Any]:
    a_aval, b_aval = ctx.avals_in
    if not (_small(a_aval) and np.dtype(b_aval.dtype) == np.dtype(a_aval.dtype)):
        return original(ctx, a, b, **params)
    solve = partial(small_linalg.triangular_solve, **params)
    return compat.lower_function(solve, multiple_results=False)(ctx, a, b)


def _pivots_to_permutation_rule(
    original: Callable, ctx: Any, pivots: Any, *, permutation_size: int
) -> Sequence[Any]:
    if not _small_permutation(ctx.avals_in[0], permutation_size):
        return original(ctx, pivots, permutation_size=permutation_size)
    convert = partial(
        small_linalg.pivots_to_permutation, permutation_size=permutation_size
    )
    return compat.lower_function(convert, multiple_results=False)(ctx, pivots)


def _cholesky_rule(original: Callable, ctx: Any, operand: Any) -> Sequence[Any]:
    if not _small(ctx.avals_in[0]):
        return original(ctx, operand)
    return compat.lower_function(small_linalg.cholesky, multiple_results=False)(
        ctx, operand
    )


_RULES = {
    "lu": _lu_rule,
    "lu_pivots_to_permutation": _pivots_to_permutation_rule,
    "triangular_solve": _triangular_solve_rule,
    "cholesky": _cholesky_rule,
}


def install() -> bool:
    """Lower small ``lu``, ``triangular_solve``, ``cholesky`` and
    ``lu_pivots_to_permutation`` without LAPACK on CPU; whether every rule is in
    place.

    Wraps each primitive's CPU lowering once (calling it again does nothing):
    the wrapper reads :func:`~pytensor.compile._jax_ofg.small_linalg.max_size`
    whenever a program is lowered.
    """
    wrapped = [compat.wrap_cpu_lowering(name, rule) for name, rule in _RULES.items()]
    return all(wrapped)
