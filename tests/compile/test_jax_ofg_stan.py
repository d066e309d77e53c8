"""Stan's porting toolkit (``_jax_ofg.stan``): ODE settings, starting points, bounds.

Values are checked against Stan's documented rules and against direct
computation: Stan's accept/reject rule near the step budget on an oscillator
whose steps per interval are counted here, log-densities and gradients
compiled here from the same model.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytest
from _fresh_process import run_script

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import (
    as_jax_op,
    diffrax_settings,
    stan_bound,
    stan_initvals,
)


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
def test_defaults_are_stans(name):
    rtol, atol, steps = STAN_DEFAULTS[name]
    settings = diffrax_settings(name, n_outputs=3)
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


def test_tol_variants_take_the_arguments():
    settings = diffrax_settings("ode_bdf_tol", 1e-7, 1e-9, 500, n_outputs=4)
    controller = settings["stepsize_controller"]
    assert (controller.rtol, controller.atol) == (1e-7, 1e-9)
    assert settings["dt0"] is None  # CVODES picks its first step; so does diffrax
    with pytest.raises(ValueError, match="no default for rtol, atol, max_num_steps"):
        diffrax_settings("ode_rk45_tol", n_outputs=4)
    with pytest.raises(ValueError, match="n_outputs"):
        diffrax_settings("ode_rk45", n_outputs=0)
    with pytest.raises(ValueError, match="rtol must be positive, got 0"):
        diffrax_settings("ode_rk45_tol", 0.0, 1e-6, 100, n_outputs=4)
    with pytest.raises(ValueError, match="max_num_steps must be positive, got -1"):
        diffrax_settings("ode_bdf", max_num_steps=-1, n_outputs=4)


#: Every ODE function of Stan's Functions Reference (Stan 2.24 and later, and
#: the deprecated integrate_ode_* ones), but the adjoint method.
STAN_FUNCTIONS = [
    "ode_rk45",
    "ode_rk45_tol",
    "ode_ckrk",
    "ode_ckrk_tol",
    "ode_adams",
    "ode_adams_tol",
    "ode_bdf",
    "ode_bdf_tol",
    "integrate_ode_rk45",
    "integrate_ode_adams",
    "integrate_ode_bdf",
]


@pytest.mark.parametrize("name", [n for n in STAN_FUNCTIONS if n.endswith("_tol")])
def test_tol_forms_solve_as_their_function(name):
    """Each _tol form: its function's integrator, the settings given."""
    settings = diffrax_settings(name, 1e-5, 1e-7, 300, n_outputs=5)
    base = diffrax_settings(name.removesuffix("_tol"), n_outputs=5)
    assert type(settings["solver"]) is type(base["solver"])
    assert settings["dt0"] == base["dt0"]
    controller = settings["stepsize_controller"]
    assert (controller.rtol, controller.atol) == (1e-5, 1e-7)
    assert settings["max_steps"] >= 300 * 5


def test_unknown_function_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown Stan ODE function 'ode_rk4'") as e:
        diffrax_settings("ode_rk4", n_outputs=4)
    known = str(e.value).split("; one of ")[1]
    assert sorted(known.split(", ")) == sorted(STAN_FUNCTIONS)
    with pytest.raises(ValueError, match="port it as ode_bdf_tol or ode_adams_tol"):
        diffrax_settings("ode_adjoint_tol_ctl", n_outputs=4)


def test_checkpoints_do_not_follow_the_budget():
    small = diffrax_settings("ode_rk45", max_num_steps=100, n_outputs=2)
    large = diffrax_settings("integrate_ode_bdf", n_outputs=20)
    assert small["adjoint"].checkpoints == large["adjoint"].checkpoints
    default = diffrax_settings("ode_rk45", n_outputs=2, checkpoints=None)
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
def steps_per_interval():
    """Accepted steps of the helper's solver between consecutive output times."""
    jax.config.update("jax_enable_x64", True)
    settings = diffrax_settings("ode_rk45_tol", 1e-8, 1e-8, 10**6, n_outputs=len(TS))
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


def test_accepts_what_stan_accepts(steps_per_interval):
    """Stan's budget = the most steps any interval needs: Stan accepts; so must we."""
    budget = int(steps_per_interval.max())
    settings = diffrax_settings("ode_rk45_tol", 1e-8, 1e-8, budget, n_outputs=len(TS))
    solution = solve(settings, diffrax.SaveAt(ts=TS))
    assert solution.result == diffrax.RESULTS.successful
    exact = np.cos(OMEGA * TS)
    np.testing.assert_allclose(np.asarray(solution.ys[:, 0]), exact, atol=1e-5)
    # the one-to-one port (max_steps = max_num_steps) rejects it
    one_to_one = dict(settings, max_steps=budget)
    assert solve(one_to_one, diffrax.SaveAt(ts=TS)).result != diffrax.RESULTS.successful


def test_rejects_a_solve_far_over_stans_budget(steps_per_interval):
    """Every interval needs more than twice the budget: Stan rejects, so do we."""
    budget = int(steps_per_interval.min()) // 2 - 1
    assert (steps_per_interval > budget).all()  # Stan's rule: rejected
    settings = diffrax_settings("ode_rk45_tol", 1e-8, 1e-8, budget, n_outputs=len(TS))
    solution = solve(settings, diffrax.SaveAt(ts=TS))
    assert solution.result == diffrax.RESULTS.max_steps_reached


# -- Stan's starting points -------------------------------------------------------


def test_stan_initvals_are_uniform_on_the_unconstrained_scale():
    with pm.Model() as model:
        pm.HalfNormal("sigma", sigma=1.0)
        pm.Beta("p", alpha=2.0, beta=2.0)
        pm.Normal("mu", mu=10.0, sigma=0.1, shape=3)
    points = stan_initvals(model, chains=5, seed=3)
    assert len(points) == 5
    unconstrained = np.array(
        [
            [
                np.log(point["sigma"]),
                np.log(point["p"] / (1 - point["p"])),
                *point["mu"],
            ]
            for point in points
        ]
    )
    assert unconstrained.shape == (5, 5)
    # PyMC's own start is far outside: mu at 10, not in (-2, 2)
    assert (np.abs(unconstrained) < 2).all()
    assert np.unique(unconstrained).size == unconstrained.size  # no two alike
    again = stan_initvals(model, chains=5, seed=3)
    np.testing.assert_array_equal(again[4]["mu"], points[4]["mu"])
    other = stan_initvals(model, chains=5, seed=4)
    assert not np.array_equal(other[4]["mu"], points[4]["mu"])
    smaller = stan_initvals(model, chains=5, seed=3, radius=0.5)
    assert all(np.abs(point["mu"]).max() < 0.5 for point in smaller)


def _finite_at(model, points) -> list[bool]:
    """Whether the model's log-density and gradient, compiled here, are finite."""
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    finite = []
    for point in points:
        unconstrained = {}
        for rv in model.free_RVs:
            value = np.asarray(point[rv.name])
            transform = model.rvs_to_transforms[rv]
            if transform is not None:
                value = transform.forward(value, *rv.owner.inputs).eval()
            unconstrained[model.rvs_to_values[rv].name] = value
        finite.append(
            bool(np.isfinite(logp(unconstrained)))
            and bool(np.isfinite(dlogp(unconstrained)).all())
        )
    return finite


def test_stan_initvals_draw_again_where_the_log_density_is_not_finite():
    # finite only where both coordinates exceed 1: 1 draw in 16
    with pm.Model() as model:
        x = pm.Normal("x", mu=0.0, sigma=1.0, shape=2)
        pm.Potential("corner", pt.switch(pt.all(x > 1), 0.0, -np.inf))
    points = stan_initvals(model, chains=6, seed=0)
    assert len(points) == 6
    assert all((point["x"] > 1).all() and (point["x"] < 2).all() for point in points)
    assert all(_finite_at(model, points))


def test_stan_initvals_draw_again_where_the_gradient_is_not_finite():
    # The log-density is finite everywhere, its gradient NaN where x < 0: JAX
    # differentiates the branch jnp.where leaves unused too (0 * NaN).
    @as_jax_op
    def root(x):
        return jnp.where(x < 0, 0.0, jnp.sqrt(x)).sum()

    with pm.Model() as model:
        x = pm.Normal("x", mu=0.0, sigma=1.0, shape=3)
        pm.Potential("root", root(x))
    below = {"x": np.array([-1.0, 0.5, 0.5])}
    assert np.isfinite(model.compile_logp()(below))
    assert not np.isfinite(model.compile_dlogp()(below)).all()
    points = stan_initvals(model, chains=4, seed=0)
    assert all((point["x"] > 0).all() for point in points)
    assert all(_finite_at(model, points))


def test_stan_initvals_name_the_variables_when_no_draw_is_finite():
    with pm.Model() as model:
        x = pm.Normal("x", mu=0.0, sigma=1.0)
        pm.HalfNormal("scale", sigma=1.0)
        pm.Potential("far_away", pt.switch(x > 5, 0.0, -np.inf))
    with pytest.raises(ValueError) as error:
        stan_initvals(model, chains=2, seed=0)
    message = str(error.value)
    assert "no starting point for chain 0: in 100 draws" in message
    assert "(-2, 2) on the unconstrained scale" in message
    assert "free variables: x, scale (as scale_log__)" in message
    assert "the log-density of far_away was not finite" in message
    assert "initvals=" in message
    with pytest.raises(ValueError, match="in 7 draws uniform in"):
        stan_initvals(model, chains=1, attempts=7)


def test_stan_initvals_refuse_discrete_variables():
    with pm.Model() as model:
        pm.Poisson("n", mu=3.0)
    with pytest.raises(ValueError, match="discrete free variables: n"):
        stan_initvals(model, chains=1)


# -- Stan's bounds on computed quantities ----------------------------------------

DECAY_TS = np.array([0.0, 1.0, 2.0, 4.0])


@as_jax_op
def linear_decline(y0, k):
    """y0 - k t: below 0 at the last time once k > y0 / 4."""
    return y0 - k * jnp.asarray(DECAY_TS)


def decline_model(bound: bool, **bounds):
    with pm.Model() as model:
        k = pm.HalfNormal("k", sigma=1.0)
        y0 = pm.Normal("y0", mu=2.0, sigma=0.5)
        y = linear_decline(y0, k)
        if bound:
            returned = stan_bound("y_bounds", y, **bounds)
            assert returned is y
        pm.Normal("obs", mu=y, sigma=0.3, observed=[2.0, 1.6, 1.1, 0.2])
    return model


def test_stan_bound_rejects_a_proposal_that_breaks_it():
    bounded = decline_model(True, lower=0.0)
    free = decline_model(False)
    logp, dlogp = bounded.compile_logp(), bounded.compile_dlogp()
    logp_free, dlogp_free = free.compile_logp(), free.compile_dlogp()
    # k = 0.45: y = 2 - 0.45 * 4 = 0.2 >= 0 holds; the same log-density and
    # gradient as without the bound
    holds = {"k_log__": np.log(0.45), "y0": 2.0}
    assert np.isfinite(logp(holds))
    assert logp(holds) == logp_free(holds)
    np.testing.assert_array_equal(dlogp(holds), dlogp_free(holds))
    # k = 0.55: y(4) = -0.2 < 0: rejected, where the model without the bound
    # is finite
    breaks = {"k_log__": np.log(0.55), "y0": 2.0}
    assert np.isfinite(logp_free(breaks))
    assert logp(breaks) == -np.inf
    # the potential's gradient is 0 even there: no NaN enters the gradient
    np.testing.assert_array_equal(dlogp(breaks), dlogp_free(breaks))


def test_stan_bound_upper_lower_and_nan():
    with pm.Model() as model:
        x = pm.Normal("x", mu=0.0, sigma=1.0, shape=2)
        stan_bound("between", x, lower=[-1.0, 0.0], upper=1.0)
        stan_bound("not_nan", pt.log(x[1]), upper=np.inf)
    logp = model.compile_logp(vars=model.potentials)
    assert logp({"x": np.array([-1.0, 0.5])}) == 0.0  # inclusive, as Stan's
    assert logp({"x": np.array([-1.5, 0.5])}) == -np.inf  # x[0] < -1
    assert logp({"x": np.array([0.0, 1.5])}) == -np.inf  # x[1] > 1
    # x[1] = -0.5: below its lower bound 0, and log(-0.5) is NaN
    assert logp({"x": np.array([0.0, -0.5])}) == -np.inf
    nan_only = model.compile_logp(vars=model.potentials[1:])
    assert nan_only({"x": np.array([5.0, -0.5])}) == -np.inf
    assert nan_only({"x": np.array([5.0, 0.5])}) == 0.0
    with pytest.raises(ValueError, match="stan_bound 'y': give lower, upper or both"):
        stan_bound("y", x, model=model)


def test_stan_initvals_respect_a_stan_bound():
    model = decline_model(True, lower=0.0)
    points = stan_initvals(model, chains=8, seed=0)
    # half-normal k: exp(U(-2, 2)) in (0.14, 7.4); y0 in (-2, 2)
    assert all((point["y0"] - point["k"] * DECAY_TS >= 0).all() for point in points)
    assert all(_finite_at(model, points))


# -- without the examples extra ---------------------------------------------------

#: The examples extra's packages (pyproject.toml), refused in the script below.
EXTRA = ("pymc", "diffrax", "equinox", "lineax", "nutpie", "numpyro", "arviz")


def test_the_facade_imports_without_pymc_and_diffrax():
    script = f"""
import importlib.abc, sys
class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {EXTRA!r}:
            raise ImportError(f"No module named {{name!r}}")
sys.meta_path.insert(0, NoExtras())
from pytensor.compile.jax_ofg import diffrax_settings, stan_bound, stan_initvals
for call in (lambda: diffrax_settings("ode_bdf", n_outputs=3),
             lambda: stan_bound("y", 1.0, lower=0.0)):
    try:
        call()
    except ImportError as error:
        print(error)
print(sorted(name for name in {EXTRA!r} if name in sys.modules))
"""
    result = run_script(script, timeout=300)
    lines = result.stdout.strip().splitlines()
    assert lines[-3:] == [
        "diffrax_settings needs diffrax, which is not installed: it comes with "
        "the examples extra, `pip install 'pytensor-jax-ofg[examples]'`",
        "stan_bound needs pymc, which is not installed: it comes with "
        "the examples extra, `pip install 'pytensor-jax-ofg[examples]'`",
        "[]",
    ]
