"""A model whose wrapped function raises for part of the posterior, importable by workers."""

import equinox as eqx
import numpy as np
import pymc as pm

from pytensor.compile.jax_ofg import as_jax_op


@as_jax_op
def worker_check(mu):
    return eqx.error_if(mu * 1.0, mu > 3.0, "worker_check blew up: mu too large")


def sample_with_workers():
    observed = np.random.default_rng(3).normal(2.9, 1.0, size=5)
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", worker_check(mu), 1.0, observed=observed)
        return pm.sample(
            draws=200,
            tune=200,
            chains=2,
            cores=2,
            nuts_sampler="pymc",
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
