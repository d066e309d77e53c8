"""Module-level wrapped functions: importable by name from a fresh process.

The SIR models the tests share with the benchmarks are in
``examples/_sir_models.py``; :func:`sir_model` is the tests' own.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from examples._sir_models import SIR_Y0, interpolate_jax, sir_solve
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
sir_rate = as_jax_op(interpolate_jax)


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
