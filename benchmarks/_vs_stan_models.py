"""The boarding-school SIR model along the routes that do not use this package.

``vs_stan.py`` fits one model along every route; the ``ours_*`` routes take it
from ``examples/boarding_school_sir.py``. The others must not import
``pytensor.compile.jax_ofg`` (a ``pytensor.wrap_jax`` user does not have it,
and importing it would give them its XLA cache), and the example imports it
at its top, so the data, the PyMC model and the solve are repeated here, once
for every benchmark; ``tests/examples/test_vs_stan_benchmark.py`` checks that
they are the example's, and that every solver gives the same log-density.

* :func:`build_model`: the PyMC model around any solver (also the pure
  PyTensor one of ``_models.boarding_school_pytensor``);
* :func:`solve_sir_jax`: the example's diffrax solve as a plain JAX function,
  for ``pytensor.wrap_jax``;
* :func:`pm_ode_solver`: PyMC's built-in ``pm.ode.DifferentialEquation``;
* :data:`STAN_PROGRAM` and :func:`stan_data`: the case study in Stan.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np


N = 763
T0 = 0.0
Y0 = np.array([762.0, 1.0, 0.0])
DAYS = np.arange(1.0, 15.0)
CASES = np.array([3, 8, 26, 76, 225, 298, 258, 233, 189, 128, 68, 29, 14, 4])
RTOL = ATOL = 1e-6
MAX_STEPS = 4096
STAN_MAX_NUM_STEPS = 10**6

#: Stan's ode_rk45 takes the same tolerances and step budget by default; they
#: are spelled out so the settings of the comparison are in the program.
STAN_PROGRAM = (
    Path(__file__).resolve().parent / "stan" / "boarding_school.stan"
).read_text()


def stan_data() -> dict:
    """The data block's values."""
    return {
        "n_days": len(DAYS),
        "y0": Y0.tolist(),
        "t0": T0,
        "ts": DAYS.tolist(),
        "N": N,
        "cases": CASES.tolist(),
    }


def build_model(trajectory: Callable):
    """The case study's PyMC model (the example's ``build_model``) around a solver.

    Parameters
    ----------
    trajectory
        ``trajectory(beta, gamma)`` returns S, I and R at :data:`DAYS`,
        ``(14, 3)``.

    Returns
    -------
    pm.Model
    """
    import pymc as pm

    with pm.Model(coords={"day": DAYS.astype(int)}) as model:
        beta = pm.TruncatedNormal("beta", mu=2.0, sigma=1.0, lower=0.0)
        gamma = pm.TruncatedNormal("gamma", mu=0.4, sigma=0.5, lower=0.0)
        phi_inv = pm.Exponential("phi_inv", lam=5.0)
        y = trajectory(beta, gamma)
        pm.NegativeBinomial(
            "cases", mu=y[:, 1], alpha=1.0 / phi_inv, observed=CASES, dims="day"
        )
        pm.Deterministic("R0", beta / gamma)
        pm.Deterministic("recovery_time", 1.0 / gamma)
    return model


def solve_sir_jax(beta, gamma, *, max_steps: int = MAX_STEPS):
    """The example's ``solve_sir`` (diffrax ``Dopri5``), a plain JAX function."""
    import diffrax
    import jax.numpy as jnp

    def vector_field(t, y, args):
        s, i, _ = y
        infection = beta * i * s / N
        recovery = gamma * i
        return jnp.stack([-infection, infection - recovery, recovery])

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        diffrax.Dopri5(),
        t0=T0,
        t1=DAYS[-1],
        dt0=0.1,
        y0=jnp.asarray(Y0),
        saveat=diffrax.SaveAt(ts=DAYS),
        stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
        max_steps=max_steps,
        throw=False,
    )
    succeeded = solution.result == diffrax.RESULTS.successful
    return jnp.where(succeeded, solution.ys, jnp.nan)


def wrap_jax_solver(max_steps: int) -> Callable:
    """``trajectory(beta, gamma)`` through ``pytensor.wrap_jax``."""
    import jax

    import pytensor

    # diffrax computes in float32 unless JAX is told otherwise, and with
    # PyTensor's default linker nothing tells it (PyTensor's JAX backend
    # would): a diffrax user turns float64 on.
    jax.config.update("jax_enable_x64", True)

    def trajectory(beta, gamma):
        return solve_sir_jax(beta, gamma, max_steps=max_steps)

    return pytensor.wrap_jax(trajectory)


def _sir_rhs(y, t, p):
    """The SIR vector field in ``pm.ode``'s convention: ``f(y, t, theta)``."""
    infection = p[0] * y[1] * y[0] / N
    recovery = p[1] * y[1]
    return [-infection, infection - recovery, recovery]


def pm_ode_solver() -> Callable:
    """``trajectory(beta, gamma)`` through ``pm.ode.DifferentialEquation``.

    It solves with SciPy's ``odeint`` (LSODA) at its own tolerances
    (1.49e-8, not settable through ``pm.ode``), the forward sensitivities in
    the same solve; the vector field is a PyTensor function called from
    Python at every step.
    """
    import pymc as pm

    ode = pm.ode.DifferentialEquation(
        func=_sir_rhs, times=DAYS, n_states=3, n_theta=2, t0=T0
    )

    def trajectory(beta, gamma):
        return ode(y0=Y0, theta=[beta, gamma])

    return trajectory
