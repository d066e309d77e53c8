"""Small dense linear algebra without LAPACK: values, derivatives, loops, linkers.

Every reference here is LAPACK's: SciPy's own LAPACK (``scipy.linalg``) for
the factorisations, and the same JAX program compiled with
``jax_ofg__small_linalg_max_size = 0`` (jaxlib's LAPACK calls) for whole
programs.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from _linkers import LINKER_MODES, compile_function

import pytensor.tensor as pt
from pytensor.compile._jax_ofg import small_linalg
from pytensor.compile._jax_ofg.cache.api import environment_fingerprint
from pytensor.compile.jax_ofg import as_jax_op


RNG = np.random.default_rng(20261206)


def lapack_calls(fn, *args) -> list[str]:
    """The LAPACK kernels in ``fn``'s program lowered for the CPU."""
    return re.findall(r"lapack_\w+", jax.jit(fn).lower(*args).as_text())


def compiled_with_lapack(fn, *args):
    """``fn`` compiled for ``args`` with jaxlib's LAPACK calls (the reference)."""
    with small_linalg.max_size_set_to(0):
        compiled = jax.jit(fn).lower(*args).compile()
    assert "lapack_" in compiled.as_text()  # the reference really calls LAPACK
    return compiled


def matrices(n: int) -> dict[str, np.ndarray]:
    """Square matrices that exercise LU's pivoting."""
    general = RNG.standard_normal((n, n))
    needs_pivoting = general.copy()
    needs_pivoting[0, 0] = 1e-9  # a tiny first pivot: rows must swap
    permuted = np.eye(n)[::-1] + 1e-3 * RNG.standard_normal((n, n))
    u, _, vt = np.linalg.svd(general)
    near_singular = u @ np.diag(np.logspace(0, -12, n)) @ vt
    ties = np.ones((n, n)) + np.diag(np.arange(n))  # equal magnitudes: first wins
    return {
        "general": general,
        "needs pivoting": needs_pivoting,
        "permuted": permuted,
        "near singular": near_singular,
        "ties": ties,
    }


CASES = [(n, name) for n in (1, 2, 3, 5, 8, 10) for name in matrices(n)]


@pytest.mark.parametrize(("n", "name"), CASES)
def test_lu_equals_lapacks_getrf(n, name):
    a = matrices(n)[name]
    packed, pivots, permutation = jax.jit(jax.lax.linalg.lu)(a)
    expected, expected_pivots = scipy.linalg.lu_factor(a, check_finite=False)
    assert lapack_calls(jax.lax.linalg.lu, a) == []
    np.testing.assert_array_equal(pivots, expected_pivots)
    scale = np.abs(a).max()
    # Another order of the same operations: equal to rounding, which a
    # condition number of 1e12 amplifies in the trailing factors (up to about
    # eps * 1e12 = 1e-4 relative; both are backward stable: the product check
    # below holds to rounding for both).
    rtol = 1e-4 if name == "near singular" else 1e-12
    np.testing.assert_allclose(packed, expected, rtol=rtol, atol=1e-13 * scale)
    lower = np.tril(np.asarray(packed), -1) + np.eye(n)
    np.testing.assert_allclose(
        lower @ np.triu(packed), a[np.asarray(permutation)], atol=1e-13 * scale
    )


def test_an_exactly_singular_matrix_gives_getrfs_factors():
    a = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0], [1.0, 3.0, 4.0]])
    packed, pivots, _ = jax.jit(jax.lax.linalg.lu)(a)
    expected, expected_pivots = scipy.linalg.lu_factor(a, check_finite=False)
    np.testing.assert_array_equal(pivots, expected_pivots)
    np.testing.assert_allclose(packed, expected, atol=1e-15)


@pytest.mark.parametrize("n", [2, 4, 7])
def test_solves_equal_lapacks_batched_under_vmap(n):
    a = np.stack([matrices(n)[name] for name in ("general", "needs pivoting")] * 3)
    b = RNG.standard_normal((6, n, 3))
    solve = jax.vmap(jnp.linalg.solve)
    assert lapack_calls(solve, a, b) == []
    expected = compiled_with_lapack(solve, a, b)(a, b)
    np.testing.assert_allclose(solve(a, b), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        np.einsum("bij,bjk->bik", a, solve(a, b)), b, rtol=1e-8, atol=1e-10
    )


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
def test_triangular_solves_equal_lapacks(left_side, lower, transpose_a, unit_diagonal):
    n = 5
    a = RNG.standard_normal((n, n)) + 3 * np.eye(n)
    b = RNG.standard_normal((n, 4) if left_side else (4, n))
    params = {
        "left_side": left_side,
        "lower": lower,
        "transpose_a": transpose_a,
        "conjugate_a": False,
        "unit_diagonal": unit_diagonal,
    }

    def solve(a, b):
        return jax.lax.linalg.triangular_solve(a, b, **params)

    assert lapack_calls(solve, a, b) == []
    triangle = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        np.fill_diagonal(triangle, 1.0)
    op = triangle.T if transpose_a else triangle
    expected = np.linalg.solve(op, b) if left_side else np.linalg.solve(op.T, b.T).T
    np.testing.assert_allclose(jax.jit(solve)(a, b), expected, rtol=1e-10)


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_cholesky_equals_lapacks_potrf(n):
    root = RNG.standard_normal((n, n))
    spd = root @ root.T + n * np.eye(n)
    # potrf reads the lower triangle only: garbage above must not matter
    garbage = spd + np.triu(RNG.standard_normal((n, n)), 1)
    factor = jax.jit(lambda x: jax.lax.linalg.cholesky(x, symmetrize_input=False))
    assert lapack_calls(factor, garbage) == []
    np.testing.assert_allclose(factor(garbage), np.linalg.cholesky(spd), rtol=1e-12)


def test_a_matrix_that_is_not_positive_definite_gives_nan_as_with_lapack():
    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])
    ours = jax.jit(jnp.linalg.cholesky)(indefinite)
    expected = compiled_with_lapack(jnp.linalg.cholesky, indefinite)(indefinite)
    # NaN wherever the factor has entries (jnp.linalg.cholesky zeroes the rest)
    assert np.isnan(np.asarray(expected)[np.tril_indices(2)]).all()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))


def test_larger_matrices_and_other_dtypes_keep_lapack():
    size = small_linalg.max_size()
    large = RNG.standard_normal((size + 1, size + 1))
    assert "lapack_dgetrf_ffi" in lapack_calls(jax.lax.linalg.lu, large)
    small = RNG.standard_normal((2, 2))
    assert "lapack_cgetrf_ffi" in lapack_calls(
        jax.lax.linalg.lu, small.astype(np.complex64)
    )
    assert lapack_calls(jax.lax.linalg.lu, small.astype(np.float32)) == []
    with small_linalg.max_size_set_to(0):
        assert "lapack_dgetrf_ffi" in lapack_calls(jax.lax.linalg.lu, small)


def test_the_setting_is_part_of_every_trace_cache_key():
    before = environment_fingerprint()
    with small_linalg.max_size_set_to(small_linalg.max_size() + 1):
        assert environment_fingerprint() != before
    assert environment_fingerprint() == before


def _logp(a_flat, b):
    """A Gaussian log-density through a solve and a Cholesky factor."""
    a = a_flat.reshape(3, 3)
    cov = a @ a.T + 3.0 * jnp.eye(3)
    factor = jnp.linalg.cholesky(cov)
    z = jax.scipy.linalg.solve_triangular(factor, b, lower=True)
    x = jnp.linalg.solve(a + 2.0 * jnp.eye(3), b)
    return -0.5 * z @ z - jnp.log(jnp.diag(factor)).sum() + jnp.sum(x)


@pytest.mark.parametrize(("linker", "mode"), LINKER_MODES)
def test_wrapped_value_and_gradient_equal_lapacks_in_every_linker(linker, mode):
    a_value = matrices(3)["needs pivoting"].ravel()
    b_value = RNG.standard_normal(3)
    reference = compiled_with_lapack(
        jax.value_and_grad(_logp, argnums=(0, 1)), a_value, b_value
    )
    expected_value, (expected_da, expected_db) = reference(a_value, b_value)

    a, b = pt.tensor("a", shape=(9,)), pt.tensor("b", shape=(3,))
    logp = as_jax_op(_logp)(a, b)
    f = compile_function([a, b], [logp, *pt.grad(logp, [a, b])], mode=mode)
    value, da, db = f(a_value, b_value)
    np.testing.assert_allclose(value, expected_value, rtol=1e-12)
    np.testing.assert_allclose(da, expected_da, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, expected_db, rtol=1e-9, atol=1e-12)
    # and against finite differences of the wrapped value itself
    step = 1e-6
    direction = RNG.standard_normal(9)
    central = (
        f(a_value + step * direction, b_value)[0]
        - f(a_value - step * direction, b_value)[0]
    ) / (2 * step)
    np.testing.assert_allclose(central, da @ direction, rtol=1e-5)
