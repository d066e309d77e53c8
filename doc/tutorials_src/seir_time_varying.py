"""
An epidemic with a time-varying transmission rate
=================================================

Interventions change how fast an epidemic spreads: the transmission rate
``beta`` is not a constant but a curve in time. This tutorial fits an SEIR
model whose ``beta(t)`` is a smooth interpolation of its values at eight
knots, two weeks apart, to 14 weeks of daily case counts. Two JAX functions
are wrapped, and one takes the other:

* ``transmission_rate`` builds the interpolation from the knot values and
  **returns a function**, ``beta(t)``;
* ``solve_seir`` takes that function and calls it inside diffrax's vector
  field.

PyTensor passes the returned function from one op to the other as a
*symbolic callable*: the two are composed inside one JAX trace, and
gradients flow from the likelihood through the solver and the interpolation
to the knots. This is a short version of the repository's main example,
``examples/seir_time_varying.py`` (``bash scripts/example``), which fits the
same model with three samplers.
"""

# %%
# The model and its JAX pieces
# ----------------------------
#
# The population (one million) is split into susceptible ``S``, exposed
# ``E``, infectious ``I`` and recovered ``R`` fractions; ``C`` counts the
# symptom onsets so far, so that each day's new cases are its increments:
#
# .. code-block:: text
#
#     dS/dt = -beta(t) S I         dE/dt = beta(t) S I - E / 4
#     dI/dt = E / 4 - I / 5        dR/dt = I / 5          dC/dt = E / 4
#
# (4 days' incubation, 5 days infectious). ``log(beta)`` is interpolated by a
# cubic Hermite spline through the knots, so ``beta`` stays positive.

import arviz as az
import diffrax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


population = 1_000_000
n_days = 98
days = np.arange(n_days + 1.0)  # the solution is saved at the start of each day
knot_times = np.linspace(0.0, n_days, 8)


@as_jax_op
def transmission_rate(knot_times, log_beta):
    coefficients = diffrax.backward_hermite_coefficients(knot_times, log_beta)
    log_path = diffrax.CubicInterpolation(knot_times, coefficients)
    log_beta_at = jnp.vectorize(log_path.evaluate)
    return lambda t: jnp.exp(log_beta_at(t))  # a function: returned as is


@as_jax_op
def solve_seir(beta, i0, days):
    def vector_field(t, state, args):
        s, e, i, _, _ = state
        infections = beta(t) * s * i  # the other op's function, called here
        return jnp.stack([-infections, infections - e / 4, e / 4 - i / 5, i / 5, e / 4])

    zero = jnp.zeros_like(i0)
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        diffrax.Tsit5(),
        t0=days[0],
        t1=days[-1],
        dt0=0.5,
        y0=jnp.stack([1.0 - 2.0 * i0, i0, i0, zero, zero]),
        saveat=diffrax.SaveAt(ts=days),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-9),
        throw=False,
    )
    ok = solution.result == diffrax.RESULTS.successful
    return jnp.where(ok, solution.ys, jnp.nan)


def build_model():
    coords = {"knot": knot_times.astype(int), "time": days.astype(int)}
    coords["day"] = coords["time"][1:]
    with pm.Model(coords=coords) as model:
        log_beta = pm.GaussianRandomWalk(
            "log_beta",
            sigma=0.5,
            init_dist=pm.Normal.dist(np.log(0.4), 0.5),
            steps=7,
            dims="knot",
        )
        i0 = pm.LogNormal("i0", mu=np.log(1e-4), sigma=1.0)
        alpha = pm.Exponential("alpha", scale=20.0)

        beta = transmission_rate(knot_times, log_beta)  # a symbolic callable
        pm.Deterministic("beta", beta(pt.as_tensor(days)), dims="time")
        states = solve_seir(beta, i0, days)
        onsets = population * pt.diff(states[:, 4])
        expected = pm.Deterministic("expected", pt.maximum(onsets, 1e-6), dims="day")
        pm.NegativeBinomial("cases", mu=expected, alpha=alpha, dims="day")
    return model


# %%
# Data from known knots
# ---------------------
#
# A fast first wave, interventions that push ``beta`` below the recovery
# rate (0.2 per day), a relaxation that starts a second wave, and new
# measures. ``pm.do`` fixes the parameters at these values and ``pm.draw``
# simulates the daily cases from the model itself.

true_knots = np.array([0.55, 0.45, 0.26, 0.17, 0.22, 0.32, 0.24, 0.15])
truth = {"log_beta": np.log(true_knots), "i0": 1e-4, "alpha": 20.0}
true_model = pm.do(build_model(), truth)
cases, true_beta = pm.draw([true_model["cases"], true_model["beta"]], random_seed=2024)
print(f"{cases.sum():,} cases in {n_days} days, at most {cases.max():,} a day")

# %%
# Sampling
# --------
#
# ``pm.observe`` attaches the data; ``pm.sample()`` (nutpie) draws 2 chains
# of 300 tuning steps and 300 draws (short, for the documentation build; the
# main example runs 4 chains of 500 + 500).

model = pm.observe(build_model(), {"cases": cases})
with model:
    idata = pm.sample(draws=300, tune=300, chains=2, random_seed=1, progressbar=False)

summary = az.summary(idata, var_names=["log_beta", "i0", "alpha"])
print(summary[["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]].round(3))
print(f"divergent transitions: {int(idata['sample_stats']['diverging'].sum())}")

# %%
# Convergence: rank plots of the knots
# ------------------------------------
#
# One panel per knot, one line per chain: how far the empirical CDF of the
# chain's ranks among all draws strays from a uniform one. Chains that agree
# wander around zero together; the p-value above each panel falls below
# the level shown beside it (alpha) when one does not.

az.plot_rank(
    idata,
    var_names=["log_beta"],
    backend="matplotlib",
    figure_kwargs={"figsize": (8, 4.5)},
)

# %%
# The transmission rate and the posterior predictive check
# --------------------------------------------------------
#
# Top: new cases drawn again for every posterior draw (the band holds 90% of
# them) over the data. Bottom: the posterior of ``beta(t)`` over the curve
# the data were simulated from; the dotted line is the recovery rate, above
# which the epidemic grows.

with model:
    pm.sample_posterior_predictive(
        idata, extend_inferencedata=True, random_seed=1, progressbar=False
    )


def band(ax, x, draws, label):
    low, mid, high = np.quantile(
        draws.reshape(-1, draws.shape[-1]), [0.05, 0.5, 0.95], axis=0
    )
    ax.fill_between(x, low, high, color="C0", alpha=0.3)
    ax.plot(x, mid, color="C0", label=label)


fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
band(
    top, days[1:], idata["posterior_predictive"]["cases"].values, "posterior predictive"
)
top.plot(days[1:], cases, "o", color="black", ms=2.5, label="data")
top.set_ylabel("new cases per day")
top.legend(fontsize="small")
band(bottom, days, idata["posterior"]["beta"].values, "posterior (median, 5%-95%)")
bottom.plot(days, true_beta, "--", color="black", label="true beta(t)")
bottom.plot(knot_times, true_knots, "s", color="black", ms=4, label="true knots")
bottom.axhline(0.2, color="gray", ls=":", lw=1, label="recovery rate")
bottom.set(xlabel="day", ylabel="beta(t) per day")
bottom.legend(fontsize="small", ncol=2)
fig.tight_layout()

# %%
# The posterior follows the true curve through both waves; it is widest at
# the ends, where fewer cases inform the knots (the last knot only shapes
# the final days). Every gradient of this fit went through two composed ops:
# the interpolation built by one and called, inside the ODE, by the other.

# sphinx_gallery_thumbnail_number = 2
