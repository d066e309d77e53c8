"""The SIR epidemic the tests and the benchmarks share, as PyMC modellers write it.

Not an example to run: the model code that ``tests/`` and ``benchmarks/``
both measure, kept with the examples' other models so that both import it
as they import those. The tests import it as ``examples._sir_models`` (pytest
puts the checkout's root on ``sys.path``, and so do the tests' fresh
processes); a benchmark as ``_sir_models`` (``benchmarks/_checkout.py`` makes
every module of ``examples/`` importable by its name). It imports nothing of
either.

* :func:`interpolate_jax`, :func:`solve_jax`: a cubic interpolation of a
  transmission rate's knots (a closure, ``beta(t)``) and an SIR solve
  (diffrax's ``Tsit5`` with a PID controller) that calls it;
  :data:`sir_solve`: the solve wrapped;
* :func:`sir_nested_model`: issue #50's nested 8-knot model (50 days), the
  rate's closure built by one wrapped function and called inside another's
  solve, equinox's checks on.
"""

import diffrax
import jax.numpy as jnp
import numpy as np

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


SIR_Y0 = np.array([0.99, 0.01])


def interpolate_jax(ts, values):
    coefficients = diffrax.backward_hermite_coefficients(ts, values)
    return diffrax.CubicInterpolation(ts, coefficients).evaluate


def solve_jax(beta_t, y0, t_out, gamma, *, throw=True):
    """The SIR states at ``t_out``; ``throw=False``: a failed solve gives NaN states
    (an infinite log-density, a rejection) where diffrax's default raises."""

    def sir(t, y, args):
        s, i = y
        infections = beta_t(t) * s * i
        return jnp.stack([-infections, infections - gamma * i])

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(sir),
        diffrax.Tsit5(),
        t_out[0],
        t_out[-1],
        0.1,
        y0,
        saveat=diffrax.SaveAt(ts=t_out),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        throw=throw,
    )
    return solution.ys


sir_solve = as_jax_op(solve_jax)


def interpolated_rate_jax(ts, log_values):
    """A closure over a cubic interpolation: ``beta(t)``, positive."""
    coefficients = diffrax.backward_hermite_coefficients(ts, log_values)
    log_rate = diffrax.CubicInterpolation(ts, coefficients)
    return lambda t: jnp.exp(log_rate.evaluate(t))


sir_closure_rate = as_jax_op(interpolated_rate_jax)

#: Daily cases simulated from log-knots (0.45, 0.42, 0.35, 0.25, 0.2, 0.24, 0.3,
#: 0.28), gamma 0.12 and NB(alpha 20) noise (``_models.sir_trajectory_wrap_jax``).
SIR_NESTED_OBSERVED = np.array([
    87, 62, 73, 109, 191, 198, 243, 287, 463, 307, 408, 613, 456, 444, 578, 579,
    548, 292, 228, 272, 258, 175, 122, 160, 169, 103, 111, 135, 66, 85, 45, 44,
    54, 30, 34, 35, 20, 35, 20, 34, 15, 29, 34, 24, 24, 18, 18, 21, 12, 8,
])  # fmt: skip


def sir_nested_model(trajectory_of=None):
    """Issue #50's nested 8-knot SIR model (the benchmarks' ``sir_nested``).

    The log-knots are a PyTensor ``cumsum`` of PyMC increments; a closure over
    their interpolation, built by one wrapped function, is called in another's
    diffrax solve, which keeps equinox's default checks (``throw=True``).
    ``trajectory_of(log_knots, gamma)``: the states another way (the
    benchmarks' ``pytensor.wrap_jax`` of the same JAX code).
    """
    import pymc as pm

    knot_times, days = np.linspace(0.0, 50.0, 8), np.arange(51.0)

    def nested(log_knots, gamma):
        return sir_solve(sir_closure_rate(knot_times, log_knots), SIR_Y0, days, gamma)

    with pm.Model() as model:
        log_first = pm.Normal("log_first_knot", np.log(0.3), 0.3)
        increments = pm.Normal("increments", 0.0, 0.1, shape=7)
        log_knots = pt.cumsum(pt.concatenate([log_first[None], increments]))
        gamma = pm.LogNormal("gamma", np.log(0.1), 0.2)
        trajectory = (trajectory_of or nested)(log_knots, gamma)
        cases = 10_000.0 * (trajectory[:-1, 0] - trajectory[1:, 0])
        pm.NegativeBinomial("cases", mu=cases, alpha=20.0, observed=SIR_NESTED_OBSERVED)
    return model
