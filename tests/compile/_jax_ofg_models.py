"""Module-level wrapped functions: importable by name from a fresh process."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

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


def solve_jax(beta_t, y0, t_out, gamma):
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
