"""A stiff pharmacokinetic model: one compartment, first-order absorption,
Michaelis-Menten elimination (4 parameters, 2 states), with simulated data.

    d gut / dt     = -ka * gut
    d conc / dt    =  ka * gut / V - Vmax * conc / (V * (Km + conc))

A small ``Km`` makes it stiff: once the absorption has slowed, elimination is
linear with rate ``Vmax / (V * Km)`` (~200 / h) against absorption's ``ka``
(~1 / h) over 24 h. Solved with ``diffrax.Kvaerno5`` and a PID controller
here, with Stan's ``ode_bdf_tol`` at the same tolerances in :data:`STAN_PROGRAM`.

* :func:`solve`: the concentrations at :data:`TIMES` as a JAX function, with
  ``diffrax.Kvaerno5()`` as a user writes it (its adjoint is an argument:
  diffrax's default reverse-mode adjoint, or ``diffrax.ForwardMode()``);
* :func:`build_model`: the PyMC model around a PyTensor ``concentrations(theta)``;
* :func:`logp`: the same log-density in pure JAX (for pure-JAX timings);
* :data:`STAN_PROGRAM`, :func:`stan_data`: the model in Stan.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

DOSE = 500.0
TIMES = np.array([0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24.0])
TRUE_THETA = np.array([1.0, 5.0, 20.0, 0.1])  # ka, V, Vmax, Km
TRUE_SIGMA = 0.5
RTOL = ATOL = 1e-6
MAX_STEPS = 100_000
PRIOR_MEANS = np.log([1.0, 5.0, 20.0, 0.1])
PRIOR_SDS = np.array([0.5, 0.3, 0.3, 1.0])


def _rhs(t, y, theta):
    ka, volume, vmax, km = theta[0], theta[1], theta[2], theta[3]
    gut, conc = y[0], y[1]
    return jnp.stack(
        [-ka * gut, ka * gut / volume - vmax * conc / (volume * (km + conc))]
    )


def solve(theta, adjoint=None):
    """Concentrations at :data:`TIMES` for ``theta = (ka, V, Vmax, Km)``.

    ``diffrax.Kvaerno5()`` as a user writes it: its Newton steps (and their
    derivative) solve the 2 x 2 systems with lineax's LU, which this package
    lowers without LAPACK (:mod:`pytensor.compile._jax_ofg.small_linalg`).
    """
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(_rhs),
        diffrax.Kvaerno5(),
        t0=0.0,
        t1=float(TIMES[-1]),
        dt0=0.01,
        y0=jnp.array([DOSE, 0.0]),
        args=theta,
        saveat=diffrax.SaveAt(ts=jnp.asarray(TIMES)),
        stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
        adjoint=adjoint or diffrax.RecursiveCheckpointAdjoint(),
        max_steps=MAX_STEPS,
        throw=False,
    )
    return solution.ys[:, 1]


def solve_forward_mode(theta):
    """:func:`solve` with ``adjoint=diffrax.ForwardMode()`` (forward mode only)."""
    return solve(theta, diffrax.ForwardMode())


def simulated_data(seed: int = 1) -> np.ndarray:
    conc = np.asarray(solve(jnp.asarray(TRUE_THETA)))
    return conc + TRUE_SIGMA * np.random.default_rng(seed).standard_normal(conc.shape)


OBSERVED = simulated_data()


def logp(log_theta, log_sigma, solver: Callable = solve):
    """The model's log-density (up to a constant) on the unconstrained scale."""
    conc = solver(jnp.exp(log_theta))
    sigma = jnp.exp(log_sigma)
    lik = jnp.sum(-0.5 * ((OBSERVED - conc) / sigma) ** 2 - jnp.log(sigma))
    prior = jnp.sum(-0.5 * ((log_theta - PRIOR_MEANS) / PRIOR_SDS) ** 2)
    # HalfNormal(1) on sigma, with the log-Jacobian of sigma = exp(log_sigma)
    return lik + prior - 0.5 * sigma**2 + log_sigma


def build_model(concentrations: Callable):
    """The PyMC model, ``concentrations(theta)`` giving the solve at :data:`TIMES`."""
    import pymc as pm

    import pytensor.tensor as pt

    with pm.Model() as model:
        log_theta = pm.Normal("log_theta", mu=PRIOR_MEANS, sigma=PRIOR_SDS, shape=4)
        sigma = pm.HalfNormal("sigma", 1.0)
        conc = concentrations(pt.exp(log_theta))
        pm.Normal("obs", mu=conc, sigma=sigma, observed=OBSERVED)
    return model


STAN_PROGRAM = (Path(__file__).resolve().parent / "stan" / "pk.stan").read_text()


def stan_data() -> dict:
    return {
        "n": len(TIMES),
        "ts": TIMES.tolist(),
        "obs": OBSERVED.tolist(),
        "dose": DOSE,
        "prior_means": PRIOR_MEANS.tolist(),
        "prior_sds": PRIOR_SDS.tolist(),
        "rtol": RTOL,
        "atol": ATOL,
        "max_num_steps": MAX_STEPS,
    }
