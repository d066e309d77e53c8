"""Module-level wrapped functions: importable by name from a fresh process."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


@as_jax_op
def powers(x, *, power=2):
    return {"power": x**power, "total": jnp.sum(x)}


@as_jax_op
def make_interpolator(ys):
    ts = jnp.linspace(0.0, 1.0, ys.shape[0])
    return diffrax.LinearInterpolation(ts=ts, ys=ys).evaluate


@as_jax_op
def integrate(f, t):
    return jax.vmap(f)(jnp.linspace(0.0, t, 5)).sum()


class Scale(eqx.Module):
    weight: jax.Array
    kind: str = eqx.field(static=True)

    def __call__(self, x):
        return jnp.tanh(self.weight * x) if self.kind == "tanh" else self.weight * x


@as_jax_op
def apply(module, x):
    return module(x)


@as_jax_op
def doubled(theta):
    return 2.0 * theta


# --- an SIR epidemic as PyMC modellers write it (the JAX-islands scenario) ----
SIR_KNOT_TIMES = np.linspace(0.0, 30.0, 6)
SIR_DAYS = np.arange(31.0)
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


sir_rate = as_jax_op(interpolate_jax)
sir_solve = as_jax_op(solve_jax)


def sir_model():
    """A 6-knot SIR model: interpolated beta inside a diffrax solve, NB cases."""
    import pymc as pm

    # simulated at knots (0.45, 0.4, 0.3, 0.22, 0.25, 0.3), gamma 0.12, alpha 20
    observed = np.array([
        87, 61, 71, 102, 175, 178, 211, 238, 368, 232, 296, 422, 310, 296, 388,
        395, 381, 204, 170, 224, 241, 190, 153, 230, 266, 186, 206, 289, 154, 212,
    ])  # fmt: skip
    with pm.Model() as model:
        knots = pm.LogNormal("knots", np.log(0.3), 0.3, shape=6)
        gamma = pm.LogNormal("gamma", np.log(0.1), 0.2)
        trajectory = sir_solve(sir_rate(SIR_KNOT_TIMES, knots), SIR_Y0, SIR_DAYS, gamma)
        cases = 10_000.0 * (trajectory[:-1, 0] - trajectory[1:, 0])
        pm.NegativeBinomial("cases", mu=cases, alpha=20.0, observed=observed)
    return model


def interpolated_rate_jax(ts, log_values):
    """A closure over a cubic interpolation: ``beta(t)``, positive."""
    coefficients = diffrax.backward_hermite_coefficients(ts, log_values)
    log_rate = diffrax.CubicInterpolation(ts, coefficients)
    return lambda t: jnp.exp(log_rate.evaluate(t))


sir_closure_rate = as_jax_op(interpolated_rate_jax)

#: Daily cases simulated from log-knots (0.45, 0.42, 0.35, 0.25, 0.2, 0.24, 0.3,
#: 0.28), gamma 0.12 and NB(alpha 20) noise (``benchmarks/_models.py``).
SIR_NESTED_OBSERVED = np.array([
    87, 62, 73, 109, 191, 198, 243, 287, 463, 307, 408, 613, 456, 444, 578, 579,
    548, 292, 228, 272, 258, 175, 122, 160, 169, 103, 111, 135, 66, 85, 45, 44,
    54, 30, 34, 35, 20, 35, 20, 34, 15, 29, 34, 24, 24, 18, 18, 21, 12, 8,
])  # fmt: skip


def sir_nested_model(trajectory_of=None):
    """Issue #50's nested 8-knot SIR model (``benchmarks/_models.py``'s ``sir_nested``).

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
