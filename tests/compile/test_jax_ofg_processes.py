"""Processes: PyMC samples in worker processes without hanging; a fork fails fast.

The sampling scripts run in a fresh interpreter (:func:`_fresh_process.run_script`),
whose workers import this checkout's modules, with a timeout: a deadlock
fails the test instead of stalling it.
"""

import inspect
import multiprocessing
import sys

import _conjugate_model as conjugate
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pymc.sampling.mcmc
import pymc.sampling.parallel
import pymc.smc.sampling
import pytest
from _fresh_process import run_script

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.compat import PYMC_SAMPLING_MODULES
from pytensor.compile._jax_ofg.host.fork_guard import ForkedAfterJaxError
from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops
from pytensor.compile._jax_ofg.patches.jax_linker_check import ForkCheckedFunction
from pytensor.compile._jax_ofg.samplers.pymc import (
    SAFE_START_METHOD,
    model_holds_jax_ops,
)
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.jax_ofg import as_jax_op
from pytensor.link.jax.linker import JAXLinker


#: What the error raised in a forked process says, in part.
FORK_ERROR = "cannot run in this process: it was forked"
ADVICE = "mp_ctx='forkserver'"

#: PyMC's start method when none is given, before this library changes it.
PYMC_DEFAULT = pymc.sampling.parallel._initialize_multiprocessing_context(None)


@pytest.mark.slow
def test_pymc_nuts_and_smc_sample_in_processes_with_the_default_start_method(
    tmp_path,
):
    """Must hold 1: no hang with PyMC's default ``mp_ctx``, a correct posterior.

    The model's wrapped function multiplies 400 x 400 matrices (XLA's thread
    pool) and solves an ODE with diffrax; JAX has run in the parent. Under
    ``fork`` this deadlocks; the library makes PyMC start its workers with
    forkserver. SMC runs with its default ``cores``: PyMC counts half the
    logical CPUs, which on this 2-CPU machine would mean one core and no
    processes, so the script reports 4 CPUs.
    """
    result = run_script(
        """
        import logging, multiprocessing
        import jax.numpy as jnp
        import numpy as np
        import pymc as pm
        import _conjugate_model as conjugate

        if __name__ == "__main__":
            assert multiprocessing.get_start_method() == "fork"
            float(jnp.ones((400, 400)).dot(jnp.ones(400)).sum())  # JAX runs here
            model = conjugate.build_model()
            nuts = pm.sample(
                nuts_sampler="pymc", chains=2, cores=2, draws=200, tune=200,
                random_seed=1, progressbar=False, compute_convergence_checks=False,
                model=model,
            )
            multiprocessing.cpu_count = lambda: 4
            smc = pm.sample_smc(draws=300, random_seed=1, progressbar=False, model=model)
            # the rest of the program keeps its own start method
            assert multiprocessing.get_start_method() == "fork"
            np.save("nuts.npy", nuts.posterior["theta"].values)
            np.save("smc.npy", smc.posterior["theta"].values)
        """,
        tmp_path,
        timeout=900,
    )
    assert "Multiprocess sampling (2 chains in 2 jobs)" in result.stderr
    assert "Sampling 2 chains in 2 jobs" in result.stderr  # SMC, in processes
    for name in ("nuts", "smc"):
        draws = np.load(tmp_path / f"{name}.npy")
        assert draws.shape[0] == 2, name
        conjugate.check_posterior(draws)


@pytest.mark.slow
def test_explicit_fork_fails_within_seconds_and_says_what_to_pass(tmp_path):
    """Must hold 2: ``mp_ctx="fork"`` gives the error, not a deadlock (NUTS and SMC)."""
    result = run_script(
        """
        import pymc as pm
        import _conjugate_model as conjugate

        if __name__ == "__main__":
            model = conjugate.build_model()
            options = {
                pm.sample: {"nuts_sampler": "pymc", "draws": 20, "tune": 20},
                pm.sample_smc: {"draws": 50},
            }
            for sample, kwargs in options.items():
                try:
                    sample(chains=2, cores=2, mp_ctx="fork", progressbar=False,
                           model=model, **kwargs)
                except Exception as error:
                    print(f"{sample.__name__}: {type(error).__name__}: {error}")
                else:
                    print(f"{sample.__name__}: sampled")
        """,
        tmp_path,
        timeout=300,
    )
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(lines) == {"sample", "sample_smc"}, result.stdout
    for name, message in lines.items():
        assert FORK_ERROR in message, (name, message)
        assert ADVICE in message and "forkserver" in message, (name, message)


@pytest.mark.slow
def test_own_fork_pool_fails_fast_in_every_linker(tmp_path):
    """Must hold 2: a user's fork pool calling compiled functions gets the error.

    One compiled function per linker, JAX islands on and off; the parent ran
    them all before forking. Work that calls no JAX still runs in the pool.
    """
    result = run_script(
        """
        import multiprocessing
        import numpy as np
        import pytensor
        import pytensor.tensor as pt
        from pytensor.compile.mode import get_mode
        import _conjugate_model as conjugate

        theta = pt.vector("theta", shape=(2,))
        cost = (conjugate.trajectory(theta, times=conjugate.TIMES) ** 2).sum()
        MODES = {
            "py": "FAST_COMPILE",
            "cvm": "CVM",
            "cvm_no_islands": get_mode("CVM").excluding("jax_islands"),
            "numba": "NUMBA",
            "numba_no_islands": get_mode("NUMBA").excluding("jax_islands"),
            "jax": "JAX",
        }
        FUNCTIONS = {
            name: pytensor.function([theta], [cost, pytensor.grad(cost, theta)], mode=mode)
            for name, mode in MODES.items()
        }

        def call(name):
            try:
                FUNCTIONS[name](np.ones(2))
            except Exception as error:
                return f"{type(error).__name__}: {error}"
            return "ran"

        if __name__ == "__main__":
            for f in FUNCTIONS.values():
                f(np.ones(2))
            with multiprocessing.get_context("fork").Pool(2) as pool:
                outcomes = pool.map(call, list(FUNCTIONS))
                assert pool.map(abs, [-1, -2]) == [1, 2]
            for name, outcome in zip(FUNCTIONS, outcomes):
                print(f"{name}| {outcome}")
        """,
        tmp_path,
        timeout=300,
    )
    outcomes = dict(line.split("| ", 1) for line in result.stdout.splitlines())
    assert len(outcomes) == 6, result.stdout
    for name, outcome in outcomes.items():
        assert outcome.startswith("ForkedAfterJaxError: "), (name, outcome)
        assert FORK_ERROR in outcome and "get_context('forkserver')" in outcome
    # the error names what was called
    assert "JaxIsland{trajectory" in outcomes["cvm"]
    assert "OpFromJax{trajectory" in outcomes["cvm_no_islands"]
    assert "compiled with mode='JAX'" in outcomes["jax"]
    # not the islands' fallback to PyTensor, which would fail the same way
    assert "could not be traced" not in result.stderr


def test_fork_before_jax_started_still_works(tmp_path):
    """Forked before the parent started JAX: the workers run JAX themselves."""
    result = run_script(
        """
        import multiprocessing
        import numpy as np
        from jax._src import xla_bridge
        import _conjugate_model as conjugate

        def solve(x):
            import pytensor.tensor as pt
            theta = pt.vector("theta", shape=(2,))
            y = conjugate.trajectory(theta, times=conjugate.TIMES, pool_work=False)
            return float(y[-1, 0].eval({theta: np.full(2, x)}))

        if __name__ == "__main__":
            assert not xla_bridge.backends_are_initialized()
            with multiprocessing.get_context("fork").Pool(2) as pool:
                print(pool.map(solve, [1.0, 2.0]))
        """,
        tmp_path,
        timeout=300,
    )
    first, second = eval(result.stdout.strip())
    np.testing.assert_allclose(second, 2 * first, rtol=1e-7)


# --------------------------------------------------------------------------
# Which models hold JAX ops; PyMC's start method (fast: nothing is sampled)
# --------------------------------------------------------------------------


class _StartMethodChosen(Exception):
    pass


@pytest.fixture
def chosen_start_method(monkeypatch):
    """Call a PyMC sampling function up to its choice of start method; return that.

    ``setup_cores_blas_cores`` is the next thing both ``pm.sample`` and
    ``pm.sample_smc`` do; here it stops them, carrying the context they chose.
    """

    def stop(blas_cores, chains, cores, mp_ctx):
        raise _StartMethodChosen(mp_ctx.get_start_method())

    for name in PYMC_SAMPLING_MODULES:
        monkeypatch.setattr(sys.modules[name], "setup_cores_blas_cores", stop)

    def choose(sample, **kwargs):
        with pytest.raises(_StartMethodChosen) as chosen:
            sample(chains=2, cores=2, progressbar=False, **kwargs)
        return chosen.value.args[0]

    return choose


def _plain_model():
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, observed=np.zeros(3))
        pm.Normal("y", 0.0, 1.0)
    return model


@as_jax_op
def _log_density(value, mu):
    return -0.5 * jnp.sum((value - mu) ** 2)


def _custom_logp_model():
    """The op appears only in the log-density (``CustomDist(logp=...)``)."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.CustomDist("obs", mu, logp=_log_density, observed=np.zeros(3))
    return model


def test_pymc_gets_a_safe_start_method_for_models_holding_jax_ops(
    chosen_start_method,
):
    """Compat: fails when PyMC's internals move under the start-method choice."""
    assert PYMC_DEFAULT.get_start_method() == "fork"  # Linux, Python < 3.14
    model = conjugate.build_model(pool_work=False)
    for sample in (pm.sample, pm.sample_smc):
        # the model as an argument, and from the context
        assert chosen_start_method(sample, model=model) == SAFE_START_METHOD
        with model:
            assert chosen_start_method(sample) == SAFE_START_METHOD
        assert chosen_start_method(sample, model=_custom_logp_model()) == (
            SAFE_START_METHOD
        )
        # left alone: other models, an explicit choice
        assert chosen_start_method(sample, model=_plain_model()) == "fork"
        assert chosen_start_method(sample, model=model, mp_ctx="fork") == "fork"
        assert chosen_start_method(sample, model=model, mp_ctx="spawn") == "spawn"
    assert multiprocessing.get_start_method() == "fork"


def test_pymc_internals_the_choice_relies_on():
    """Compat: the wrapped function, its signature and the ``model`` local."""
    for name in PYMC_SAMPLING_MODULES:
        chooser = sys.modules[name]._initialize_multiprocessing_context
        assert chooser.chooses_safe_start_method, name
    original = pymc.sampling.parallel._initialize_multiprocessing_context
    assert list(inspect.signature(original).parameters) == ["mp_ctx", "mode", "quiet"]
    for sample in (pymc.sampling.mcmc.sample, pymc.smc.sampling.sample_smc):
        assert "model" in sample.__code__.co_varnames, sample


@pytest.mark.parametrize("first", ["pymc", "jax_ofg"])
def test_pymc_is_patched_whichever_is_imported_first(first, tmp_path):
    imports = ["import pymc", "import pytensor.compile.jax_ofg"]
    if first == "jax_ofg":
        imports.reverse()
    result = run_script(
        "\n".join(imports)
        + """
import pymc.sampling.mcmc, pymc.smc.sampling
print(pymc.sampling.mcmc._initialize_multiprocessing_context.chooses_safe_start_method,
      pymc.smc.sampling._initialize_multiprocessing_context.chooses_safe_start_method)
""",
        tmp_path,
        timeout=300,
    )
    assert result.stdout.split() == ["True", "True"]


def test_graph_holds_jax_ops_inside_inner_graphs():
    x = pt.vector("x", shape=(2,))
    y = _log_density(x, 0.0)
    assert graph_holds_jax_ops([y])
    assert not graph_holds_jax_ops([pt.sum(x**2)])
    wrapped = OpFromGraph([x], [y])(x)
    assert graph_holds_jax_ops([wrapped + 1.0])
    assert model_holds_jax_ops(_custom_logp_model())
    assert not model_holds_jax_ops(_plain_model())


def test_jax_linker_checks_only_graphs_holding_jax_ops():
    """Compat: ``JAXLinker.jit_compile`` is wrapped; other graphs are untouched."""
    assert JAXLinker.jit_compile.checks_forked_processes
    x = pt.vector("x", shape=(2,))
    ours = pytensor.function([x], _log_density(x, 1.0), mode="JAX")
    theirs = pytensor.function([x], pt.sum(x**2), mode="JAX")
    assert isinstance(ours.vm.jit_fn, ForkCheckedFunction)
    assert not isinstance(theirs.vm.jit_fn, ForkCheckedFunction)
    assert ours(np.ones(2)) == 0.0
    # jax.jit's own methods stay reachable
    assert ours.vm.jit_fn.lower(np.ones(2)).as_text()


def test_fork_error_is_a_jax_runtime_error():
    import jax

    assert issubclass(ForkedAfterJaxError, jax.errors.JaxRuntimeError)
    from jax._src import xla_bridge  # the private check of jax_started()

    assert callable(xla_bridge.backends_are_initialized)
