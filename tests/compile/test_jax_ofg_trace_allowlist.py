"""The trace cache serves only what it can prove: patterns a key cannot see.

Each pattern runs in fresh processes sharing one ``compiledir`` (every linker
in each process), and in one process between two compiles (a notebook), and
gives JAX's own value. Patterns whose trace depends on what no key holds (a
file read by a jitted helper when traced, a memoised loader) are left
uncached, with the reason; patterns the key now holds (the installed
environment, PyTensor's flags, a lowering registered for an op) are cached
and traced again when they change. A last group calls arbitrary functions
no test above names while tracing and finds the function uncached.
"""

import functools
import json
import shutil
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fake_distributions import install_distribution
from _fresh_process import SERVE_HITS, run_script
from _linkers import compile_function

import pytensor
import pytensor.tensor as pt


X = np.array([0.1, 0.2, 0.3])

#: Compiles value and gradient of ``model.cost`` in every linker and prints
#: them with what the trace cache did.
SCRIPT = """
import json, sys
sys.path.insert(0, "libs")
import numpy as np, pytensor, pytensor.tensor as pt
import model
from _linkers import LINKER_MODES, compile_function
from pytensor.compile.jax_ofg import trace_cache_info

getattr(model, "before_building", lambda: None)()
x = pt.vector("x", dtype="float64", shape=(3,))
cost = model.cost(x)
results = {}
for name, mode in LINKER_MODES:
    f = compile_function([x], [cost, pt.grad(cost, x)], mode)
    value, gradient = f(np.array([0.1, 0.2, 0.3]))
    results[name] = [float(value), np.asarray(gradient, dtype=float).tolist()]
print("RESULT", json.dumps(results))
print("CACHE", json.dumps(trace_cache_info()))
"""


class Project:
    """A folder of modules (``model.py`` defines ``cost(x)``), run in fresh processes."""

    def __init__(self, folder: Path, files: dict[str, str]):
        self.folder = folder
        (folder / "libs").mkdir(exist_ok=True)
        for name, text in files.items():
            self.write(name, text)

    def write(self, name: str, text: str) -> None:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        # An edit within the file system's mtime resolution must not let
        # Python reuse the old bytecode.
        shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)

    def run(self, flags: str = "") -> tuple[dict, dict]:
        """Each linker's ``[value, gradient]``, and the trace cache's state."""
        done = run_script(
            SCRIPT,
            self.folder,
            timeout=600,
            env={
                "PYTENSOR_FLAGS": f"{SERVE_HITS},base_compiledir={self.folder / 'cache'}{flags}"
            },
        )
        lines = done.stdout.splitlines()
        result = next(json.loads(s[7:]) for s in lines if s.startswith("RESULT "))
        cache = next(json.loads(s[6:]) for s in lines if s.startswith("CACHE "))
        return result, cache


def assert_linkers_give(result: dict, expected) -> None:
    """Every linker's value and gradient against ``expected(linker)``."""
    for linker, (value, gradient) in result.items():
        want_value, want_gradient = expected(linker)
        np.testing.assert_allclose(value, want_value, rtol=1e-6, err_msg=linker)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-6, err_msg=linker)


def sin_plus_weights(weights):
    """``sum(sin(x) + sum(w * x))`` and its gradient (the models below)."""
    w = np.asarray(weights)
    return lambda linker: (np.sum(np.sin(X)) + 3 * (w @ X), np.cos(X) + 3 * w)


def reasons_for(cache: dict, function: str) -> list[str]:
    return [r for name, r in cache["uncached_functions"].items() if function in name]


# =================================================== what no key can describe
JIT_HELPER_MODEL = """
import jax, jax.numpy as jnp, numpy as np, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op

@jax.jit
def weighted(x):
    return jnp.sum(np.load("weights.npy") * x)  # read when JAX traces it

def before_building():  # the user called it once: JAX keeps its trace
    weighted(jnp.ones(3))

@as_jax_op
def solve(x):
    return jnp.sin(x) + weighted(x)

def cost(x):
    return pt.sum(solve(x))
"""

MEMOISED_LOADER_MODEL = """
import functools
import jax.numpy as jnp, numpy as np, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op

@functools.cache
def table():
    return np.load("weights.npy")

table()  # filled at import

@as_jax_op
def solve(x):
    return jnp.sin(x) + jnp.sum(table() * x)

def cost(x):
    return pt.sum(solve(x))
"""

#: Making a memo (calling the class ``functools._lru_cache_wrapper``) is
#: pure; calling one answers from its contents. The two verdicts once shared
#: a key: a memo made while traced let every later memo call through.
MEMO_MADE_BEFORE_THE_LOADER_MODEL = (
    MEMOISED_LOADER_MODEL
    + """
@as_jax_op
def makes_a_memo(x):
    functools.lru_cache(jnp.sin)  # made, never called
    return 2.0 * x

def before_building():
    makes_a_memo(pt.vector(dtype="float64", shape=(3,)))  # traced first
"""
)


@pytest.mark.parametrize(
    "model, reason",
    [
        (JIT_HELPER_MODEL, "_io.open (from numpy.lib._npyio_impl.load)"),
        (MEMOISED_LOADER_MODEL, "functools._lru_cache_wrapper (from model.solve)"),
        (
            MEMO_MADE_BEFORE_THE_LOADER_MODEL,
            "functools._lru_cache_wrapper (from model.solve)",
        ),
    ],
    ids=[
        "jitted helper reading a file",
        "memoised loader",
        "memoised loader after a memo was made",
    ],
)
def test_a_trace_depending_on_what_no_key_holds_is_not_served(tmp_path, model, reason):
    project = Project(tmp_path, {"model.py": model})
    np.save(tmp_path / "weights.npy", np.array([1.0, 2.0, 3.0]))
    first, cache = project.run()
    assert_linkers_give(first, sin_plus_weights([1.0, 2.0, 3.0]))
    assert any(reason in r for r in reasons_for(cache, "solve")), cache
    np.save(tmp_path / "weights.npy", np.array([0.5, 0.5, 4.0]))
    second, cache = project.run()
    assert_linkers_give(second, sin_plus_weights([0.5, 0.5, 4.0]))
    assert cache["misses"] > 0 and any(reason in r for r in reasons_for(cache, "solve"))


def _load_module(tmp_path, monkeypatch, name: str, text: str):
    import importlib
    import sys

    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _value_and_gradient(cost_of, mode):
    x = pt.vector("x", dtype="float64", shape=(3,))
    cost = cost_of(x)
    return compile_function([x], [cost, pt.grad(cost, x)], mode)(X)


def test_a_jitted_helper_reading_a_file_gives_the_file_now(mode, tmp_path, monkeypatch):
    """In a notebook: the file changes between two compiles. JAX's own trace of
    the helper (kept by ``jax.jit``) is not reused by the wrapped function's
    traces, in any linker: the value is the file's now."""
    np.save(tmp_path / "weights.npy", np.array([1.0, 2.0, 3.0]))
    model = _load_module(tmp_path, monkeypatch, "jit_helper_cell", JIT_HELPER_MODEL)
    model.before_building()
    before = _value_and_gradient(model.cost, mode)
    np.save(tmp_path / "weights.npy", np.array([0.5, 0.5, 4.0]))
    after = _value_and_gradient(model.cost, mode)
    assert_linkers_give({"before": before}, sin_plus_weights([1.0, 2.0, 3.0]))
    assert_linkers_give({"after": after}, sin_plus_weights([0.5, 0.5, 4.0]))
    fresh = jax.jit(lambda x: jnp.sum(model.solve.fn(x)))  # JAX itself, fresh
    jax.clear_caches()
    np.testing.assert_allclose(after[0], fresh(X), rtol=1e-12)


def test_a_memoised_loader_gives_what_the_memo_holds(mode, tmp_path, monkeypatch):
    """In a notebook, the memo keeps the old table after the file changed: JAX
    computes with it, and so does the op (the trace is never cached)."""
    from pytensor.compile.jax_ofg import trace_cache_info

    np.save(tmp_path / "weights.npy", np.array([1.0, 2.0, 3.0]))
    model = _load_module(tmp_path, monkeypatch, "memo_cell", MEMOISED_LOADER_MODEL)
    _value_and_gradient(model.cost, mode)
    np.save(tmp_path / "weights.npy", np.array([0.5, 0.5, 4.0]))
    after = _value_and_gradient(model.cost, mode)
    jax_value = jax.jit(lambda x: jnp.sum(model.solve.fn(x)))(X)
    np.testing.assert_allclose(after[0], jax_value, rtol=1e-12)
    assert_linkers_give({"after": after}, sin_plus_weights([1.0, 2.0, 3.0]))
    if mode != "JAX":  # the JAX linker traces without the cache
        # The first refusal is the memo, or the file read inside it when the
        # memo is still empty as the trace runs (both are what the key lacks).
        reason = trace_cache_info()["uncached_functions"]["solve"]
        assert "functools._lru_cache_wrapper" in reason or "_io.open" in reason


# =============================================== what the key holds, now
LIBRARY_A = """
import libb

def scale(x):
    return libb.FACTOR * x
"""

UPGRADE_MODEL = """
import jax.numpy as jnp, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op
import liba

@as_jax_op
def solve(x):
    return jnp.sin(x) + liba.scale(x)

def cost(x):
    return pt.sum(solve(x))
"""


def scaled_sine(factor):
    return lambda linker: (np.sum(np.sin(X) + factor * X), np.cos(X) + factor)


def test_a_dependency_upgraded_under_an_unchanged_library_traces_again(tmp_path):
    libs = tmp_path / "libs"
    project = Project(tmp_path, {"model.py": UPGRADE_MODEL})
    install_distribution(libs, "liba", "1.0", LIBRARY_A)
    install_distribution(libs, "libb", "1.0", "FACTOR = 2.0\n")
    first, cache = project.run()
    assert_linkers_give(first, scaled_sine(2.0))
    assert not reasons_for(cache, "solve"), cache
    _, cache = project.run()
    assert cache["misses"] == 0 and cache["hits"] > 0  # served
    install_distribution(libs, "libb", "2.0", "FACTOR = 3.0\n")  # liba unchanged
    second, cache = project.run()
    assert_linkers_give(second, scaled_sine(3.0))
    assert cache["misses"] > 0 and not reasons_for(cache, "solve")
    _, cache = project.run()
    assert cache["misses"] == 0  # the new traces were kept


def test_an_upgrade_while_a_process_runs_keeps_what_its_modules_compute(
    mode, tmp_path, monkeypatch
):
    """The modules in memory are the old ones: their entries stay served (the
    value JAX computes in this process), and no new trace is kept."""
    import sys

    from pytensor.compile._jax_ofg.cache.environment import (
        installed_distributions_changed,
    )
    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    libs = tmp_path / "libs"
    install_distribution(libs, "liba", "1.0", LIBRARY_A)
    install_distribution(libs, "libb", "1.0", "FACTOR = 2.0\n")
    monkeypatch.syspath_prepend(str(libs))
    for name in ("liba", "libb"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import liba

    monkeypatch.setitem(sys.modules, "liba", liba)
    monkeypatch.setitem(sys.modules, "libb", sys.modules["libb"])

    def solve(x):
        return jnp.sin(x) + liba.scale(x)

    def solve_too(x):  # another function: no entry yet
        return liba.scale(x) + jnp.sin(x)

    def cost_of(wrapped):
        return lambda x: pt.sum(wrapped(x))

    before = _value_and_gradient(cost_of(as_jax_op(solve, name="upgraded_a")), mode)
    install_distribution(libs, "libb", "2.0", "FACTOR = 3.0\n")
    assert installed_distributions_changed()
    again = _value_and_gradient(cost_of(as_jax_op(solve, name="upgraded_a")), mode)
    other = _value_and_gradient(cost_of(as_jax_op(solve_too, name="upgraded_b")), mode)
    for result in (before, again, other):
        assert_linkers_give({"in memory": result}, scaled_sine(2.0))
    if mode != "JAX":
        reason = trace_cache_info()["uncached_functions"]["upgraded_b"]
        assert "installed or upgraded since this process started" in reason


FLOATX_MODEL = """
import jax.numpy as jnp, pytensor, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op

@as_jax_op
def solve(x):
    return 2.0 * jnp.sin(x.astype(pytensor.config.floatX))

def cost(x):
    return pt.sum(solve(x))
"""


def sine_in(dtype):
    def expected(linker):
        x = X.astype(dtype)
        return np.sum(2.0 * np.sin(x)), 2.0 * np.cos(x)

    return expected


def test_a_pytensor_flag_read_while_tracing_is_in_the_key(tmp_path):
    project = Project(tmp_path, {"model.py": FLOATX_MODEL})
    first, _ = project.run()
    assert_linkers_give(first, sine_in("float64"))
    second, cache = project.run(",floatX=float32")
    assert_linkers_give(second, sine_in("float32"))
    assert cache["misses"] > 0 and not reasons_for(cache, "solve")
    np.testing.assert_array_equal(
        second["default"][0], np.float32(np.sum(2.0 * np.sin(X.astype("float32"))))
    )


def test_a_pytensor_flag_changed_in_a_notebook_gives_the_new_value(
    mode, tmp_path, monkeypatch
):
    model = _load_module(tmp_path, monkeypatch, "floatx_cell", FLOATX_MODEL)
    x = pt.vector("x", dtype="float64", shape=(3,))
    before = _value_and_gradient(model.cost, mode)
    assert model.solve(x).type.dtype == "float64"
    with pytensor.config.change_flags(floatX="float32"):
        after = _value_and_gradient(model.cost, mode)
        assert model.solve(x).type.dtype == "float32"  # traced again
        values = compile_function([x], model.solve(x), mode)(X)
    assert_linkers_give({"float64": before}, sine_in("float64"))
    assert_linkers_give({"float32": after}, sine_in("float32"))
    assert values.dtype == np.float32
    np.testing.assert_allclose(values, 2.0 * np.sin(X.astype("float32")), rtol=1e-6)


OPS_MODULE = """
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

class Twice(Op):
    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = 2.0 * inputs[0]

    def L_op(self, inputs, outputs, output_grads):
        return [2.0 * output_grads[0]]
"""

LOWERING_MODULE = """
from pytensor.link.jax.dispatch import jax_funcify
from ops import Twice

@jax_funcify.register(Twice)
def twice_lowering(op, **kwargs):
    def twice(x):
        return {factor} * x
    return twice
"""

LOWERING_MODEL = """
import jax.numpy as jnp, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op
import lowering
from ops import Twice

@as_jax_op
def solve(x):
    return jnp.sin(x)

def cost(x):
    return pt.sum(solve(Twice()(x)))
"""


def lowered_with(factor):
    """The island (and the JAX linker) runs the lowering; the Python linker runs
    ``perform``, which doubles. The gradient is the op's ``L_op`` (doubles)."""

    def expected(linker):
        c = 2.0 if linker == "py" else factor
        return np.sum(np.sin(c * X)), 2.0 * np.cos(c * X)

    return expected


def test_an_edited_lowering_of_an_op_in_an_island_traces_again(tmp_path):
    project = Project(
        tmp_path,
        {
            "ops.py": OPS_MODULE,
            "lowering.py": LOWERING_MODULE.format(factor=2.0),
            "model.py": LOWERING_MODEL,
        },
    )
    first, cache = project.run()
    assert_linkers_give(first, lowered_with(2.0))
    _, cache = project.run()
    assert cache["misses"] == 0  # served, the island's program included
    project.write("lowering.py", LOWERING_MODULE.format(factor=3.0))
    second, cache = project.run()
    assert_linkers_give(second, lowered_with(3.0))
    assert cache["misses"] > 0


def test_a_lowering_registered_again_in_a_notebook_gives_the_new_value(mode):
    from pytensor.compile.jax_ofg import as_jax_op
    from pytensor.link.jax.dispatch import jax_funcify

    namespace: dict = {}
    exec(OPS_MODULE, namespace)  # a class of this test's own: the registry keeps it
    Twice = namespace["Twice"]

    def register(factor):
        @jax_funcify.register(Twice)
        def lowering(op, **kwargs):
            return lambda x: factor * x

    solve = as_jax_op(jnp.sin, name="lowered_sine")
    register(2.0)
    before = _value_and_gradient(lambda x: pt.sum(solve(Twice()(x))), mode)
    register(3.0)
    after = _value_and_gradient(lambda x: pt.sum(solve(Twice()(x))), mode)
    linker = "py" if mode == "FAST_COMPILE" else "lowered"
    assert_linkers_give({linker: before}, lowered_with(2.0))
    assert_linkers_give({linker: after}, lowered_with(3.0))


# ============================================= calls no test above names
def _file_of_this_test() -> str:
    return __file__


#: What a wrapped function calls while traced: an expression, and what the
#: reason it is left uncached names.
CALLS = {
    "os.stat": ("os.stat(PATH).st_size", "posix.stat"),
    "os.path.getmtime": ("os.path.getmtime(PATH)", "posix.stat"),
    "os.path.exists": ("os.path.exists(PATH)", "posix.stat"),
    "pathlib read": ("len(pathlib.Path(PATH).read_text())", "_io."),
    "open": ("len(open(PATH).read())", "_io.open"),
    "map(os.stat)": ("list(map(os.stat, [PATH]))[0].st_size", "posix.stat"),
    "time.time": ("time.time()", "time.time"),
    "datetime.now": ("datetime.datetime.now().second", "datetime"),
    "os.getpid": ("os.getpid()", "posix.getpid"),
    "os.environ": ("len(os.environ.get('HOME', ''))", "os._Environ"),
    "random": ("random.random()", "_random.Random"),
    "np.random": ("np.random.rand()", "numpy.random"),
    "uuid": ("uuid.uuid4().int % 7", "posix.urandom"),
    "a thread": ("run_in_a_thread(lambda: 1.0)", "_thread"),
    "a thread pool": (
        "concurrent.futures.ThreadPoolExecutor(1).submit(lambda: 1.0).result()",
        "_queue",
    ),
    "a C extension": ("zlib.crc32(b'abc') % 7", "zlib.crc32"),
    "ctypes": ("ctypes.CDLL(None).getpid()", "ctypes"),
    "a memo of the user's": ("memoised(2.0)", "functools._lru_cache_wrapper"),
    "a memo's __call__": ("memoised.__call__(2.0)", "functools._lru_cache_wrapper"),
    "hash": ("hash('a') % 7", "builtins.hash"),
    # Python 3.13's subprocess takes a lock before it starts the process
    "subprocess": ("subprocess.run(['true']).returncode", "subprocess|_thread.lock"),
    "socket": ("len(socket.gethostname())", "socket"),
}


def run_in_a_thread(f):
    import threading

    out = []
    thread = threading.Thread(target=lambda: out.append(f()))
    thread.start()
    thread.join()
    return out[0]


@functools.lru_cache
def memoised(v):
    return v


@pytest.mark.parametrize("case", sorted(CALLS))
def test_a_function_calling_what_the_allowlist_does_not_hold_is_not_cached(case):
    import concurrent.futures  # noqa: F401  (used by the expressions)
    import ctypes  # noqa: F401
    import datetime  # noqa: F401
    import os  # noqa: F401
    import pathlib  # noqa: F401
    import random  # noqa: F401
    import socket  # noqa: F401
    import subprocess  # noqa: F401
    import time  # noqa: F401
    import uuid  # noqa: F401
    import zlib  # noqa: F401

    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    expression, reason = CALLS[case]
    namespace = {**globals(), **locals(), "PATH": _file_of_this_test()}
    source = f"def f(x):\n    _ = {expression}\n    return 2.0 * x\n"
    exec(source, namespace)
    name = f"calls {case}"
    wrapped = as_jax_op(namespace["f"], name=name)
    x = pt.vector("x", dtype="float64", shape=(3,))
    with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
        before = trace_cache_info()
        y = wrapped(x)
    np.testing.assert_allclose(y.eval({x: X}), 2.0 * X)
    after = trace_cache_info()
    found = after["uncached_functions"].get(name, "")
    # on failure: whether the trace was served (a hit) or traced and kept
    counts = {k: after[k] - before[k] for k in ("hits", "misses", "uncached")}
    assert any(part in found for part in reason.split("|")), (found, counts)


def test_a_function_calling_only_what_the_allowlist_holds_is_cached():
    import itertools
    import math

    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    def pure(x):
        scale = math.sqrt(4.0) * functools.reduce(lambda a, b: a * b, [1, 2, 3])
        shifts = list(itertools.accumulate(np.arange(3.0)))
        return scale * jnp.sin(x) + jnp.asarray(shifts) + np.float64(np.pi)

    wrapped = as_jax_op(pure, name="pure_allowlisted")
    x = pt.vector("x", dtype="float64", shape=(3,))
    with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
        before = trace_cache_info()["hits"]
        wrapped(x)
        y = as_jax_op(pure, name="pure_allowlisted")(x)  # a second wrapper
        assert trace_cache_info()["hits"] > before
    assert "pure_allowlisted" not in trace_cache_info()["uncached_functions"]
    np.testing.assert_allclose(
        y.eval({x: X}), 12.0 * np.sin(X) + np.array([0.0, 1.0, 3.0]) + np.pi
    )


def test_command_line_arguments_read_while_tracing_are_in_the_key(monkeypatch):
    """``sys.argv`` is data a module holds: described, not refused."""
    import sys

    from pytensor.compile._jax_ofg.cache import keys

    def with_argv(x):
        return float(len(sys.argv)) * x

    monkeypatch.setattr(sys, "argv", ["a"])
    one, _ = keys.trace_key("types", with_argv)
    monkeypatch.setattr(sys, "argv", ["a", "b"])
    two, _ = keys.trace_key("types", with_argv)
    assert one != two


def test_a_collection_during_a_trace_is_no_part_of_it():
    """A garbage collection runs where an allocation triggers it: its callbacks
    (which read the clock, as hypothesis's does) do not refuse the trace."""
    import gc
    import time

    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    collections = []

    def timed(phase, info):
        collections.append(time.perf_counter())

    def allocating(x):
        garbage = [[] for _ in range(50_000)]  # past gc's threshold, many times
        return float(len(garbage) > 0) * jnp.sin(x)

    gc.callbacks.append(timed)
    try:
        wrapped = as_jax_op(allocating, name="collects_while_traced")
        x = pt.vector("x", dtype="float64", shape=(3,))
        with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
            y = wrapped(x)
    finally:
        gc.callbacks.remove(timed)
    assert collections  # a collection did run, its callback with it
    assert "collects_while_traced" not in trace_cache_info()["uncached_functions"]
    np.testing.assert_allclose(y.eval({x: X}), np.sin(X))


def test_a_package_putting_its_vendored_folder_on_the_path_changes_no_key(
    tmp_path, monkeypatch
):
    """setuptools appends ``setuptools/_vendor`` (with its dist-info folders) to
    ``sys.path`` when imported: what that holds is setuptools', pinned by its
    own version. A folder of distributions of its own is another environment."""
    import sys

    from pytensor.compile._jax_ofg.cache import environment

    site = tmp_path / "site"
    (site / "pkg" / "_vendor" / "vendored-1.0.dist-info").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg-2.0.dist-info").mkdir()
    other = tmp_path / "other"
    (other / "more-3.0.dist-info").mkdir(parents=True)

    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    installed = environment.installed_distributions()
    assert "pkg-2.0.dist-info" in installed
    monkeypatch.setattr(sys, "path", [*sys.path, str(site / "pkg" / "_vendor")])
    assert environment.installed_distributions() == installed
    monkeypatch.setattr(sys, "path", [*sys.path, str(other)])
    assert "more-3.0.dist-info" in environment.installed_distributions()


# ======================================== equal code is not the same code
CELL = "def f(x):\n    _ = os.stat(PATH).st_size\n    return 2.0 * x\n"


def test_a_cell_run_again_is_watched_again():
    """A notebook cell run twice makes two equal code objects (``==`` holds for
    code of the same text): the second is watched like the first, not let through
    as one already seen."""
    import os

    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    reasons = []
    for run in ("first", "second"):
        cell = {"__name__": "__main__", "os": os, "PATH": _file_of_this_test()}
        exec(CELL, cell)
        name = f"cell run {run}"
        x = pt.vector("x", dtype="float64", shape=(3,))
        with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
            y = as_jax_op(cell["f"], name=name)(x)
        np.testing.assert_allclose(y.eval({x: X}), 2.0 * X)
        reasons.append(trace_cache_info()["uncached_functions"].get(name, ""))
    assert all("posix.stat" in reason for reason in reasons), reasons


def test_code_equal_to_covered_code_in_other_globals_is_not_covered():
    """The same function text in two modules: the key describes one module's
    globals, so the other's code (``==`` to it) is code the key does not describe."""
    from pytensor.compile._jax_ofg.cache.watch import watching

    def scale_in(module_name, factor):
        module = {"__name__": module_name, "FACTOR": factor}
        exec("def scale(x):\n    return FACTOR * x\n", module)
        return module["scale"]

    described, other = scale_in("__main__", 2.0), scale_in("__main__", 3.0)
    assert described.__code__ == other.__code__
    with watching([described.__code__]) as watch:
        described(1.0)
    assert watch.refusal is None
    with watching([described.__code__]) as watch:
        other(1.0)
    assert watch.refusal == "it ran __main__.scale, code its key does not describe"
