"""Sampler threads pinned to CPUs chosen by what is free, machine-wide.

Checked on fake machines (a ``/sys`` and ``/proc`` written here: 2, 4, 16 and
64 cores, SMT pairs, a restricted mask, CPU quotas) and on this one: the
machine is read as Linux describes it; leases keep two threads, of one
process or of several, off one CPU while another is free, and vanish with
their holder however it ends; a pinned thread runs its programs on its
CPU's runtime, compiled once per process, computing what any thread
computes; a failure leaves it unpinned with one warning; nothing re-pins
per call; a session's threads get their affinity back when it closes.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import LINKER_MODES, compile_function

import pytensor
import pytensor.tensor as pt
from pytensor import config
from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cores import api as cores
from pytensor.compile._jax_ofg.cores import threads
from pytensor.compile._jax_ofg.cores.leases import Leases
from pytensor.compile._jax_ofg.cores.topology import Topology, read_topology
from pytensor.compile.jax_ofg import as_jax_op


pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="threads are pinned on Linux only"
)

#: The host linkers (the JAX linker's programs are PyTensor's, not host calls).
HOST_LINKERS = [(name, mode) for name, mode in LINKER_MODES if name != "jax"]
THIS_MACHINE = read_topology()


# ------------------------------------------------------------ fake machines
def fake_machine(
    root: Path,
    cores: int,
    smt: int = 1,
    *,
    cgroup: str | None = None,
    mask: tuple[int, ...] | None = None,
) -> Topology:
    """Write a machine of ``cores`` x ``smt`` CPUs under ``root`` (Linux's numbering:
    CPU ``c + k * cores`` is thread ``k`` of core ``c``) and read it back.

    ``cgroup``: the lines of ``/proc/self/cgroup`` and the quota files, as
    ``"v2 150000 100000"`` or ``"v1 150000 100000"``.
    """
    count = cores * smt
    for cpu in range(count):
        folder = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        folder.mkdir(parents=True)
        siblings = [cpu % cores + k * cores for k in range(smt)]
        (folder / "thread_siblings_list").write_text(",".join(map(str, siblings)))
    proc = root / "proc/self"
    proc.mkdir(parents=True)
    if cgroup is None:
        (proc / "cgroup").write_text("0::/\n")
    else:
        version, quota, period = cgroup.split()
        if version == "v2":
            (proc / "cgroup").write_text("0::/job/step\n")
            folder = root / "sys/fs/cgroup/job"
            folder.mkdir(parents=True)
            (folder / "cpu.max").write_text(f"{quota} {period}\n")
        else:
            (proc / "cgroup").write_text("4:cpu,cpuacct:/job\n1:memory:/job\n")
            folder = root / "sys/fs/cgroup/cpu,cpuacct/job"
            folder.mkdir(parents=True)
            (folder / "cpu.cfs_quota_us").write_text(quota)
            (folder / "cpu.cfs_period_us").write_text(period)
    return read_topology(root, mask=mask or tuple(range(count)))


@pytest.mark.parametrize(
    "cores, smt, cgroup, mask, expected",
    [
        (2, 1, None, None, 2),  # 2 cores x 1 thread
        (4, 2, None, None, 4),  # 4 cores x 2 threads
        (4, 1, None, (0, 1, 2), 3),  # a mask of 3
        (4, 1, "v2 150000 100000", None, 1),  # a quota of 1.5 CPUs
        (16, 2, "v1 800000 100000", None, 8),
        (64, 1, "v2 max 100000", None, 64),
        (4, 2, None, (0, 4), 1),  # two SMT siblings of one core
    ],
)
def test_the_default_cores_are_the_physical_cores_capped_by_the_quota(
    tmp_path, cores, smt, cgroup, mask, expected
):
    machine = fake_machine(tmp_path, cores, smt, cgroup=cgroup, mask=mask)
    assert cores_api_default(machine) == expected


def cores_api_default(machine: Topology) -> int:
    return cores.default_cores(machine)


def test_this_machine_is_read_as_linux_describes_it():
    usable = tuple(sorted(os.sched_getaffinity(0)))
    assert THIS_MACHINE.usable == usable
    for cpu in usable:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        if path.exists():
            text = path.read_text().strip()
            assert ",".join(map(str, THIS_MACHINE.siblings[cpu])) in (
                text,
                text.replace("-", ","),
            )


def test_physical_cores_come_before_smt_siblings(tmp_path):
    machine = fake_machine(tmp_path, 4, 2)
    assert machine.physical_cores() == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert machine.preferred() == [0, 1, 2, 3, 4, 5, 6, 7]
    leases = Leases(tmp_path / "leases")
    taken = [leases.take(machine) for _ in range(8)]
    assert [lease.cpu for lease in taken] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert leases.take(machine) is None
    for lease in taken:
        lease.release()


def test_a_cpu_whose_sibling_is_held_comes_after_free_cores(tmp_path):
    machine = fake_machine(tmp_path, 2, 2)  # cores (0, 2) and (1, 3)
    leases = Leases(tmp_path / "leases")
    other = leases.take(machine, among=[2])  # another process holds CPU 2
    first = leases.take(machine)
    assert first.cpu == 1  # not 0: its sibling 2 is busy
    second = leases.take(machine)
    assert second.cpu == 0  # then the siblings
    for lease in (other, first, second):
        lease.release()


@pytest.mark.parametrize(
    "cores_, smt, threads_", [(2, 1, 2), (4, 2, 2), (16, 1, 5), (64, 2, 3)]
)
def test_shares_give_each_thread_a_physical_core_and_spread_the_rest(
    tmp_path, cores_, smt, threads_
):
    machine = fake_machine(tmp_path, cores_, smt)
    shares = threads.shares_of(machine.preferred(), threads_)
    homes = [share[0] for share in shares]
    assert homes == list(range(threads_))  # distinct physical cores
    assert sorted(cpu for share in shares for cpu in share) == list(machine.usable)
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1


def test_a_restricted_mask_is_respected(tmp_path):
    machine = fake_machine(tmp_path, 8, 1, mask=(2, 5, 7))
    leases = Leases(tmp_path / "leases")
    taken = [leases.take(machine) for _ in range(3)]
    assert sorted(lease.cpu for lease in taken) == [2, 5, 7]
    assert leases.take(machine) is None
    for lease in taken:
        lease.release()


def test_a_quota_caps_the_threads_a_session_plans(tmp_path, monkeypatch):
    machine = fake_machine(tmp_path, 8, 1, cgroup="v2 250000 100000")
    session = threads.SamplerSession(4, machine, Leases(tmp_path / "leases"))
    assert len(session.shares) == 2  # 2.5 CPUs: two busy threads at most


def test_a_second_session_plans_around_the_first(tmp_path):
    machine = fake_machine(tmp_path, 4, 1)
    leases = Leases(tmp_path / "leases")
    held = [leases.take(machine), leases.take(machine)]  # another sampler's
    session = threads.SamplerSession(2, machine, leases)
    assert session.shares == [(2,), (3,)]
    full = threads.SamplerSession(2, machine, leases)
    held += [leases.take(machine), leases.take(machine)]
    assert threads.SamplerSession(2, machine, leases).shares == []
    assert full.shares == [(2,), (3,)]  # planned before they were taken
    for lease in held:
        lease.release()


LEASE_HOLDER = """
import sys, time
from pathlib import Path
from pytensor.compile._jax_ofg.cores.leases import Leases
from pytensor.compile._jax_ofg.cores.topology import Topology
lease = Leases(Path(sys.argv[1])).take(Topology((0, 1), {}, None))
print(lease.cpu, flush=True)
time.sleep(600)
"""


def test_a_lease_vanishes_with_a_killed_holder(tmp_path):
    machine = Topology((0, 1), {}, None)
    leases = Leases(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import conftest\n" + LEASE_HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert holder.stdout.readline().strip() == "0"
        assert leases.free(machine) == [1]
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert leases.free(machine) == [0, 1]
    finally:
        holder.kill()
        holder.wait()


def test_a_threads_lease_is_closed_when_the_thread_exits(tmp_path):
    machine = Topology((0, 1), {}, None)
    leases = Leases(tmp_path)
    inside = {}

    def chain():
        lease = leases.take(machine)
        compat.close_at_thread_exit(lease.fd)
        inside["cpu"], inside["free"] = lease.cpu, leases.free(machine)
        lease.hand_over()

    in_thread(chain)
    assert inside == {"cpu": 0, "free": [1]}
    assert leases.free(machine) == [0, 1]


# -------------------------------------------------------------- this machine
def in_thread(function):
    """Run ``function`` in a new Python thread; return its result (or raise) once
    the thread has exited (its C library's exit work done, not only Python's)."""
    result = {}

    def run():
        result["tid"] = threading.get_native_id()
        try:
            result["value"] = function()
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    task = Path(f"/proc/self/task/{result['tid']}")
    for _ in range(1000):
        if not task.exists():
            break
        threading.Event().wait(0.001)
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.fixture
def lease_folder(tmp_path):
    """Leases in a folder of this test's: other processes' leases stay out of it."""
    with config.change_flags(jax_ofg__cpu_leases=str(tmp_path / "leases")):
        yield tmp_path / "leases"


def damped(x, *, rate):
    return jnp.cumsum(jnp.sin(x) * jnp.exp(-rate * x))


@pytest.fixture
def compiles():
    """A list that gets an entry per XLA compilation (a persistent cache miss, as
    JAX logs it) while the test runs.

    Read from JAX's log, not its monitoring events: a listener's code would run
    inside the traces the trace cache watches, which would then not be kept.
    """
    found = []

    class Misses(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("PERSISTENT COMPILATION CACHE MISS"):
                found.append(record.getMessage())

    logger, handler = logging.getLogger("jax._src.compiler"), Misses()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield found
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.parametrize("linker, mode", HOST_LINKERS)
def test_a_pinned_thread_computes_what_any_thread_computes(linker, mode, lease_folder):
    # A rate of each linker's own: a program no other test compiled.
    rate = 0.3 + [name for name, _ in HOST_LINKERS].index(linker) / 10
    x = pt.vector("x", shape=(5,))
    y = as_jax_op(damped)(x, rate=rate)
    function = compile_function([x], [y, pytensor.grad(y.sum() ** 2, x)], mode)
    point = np.linspace(0.1, 2.0, 5)
    expected = [
        damped(point, rate=rate),
        jax.grad(lambda v: damped(v, rate=rate).sum() ** 2)(point),
    ]
    session = cores.start_session(1)

    def pinned_call():
        pin = session.pin_calling_thread()
        client = pin.runtime.device.client
        before = len(client.live_executables())
        outputs = function(point)
        return (
            pin,
            os.sched_getaffinity(0),
            len(client.live_executables()) - before,
            outputs,
        )

    pin, affinity, loaded, outputs = in_thread(pinned_call)
    assert affinity == {pin.cpu}
    assert loaded >= 1  # the program ran on the runtime of the thread's CPU
    assert cores.thread_pin() is None  # this thread was not pinned
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for got, want in zip(function(point), expected):  # and in this thread
        np.testing.assert_allclose(got, want, rtol=1e-12)
    session.close()


def checked_decay(x, *, rate):
    y = jnp.exp(-rate * x)
    return eqx.error_if(y, jnp.any(x < 0), "x must not be negative")


@pytest.fixture
def every_compile_cached():
    """JAX's persistent cache keeps every program, however fast it compiled."""
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


@pytest.mark.skipif(len(THIS_MACHINE.usable) < 2, reason="one CPU")
def test_each_program_compiles_once_for_every_cores_runtime(
    lease_folder, compiles, every_compile_cached
):
    """Two threads on two CPUs (two XLA clients) run a program with an equinox
    check: one XLA compilation; the second client reads it from JAX's cache.
    Its check still raises the user's error on either thread."""
    rate = 0.5 + (time.time_ns() % 10**9) / 10**10  # a program no run compiled
    x = pt.vector("x", shape=(4,))
    y = as_jax_op(checked_decay)(x, rate=rate)
    function = pytensor.function([x], [y, pytensor.grad(y.sum(), x)])
    point = np.linspace(0.0, 1.0, 4)
    expected = [
        checked_decay(point, rate=rate),
        jax.grad(lambda v: checked_decay(v, rate=rate).sum())(point),
    ]
    session = cores.start_session(2)

    def chain():
        pin = session.pin_calling_thread()
        before = len(compiles)
        values = function(point)
        compiled = len(compiles) - before
        with pytest.raises(Exception, match="x must not be negative"):
            function(-point - 1.0)
        return pin.cpu, values, compiled

    first, second = in_thread(chain), in_thread(chain)
    session.close()
    assert first[0] != second[0]
    assert (first[2], second[2]) == (1, 0)  # the second read the first's
    for _, values, _ in (first, second):
        for value, want in zip(values, expected):
            np.testing.assert_allclose(value, want, rtol=1e-12)


def test_a_pinning_failure_leaves_the_thread_unpinned_with_one_warning(
    lease_folder, monkeypatch
):
    """A CPU the OS refuses (one that does not exist): the thread stays where it
    was, computes the same, its lease is released, and one warning says so."""
    monkeypatch.setattr(threads, "_warned", [])
    x = pt.vector("x", shape=(3,))
    function = pytensor.function([x], as_jax_op(damped)(x, rate=1.7))
    point = np.array([0.5, 1.0, 2.0])
    session = threads.SamplerSession(
        2, Topology((max(THIS_MACHINE.usable) + 1000,), {}, None), Leases(lease_folder)
    )  # a CPU that does not exist: made for the test, never a runtime's key

    def pinned_calls():
        affinity = os.sched_getaffinity(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pins = [session.pin_calling_thread() for _ in range(3)]
            value = function(point)
        return pins, affinity, os.sched_getaffinity(0), value, caught

    pins, before, after, value, caught = in_thread(pinned_calls)
    second = in_thread(lambda: session.pin_calling_thread())
    assert pins == [None, None, None] and second is None
    assert after == before  # not pinned, affinity as it was
    np.testing.assert_allclose(value, damped(point, rate=1.7), rtol=1e-12)
    messages = [str(w.message) for w in caught if "could not pin" in str(w.message)]
    assert len(messages) == 1, messages
    assert "same draws" in messages[0]
    assert Leases(lease_folder).free(session.machine) == list(session.machine.usable)


def test_nothing_re_pins_per_call_in_300_sessions(lease_folder, monkeypatch):
    """300 samplers one after another, each thread calling 5 times, some calls
    with its Python state lost (nutpie's threads past the states kept): one
    lease per thread, and every lease free once its thread has exited."""
    taken = []
    take = Leases.take

    def counting_take(self, machine, among=None):
        lease = take(self, machine, among)
        taken.append(lease)
        return lease

    monkeypatch.setattr(Leases, "take", counting_take)
    x = pt.vector("x", shape=(2,))
    function = pytensor.function([x], as_jax_op(damped)(x, rate=2.5))
    point = np.array([0.1, 0.2])

    def chain(session):
        for call in range(5):
            if call % 2:
                threads._CALLING.pin = None  # as a fresh Python thread state
            session.pin_calling_thread()
            function(point)

    for _ in range(300):
        session = cores.start_session(1)
        in_thread(lambda session=session: chain(session))
        session.close()
    assert len(taken) == 300
    assert all(lease is not None for lease in taken)
    assert Leases(lease_folder).free(THIS_MACHINE) == THIS_MACHINE.preferred()
    assert len(threads._PINS) <= 2  # the dead threads' pins are forgotten


def test_a_closed_session_gives_its_live_threads_their_affinity_back(lease_folder):
    session = cores.start_session(1)
    pinned, release = threading.Event(), threading.Event()
    seen = {}

    def chain():
        seen["before"] = os.sched_getaffinity(0)
        seen["pin"] = session.pin_calling_thread()
        seen["pinned"] = os.sched_getaffinity(0)
        pinned.set()
        release.wait()
        seen["after"] = os.sched_getaffinity(0)
        seen["pin after"] = cores.thread_pin()

    thread = threading.Thread(target=chain)
    thread.start()
    pinned.wait()
    session.close()
    release.set()
    thread.join()
    assert seen["pinned"] == {seen["pin"].cpu}
    assert seen["after"] == seen["before"]
    assert seen["pin after"].runtime is None  # its calls take the default route


def test_the_flag_off_pins_nothing():
    with config.change_flags(jax_ofg__pin_sampler_threads=False):
        assert cores.start_session(2) is None


def products(a):
    return a @ a @ a @ a


@pytest.mark.skipif(len(THIS_MACHINE.usable) < 2, reason="one CPU")
def test_a_thread_with_cpus_to_spare_runs_big_programs_on_all_of_them(lease_folder):
    a = pt.matrix("a", shape=(300, 300))
    small = pytensor.function([a], as_jax_op(lambda m: m[0] * 2.0)(a))
    big = pytensor.function([a], as_jax_op(products)(a))
    value = np.eye(300) + np.random.default_rng(0).normal(scale=0.01, size=(300, 300))
    session = cores.start_session(1)  # one thread: every free CPU is its share

    def pinned_calls():
        pin = session.pin_calling_thread()
        runtimes = (pin.runtime, pin.runtime_on_share())
        counts = {}
        for name, function in (("small", small), ("big", big)):
            before = [len(r.device.client.live_executables()) for r in runtimes]
            function(value)
            counts[name] = [
                len(r.device.client.live_executables()) - b
                for r, b in zip(runtimes, before)
            ]
        return pin, runtimes, counts, small(value), big(value)

    _, runtimes, counts, small_value, big_value = in_thread(pinned_calls)
    session.close()
    assert runtimes[1] is not None and runtimes[1].cores == tuple(THIS_MACHINE.usable)
    assert counts["small"] == [1, 0]  # home, wide
    assert counts["big"][1] == 1
    np.testing.assert_allclose(small_value, value[0] * 2.0, rtol=1e-14)
    np.testing.assert_allclose(big_value, products(value), rtol=1e-10, atol=1e-13)


# ------------------------------------------------------ pm.sample's default cores
class Sampled(Exception):
    """Raised in place of sampling, with the cores pm.sample passed."""


@pytest.fixture
def sampled_cores(monkeypatch):
    """Return a function that runs ``pm.sample`` on a model up to the sampler, and
    returns the ``cores`` it passes nutpie."""
    import pymc as pm
    import pymc.sampling.mcmc as mcmc

    def external(*args, cores, **kwargs):
        raise Sampled(cores)

    monkeypatch.setattr(mcmc, "_sample_external_nuts", external)

    def cores_passed(model, **kwargs):
        with model, pytest.raises(Sampled) as raised:
            pm.sample(nuts_sampler="nutpie", progressbar=False, **kwargs)
        return raised.value.args[0]

    return cores_passed


def two_models():
    import pymc as pm

    with pm.Model() as wrapped:
        rate = pm.HalfNormal("rate")
        pm.Normal(
            "y", as_jax_op(damped)(pt.ones(3), rate=rate), 1.0, observed=np.ones(3)
        )
    with pm.Model() as plain:
        rate = pm.HalfNormal("rate")
        pm.Normal("y", pt.exp(-rate), 1.0, observed=np.ones(3))
    return wrapped, plain


@pytest.mark.parametrize(
    "cores_, smt, cgroup, mask, expected",
    [
        (2, 1, None, None, 2),
        (4, 2, None, None, 4),
        (4, 1, None, (0, 1, 2), 3),
        (4, 1, "v2 150000 100000", None, 1),
        (16, 1, None, None, 4),  # PyMC's own cap of 4
    ],
)
def test_pm_sample_runs_a_chain_per_physical_core_by_default(
    tmp_path, monkeypatch, sampled_cores, cores_, smt, cgroup, mask, expected
):
    machine = fake_machine(tmp_path, cores_, smt, cgroup=cgroup, mask=mask)
    monkeypatch.setattr(cores, "read_topology", lambda: machine)
    monkeypatch.setattr("multiprocessing.cpu_count", lambda: cores_ * smt)
    wrapped, plain = two_models()
    assert sampled_cores(wrapped, chains=4) == expected
    assert sampled_cores(wrapped, chains=4, cores=3) == 3  # the user's, as given
    assert sampled_cores(plain, chains=4) == min(4, cores_ * smt // 2)  # PyMC's
    assert sampled_cores(wrapped, chains=1) == 1  # at most the chains


def test_the_flag_off_keeps_pymcs_default_cores(monkeypatch, sampled_cores):
    import pymc.sampling.mcmc as mcmc

    monkeypatch.setattr(mcmc, "_cpu_count", mcmc._cpu_count.__wrapped__)
    monkeypatch.setattr("multiprocessing.cpu_count", lambda: 2)
    wrapped, _ = two_models()
    assert sampled_cores(wrapped, chains=4) == 1


# ---------------------------------------------------------- nutpie end to end
def sampled_threads_and_draws(model, *, pin: bool, **kwargs):
    """Sample with nutpie; return the CPUs its chain threads were pinned to and
    the draws."""
    import nutpie

    homes: dict[int, int | None] = {}
    pin_calling = threads.SamplerSession.pin_calling_thread

    def recording(self):
        found = pin_calling(self)
        homes[threading.get_native_id()] = None if found is None else found.cpu
        return found

    with config.change_flags(jax_ofg__pin_sampler_threads=pin):
        threads.SamplerSession.pin_calling_thread = recording
        try:
            compiled = nutpie.compile_pymc_model(model)
            trace = nutpie.sample(compiled, progress_bar=False, **kwargs)
        finally:
            threads.SamplerSession.pin_calling_thread = pin_calling
    return homes, trace.posterior["theta"].values


@pytest.fixture(scope="module")
def conjugate():
    from _conjugate_model import build_model

    return build_model(pool_work=False)


@pytest.mark.slow
def test_pinning_on_or_off_gives_the_same_draws(conjugate):
    from _conjugate_model import check_posterior

    settings = {"chains": 2, "cores": 2, "tune": 200, "draws": 300, "seed": 11}
    homes_on, draws_on = sampled_threads_and_draws(conjugate, pin=True, **settings)
    homes_off, draws_off = sampled_threads_and_draws(conjugate, pin=False, **settings)
    check_posterior(draws_on)
    np.testing.assert_array_equal(draws_on, draws_off)
    assert homes_off == {}
    pinned = [cpu for cpu in homes_on.values() if cpu is not None]
    assert len(pinned) == len(set(pinned)) == min(2, THIS_MACHINE.busy_threads())


@pytest.mark.slow
def test_two_samplers_at_once_get_distinct_cpus(conjugate):
    import nutpie

    if THIS_MACHINE.busy_threads() < 2:
        pytest.skip("one core")
    homes: dict[int, int | None] = {}
    pin_calling = threads.SamplerSession.pin_calling_thread

    def recording(self):
        found = pin_calling(self)
        homes[threading.get_native_id()] = None if found is None else found.cpu
        return found

    threads.SamplerSession.pin_calling_thread = recording
    try:
        compiled = nutpie.compile_pymc_model(conjugate)
        samplers = [
            nutpie.sample(
                compiled,
                chains=1,
                cores=1,
                tune=300,
                draws=300,
                seed=seed,
                progress_bar=False,
                blocking=False,
            )
            for seed in (1, 2)
        ]
        traces = [sampler.wait() for sampler in samplers]
    finally:
        threads.SamplerSession.pin_calling_thread = pin_calling
    assert all(t.posterior.sizes["draw"] == 300 for t in traces)
    cpus = [cpu for cpu in homes.values() if cpu is not None]
    assert len(homes) == 2 and sorted(cpus) == sorted(set(cpus)) and len(cpus) == 2


TWO_PROCESSES = """
import json, os, sys, threading, time
import conftest
import nutpie
sys.path.insert(0, "tests/compile")
from _conjugate_model import build_model
from pytensor.compile._jax_ofg.cores import threads
homes = {}
pin_calling = threads.SamplerSession.pin_calling_thread
def recording(self):
    found = pin_calling(self)
    homes[threading.get_native_id()] = None if found is None else found.cpu
    return found
threads.SamplerSession.pin_calling_thread = recording
compiled = nutpie.compile_pymc_model(build_model(pool_work=False))
open(sys.argv[1], "w").close()
while len(os.listdir(os.path.dirname(sys.argv[1]))) < 2:  # both compiled
    time.sleep(0.01)
start = time.perf_counter()
nutpie.sample(compiled, chains=2, cores=1, tune=300, draws=300, progress_bar=False)
print(json.dumps({"homes": list(homes.values()), "seconds": time.perf_counter() - start}))
"""


@pytest.mark.slow
def test_processes_sampling_at_once_pin_their_chains_to_distinct_cpus(tmp_path):
    """Two processes each sample with ``cores=1`` at once, as the Dask how-to runs
    fits: each one's chain thread gets a CPU of its own (one per free CPU)."""
    if THIS_MACHINE.busy_threads() < 2:
        pytest.skip("one core")
    root = Path(__file__).parents[2]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_PROCESSES, str(tmp_path / f"ready-{k}")],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    try:
        outputs = [process.communicate(timeout=600)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    results = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    homes = [cpu for result in results for cpu in result["homes"]]
    print("seconds sampling:", [round(r["seconds"], 2) for r in results])
    assert None not in homes and len(homes) == 2 and homes[0] != homes[1]


COLD_PROCESS = """
import collections, json, logging, sys
import conftest
sys.path.insert(0, "tests/compile")
misses = collections.Counter()

class Misses(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("PERSISTENT COMPILATION CACHE MISS for"):
            misses[message.split("'")[1]] += 1

logger = logging.getLogger("jax._src.compiler")
logger.setLevel(logging.DEBUG)
logger.addHandler(Misses())
import nutpie
from _conjugate_model import build_model
compiled = nutpie.compile_pymc_model(build_model(pool_work=False))
trace = nutpie.sample(compiled, chains=2, cores=2, tune=30, draws=30, progress_bar=False)
print(json.dumps(dict(misses)))
"""


@pytest.mark.slow
def test_a_cold_process_compiles_its_model_once_for_every_chain(tmp_path):
    """A fresh process, its XLA cache empty, samples 2 chains on 2 CPUs (two XLA
    clients): the model's program is compiled once; the second chain's client
    reads it from the cache."""
    if THIS_MACHINE.busy_threads() < 2:
        pytest.skip("one core")
    environment = dict(
        os.environ,
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "xla"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", COLD_PROCESS],
        cwd=Path(__file__).parents[2],
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    misses = json.loads(done.stdout.strip().splitlines()[-1])
    assert misses.get("jit_program_on_core") == 1, misses


def test_work_beside_a_compile_runs_on_its_own_thread_on_every_cpu():
    """Work handed over runs while a runtime compiles, on a thread of its own
    that may use every CPU of the process (not the compiling thread's one
    core); work that raises is dropped, and the rest still runs."""
    from pytensor.compile._jax_ofg.cores import runtimes

    seen, done = [], threading.Event()

    def work():
        seen.append((threading.current_thread().name, os.sched_getaffinity(0)))
        done.set()

    def failing():
        raise RuntimeError("dropped")

    runtimes.beside_next_compile(failing)
    runtimes.beside_next_compile(work)
    core = sorted(os.sched_getaffinity(0))[0]
    runtime = runtimes.runtime_on((core,))
    program = runtimes.CompiledPerRuntime(
        jax.jit(lambda x: (x * 3.0 + 1.0,)), [jax.ShapeDtypeStruct((2,), np.float64)]
    )
    outputs = []

    def chain():  # a chain's thread, pinned to one core, compiles
        with runtimes._on_cores((core,)):
            outputs.extend(program.on(runtime)(np.ones(2)))

    chain_thread = threading.Thread(target=chain)
    chain_thread.start()
    chain_thread.join()
    np.testing.assert_array_equal(np.asarray(outputs[0]), [4.0, 4.0])
    assert done.wait(60)
    ((name, cpus),) = seen
    assert name == "jax_ofg-beside-compile"
    assert cpus == os.sched_getaffinity(os.getpid())  # the main thread's: all
    assert not runtimes._WAITING
