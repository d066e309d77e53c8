"""examples/stan_ode.py: Stan's ODE settings in diffrax, Stan's starting points, the lynx-hare model."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import run_python
from _scripts import EXAMPLES, imported_scripts
from scipy.integrate import solve_ivp


SCRIPT = EXAMPLES / "stan_ode.py"


@pytest.fixture(scope="module")
def example():
    """The example script, imported as a module (its ``main`` is not run)."""
    with imported_scripts(SCRIPT) as (module,):
        yield module


# Stan's documented defaults (Functions Reference; User's Guide, "Control
# parameters for ODE solving"): the ode_* functions 1e-6, 1e-6 and 1e6 steps
# between output times; the old integrate_ode_bdf and integrate_ode_adams
# 1e-10, 1e-10 and 1e8; integrate_ode_rk45 1e-6, 1e-6 and 1e6.
STAN_DEFAULTS = {
    "ode_rk45": (1e-6, 1e-6, 10**6),
    "ode_ckrk": (1e-6, 1e-6, 10**6),
    "ode_adams": (1e-6, 1e-6, 10**6),
    "ode_bdf": (1e-6, 1e-6, 10**6),
    "integrate_ode_rk45": (1e-6, 1e-6, 10**6),
    "integrate_ode_adams": (1e-10, 1e-10, 10**8),
    "integrate_ode_bdf": (1e-10, 1e-10, 10**8),
}
STIFF = {"ode_bdf", "ode_bdf_tol", "integrate_ode_bdf"}


@pytest.mark.parametrize("name", sorted(STAN_DEFAULTS))
def test_defaults_are_stans(example, name):
    rtol, atol, steps = STAN_DEFAULTS[name]
    settings = example.diffrax_settings(name, n_outputs=3)
    controller = settings["stepsize_controller"]
    assert isinstance(controller, diffrax.PIDController)
    assert (controller.rtol, controller.atol) == (rtol, atol)
    # Stan's budget is per output interval: 3 of them
    assert settings["max_steps"] >= 3 * steps
    if name in STIFF:
        assert settings["solver"].__class__ is diffrax.Kvaerno5
    else:
        assert not isinstance(settings["solver"], diffrax.AbstractImplicitSolver)
    if "rk45" in name:
        # the same Runge-Kutta pair, and Boost's first step in Stan
        assert isinstance(settings["solver"], diffrax.Dopri5)
        assert settings["dt0"] == 0.1


def test_tol_variants_take_the_arguments(example):
    settings = example.diffrax_settings("ode_bdf_tol", 1e-7, 1e-9, 500, n_outputs=4)
    controller = settings["stepsize_controller"]
    assert (controller.rtol, controller.atol) == (1e-7, 1e-9)
    assert settings["dt0"] is None  # CVODES picks its first step; so does diffrax
    with pytest.raises(ValueError, match="no default for rtol, atol, max_num_steps"):
        example.diffrax_settings("ode_rk45_tol", n_outputs=4)
    with pytest.raises(ValueError, match="unknown Stan ODE function 'ode_rk4'"):
        example.diffrax_settings("ode_rk4", n_outputs=4)
    with pytest.raises(ValueError, match="n_outputs"):
        example.diffrax_settings("ode_rk45", n_outputs=0)


def test_checkpoints_do_not_follow_the_budget(example):
    small = example.diffrax_settings("ode_rk45", max_num_steps=100, n_outputs=2)
    large = example.diffrax_settings("integrate_ode_bdf", n_outputs=20)
    assert small["adjoint"].checkpoints == large["adjoint"].checkpoints
    default = example.diffrax_settings("ode_rk45", n_outputs=2, checkpoints=None)
    assert default["adjoint"].checkpoints is None


# -- Stan's accept/reject rule near the budget ---------------------------------
#
# A harmonic oscillator of 5 periods per time unit at tight tolerances takes
# about the same number of steps in each of its output intervals. Stan rejects a
# solve when the steps between two consecutive output times exceed
# max_num_steps (counting accepted steps). The steps per interval are counted
# here from diffrax's own accepted steps (SaveAt(steps=True)).

OMEGA = 2 * np.pi * 5
TS = np.arange(1.0, 9.0)


def oscillator(t, y, args):
    return jnp.stack([y[1], -(OMEGA**2) * y[0]])


def solve(settings, saveat):
    return diffrax.diffeqsolve(
        diffrax.ODETerm(oscillator),
        t0=0.0,
        t1=float(TS[-1]),
        y0=jnp.array([1.0, 0.0]),
        saveat=saveat,
        throw=False,
        **settings,
    )


@pytest.fixture(scope="module")
def steps_per_interval(example):
    """Accepted steps of the helper's solver between consecutive output times."""
    jax.config.update("jax_enable_x64", True)
    settings = example.diffrax_settings(
        "ode_rk45_tol", 1e-8, 1e-8, 10**6, n_outputs=len(TS)
    )
    solution = solve(settings, diffrax.SaveAt(steps=True))
    assert solution.result == diffrax.RESULTS.successful
    step_ends = np.asarray(solution.ts)
    step_ends = step_ends[np.isfinite(step_ends)]
    edges = np.concatenate([[0.0], TS])
    # a step ending exactly on an output time belongs to the interval it closes
    counts = np.histogram(step_ends, bins=edges)[0]
    assert counts.sum() == len(step_ends)
    return counts


def test_oscillator_needs_many_steps_in_every_interval(steps_per_interval):
    assert steps_per_interval.min() > 50
    assert steps_per_interval.max() < 1.5 * steps_per_interval.min()


def test_accepts_what_stan_accepts(example, steps_per_interval):
    """Stan's budget = the most steps any interval needs: Stan accepts; so must we."""
    budget = int(steps_per_interval.max())
    settings = example.diffrax_settings(
        "ode_rk45_tol", 1e-8, 1e-8, budget, n_outputs=len(TS)
    )
    solution = solve(settings, diffrax.SaveAt(ts=TS))
    assert solution.result == diffrax.RESULTS.successful
    exact = np.cos(OMEGA * TS)
    np.testing.assert_allclose(np.asarray(solution.ys[:, 0]), exact, atol=1e-5)
    # the one-to-one port (max_steps = max_num_steps) rejects it
    one_to_one = dict(settings, max_steps=budget)
    assert solve(one_to_one, diffrax.SaveAt(ts=TS)).result != diffrax.RESULTS.successful


def test_rejects_a_solve_far_over_stans_budget(example, steps_per_interval):
    """Every interval needs more than twice the budget: Stan rejects, so do we."""
    budget = int(steps_per_interval.min()) // 2 - 1
    assert (steps_per_interval > budget).all()  # Stan's rule: rejected
    settings = example.diffrax_settings(
        "ode_rk45_tol", 1e-8, 1e-8, budget, n_outputs=len(TS)
    )
    solution = solve(settings, diffrax.SaveAt(ts=TS))
    assert solution.result == diffrax.RESULTS.max_steps_reached


# -- Stan's starting points -------------------------------------------------------


def test_stan_initvals_are_uniform_on_the_unconstrained_scale(example):
    model = example.build_model()
    points = example.stan_initvals(model, chains=4, seed=3)
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
    again = example.stan_initvals(model, chains=4, seed=3)
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
