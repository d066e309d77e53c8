"""benchmarks/_pk_model.py: ``diffrax.Kvaerno5()`` as written, lowered without LAPACK.

Its Newton steps solve 2 x 2 systems with lineax's LU; the package lowers
them as unrolled XLA operations (``_jax_ofg.small_linalg``). The derivatives
in both modes must equal those of the same program with jaxlib's LAPACK calls.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _scripts import BENCHMARKS, imported_scripts

from pytensor.compile._jax_ofg import small_linalg


@pytest.fixture(scope="module")
def pk():
    """The benchmark's PK model, imported as a module."""
    with imported_scripts(BENCHMARKS / "_pk_model.py") as (module,):
        yield module


def lapack_calls(text: str) -> set[str]:
    return set(re.findall(r"lapack_\w+", text))


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_the_stiff_solves_jacobian_equals_lapacks_without_calling_it(pk, mode):
    theta = jnp.asarray(pk.TRUE_THETA)
    if mode == "reverse":
        jacobian = jax.jacrev(pk.solve)
    else:
        jacobian = jax.jacfwd(pk.solve_forward_mode)
    with small_linalg.max_size_set_to(0):
        lapack = jax.jit(jacobian).lower(theta).compile()
    # LU's LAPACK calls: the Newton steps' and the root find's derivative's
    assert {"lapack_dgetrf_ffi", "lapack_dtrsm_ffi"} <= lapack_calls(lapack.as_text())
    ours = jax.jit(jacobian).lower(theta).compile()
    assert lapack_calls(ours.as_text()) == set()
    expected = lapack(theta)
    assert np.all(np.isfinite(expected)) and np.abs(expected).max() > 1.0
    np.testing.assert_allclose(ours(theta), expected, rtol=1e-7, atol=1e-10)
