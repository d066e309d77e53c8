"""Small dense factorisations as a few XLA operations instead of LAPACK calls.

On the CPU, jaxlib lowers LU (``getrf``), triangular solves (``trsm``) and
Cholesky (``potrf``) to LAPACK through custom calls. On the tiny systems of a
stiff ODE solver's Newton steps (2 x 2 for a two-state model) or an
optimistix root find, the call costs far more than its arithmetic: the
custom call leaves XLA's fused loop, and the LAPACK routine pays its own
fixed cost (argument checks, workspace queries, blocking logic) for a few
flops. The same numbers come from the textbook algorithms unrolled over a
static size: a handful of elementwise operations per row, which XLA fuses
with the code around them.

``patches/linalg_lowering`` replaces the CPU lowering of JAX's primitives
``lu``, ``triangular_solve`` and ``cholesky`` with one that emits these
unrolled algorithms for square matrices of real floating dtype up to
:func:`max_size` rows, and calls the original (LAPACK) lowering otherwise. A
lowering rule is the right depth: it is below every user of the primitives --
``jnp.linalg.solve``, ``jax.scipy.linalg.lu_factor``, lineax's LU inside
diffrax's implicit solvers, optimistix -- and above every transformation:
JAX's own derivative and batching rules of the primitives stay as they are,
so forward and reverse mode, ``vmap`` (batch dimensions become leading
dimensions of the operand) and loops all see the same primitive.

It is process-wide: once :func:`pytensor.compile.jax_ofg.install` has run,
*every* JAX program lowered for the CPU in the process uses it, not only the
programs of this package's ops. The results equal LAPACK's to rounding (the
same algorithm: partial pivoting by the largest magnitude, first one on ties,
no division by an exactly zero pivot, NaN for a matrix that is not positive
definite). The PyTensor flag ``jax_ofg__small_linalg_max_size`` sets the
size (0: LAPACK everywhere); programs already compiled keep what they were
compiled with.

Examples
--------
>>> import jax, jax.numpy as jnp, numpy as np
>>> import pytensor.compile.jax_ofg  # installs the lowering
>>> a = jnp.array([[1e-3, 2.0], [3.0, 4.0]])  # needs a row swap
>>> lu, pivots, permutation = jax.jit(jax.lax.linalg.lu)(a)
>>> np.asarray(pivots).tolist(), np.asarray(permutation).tolist()
([1, 1], [1, 0])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pytensor import config
from pytensor.compile._jax_ofg.flags import SMALL_LINALG_MAX_SIZE


__all__ = [
    "DEFAULT_MAX_SIZE",
    "cholesky",
    "lu",
    "max_size",
    "max_size_set_to",
    "pivots_to_permutation",
    "triangular_solve",
]

#: The largest matrix (rows) lowered without LAPACK by default (how it was
#: measured: ``flags.SMALL_LINALG_DEFAULT``).
DEFAULT_MAX_SIZE: int = SMALL_LINALG_MAX_SIZE.default


def max_size() -> int:
    """Return the largest size lowered without LAPACK: the flag
    ``jax_ofg__small_linalg_max_size`` (default and measurement: ``flags``),
    read whenever a program is lowered."""
    return int(SMALL_LINALG_MAX_SIZE.value)


@contextlib.contextmanager
def max_size_set_to(size: int) -> Iterator[None]:
    """Lower with ``jax_ofg__small_linalg_max_size = size`` inside the block.

    JAX keeps lowered programs in memory by the traced function and its
    arguments, not by this setting: its caches are cleared on entry and on
    exit, so that programs lowered inside (``jax.jit(f).lower(...).compile()``
    keeps one) use ``size`` and later ones do not reuse them. For benchmarks
    and tests (``max_size_set_to(0)`` gives LAPACK's programs).
    """
    previous = max_size()
    jax.clear_caches()
    config.jax_ofg__small_linalg_max_size = size
    try:
        yield
    finally:
        config.jax_ofg__small_linalg_max_size = previous
        jax.clear_caches()


# --------------------------------------------------------------- algorithms
def lu(a: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """LU with partial pivoting of square matrices ``a`` (``..., n, n``), unrolled.

    Returns what ``jax.lax.linalg.lu`` returns: the packed factors (unit lower
    ``L`` below the diagonal, ``U`` on and above it), the pivot row of each
    step and the permutation, ``a[..., permutation, :] == L @ U``. Like
    LAPACK's ``getrf``: the pivot is the first row of largest magnitude, and
    a column whose pivot is exactly zero is left undivided.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np
    >>> packed, pivots, permutation = lu(jnp.array([[0.0, 1.0], [2.0, 3.0]]))
    >>> np.asarray(packed).tolist(), np.asarray(permutation).tolist()
    ([[2.0, 3.0], [0.0, 1.0]], [1, 0])
    """
    n = a.shape[-1]
    batch = a.shape[:-2]
    rows = lax.broadcasted_iota(np.int32, (*batch, n), len(batch))
    permutation = rows
    pivots = []
    for k in range(n):
        pivot = k + lax.argmax(jnp.abs(a[..., k:, k]), len(batch), np.int32)
        pivots.append(pivot)
        # Swap rows k and pivot: `order` is that transposition as a gather.
        pivot_ = pivot[..., None]
        order = jnp.where(rows == k, pivot_, jnp.where(rows == pivot_, k, rows))
        a = jnp.take_along_axis(a, order[..., None], axis=-2)
        permutation = jnp.take_along_axis(permutation, order, axis=-1)
        if k == n - 1:
            break
        diagonal = a[..., k, k, None]
        below = a[..., k + 1 :, k]
        below = jnp.where(diagonal != 0, below / diagonal, below)
        trailing = (
            a[..., k + 1 :, k + 1 :] - below[..., None] * a[..., k, None, k + 1 :]
        )
        lower_rows = jnp.concatenate(
            [a[..., k + 1 :, :k], below[..., None], trailing], axis=-1
        )
        a = jnp.concatenate([a[..., : k + 1, :], lower_rows], axis=-2)
    return a, jnp.stack(pivots, axis=-1), permutation


def pivots_to_permutation(pivots: jnp.ndarray, permutation_size: int) -> jnp.ndarray:
    """The permutation made by LU's row swaps ``pivots`` (``..., k``), unrolled.

    What ``jax.lax.linalg.lu_pivots_to_permutation`` returns; JAX's own
    lowering on the CPU is a while loop, run at every ``lu_solve``.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np
    >>> np.asarray(pivots_to_permutation(jnp.array([2, 2, 2]), 3)).tolist()
    [2, 0, 1]
    """
    batch = pivots.shape[:-1]
    rows = lax.broadcasted_iota(np.int32, (*batch, permutation_size), len(batch))
    permutation = rows
    for i in range(pivots.shape[-1]):
        swap = pivots[..., i, None]
        at_i = permutation[..., i, None]
        at_swap = jnp.take_along_axis(permutation, swap, axis=-1)
        permutation = jnp.where(
            rows == i, at_swap, jnp.where(rows == swap, at_i, permutation)
        )
    return permutation


def triangular_solve(
    a: jnp.ndarray,
    b: jnp.ndarray,
    *,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    conjugate_a: bool,
    unit_diagonal: bool,
) -> jnp.ndarray:
    """Solve ``op(a) x = b`` (``left_side``) or ``x op(a) = b``, ``a`` triangular.

    The parameters are those of ``jax.lax.linalg.triangular_solve`` (real
    dtypes: ``conjugate_a`` changes nothing). Substitution unrolled over the
    rows of ``a``, each step one column update of all right-hand sides.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np
    >>> a = jnp.array([[2.0, 0.0], [1.0, 4.0]])
    >>> x = triangular_solve(a, jnp.array([[2.0], [9.0]]), left_side=True,
    ...     lower=True, transpose_a=False, conjugate_a=False, unit_diagonal=False)
    >>> np.asarray(x).ravel().tolist()
    [1.0, 2.0]
    """
    del conjugate_a
    if not left_side:  # x A = b  <=>  A^T x^T = b^T
        solution = triangular_solve(
            a,
            jnp.swapaxes(b, -1, -2),
            left_side=True,
            lower=lower,
            transpose_a=not transpose_a,
            conjugate_a=False,
            unit_diagonal=unit_diagonal,
        )
        return jnp.swapaxes(solution, -1, -2)
    if transpose_a:
        a, lower = jnp.swapaxes(a, -1, -2), not lower
    n = a.shape[-1]
    order = range(n) if lower else range(n - 1, -1, -1)
    solved: dict[int, jnp.ndarray] = {}
    for i in order:
        row = b[..., i, :]
        for j, x_j in solved.items():
            row = row - a[..., i, j, None] * x_j
        solved[i] = row if unit_diagonal else row / a[..., i, i, None]
    return jnp.stack([solved[i] for i in range(n)], axis=-2)


def cholesky(a: jnp.ndarray) -> jnp.ndarray:
    """The lower Cholesky factor of ``a`` (``..., n, n``), read from its lower triangle.

    Like ``jax.lax.linalg.cholesky`` on the CPU: zero above the diagonal, and
    NaN everywhere for a matrix that is not positive definite.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np
    >>> np.asarray(cholesky(jnp.array([[4.0, 2.0], [2.0, 5.0]]))).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    >>> bool(jnp.isnan(cholesky(jnp.array([[1.0, 2.0], [2.0, 1.0]]))).all())
    True
    """
    n = a.shape[-1]
    factor: list[list[Any]] = [[None] * n for _ in range(n)]
    positive = None
    for j in range(n):
        square = a[..., j, j]
        for k in range(j):
            square = square - factor[j][k] * factor[j][k]
        ok = square > 0
        positive = ok if positive is None else positive & ok
        diagonal = jnp.sqrt(square)
        factor[j][j] = diagonal
        for i in range(j + 1, n):
            entry = a[..., i, j]
            for k in range(j):
                entry = entry - factor[i][k] * factor[j][k]
            factor[i][j] = entry / diagonal
    zero = jnp.zeros_like(a[..., 0, 0])
    result = jnp.stack(
        [
            jnp.stack([factor[i][j] if j <= i else zero for j in range(n)], axis=-1)
            for i in range(n)
        ],
        axis=-2,
    )
    return jnp.where(positive[..., None, None], result, jnp.nan)
