"""examples/stan_ode.py: the lynx-hare model, ported with Stan's toolkit.

The toolkit itself (``diffrax_settings``, ``stan_initvals``) is tested in
``tests/compile/test_jax_ofg_stan.py``.
"""

import numpy as np
import pytest
from _fresh_process import run_python
from _scripts import EXAMPLES, imported_scripts
from scipy.integrate import solve_ivp

from pytensor.compile.jax_ofg import stan_initvals


SCRIPT = EXAMPLES / "stan_ode.py"


@pytest.fixture(scope="module")
def example():
    """The example script, imported as a module (its ``main`` is not run)."""
    with imported_scripts(SCRIPT) as (module,):
        yield module


# -- Stan's starting points -------------------------------------------------------


def test_stan_initvals_are_uniform_on_the_unconstrained_scale(example):
    model = example.build_model()
    points = stan_initvals(model, chains=4, seed=3)
    assert len(points) == 4
    unconstrained = []
    for point in points:
        assert set(point) == {"theta", "z_init", "sigma"}
        assert (point["theta"] > 0).all() and point["theta"].shape == (4,)
        values = []
        for rv in model.free_RVs:
            transform = model.rvs_to_transforms[rv]
            values.append(
                np.asarray(transform.forward(point[rv.name], *rv.owner.inputs).eval())
            )
        unconstrained.append(np.concatenate(values))
    unconstrained = np.array(unconstrained)
    assert unconstrained.shape == (4, 8)
    assert (np.abs(unconstrained) < 2).all()
    assert np.unique(unconstrained).size == unconstrained.size  # no two alike
    # same seed, same points
    again = stan_initvals(model, chains=4, seed=3)
    np.testing.assert_array_equal(again[2]["sigma"], points[2]["sigma"])


# -- the lynx-hare model -------------------------------------------------------------


def test_data_are_hudsons_bay_pelts(example):
    assert example.YEARS[0] == 1900 and example.YEARS[-1] == 1920
    assert example.HARE.shape == example.LYNX.shape == (21,)
    assert (example.HARE[:4].tolist(), example.LYNX[:4].tolist()) == (
        [30.0, 47.2, 70.2, 77.4],
        [4.0, 6.1, 9.8, 35.2],
    )
    np.testing.assert_array_equal(example.TS, np.arange(1.0, 21.0))


def test_solve_matches_scipy(example):
    import pytensor.tensor as pt

    z_init = pt.tensor("z_init", shape=(2,), dtype="float64")
    theta = pt.tensor("theta", shape=(4,), dtype="float64")
    values = {z_init: [33.9, 5.9], theta: [0.55, 0.028, 0.80, 0.024]}
    ours = example.solve_lv(z_init, theta).eval(values)
    tight = example.solve_lv(
        z_init, theta, stan_function="ode_rk45_tol", rtol=1e-10, atol=1e-10
    ).eval(values)
    reference = solve_ivp(
        lambda t, z: np.asarray(example.lotka_volterra(t, z, values[theta])),
        (0.0, 20.0),
        values[z_init],
        method="DOP853",
        t_eval=example.TS,
        rtol=1e-12,
        atol=1e-10,
    ).y.T
    assert ours.shape == (20, 2)
    np.testing.assert_allclose(tight, reference, rtol=1e-7)
    np.testing.assert_allclose(ours, reference, rtol=1e-3)


def test_failed_solve_is_nan(example):
    import pytensor.tensor as pt

    theta = pt.tensor("theta", shape=(4,), dtype="float64")
    # at 1e-12 the solve takes far more than 2 * 1 * 20 steps
    states = example.solve_lv(
        np.array([33.9, 5.9]),
        theta,
        stan_function="ode_rk45_tol",
        rtol=1e-12,
        atol=1e-12,
        max_num_steps=1,
    )
    assert np.isnan(states.eval({theta: [0.55, 0.028, 0.80, 0.024]})).all()


# -- the script ----------------------------------------------------------------------


def test_arguments(example):
    full = example.parse_args([])
    assert (full.sampler, full.start, full.chains, full.tune, full.draws) == (
        "nutpie",
        "prior",
        4,
        1000,
        1000,
    )
    quick = example.parse_args(["--quick", "--draws", "10"])
    assert (quick.chains, quick.tune, quick.draws) == (2, 100, 10)


def test_initvals_for_each_sampler(example):
    model = example.build_model()
    assert example.initvals_for("default", model, 4, "nutpie") is None
    assert example.initvals_for("prior", model, 4, "pymc") is example.PRIOR_LOCATIONS
    per_chain = example.initvals_for("stan", model, 4, "numpyro")
    assert len(per_chain) == 4
    # nutpie takes one point (and jitters it per chain)
    one = example.initvals_for("stan", model, 4, "nutpie")
    np.testing.assert_array_equal(one["theta"], per_chain[0]["theta"])


@pytest.mark.slow
def test_quick_run_as_a_script(tmp_path):
    """``--quick`` (what CI runs): a short nutpie fit from the priors' locations."""
    result = run_python([str(SCRIPT), "--quick"], tmp_path, timeout=600)
    out = result.stdout
    assert "2 chains of 100 tuning + 100 draws (nutpie, start: prior)" in out
    for name in ("theta[0]", "theta[3]", "z_init[1]", "sigma[1]"):
        assert f"\n{name} " in out, name
    assert " divergent, R-hat <= " in out
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_quick_run_with_chains_in_processes(tmp_path):
    """``--sampler nutpie-processes``: the chains in worker processes, one per core."""
    result = run_python(
        [str(SCRIPT), "--quick", "--sampler", "nutpie-processes"], tmp_path, timeout=600
    )
    out = result.stdout
    assert "2 chains of 100 tuning + 100 draws (nutpie-processes, start: prior)" in out
    # The prey's growth rate: 0.55 in the case study's posterior (sd 0.07), 1.0
    # where the chains start.
    growth = float(out.split("\ntheta[0] ")[1].split()[0])
    assert 0.4 < growth < 0.7, growth
    assert " divergent, R-hat <= " in out
    assert "Traceback" not in result.stderr
