"""nutpie's chain threads, each pinned to a core whose XLA runtime runs its programs.

A core's runtime is an XLA CPU client made on that core: its threads are
pinned there, and it runs programs on the calling thread. Checked here: the
runtime's threads and the pinned threads sit on their cores, a pinned thread
computes exactly what any other thread computes in every host linker, Python
threads that call a model themselves are not pinned, and nutpie's chains
are pinned to distinct cores (and not when the flag is off) while sampling
the known posterior of :mod:`_conjugate_model`.
"""

import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import nutpie
import pytest
from _conjugate_model import build_model, check_posterior
from _linkers import LINKER_MODES, compile_function

import pytensor
import pytensor.tensor as pt
from pytensor import config
from pytensor.compile._jax_ofg.host import cores
from pytensor.compile.jax_ofg import as_jax_op


pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="threads are pinned on Linux only"
)

#: The host linkers (the JAX linker's programs are PyTensor's, not host calls).
HOST_LINKERS = [(name, mode) for name, mode in LINKER_MODES if name != "jax"]


def thread_ids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def in_thread(function):
    """Run ``function`` in a new Python thread; return its result (or raise)."""
    result = {}

    def run():
        try:
            result["value"] = function()
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.parametrize("which", ["one core", "every core"])
def test_a_runtime_keeps_its_threads_on_its_cores(which):
    usable = tuple(cores.usable_cores())
    chosen = usable[-1:] if which == "one core" else usable
    made_before = chosen in cores._RUNTIMES
    before = thread_ids()
    runtime = cores.runtime_on(chosen)
    new = thread_ids() - before
    if made_before:
        pytest.skip("this process made the runtime before the test watched")
    assert new, "the client started no threads"
    assert {t: os.sched_getaffinity(t) for t in new} == {t: set(chosen) for t in new}
    assert runtime.device not in jax.devices()
    assert os.sched_getaffinity(0) == set(usable)  # restored
    assert cores.runtime_on(chosen) is runtime


def test_cores_are_shared_evenly_among_threads():
    assert cores.shares_of([0, 1, 2, 3, 4, 5, 6], 3) == [(0, 1, 2), (3, 4), (5, 6)]
    assert cores.shares_of([2, 3], 2) == [(2,), (3,)]
    assert cores.shares_of([0, 1], 3) == [(0,), (1,)]


def damped(x, *, rate):
    return jnp.cumsum(jnp.sin(x) * jnp.exp(-rate * x))


@pytest.mark.parametrize("linker, mode", HOST_LINKERS)
def test_a_pinned_thread_computes_what_any_thread_computes(linker, mode):
    # A rate of each linker's own: a program no other test compiled.
    rate = 0.3 + [name for name, _ in HOST_LINKERS].index(linker) / 10
    x = pt.vector("x", shape=(5,))
    y = as_jax_op(damped)(x, rate=rate)
    value = y.sum() ** 2
    function = compile_function([x], [y, pytensor.grad(value, x)], mode)
    point = np.linspace(0.1, 2.0, 5)
    expected = [
        damped(point, rate=rate),
        jax.grad(lambda v: damped(v, rate=rate).sum() ** 2)(point),
    ]

    def pinned_call():
        share = cores.pin_this_thread()
        affinity = os.sched_getaffinity(0)
        client = share.home.device.client
        before = len(client.live_executables())
        outputs = function(point)
        return share, affinity, len(client.live_executables()) - before, outputs

    share, affinity, compiled, outputs = in_thread(pinned_call)
    assert affinity == {share.home.cores[0]}
    assert compiled >= 1  # the program ran on the home core's runtime
    assert cores.thread_share() is None  # this thread was not pinned
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for got, want in zip(function(point), expected):  # and in this thread
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_samplers_threads_get_distinct_cores():
    usable = cores.usable_cores()
    cores.plan_sampler_threads(len(usable))
    got = [in_thread(lambda: cores.pin_this_thread().home.cores) for _ in usable]
    assert sorted(got) == [(core,) for core in usable]


def test_the_flag_off_pins_nothing():
    with config.change_flags(jax_ofg__pin_sampler_threads=False):
        assert in_thread(lambda: (cores.pin_this_thread(), cores.thread_share())) == (
            None,
            None,
        )


def products(a):
    return a @ a @ a @ a


@pytest.mark.skipif(len(cores.usable_cores()) < 2, reason="one core")
def test_a_thread_with_cores_to_spare_runs_big_programs_on_all_of_them():
    cores.plan_sampler_threads(1)  # one thread: every core is its share
    a = pt.matrix("a", shape=(300, 300))
    small = pytensor.function([a], as_jax_op(lambda m: m[0] * 2.0)(a))
    big = pytensor.function([a], as_jax_op(products)(a))
    value = np.eye(300) + np.random.default_rng(0).normal(scale=0.01, size=(300, 300))

    def pinned_calls():
        share = cores.pin_this_thread()
        counts = {}
        for name, function in (("small", small), ("big", big)):
            before = [
                len(r.device.client.live_executables())
                for r in (share.home, share.wide)
            ]
            function(value)
            counts[name] = [
                len(r.device.client.live_executables()) - b
                for r, b in zip((share.home, share.wide), before)
            ]
        return share, counts, small(value), big(value)

    share, counts, small_value, big_value = in_thread(pinned_calls)
    assert share.wide is not None and share.wide.cores == tuple(cores.usable_cores())
    assert counts == {"small": [1, 0], "big": [0, 1]}  # home, wide
    np.testing.assert_allclose(small_value, value[0] * 2.0, rtol=1e-14)
    np.testing.assert_allclose(big_value, products(value), rtol=1e-10, atol=1e-13)


def sample(model, **kwargs):
    compiled = nutpie.compile_pymc_model(model)
    affinity = os.sched_getaffinity(0)
    trace = nutpie.sample(
        compiled, chains=2, cores=2, tune=300, draws=600, progress_bar=False, **kwargs
    )
    assert os.sched_getaffinity(0) == affinity  # this thread is not pinned
    return trace


@pytest.fixture(scope="module")
def conjugate():
    return build_model(pool_work=False)


@pytest.fixture
def watch_pins(monkeypatch):
    """Record the runtime each thread that nutpie's callbacks pin gets."""
    pinned: dict[int, int] = {}
    pin = cores.pin_this_thread

    def recording_pin():
        share = pin()
        if share is not None:
            pinned[threading.get_native_id()] = share.home.cores[0]
        return share

    monkeypatch.setattr(cores, "pin_this_thread", recording_pin)
    return pinned


@pytest.mark.slow
def test_nutpies_chains_are_pinned_to_distinct_cores(conjugate, watch_pins):
    if len(cores.usable_cores()) < 2:
        pytest.skip("one core")
    trace = sample(conjugate, seed=3)
    check_posterior(trace.posterior["theta"].values)
    assert len(watch_pins) == 2, watch_pins
    assert sorted(watch_pins.values()) == cores.usable_cores()[:2]


@pytest.mark.slow
def test_with_the_flag_off_nutpies_chains_are_not_pinned(conjugate, watch_pins):
    with config.change_flags(jax_ofg__pin_sampler_threads=False):
        trace = sample(conjugate, seed=4)
    check_posterior(trace.posterior["theta"].values)
    assert watch_pins == {}
