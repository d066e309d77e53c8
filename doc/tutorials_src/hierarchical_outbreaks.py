"""
A hierarchical ODE model: one outbreak per school
=================================================

Ten boarding schools each had an influenza outbreak. Each school has its own
transmission rate, drawn from a distribution shared by all schools, so a
school with little data borrows strength from the others: a hierarchical
model. Every school's epidemic is an SIR ODE, and all ten are solved by
**one** wrapped function that maps diffrax's solve over the schools with
:func:`jax.vmap`: one op, one XLA program and one gradient for the whole
model, however many groups there are.

The steps:

1. simulate ten outbreaks from known parameters;
2. write the solve for one school, ``jax.vmap`` it over schools and wrap it;
3. write the hierarchical PyMC model (non-centred);
4. sample with ``pm.sample()``, check convergence with a rank plot;
5. compare each school's posterior with the truth and the data.
"""

# %%
# The data
# --------
#
# Ten schools of 300 to 900 pupils, one pupil ill on day 0 in each, the
# number of pupils in bed counted on days 1 to 14. The data are simulated
# here from known parameters, so that the fit can be checked against them:
# the school-level log transmission rates are normal around ``log(1.8)``
# with spread 0.25, the recovery rate is 0.5 per day in every school, and
# the counts are negative binomial around the solved number of infected.

import arviz as az
import diffrax
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from pytensor.compile.jax_ofg import as_jax_op


rng = np.random.default_rng(2024)
n_schools = 10
pupils = rng.integers(300, 900, size=n_schools).astype(float)
days = np.arange(1.0, 15.0)
true_beta = np.exp(np.log(1.8) + 0.25 * rng.standard_normal(n_schools))
true_gamma = 0.5
true_phi_inv = 0.1

# %%
# The ODE, for one school and for all of them
# -------------------------------------------
#
# ``solve_school`` is the SIR solve of one school, in fractions of its
# pupils, returning the infected fraction on each day. ``solve_schools``
# maps it over the schools with :func:`jax.vmap` and is the one function
# wrapped: its inputs are the vector of school transmission rates and the
# shared recovery rate; ``days`` (a NumPy array) is static. ``jax.vmap``
# batches the adaptive solve: all schools step together, with the step size
# the hardest one needs, in one loop.


def solve_school(beta, gamma, i0):
    def sir(t, y, args):
        s, i = y[0], y[1]
        infection = beta * s * i
        return jnp.stack([-infection, infection - gamma * i])

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(sir),
        diffrax.Tsit5(),
        t0=0.0,
        t1=days[-1],
        dt0=0.1,
        y0=jnp.stack([1.0 - i0, i0]),
        saveat=diffrax.SaveAt(ts=days),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-9),
        throw=False,
    )
    ok = solution.result == diffrax.RESULTS.successful
    return jnp.where(ok, solution.ys[:, 1], jnp.nan)


@as_jax_op
def solve_schools(beta, gamma, pupils):
    # one pupil infected on day 0 in every school
    return jax.vmap(solve_school, in_axes=(0, None, 0))(beta, gamma, 1.0 / pupils)


# The data: solve at the true parameters, then draw the counts.
true_infected = np.asarray(solve_schools.__wrapped__(true_beta, true_gamma, pupils))
mean_in_bed = true_infected * pupils[:, None]  # (schools, days)
in_bed = rng.negative_binomial(1 / true_phi_inv, 1 / (1 + true_phi_inv * mean_in_bed))

fig, axes = plt.subplots(2, 5, figsize=(9, 3.6), sharex=True)
for school, ax in enumerate(axes.flat):
    ax.plot(days, in_bed[school], "o", color="black", ms=3)
    ax.set_title(f"school {school} ({pupils[school]:.0f})", fontsize=8)
    ax.tick_params(labelsize=7)
fig.supxlabel("day", fontsize=9)
fig.supylabel("pupils in bed", fontsize=9)
fig.tight_layout()

# %%
# The hierarchical model
# ----------------------
#
# Each school's log transmission rate is normal around a common centre
# ``mu`` with spread ``tau``, both unknown. This is the *centred* form,
# which samples well when every group's data are informative, as a whole
# outbreak is; with little data per group, write ``mu + tau * z`` with a
# standard normal ``z`` instead (the non-centred form). The school
# dimension is a PyMC ``dims`` entry: the wrapped function gets a vector
# whose length PyMC keeps in a shared variable, and its output shape
# follows (no ``shape=`` to spell out).

coords = {"school": np.arange(n_schools), "day": days.astype(int)}
with pm.Model(coords=coords) as model:
    mu = pm.Normal("mu", mu=np.log(2.0), sigma=0.5)
    tau = pm.HalfNormal("tau", sigma=0.5)
    log_beta = pm.Normal("log_beta", mu=mu, sigma=tau, dims="school")
    beta = pm.Deterministic("beta", pm.math.exp(log_beta), dims="school")
    gamma = pm.LogNormal("gamma", mu=np.log(0.4), sigma=0.5)
    phi_inv = pm.Exponential("phi_inv", lam=5.0)

    infected = solve_schools(beta, gamma, pupils)  # (school, day)
    expected = pm.Deterministic(
        "expected", infected * pupils[:, None], dims=("school", "day")
    )
    pm.NegativeBinomial(
        "in_bed",
        mu=expected,
        alpha=1 / phi_inv,
        observed=in_bed,
        dims=("school", "day"),
    )

# %%
# Sampling
# --------
#
# ``pm.sample()`` (nutpie), 2 chains of 300 tuning steps and 300 draws: short,
# for the documentation build. Each gradient is one call of one XLA program
# holding the ten solves, their reverse-mode derivative and the likelihood.

with model:
    idata = pm.sample(draws=300, tune=300, chains=2, random_seed=11, progressbar=False)

summary = az.summary(idata, var_names=["mu", "tau", "gamma", "phi_inv", "beta"])
print(summary[["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]].round(3))
print(f"divergent transitions: {int(idata['sample_stats']['diverging'].sum())}")

# %%
# Convergence: rank plots
# -----------------------
#
# A rank plot ranks all draws of a parameter together and shows, for each
# chain, how far the empirical CDF of its ranks strays from a uniform one (one
# line per chain). Chains that sample the same distribution wander around
# zero together; a chain stuck high or low bends away from the others. The
# p-value above each panel tests exactly that: a value below the level
# shown beside it (alpha) flags it.

az.plot_rank(
    idata,
    var_names=["mu", "tau", "gamma", "phi_inv"],
    backend="matplotlib",
    figure_kwargs={"figsize": (8, 4.5)},
)

# %%
# Each school's transmission rate
# -------------------------------
#
# The posterior of each school's ``beta`` (90% interval and median) with the
# value the data were simulated from. The dashed line is the posterior median
# of the schools' common centre, ``exp(mu)``: schools with flatter outbreaks
# (less information) are pulled towards it.

beta_draws = idata["posterior"]["beta"].values.reshape(-1, n_schools)
low, mid, high = np.quantile(beta_draws, [0.05, 0.5, 0.95], axis=0)
centre = float(np.median(np.exp(idata["posterior"]["mu"].values)))

fig, ax = plt.subplots(figsize=(7, 3.2))
schools = np.arange(n_schools)
ax.errorbar(
    schools,
    mid,
    yerr=[mid - low, high - mid],
    fmt="o",
    color="C0",
    capsize=3,
    label="posterior, 5%-95%",
)
ax.plot(schools, true_beta, "x", color="black", ms=8, label="true value")
ax.axhline(centre, color="C0", ls="--", lw=1, label="exp(mu), median")
ax.set_xticks(schools)
ax.set_xlabel("school")
ax.set_ylabel("transmission rate beta (per day)")
ax.legend(fontsize="small")
plt.tight_layout()

inside = ((low <= true_beta) & (true_beta <= high)).sum()
print(f"true beta inside the 90% interval: {inside} of {n_schools} schools")

# %%
# Posterior predictive check
# --------------------------
#
# New counts drawn from the likelihood for every posterior draw: the band is
# their 90% interval, the line the solved number of infected pupils
# (median). The data should look like one of those draws in every school.

with model:
    pm.sample_posterior_predictive(
        idata, extend_inferencedata=True, random_seed=11, progressbar=False
    )

predicted = idata["posterior_predictive"]["in_bed"].values.reshape(
    -1, n_schools, len(days)
)
p_low, p_high = np.quantile(predicted, [0.05, 0.95], axis=0)
solved = np.median(
    idata["posterior"]["expected"].values.reshape(-1, n_schools, len(days)), axis=0
)

fig, axes = plt.subplots(2, 5, figsize=(9, 3.8), sharex=True)
for school, ax in enumerate(axes.flat):
    ax.fill_between(days, p_low[school], p_high[school], color="C0", alpha=0.3)
    ax.plot(days, solved[school], color="C0")
    ax.plot(days, in_bed[school], "o", color="black", ms=3)
    ax.set_title(f"school {school}", fontsize=8)
    ax.tick_params(labelsize=7)
fig.supxlabel("day", fontsize=9)
fig.supylabel("pupils in bed", fontsize=9)
fig.suptitle(
    "posterior predictive 5%-95% (band), solved I(t) (line), data (dots)", fontsize=9
)
fig.tight_layout()

# %%
# The ten solves are one op: adding schools adds a batch element to the same
# program, not ten more ops in the graph. The same pattern fits one model per
# patient, region or experiment: write the function for one group, map it
# with ``jax.vmap``, wrap the mapped function.

# sphinx_gallery_thumbnail_number = 3
