"""A conjugate model whose mean is a diffrax solve: every sampler's answer is known.

``theta`` (2 values) is the initial state of the linear ODE ``y' = A y``, so
``y(t) = expm(A t) @ theta`` is linear in ``theta`` and a Normal prior with
Normal observations of ``y`` gives a Normal posterior in closed form
(:func:`analytic_posterior`). The wrapped function computes ``y`` with an
adaptive diffrax solve (gradients go through the solver), after a chain of
400 x 400 matrix products that leaves ``theta`` unchanged but makes XLA use its
thread pool: the threads a forked process does not have.

Module-level functions, so that worker processes unpickle them by name.
"""

import diffrax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from pytensor.compile.jax_ofg import as_jax_op


#: The ODE's matrix: a decaying rotation.
A = np.array([[-0.3, 1.0], [-1.0, -0.3]])
TIMES = np.linspace(0.5, 4.0, 8)
SIGMA = 0.3
PRIOR_SD = 2.0
TRUE_THETA = np.array([1.0, -0.5])
#: An orthogonal matrix: ``Q.T @ (Q @ x) == x`` up to round-off.
Q = np.linalg.qr(np.random.default_rng(0).normal(size=(400, 400)))[0]


@as_jax_op
def trajectory(theta, *, times, pool_work=True, throw=False):
    """``y(t) = expm(A t) @ theta`` at ``times``, by a diffrax solve, shape (len(times), 2)."""
    if pool_work:  # identity, computed with big matrix products
        theta = (Q.T @ (Q @ jnp.broadcast_to(theta, (400, 2)))).mean(axis=0)
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: A @ y),
        diffrax.Tsit5(),
        t0=0.0,
        t1=times[-1],
        dt0=0.1,
        y0=theta,
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        throw=throw,
    )
    return solution.ys


def observed_data(seed: int = 42) -> np.ndarray:
    """Observations of both components at :data:`TIMES`, shape (8, 2)."""
    mean = np.stack([scipy.linalg.expm(A * t) @ TRUE_THETA for t in TIMES])
    return mean + SIGMA * np.random.default_rng(seed).normal(size=mean.shape)


def analytic_posterior(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and covariance of ``theta`` given ``data`` (Normal-Normal)."""
    maps = [scipy.linalg.expm(A * t) for t in TIMES]
    precision = np.eye(2) / PRIOR_SD**2 + sum(m.T @ m for m in maps) / SIGMA**2
    covariance = np.linalg.inv(precision)
    mean = covariance @ sum(m.T @ y for m, y in zip(maps, data)) / SIGMA**2
    return mean, covariance


def build_model(data: np.ndarray | None = None, *, pool_work: bool = True):
    """``theta ~ N(0, PRIOR_SD)``, ``y ~ N(trajectory(theta), SIGMA)``."""
    import pymc as pm

    data = observed_data() if data is None else data
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD, shape=2)
        mean = trajectory(theta, times=TIMES, pool_work=pool_work)
        pm.Normal("y", mean, SIGMA, observed=data)
    return model


def check_posterior(draws: np.ndarray, data: np.ndarray | None = None) -> None:
    """Assert that ``draws`` (..., 2) match the analytic posterior.

    The means must lie within 0.3 posterior sd of the analytic ones and the
    sds within 20% (about 5 Monte Carlo standard errors for a few hundred
    effective draws).
    """
    mean, covariance = analytic_posterior(observed_data() if data is None else data)
    sd = np.sqrt(np.diag(covariance))
    flat = draws.reshape(-1, 2)
    error = (flat.mean(axis=0) - mean) / sd
    assert np.all(np.abs(error) < 0.3), (flat.mean(axis=0), mean, sd)
    ratio = flat.std(axis=0) / sd
    assert np.all((ratio > 0.8) & (ratio < 1.2)), (flat.std(axis=0), sd)
