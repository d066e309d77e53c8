"""benchmarks/_pk_model.py: the small dense solver gives LU's derivatives, without LAPACK."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
from _scripts import BENCHMARKS, imported_scripts


@pytest.fixture(scope="module")
def pk():
    """The benchmark's PK model, imported as a module."""
    with imported_scripts(BENCHMARKS / "_pk_model.py") as (module,):
        yield module


def lapack_calls(jitted, *args) -> list[str]:
    """Return the LAPACK kernels the lowered program of ``jitted`` calls."""
    return re.findall(r"lapack_\w+", jitted.lower(*args).as_text())


def test_the_small_dense_solver_gives_lus_jacobian_without_lapack(pk):
    theta = jnp.asarray(pk.TRUE_THETA)
    with_lu = jax.jit(jax.jacfwd(pk.solve_forward_mode))
    dense = jax.jit(jax.jacfwd(pk.solve_forward_mode_dense))
    # LU's LAPACK calls: the Newton steps' and the root find's derivative's
    assert {"lapack_dgetrf_ffi", "lapack_dtrsm_ffi"} <= set(
        lapack_calls(with_lu, theta)
    )
    assert lapack_calls(dense, theta) == []
    expected = with_lu(theta)
    assert np.all(np.isfinite(expected)) and np.abs(expected).max() > 1.0
    np.testing.assert_allclose(dense(theta), expected, rtol=1e-5, atol=1e-8)


def test_the_root_find_adjoint_is_swapped_only_inside_the_block(pk):
    original = optx.root_find
    with pk.root_find_linear_solver(pk.SmallDenseSolver()):
        assert optx.root_find is not original
    assert optx.root_find is original
    with (
        pytest.raises(RuntimeError, match="inside"),
        pk.root_find_linear_solver(pk.SmallDenseSolver()),
    ):
        raise RuntimeError("raised inside the block")
    assert optx.root_find is original
