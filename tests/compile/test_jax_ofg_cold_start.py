"""Cold start: compiled Numba code and XLA programs are cached across processes.

Each fresh process here shares a temporary ``base_compiledir`` with the others
of its test. What is asserted is what the caches served (Numba's cache hits,
JAX's compilation-cache events) and the results; how much time that saves is
measured by ``benchmarks/cold_start.py``, not asserted.
"""

import json
import textwrap
import threading
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import run_script, start_python

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op, clear_trace_cache
from pytensor.compile.mode import get_mode
from pytensor.link.numba.dispatch import jax_ofg as numba_dispatch


PRELUDE = """
import json
from collections import Counter
import jax
events = Counter()
jax.monitoring.register_event_listener(lambda name, **kw: events.update([name]))

def report(f, **values):
    stats = f.vm.jit_fn.stats
    print(json.dumps(dict(
        numba_hits=sum(stats.cache_hits.values()),
        numba_misses=sum(stats.cache_misses.values()),
        xla_hits=events["/jax/compilation_cache/cache_hits"],
        xla_misses=events["/jax/compilation_cache/cache_misses"],
        **values,
    )))
"""

#: A value+grad graph with a JAX island and one with a lone op, in Numba.
GRAPHS = """
import numpy as np, pytensor, pytensor.tensor as pt, jax.numpy as jnp
from pytensor.compile.jax_ofg import as_jax_op
from pytensor.compile.mode import get_mode
import {module} as m
x = pt.vector("x", shape=(5,))
cost = pt.exp(m.path(x)).sum()
island = pytensor.function([x], [cost, pt.grad(cost, x)])
lone = pytensor.function([x], m.path(x))
xv = np.linspace(0.1, 0.5, 5)
value, gradient = island(xv)
# A graph that is one JAX op runs without its Numba function; nutpie takes that
# function, so call it as nutpie does: it is what Numba's cache serves.
numba_value, numba_gradient = island.vm.jit_fn(xv)
assert np.allclose(numba_value, value) and np.allclose(numba_gradient, gradient)
assert np.allclose(lone.vm.jit_fn(xv)[0], lone(xv))
report(island, value=float(value), gradient=gradient.tolist(), path=lone(xv).tolist(),
       lone_numba_hits=sum(lone.vm.jit_fn.stats.cache_hits.values()))
"""

MODULE = """
import jax.numpy as jnp
from pytensor.compile.jax_ofg import as_jax_op
from pytensor.compile.mode import get_mode

@as_jax_op
def path(x):
    return jnp.cumsum(jnp.sin(x)) * {factor}
"""


def run(code: str, compiledir: Path, *, env: dict | None = None, cwd=None):
    """Run ``code`` in a fresh interpreter; the JSON it prints, parsed."""
    env = {"PYTENSOR_FLAGS": f"base_compiledir={compiledir}", **(env or {})}
    folder = cwd or compiledir.parent
    result = run_script(PRELUDE + textwrap.dedent(code), folder, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


#: A function with no content key (it reads a lock): its ops' Numba keys come
#: from their type and output types.
UNDESCRIBABLE_MODULE = """
import threading
import jax.numpy as jnp
from pytensor.compile.jax_ofg import as_jax_op

LOCK = threading.Lock()

@as_jax_op
def path(x):
    with LOCK:
        return jnp.cumsum(jnp.sin(x)) * 2.0
"""


def write_module(folder: Path, factor: float) -> None:
    (folder / "cold_model.py").write_text(textwrap.dedent(MODULE.format(factor=factor)))


def expected(factor: float):
    xv = np.linspace(0.1, 0.5, 5)
    path = np.cumsum(np.sin(xv)) * factor
    return float(np.exp(path).sum()), path


#: These programs compile in milliseconds, below the threshold for a cache
#: entry: the environment variable (which the package respects) lowers it.
EVERY_PROGRAM = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def test_a_new_process_is_served_from_both_caches(tmp_path):
    write_module(tmp_path, 2.0)
    code = GRAPHS.format(module="cold_model")
    first = run(code, tmp_path / "cache", cwd=tmp_path, env=EVERY_PROGRAM)
    second = run(code, tmp_path / "cache", cwd=tmp_path, env=EVERY_PROGRAM)
    assert first["numba_misses"] >= 1  # compiled, and wrote the cache
    assert first["xla_misses"] >= 1
    assert second["numba_hits"] >= 1 and second["numba_misses"] == 0
    assert second["lone_numba_hits"] >= 1
    assert second["xla_hits"] >= 1 and second["xla_misses"] == 0
    value, path = expected(2.0)
    for result in (first, second):
        np.testing.assert_allclose(result["value"], value, rtol=1e-12)
        np.testing.assert_allclose(result["path"], path, rtol=1e-12)
    assert first["gradient"] == second["gradient"]


def test_a_new_process_is_served_from_numbas_cache_without_a_content_key(tmp_path):
    (tmp_path / "locked_model.py").write_text(textwrap.dedent(UNDESCRIBABLE_MODULE))
    code = GRAPHS.format(module="locked_model")
    first = run(code, tmp_path / "cache", cwd=tmp_path)
    second = run(code, tmp_path / "cache", cwd=tmp_path)
    assert first["numba_misses"] >= 1
    assert second["numba_hits"] >= 1 and second["numba_misses"] == 0
    assert second["lone_numba_hits"] >= 1
    value, path = expected(2.0)
    for result in (first, second):
        np.testing.assert_allclose(result["value"], value, rtol=1e-12)
        np.testing.assert_allclose(result["path"], path, rtol=1e-12)


def test_an_edited_function_gives_the_new_result(tmp_path):
    """The cached body calls the function compiled in this process, never a stale one."""
    code = GRAPHS.format(module="cold_model")
    write_module(tmp_path, 2.0)
    before = run(code, tmp_path / "cache", cwd=tmp_path)
    write_module(tmp_path, 3.0)
    after = run(code, tmp_path / "cache", cwd=tmp_path)
    for result, factor in ((before, 2.0), (after, 3.0)):
        value, path = expected(factor)
        np.testing.assert_allclose(result["value"], value, rtol=1e-12)
        np.testing.assert_allclose(result["path"], path, rtol=1e-12)


def test_two_processes_starting_at_once_share_one_cache(tmp_path):
    write_module(tmp_path, 2.0)
    code = PRELUDE + textwrap.dedent(GRAPHS.format(module="cold_model"))
    env = {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'cache'}", **EVERY_PROGRAM}
    workers = [start_python(["-c", code], tmp_path, env=env) for _ in range(2)]
    value, path = expected(2.0)
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        np.testing.assert_allclose(result["value"], value, rtol=1e-12)
        np.testing.assert_allclose(result["path"], path, rtol=1e-12)
    third = run(
        GRAPHS.format(module="cold_model"),
        tmp_path / "cache",
        cwd=tmp_path,
        env=EVERY_PROGRAM,
    )
    assert third["numba_misses"] == 0 and third["xla_misses"] == 0


CONFIG = """
import os, jax
import pytensor.compile.jax_ofg
print(json.dumps(dict(dir=jax.config.jax_compilation_cache_dir)))
"""


def test_the_xla_cache_goes_under_compiledir_unless_configured(tmp_path):
    ours = run(CONFIG, tmp_path / "cache")
    assert ours["dir"].startswith(str(tmp_path / "cache"))
    assert ours["dir"].endswith("jax_ofg_xla")
    theirs = run(
        CONFIG, tmp_path / "cache", env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path)}
    )
    assert theirs["dir"] == str(tmp_path)  # the user's choice wins
    off = run(
        CONFIG,
        tmp_path / "cache",
        env={"PYTENSOR_FLAGS": f"base_compiledir={tmp_path},jax_ofg__xla_cache=False"},
    )
    assert off["dir"] is None
    jax_off = run(
        CONFIG, tmp_path / "cache", env={"JAX_ENABLE_COMPILATION_CACHE": "false"}
    )
    assert jax_off["dir"] is None  # JAX's own switch


# ============================================================== registry
def scaled_by(factor):
    @as_jax_op
    def scaled(x):
        return jnp.sin(x) * factor

    return scaled


class Factor:
    """A user's object: described by its attributes (its repr shows an address)."""

    def __init__(self, value):
        self.value = value


class LockedFactor(Factor):
    """No content key at all: it holds a lock."""

    def __init__(self, value):
        super().__init__(value)
        self.lock = threading.Lock()


def scaled_by_object(factor: Factor):
    @as_jax_op
    def scaled(x):
        return jnp.sin(x) * factor.value

    return scaled


def numba_key_of(f) -> str:
    (node,) = f.maker.fgraph.apply_nodes
    (key,) = numba_dispatch.registry_keys(node.op)
    return key


def test_two_closures_of_one_name_never_share_a_registry_key():
    x = pt.vector("x", shape=(3,))
    xv = np.array([0.1, 0.2, 0.3])
    for make in (scaled_by, lambda k: scaled_by_object(Factor(k))):
        f2 = pytensor.function([x], make(2.0)(x), mode="NUMBA")
        f3 = pytensor.function([x], make(3.0)(x), mode="NUMBA")
        assert numba_key_of(f2) != numba_key_of(f3)
        np.testing.assert_allclose(f2(xv), 2.0 * np.sin(xv))
        np.testing.assert_allclose(f3(xv), 3.0 * np.sin(xv))
        np.testing.assert_allclose(f2(xv), 2.0 * np.sin(xv))  # still its own


def test_ops_without_a_content_key_are_told_apart_by_the_suffix():
    x = pt.vector("x", shape=(3,))
    xv = np.array([0.1, 0.2, 0.3])
    f2 = pytensor.function([x], scaled_by_object(LockedFactor(2.0))(x), mode="NUMBA")
    f3 = pytensor.function([x], scaled_by_object(LockedFactor(3.0))(x), mode="NUMBA")
    key2, key3 = numba_key_of(f2), numba_key_of(f3)
    assert key2 != key3
    assert key2.rsplit("_", 1)[0] == key3.rsplit("_", 1)[0]  # by type and types
    np.testing.assert_allclose(f2(xv), 2.0 * np.sin(xv))
    np.testing.assert_allclose(f3(xv), 3.0 * np.sin(xv))
    np.testing.assert_allclose(f2(xv), 2.0 * np.sin(xv))


def sines_of(depth):
    def repeated(x, n):  # recursive: holds itself in its closure
        return x if n == 0 else repeated(jnp.sin(x), n - 1)

    @as_jax_op
    def sines(x):
        return repeated(x, depth)

    return sines


def test_a_recursive_helper_in_the_closure_gets_a_key():
    x = pt.vector("x", shape=(3,))
    xv = np.array([0.1, 0.2, 0.3])
    twice = pytensor.function([x], sines_of(2)(x), mode="NUMBA")
    thrice = pytensor.function([x], sines_of(3)(x), mode="NUMBA")
    assert numba_key_of(twice) != numba_key_of(thrice)
    np.testing.assert_allclose(twice(xv), np.sin(np.sin(xv)), rtol=1e-12)
    np.testing.assert_allclose(thrice(xv), np.sin(np.sin(np.sin(xv))), rtol=1e-12)


def test_equal_ops_share_a_key_and_outlive_each_other():
    import gc

    x = pt.vector("x", shape=(3,))
    op_maker = scaled_by(2.0)
    first = pytensor.function([x], op_maker(x), mode="NUMBA")
    second = pytensor.function([x], op_maker(x), mode="NUMBA")
    key = numba_key_of(first)
    assert key == numba_key_of(second)
    del second  # the newest registration: the registry falls back to first's
    gc.collect()
    xv = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(first(xv), 2.0 * np.sin(xv))
    assert len(numba_dispatch._REGISTRY[key].hosts) == 1
    (node,) = first.maker.fgraph.apply_nodes
    op = node.op
    del first, node
    gc.collect()
    # No compiled function calls it any more: the registry lets it go.
    assert numba_dispatch.registry_keys(op) == []
    assert key not in numba_dispatch._REGISTRY


def test_an_op_keeps_its_key_when_a_lower_suffix_is_freed():
    import gc

    x = pt.vector("x", shape=(3,))
    xv = np.array([0.1, 0.2, 0.3])
    # Equal descriptions, unequal ops (two closures): two suffixes.
    earlier = pytensor.function([x], scaled_by(2.0)(x), mode="NUMBA")
    later_op = scaled_by(2.0)
    first = pytensor.function([x], later_op(x), mode="NUMBA")
    key = numba_key_of(first)
    earlier_key = numba_key_of(earlier)
    assert earlier_key.rsplit("_", 1)[0] == key.rsplit("_", 1)[0] != earlier_key
    del earlier
    gc.collect()  # the earlier op's suffix is free again
    second = pytensor.function([x], later_op(x), mode="NUMBA")
    assert numba_key_of(second) == key
    np.testing.assert_allclose(second(xv), 2.0 * np.sin(xv))
    np.testing.assert_allclose(first(xv), 2.0 * np.sin(xv))


# ================================================= traces, once per process
@pytest.mark.parametrize("islands", [True, False], ids=["islands", "no-islands"])
def test_no_trace_is_repeated_for_an_equal_function_and_equal_types(islands, capsys):
    """A second wrapper of the function, and the model built and compiled again."""

    def path(x):
        # Runs when JAX traces the function, only then. (A counter the
        # function itself holds would be part of what it computes: a new
        # count, a new trace.)
        print("TRACED")
        return jnp.cumsum(jnp.sin(x))

    def traced() -> list[str]:
        out = capsys.readouterr().out
        calls.extend(line for line in out.splitlines() if line == "TRACED")
        return calls

    calls: list[str] = []

    mode = get_mode(None) if islands else get_mode(None).excluding("jax_islands")
    xv = np.linspace(0.1, 0.5, 5)

    def build_compile_and_run():
        x = pt.vector("x", shape=(5,))
        cost = pt.exp(as_jax_op(path)(x)).sum()
        f = pytensor.function([x], [cost, pt.grad(cost, x)], mode=mode)
        return f(xv)

    # In this process, from an empty trace cache (this session's own folder;
    # a second process is tested elsewhere). With the cache off nothing
    # watches a trace, so nothing is proven reusable: every compile traces.
    clear_trace_cache()
    with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
        first = build_compile_and_run()
        n_traces = len(traced())
        assert n_traces  # shape inference, the residual or island trace, the run
        second = build_compile_and_run()
        assert len(traced()) == n_traces
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
