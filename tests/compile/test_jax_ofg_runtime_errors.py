"""Errors raised while a wrapped function's program runs: never silent, never anonymous.

A wrapped function can raise while its compiled program runs (equinox's
checks, diffrax's ``throw=True``). The error's own message then names the op
and the wrapped function and says what to do, in every linker and in PyMC's
worker processes; the first error of each op in a process warns (nutpie turns
errors into rejections and shows nothing); every one is counted.
"""

import contextlib
import logging
import re
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytest
from _fresh_process import run_script
from _linkers import compile_function

import pytensor.tensor as pt
from pytensor.compile._jax_ofg.errors import ADVICE
from pytensor.compile.jax_ofg import (
    WrappedFunctionRuntimeWarning,
    as_jax_op,
    runtime_error_counts,
)


#: What JAX raises for a failed check, by its dispatch path: the first call of
#: a program raises JaxRuntimeError, later ones ValueError.
RUNTIME_ERRORS = (ValueError, jax.errors.JaxRuntimeError)


def checked_function(name: str):
    """A wrapped function that raises (equinox's check) for inputs above 3.

    Each test gets its own name: counts and the warn-once flag are per op
    and process.
    """

    def shifted(mu):
        return eqx.error_if(mu + 1.0, mu > 3.0, f"{name} blew up: mu too large")

    shifted.__name__ = shifted.__qualname__ = name
    return as_jax_op(shifted)


def ops_named(name: str) -> dict[str, int]:
    return {k: n for k, n in runtime_error_counts().items() if name in k}


def test_the_error_names_the_function_and_says_what_to_do(mode):
    name = f"check_{mode}".lower()
    mu = pt.dscalar("mu")
    f = compile_function([mu], checked_function(name)(mu) * 2.0, mode)
    np.testing.assert_allclose(f(1.0), 4.0)  # the fast path runs first
    with (
        pytest.warns(WrappedFunctionRuntimeWarning, match=f"{name} blew up"),
        pytest.raises(RUNTIME_ERRORS) as raised,
    ):
        f(4.0)
    message = str(raised.value)
    assert f"{name} blew up: mu too large" in message
    assert "[pytensor-jax-ofg]" in message and name in message.split("raised")[0]
    assert ADVICE in message
    assert sum(ops_named(name).values()) == 1
    np.testing.assert_allclose(f(2.0), 6.0)  # a raising call changes nothing


def test_one_warning_per_op_and_process_and_every_error_counted():
    name = "check_counted"
    mu = pt.dscalar("mu")
    f = compile_function([mu], checked_function(name)(mu), None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for value in (4.0, 5.0, 1.0, 6.0):
            with contextlib.suppress(RUNTIME_ERRORS):
                f(value)
    ours = [w for w in caught if issubclass(w.category, WrappedFunctionRuntimeWarning)]
    assert len(ours) == 1
    assert "check_counted blew up" in str(ours[0].message)
    assert "runtime_error_counts()" in str(ours[0].message)
    ((op, count),) = ops_named(name).items()
    assert count == 3
    (node,) = f.maker.fgraph.toposort()
    assert node.op.runtime_errors == 3 and str(node.op) == op


def test_nan_results_are_no_errors():
    """diffrax's ``throw=False`` gives NaN: an ordinary rejection, not reported."""
    name = "nan_instead"

    def nan_above_three(mu):
        return jnp.where(mu > 3.0, jnp.nan, mu)

    nan_above_three.__name__ = nan_above_three.__qualname__ = name
    mu = pt.dscalar("mu")
    f = compile_function([mu], as_jax_op(nan_above_three)(mu), None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrappedFunctionRuntimeWarning)
        assert np.isnan(f(4.0))
    assert ops_named(name) == {}


def test_jax_logs_no_traceback_for_an_error_we_report(caplog):
    """JAX logs every failed callback with a traceback; ours names it instead."""
    name = "check_quiet"
    mu = pt.dscalar("mu")
    f = compile_function([mu], checked_function(name)(mu), None)
    f(1.0)
    with caplog.at_level(logging.ERROR, logger="jax._src.callback"):
        for value in (4.0, 5.0):
            with pytest.raises(RUNTIME_ERRORS), warnings.catch_warnings():
                warnings.simplefilter("ignore", WrappedFunctionRuntimeWarning)
                f(value)
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]
    # The same check outside our calls is still logged by JAX.
    check = jax.jit(lambda m: eqx.error_if(m, m > 3.0, "bare"))
    check(1.0)
    with (
        caplog.at_level(logging.ERROR, logger="jax._src.callback"),
        pytest.raises(RUNTIME_ERRORS),
    ):
        check(4.0).block_until_ready()
    assert [r for r in caplog.records if "callback failed" in r.getMessage()]


def _without_frames(message: str) -> str:
    """A callback's error message without the call stack it ran in."""
    return re.sub(r"^  File .*\n", "", message, flags=re.MULTILINE)


def _error_of(call, *args) -> BaseException:
    with pytest.raises(RUNTIME_ERRORS) as raised, warnings.catch_warnings():
        warnings.simplefilter("ignore", WrappedFunctionRuntimeWarning)
        jax.block_until_ready(call(*args))
    return raised.value


@pytest.mark.parametrize("passing_calls", [0, 2], ids=["first-call", "later-call"])
def test_a_served_program_raises_what_equinox_raises(passing_calls):
    """A failed check of a served (exported, flagged) program raises equinox's error.

    Same type and message as the jitted original with equinox's default
    checks, whether the failing call is a program's first or comes after
    passing ones (JAX's dispatch raises another type then); the values of
    passing calls are JAX's.
    """
    name = f"served_check_{passing_calls}"

    def checked(mu):
        return eqx.error_if(jnp.sqrt(mu) + 1.0, mu > 3.0, f"{name}: mu too large")

    checked.__name__ = checked.__qualname__ = name
    mu = pt.dscalar("mu")
    f = compile_function([mu], as_jax_op(checked)(mu), None)
    (node,) = f.maker.fgraph.toposort()
    program = node.op.program
    assert (
        program.through_trace_cache is not program.original.raising
    )  # served by the cache
    original = jax.jit(checked)
    for value in (1.0, 2.0)[:passing_calls]:
        np.testing.assert_allclose(f(value), original(value), rtol=1e-15)
    ours, theirs = _error_of(f, 4.0), _error_of(original, 4.0)
    assert type(ours) is type(theirs)
    # After the line naming the op: equinox's message, JAX's wrapping.
    assert _without_frames(str(theirs)) in _without_frames(str(ours))
    np.testing.assert_allclose(f(2.0), original(2.0), rtol=1e-15)


def test_a_served_program_runs_on_the_calling_thread_as_the_original():
    """The served program of a diffrax solve keeps a host callback (its flag's check).

    JAX's CPU runtime runs a program holding host callbacks on the calling
    thread, and others (but the cheapest, under 1000 flops) on a thread pool,
    at a cost per call: the jitted original (equinox's checks are callbacks)
    returns its outputs computed, and so does the served program.
    """
    import diffrax

    def decay(k):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, a: -k * y),
            diffrax.Tsit5(),
            0.0,
            10.0,
            0.1,
            jnp.ones(50),
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 20)),
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        )
        return solution.ys

    assert jax.jit(decay).lower(0.3).compile().cost_analysis()["flops"] > 1000
    k = pt.dscalar("k")
    f = compile_function([k], as_jax_op(decay)(k), None)
    (node,) = f.maker.fgraph.toposort()
    program = node.op.program
    np.testing.assert_allclose(f(0.3), jax.jit(decay)(0.3), rtol=1e-12)
    for _ in range(3):
        assert all(b.is_ready() for b in program.through_trace_cache(np.float64(0.3)))


@pytest.mark.slow
def test_nutpie_rejections_warn_once_and_are_counted():
    """nutpie turns the error into a rejection: the warning is what tells."""
    name = "check_nutpie"
    observed = np.random.default_rng(3).normal(2.9, 1.0, size=5)
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", checked_function(name)(mu) - 1.0, 1.0, observed=observed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idata = pm.sample(
                draws=100, tune=100, chains=1, random_seed=1, progressbar=False
            )
    assert idata["posterior"].attrs["inference_library"] == "nutpie"
    ours = [w for w in caught if issubclass(w.category, WrappedFunctionRuntimeWarning)]
    assert len(ours) == 1 and f"{name} blew up" in str(ours[0].message)
    assert sum(ops_named(name).values()) >= 1
    assert int(idata["sample_stats"]["diverging"].sum()) >= 1


@pytest.mark.slow
def test_pymc_worker_errors_name_the_function(tmp_path):
    """PyMC's ParallelSamplingError keeps only str() of the worker's error."""
    result = run_script(
        """
        import numpy as np, pymc as pm
        import _jax_ofg_runtime_error_model as m

        if __name__ == "__main__":
            try:
                m.sample_with_workers()
            except Exception as error:
                print("TYPE", type(error).__name__)
                print("MESSAGE", str(error).replace("\\n", " "))
        """,
        tmp_path,
        timeout=600,
    )
    lines = dict(
        line.split(" ", 1) for line in result.stdout.splitlines() if " " in line
    )
    assert lines["TYPE"] == "ParallelSamplingError"
    assert "[pytensor-jax-ofg]" in lines["MESSAGE"]
    assert "worker_check" in lines["MESSAGE"]
    assert "throw=False" in lines["MESSAGE"]
