"""
A stiff PK/PD model: implicit solver, forward-mode gradients
============================================================

A drug is taken by mouth (500 mg at time 0), absorbed from the gut into the
blood, and eliminated by an enzyme that saturates (Michaelis-Menten
kinetics). Its concentration drives an effect through an Emax curve. We
observe both, concentration and effect, 15 times over a day, and want the
pharmacokinetic (PK) and pharmacodynamic (PD) parameters.

With a small Michaelis constant ``Km`` the ODE is *stiff*: elimination runs
on a time scale of seconds once the concentration is low, absorption on one
of hours. An explicit solver (``Tsit5``) would need tiny steps all day;
an implicit one (``diffrax.Kvaerno5``) does not. And with four parameters in
the ODE, *forward-mode* derivatives (the sensitivities ride along the solve,
as in Stan's CVODES) cost less than reverse mode through the implicit
solver's steps. Both are one argument each; nothing else changes.

The steps:

1. the data (simulated from known parameters);
2. the PK solve in JAX: ``Kvaerno5`` and ``adjoint=diffrax.ForwardMode()``;
3. the PD part in PyMC, around the wrapped solve;
4. sampling, a trace plot, and the posterior against the truth;
5. the posterior predictive check of both observed curves.
"""

# %%
# The data
# --------
#
# The true parameters: absorption rate ``ka`` = 1 per hour, volume ``V`` =
# 5 L, maximal elimination rate ``Vmax`` = 20 mg/h, Michaelis constant
# ``Km`` = 0.1 mg/L; the effect rises from 0 to at most ``Emax`` = 80 (a
# percentage of some response) with half its maximum at ``EC50`` = 5 mg/L.
# Concentrations are measured with normal noise of sd 0.5 mg/L, effects with
# sd 4.

import arviz as az
import diffrax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from pytensor.compile.jax_ofg import as_jax_op


dose = 500.0  # mg, by mouth at t = 0
times = np.array([0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24.0])
true = {"ka": 1.0, "V": 5.0, "Vmax": 20.0, "Km": 0.1, "Emax": 80.0, "EC50": 5.0}
true_sigma_conc, true_sigma_effect = 0.5, 4.0

# %%
# The PK solve, stiff and forward-mode
# ------------------------------------
#
# Two states, the drug in the gut (mg) and its concentration in the blood
# (mg/L):
#
# .. code-block:: text
#
#     d gut/dt  = -ka gut
#     d conc/dt =  ka gut / V - Vmax conc / (V (Km + conc))
#
# ``diffrax.Kvaerno5()`` is an implicit (ESDIRK) solver: each step solves a
# small nonlinear system by Newton's method. ``adjoint=diffrax.ForwardMode()``
# makes diffrax differentiate the solve forward, and the op follows it (its
# ``gradient="auto"`` picks forward mode for a solve that cannot be reversed;
# see :ref:`forward-or-reverse-mode`). The tolerances are those of Stan's
# ``ode_bdf``, 1e-6.


def pk(t, y, theta):
    ka, volume, vmax, km = theta[0], theta[1], theta[2], theta[3]
    gut, conc = y[0], y[1]
    elimination = vmax * conc / (volume * (km + conc))
    return jnp.stack([-ka * gut, ka * gut / volume - elimination])


@as_jax_op
def concentration(theta):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(pk),
        diffrax.Kvaerno5(),
        t0=0.0,
        t1=times[-1],
        dt0=0.01,
        y0=jnp.array([dose, 0.0]),
        args=theta,
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-6),
        adjoint=diffrax.ForwardMode(),
        max_steps=100_000,
        throw=False,
    )
    ok = solution.result == diffrax.RESULTS.successful
    return jnp.where(ok, solution.ys[:, 1], jnp.nan)


def emax(conc, e_max, ec50):
    return e_max * conc / (ec50 + conc)


theta_true = np.array([true["ka"], true["V"], true["Vmax"], true["Km"]])
true_conc = np.asarray(concentration.__wrapped__(jnp.asarray(theta_true)))
true_effect = emax(true_conc, true["Emax"], true["EC50"])
rng = np.random.default_rng(7)
conc_obs = true_conc + true_sigma_conc * rng.standard_normal(len(times))
effect_obs = true_effect + true_sigma_effect * rng.standard_normal(len(times))

fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
left.plot(times, conc_obs, "o", color="black", ms=4)
left.set(xlabel="hours", ylabel="concentration (mg/L)", title="PK")
right.plot(times, effect_obs, "o", color="black", ms=4)
right.set(xlabel="hours", ylabel="effect", title="PD")
fig.tight_layout()

# %%
# The model
# ---------
#
# The four PK parameters get log-normal priors around plausible values (the
# priors of a PK analysis come from earlier studies); the PD curve is plain
# PyTensor arithmetic on the op's output: only the ODE is in JAX. PyTensor
# differentiates the Emax curve itself and hands the op the cotangent of the
# concentrations; the op's forward-mode rule turns it into the gradient in
# the four PK parameters.

names = ["ka", "V", "Vmax", "Km"]
with pm.Model(coords={"pk": names, "time": times}) as model:
    theta = pm.LogNormal(
        "theta", mu=np.log([1.0, 5.0, 20.0, 0.1]), sigma=[0.5, 0.3, 0.3, 1.0], dims="pk"
    )
    e_max = pm.LogNormal("Emax", mu=np.log(100.0), sigma=0.5)
    ec50 = pm.LogNormal("EC50", mu=np.log(4.0), sigma=0.5)
    sigma_conc = pm.HalfNormal("sigma_conc", 1.0)
    sigma_effect = pm.HalfNormal("sigma_effect", 10.0)

    conc = pm.Deterministic("conc", concentration(theta), dims="time")
    effect = pm.Deterministic("effect", emax(conc, e_max, ec50), dims="time")
    pm.Normal("conc_obs", conc, sigma_conc, observed=conc_obs, dims="time")
    pm.Normal("effect_obs", effect, sigma_effect, observed=effect_obs, dims="time")

# %%
# Sampling
# --------
#
# ``pm.sample()`` with nutpie, 2 chains of 400 + 400 (short, for the
# documentation build).

with model:
    idata = pm.sample(draws=400, tune=400, chains=2, random_seed=3, progressbar=False)

parameters = ["theta", "Emax", "EC50", "sigma_conc", "sigma_effect"]
summary = az.summary(idata, var_names=parameters)
print(summary[["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]].round(3))
print(f"divergent transitions: {int(idata['sample_stats']['diverging'].sum())}")

# %%
# Convergence: the trace plot
# ---------------------------
#
# Left, each chain's marginal posterior (one line per chain, per element of
# ``theta``); right, the draws in order. Chains that overlap on the left and
# mix without trends on the right have converged.

az.plot_trace_dist(
    idata,
    var_names=["theta", "Emax", "EC50"],
    backend="matplotlib",
    figure_kwargs={"figsize": (8, 5)},
)

# %%
# The posterior against the truth
# -------------------------------
#
# Each parameter's posterior median and 90% interval, divided by the value the
# data were simulated from: 1 is the truth.

draws = {
    **{n: idata["posterior"]["theta"].sel(pk=n).values.ravel() for n in names},
    "Emax": idata["posterior"]["Emax"].values.ravel(),
    "EC50": idata["posterior"]["EC50"].values.ravel(),
}
fig, ax = plt.subplots(figsize=(7, 3))
for row, (name, values) in enumerate(draws.items()):
    low, mid, high = np.quantile(values / true[name], [0.05, 0.5, 0.95])
    ax.plot([low, high], [row, row], color="C0", lw=2)
    ax.plot(mid, row, "o", color="C0")
ax.axvline(1.0, color="black", lw=1, ls="--")
ax.set_yticks(range(len(draws)), list(draws))
ax.set_xscale("log")
ax.set_xticks([0.25, 0.5, 1, 2, 4], ["0.25", "0.5", "1", "2", "4"])
ax.minorticks_off()
ax.set_xlabel("posterior / true value (median, 5%-95%)")
plt.tight_layout()

# %%
# Posterior predictive check
# --------------------------
#
# Bands: the 90% interval of new observations drawn for every posterior
# draw; lines: the median solved concentration and its effect.

with model:
    pm.sample_posterior_predictive(
        idata, extend_inferencedata=True, random_seed=3, progressbar=False
    )

fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
for ax, observed, name, label in [
    (axes[0], conc_obs, "conc", "concentration (mg/L)"),
    (axes[1], effect_obs, "effect", "effect"),
]:
    replicated = idata["posterior_predictive"][f"{name}_obs"].values
    low, high = np.quantile(replicated.reshape(-1, len(times)), [0.05, 0.95], axis=0)
    median = np.median(idata["posterior"][name].values.reshape(-1, len(times)), axis=0)
    ax.fill_between(times, low, high, color="C0", alpha=0.3, label="5%-95%")
    ax.plot(times, median, color="C0", label="solved (median)")
    ax.plot(times, observed, "o", color="black", ms=4, label="data")
    ax.set(xlabel="hours", ylabel=label)
axes[0].legend(fontsize="small")
fig.tight_layout()

# %%
# The concentration peaks about two hours after the dose and then falls
# almost linearly -- the saturated enzyme removes a fixed amount per hour --
# until it is low enough for elimination to become first-order and fast:
# the stiff part. ``Km`` is the least well determined parameter: the data
# hold few points in the short phase where it matters.
#
# Stiff models in general, and why importing this package makes such
# solves fast on a CPU, are on :doc:`/howto/stiff_models`.

# sphinx_gallery_thumbnail_number = 4
