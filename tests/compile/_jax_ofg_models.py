"""Module-level wrapped functions: importable by name from a fresh process."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

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
