"""Every sampler a PyMC user reaches for, on a model whose mean is a diffrax solve.

Each posterior is checked against the analytic one (:mod:`_conjugate_model`:
means within 0.3 posterior sd, sds within 20%). PyMC's NUTS in worker
processes (``cores=2``) and SMC are tested in ``test_jax_ofg_processes.py``.
"""

import blackjax
import jax
import numpy as np
import nutpie
import pymc as pm
import pytest
import scipy.linalg
from _conjugate_model import SIGMA, TIMES, A, build_model, check_posterior
from _fresh_process import run_script
from pymc.sampling.jax import get_jaxified_logp


pytestmark = pytest.mark.slow

DRAWS = TUNE = 300


@pytest.fixture(scope="module")
def model():
    return build_model(pool_work=False)


@pytest.fixture(scope="module")
def nutpie_idata(model):
    return pm.sample(
        draws=DRAWS, tune=TUNE, chains=2, random_seed=1, progressbar=False, model=model
    )


def test_pm_sample_default_is_nutpie_with_numba(nutpie_idata):
    assert nutpie_idata["posterior"].attrs["inference_library"] == "nutpie"
    check_posterior(nutpie_idata["posterior"]["theta"].values)


def test_sample_posterior_predictive_runs_the_solve_per_draw(model, nutpie_idata):
    """Predictive draws = the op's trajectory at each posterior draw + the noise."""
    predictive = pm.sample_posterior_predictive(
        nutpie_idata, model=model, random_seed=2, progressbar=False
    )["posterior_predictive"]["y"].values
    theta = nutpie_idata["posterior"]["theta"].values
    assert predictive.shape == (*theta.shape[:2], len(TIMES), 2)
    maps = np.stack([scipy.linalg.expm(A * t) for t in TIMES])
    mean = np.einsum("tij,cdj->cdti", maps, theta)
    noise = (predictive - mean).ravel()
    assert abs(noise.mean()) < 4 * SIGMA / np.sqrt(noise.size)
    assert abs(noise.std() / SIGMA - 1) < 0.05


def test_numpyro_vectorized_chains(model):
    """numpyro vmaps its chains over the JAX-compiled model, diffrax solve included.

    (``chain_method="parallel"`` needs several JAX devices and then fails in
    diffrax's backward pass under ``jax.pmap``: see the last test.)
    """
    idata = pm.sample(
        nuts_sampler="numpyro",
        nuts={"chain_method": "vectorized"},
        draws=DRAWS,
        tune=TUNE,
        chains=2,
        random_seed=1,
        progressbar=False,
        model=model,
    )
    assert idata["posterior"].attrs["inference_library"] == "numpyro"
    check_posterior(idata["posterior"]["theta"].values)


def test_nutpie_jax_backend(model):
    compiled = nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax")
    idata = nutpie.sample(
        compiled, draws=DRAWS, tune=TUNE, chains=2, seed=1, progress_bar=False
    )
    check_posterior(idata["posterior"]["theta"].values)


def sample_blackjax(model, *, draws, tune, chains, seed):
    """blackjax's NUTS with window adaptation, chains vmapped, on PyMC's JAX log-density.

    The recipe of the user guide (``pm.sample(nuts_sampler="blackjax")`` fails
    with PyMC 6.4 and blackjax 1.7, for any model). Returns the positions of
    ``model.value_vars`` (the unconstrained space), each ``(chains, draws, ...)``.
    """
    logdensity = get_jaxified_logp(model)  # a list of value arrays -> logp

    def chain(key, position):
        warmup_key, sample_key = jax.random.split(key)
        warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
        (state, parameters), _ = warmup.run(warmup_key, position, num_steps=tune)
        step = blackjax.nuts(logdensity, **parameters).step

        def one_draw(state, key):
            state, info = step(key, state)
            return state, (state.position, info.is_divergent)

        keys = jax.random.split(sample_key, draws)
        return jax.lax.scan(one_draw, state, keys)[1]

    point = model.initial_point()
    rng = np.random.default_rng(seed)
    starts = [
        point[v.name] + rng.uniform(-1, 1, (chains, *point[v.name].shape))
        for v in model.value_vars
    ]
    keys = jax.random.split(jax.random.key(seed), chains)
    return jax.jit(jax.vmap(chain))(keys, starts)


def test_blackjax_vectorized_chains(model):
    (theta,), divergent = sample_blackjax(
        model, draws=DRAWS, tune=TUNE, chains=2, seed=1
    )
    assert theta.shape == (2, DRAWS, 2)
    assert not np.asarray(divergent).any()
    check_posterior(np.asarray(theta))


# --------------------------------------------------------------------------
# Limitations of other projects that the user guide states (and works around)
# --------------------------------------------------------------------------


def test_pm_sample_with_blackjax_fails_for_any_model():
    """PyMC 6.4 passes ``progress_bar`` on to blackjax 1.7's NUTS kernel."""
    with pm.Model() as plain:
        pm.Normal("x", 0.0, 1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'progress_bar'"):
        pm.sample(
            nuts_sampler="blackjax",
            nuts={"chain_method": "vectorized"},
            draws=10,
            tune=10,
            chains=2,
            progressbar=False,
            model=plain,
        )


def test_pmap_of_a_diffrax_gradient_fails_without_this_library(tmp_path):
    """Why numpyro's ``chain_method="parallel"`` is not advised: plain JAX fails too."""
    result = run_script(
        """
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import diffrax, jax, jax.numpy as jnp

        def final_value(y0):
            solution = diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, args: -y), diffrax.Tsit5(), 0.0, 1.0,
                0.1, y0, stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
            )
            return solution.ys[-1].sum()

        assert jax.device_count() == 2
        jax.vmap(jax.grad(final_value))(jnp.ones((2, 3)))  # fine
        try:
            jax.pmap(jax.grad(final_value))(jnp.ones((2, 3)))
        except Exception as error:
            print(f"{type(error).__name__}: {error}")
        else:
            print("pmap worked")
        """,
        tmp_path,
        timeout=300,
    )
    assert "Closure-converted function called with different dynamic" in result.stdout
