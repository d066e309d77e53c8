"""The trace cache: a later process traces nothing, and never reuses a stale trace.

Every test runs fresh processes sharing one ``compiledir``. The wrapped
functions print ``TRACED`` whenever JAX traces their body (a print is no JAX
effect, so the programs stay exportable), so the tests count traces in the
output. In-process, a global edited between two compiles (a notebook) gives
the new value in every linker.
"""

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from _fake_distributions import install_distribution
from _fresh_process import SERVE_HITS, SITECUSTOMIZE, run_python
from _linkers import compile_function

import pytensor
import pytensor.tensor as pt


#: The model: a function in a module of its own, calling a helper in another.
MODEL = """
import jax.numpy as jnp
import numpy as np
from pytensor.compile.jax_ofg import as_jax_op
import helpers

SCALE = {scale}
WEIGHTS = np.load("weights.npy")


def make_rate(weights):
    def rate(x):
        return jnp.sum(weights * x)
    return rate


rate = make_rate(WEIGHTS)


@as_jax_op
def solve(x, *, power):
    print("TRACED")
    return SCALE * helpers.shape(x) ** power + rate(x)
"""

HELPERS = """
import jax.numpy as jnp

def shape(x):
    return jnp.{function}(x)
"""

#: Builds a value-and-gradient graph, compiles it (default mode: one JAX
#: island), evaluates it; prints the result and what the cache holds.
SCRIPT = """
import json, sys
import numpy as np, pytensor, pytensor.tensor as pt
import model
from pytensor.compile.jax_ofg import trace_cache_info

x = pt.vector("x", shape=(3,))
cost = pt.sum(model.solve(x, power={power})) + pt.sum(x**2)
f = pytensor.function([x], [cost, pt.grad(cost, x)])
value, gradient = f(np.array([0.1, 0.2, 0.3]))
print("RESULT", json.dumps([float(value), gradient.tolist()]))
print("CACHE", json.dumps(trace_cache_info()))
"""


class Project:
    """A folder holding the model's modules, run in fresh processes."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.compiledir = folder / "compiledir"
        (folder / "startup").mkdir(parents=True, exist_ok=True)
        (folder / "startup" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.write(scale=2.0, function="sin", weights=[1.0, 2.0, 3.0])

    def write(self, *, scale=None, function=None, weights=None) -> None:
        if scale is not None:
            self._write("model.py", MODEL.format(scale=scale))
        if function is not None:
            self._write("helpers.py", HELPERS.format(function=function))
        if weights is not None:
            np.save(self.folder / "weights.npy", np.array(weights))

    def _write(self, name: str, text: str) -> None:
        path = self.folder / name
        path.write_text(textwrap.dedent(text))
        # A second edit within the file system's mtime resolution must not
        # let Python reuse the first version's bytecode.
        for cached in (self.folder / "__pycache__").glob(f"{path.stem}.*"):
            cached.unlink()

    def run(self, power=2, flags: str = "", env=None) -> tuple[int, list, dict]:
        """Traces of the body, the result and the cache's state in a fresh process."""
        script = self.folder / "script.py"
        script.write_text(SCRIPT.format(power=power))
        environment = {
            **subprocess_env(),
            "PYTHONPATH": f"{self.folder / 'startup'}:{self.folder}",
            "PYTENSOR_FLAGS": f"{SERVE_HITS},base_compiledir={self.compiledir}{flags}",
            **(env or {}),
        }
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=self.folder,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.splitlines()
        result = next(
            json.loads(line[7:]) for line in lines if line.startswith("RESULT ")
        )
        cache = next(
            json.loads(line[6:]) for line in lines if line.startswith("CACHE ")
        )
        return lines.count("TRACED"), result, cache


def subprocess_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def expected(scale=2.0, function=np.sin, weights=(1.0, 2.0, 3.0), power=2):
    x = np.array([0.1, 0.2, 0.3])
    w = np.array(weights)
    value = np.sum(scale * function(x) ** power + np.sum(w * x)) + np.sum(x**2)
    derivative = {np.sin: np.cos, np.tanh: lambda v: 1 - np.tanh(v) ** 2}[function]
    gradient = scale * power * function(x) ** (power - 1) * derivative(x)
    gradient = gradient + 3 * w + 2 * x  # rate(x) is added to each of 3 outputs
    return value, gradient


def check(result, *args, **kwargs) -> None:
    value, gradient = expected(*args, **kwargs)
    np.testing.assert_allclose(result[0], value, rtol=1e-12)
    np.testing.assert_allclose(result[1], gradient, rtol=1e-12)


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


def test_a_second_process_traces_nothing(project):
    traces, result, cache = project.run()
    assert traces >= 2  # the shape trace when the graph is built, the program
    check(result)
    assert cache["entries"] >= 2 and cache["bytes"] > 0
    assert Path(cache["path"]).parent.parent == project.compiledir
    traces, again, _ = project.run()
    assert traces == 0
    assert again == result


@pytest.mark.parametrize(
    "edit, new",
    [
        ({"scale": 3.0}, {"scale": 3.0}),  # a global constant the function reads
        ({"function": "tanh"}, {"function": np.tanh}),  # a helper in another module
        ({"weights": [0.5, 0.5, 4.0]}, {"weights": (0.5, 0.5, 4.0)}),  # a closure
    ],
    ids=["global", "helper module", "closure array"],
)
def test_an_edit_the_trace_depends_on_gives_the_new_result(project, edit, new):
    project.run()
    project.write(**edit)
    traces, result, _ = project.run()
    assert traces >= 1
    check(result, **new)
    traces, again, _ = project.run()  # and the new trace is kept in turn
    assert traces == 0 and again == result


def test_a_changed_static_argument_gives_the_new_result(project):
    project.run(power=2)
    traces, result, _ = project.run(power=3)
    assert traces >= 1
    check(result, power=3)


def test_a_changed_dependency_version_gives_the_new_result(project):
    """A library is keyed by its version; upgrading it re-traces."""
    site = project.folder / "site"

    def install(version: str, factor: float) -> None:
        install_distribution(
            site,
            "fakedep",
            version,
            f"FACTOR = {factor}\ndef scale(x):\n    return FACTOR * x\n",
        )

    install("1.0", 1.0)
    project._write(
        "helpers.py",
        "import jax.numpy as jnp\nimport fakedep\n\n"
        "def shape(x):\n    return fakedep.scale(jnp.sin(x))\n",
    )
    env = {"PYTHONPATH": f"{project.folder / 'startup'}:{project.folder}:{site}"}
    _, first, _ = project.run(env=env)
    check(first)
    traces, again, _ = project.run(env=env)
    assert traces == 0 and again == first
    install("1.1", 2.0)
    traces, upgraded, _ = project.run(env=env)
    assert traces >= 1
    check(upgraded, scale=2.0 * 4.0)  # (2 sin x)^2 = 4 sin^2 x


def test_the_switch_turns_it_off(project):
    _, first, cache = project.run(flags=",jax_ofg__trace_cache=False")
    assert (cache["path"], cache["entries"], cache["bytes"]) == (None, 0, 0)
    traces, again, _ = project.run(flags=",jax_ofg__trace_cache=False")
    assert traces >= 2 and again == first


def test_an_undescribable_function_is_traced_as_before(project):
    project._write(
        "model.py",
        MODEL.format(scale=2.0) + "\nimport threading\n_LOCK = threading.Lock()\n\n"
        "@as_jax_op\ndef solve(x, *, power):\n"
        "    print('TRACED')\n    with _LOCK:\n"
        "        return SCALE * helpers.shape(x) ** power + rate(x)\n",
    )
    _, first, cache = project.run()
    check(first)
    assert cache["entries"] == 0
    traces, again, _ = project.run()
    assert traces >= 2 and again == first


def test_two_processes_filling_the_cache_at_once_both_work(project):
    script = project.folder / "script.py"
    script.write_text(SCRIPT.format(power=2))
    environment = {
        **subprocess_env(),
        "PYTHONPATH": f"{project.folder / 'startup'}:{project.folder}",
        "PYTENSOR_FLAGS": f"{SERVE_HITS},base_compiledir={project.compiledir}",
    }
    processes = [
        subprocess.Popen(
            [sys.executable, str(script)],
            cwd=project.folder,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
        result = next(
            json.loads(line[7:])
            for line in stdout.splitlines()
            if line.startswith("RESULT ")
        )
        check(result)
    traces, _, _ = project.run()
    assert traces == 0


def test_programs_with_host_callbacks_are_traced_as_before(project):
    """``jax.debug.callback`` (like equinox's checks) cannot be exported."""
    project._write(
        "model.py",
        MODEL.format(scale=2.0)
        .replace(
            '    print("TRACED")\n',
            '    print("TRACED")\n    jax.debug.callback(lambda: None)\n',
        )
        .replace(
            "import jax.numpy as jnp\n", "import jax\nimport jax.numpy as jnp\n", 1
        ),
    )
    _, first, _ = project.run()
    check(first)
    traces, again, _ = project.run()
    assert traces == 1  # the program; the output types still come from the cache
    assert again == first


# ================================================================ in-process
@pytest.fixture
def notebook_module(tmp_path, monkeypatch):
    """A module whose global a later 'cell' edits."""
    (tmp_path / "notebook_cell.py").write_text(
        textwrap.dedent(
            """
            import jax.numpy as jnp
            from pytensor.compile.jax_ofg import as_jax_op

            FACTOR = 2.0

            @as_jax_op
            def scaled(x):
                return FACTOR * jnp.sin(x)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("notebook_cell")
    yield module
    sys.modules.pop("notebook_cell", None)


def test_a_global_edited_between_two_compiles_gives_the_new_value(
    mode, notebook_module
):
    x = pt.vector("x", shape=(3,))
    y = notebook_module.scaled(x).sum()
    xv = np.array([0.1, 0.2, 0.3])
    before = compile_function([x], [y, pt.grad(y, x)], mode)(xv)
    notebook_module.FACTOR = 5.0  # the next cell
    after = compile_function([x], [y, pt.grad(y, x)], mode)(xv)
    np.testing.assert_allclose(before[0], 2.0 * np.sin(xv).sum(), rtol=1e-12)
    np.testing.assert_allclose(after[0], 5.0 * np.sin(xv).sum(), rtol=1e-12)
    np.testing.assert_allclose(after[1], 5.0 * np.cos(xv), rtol=1e-12)
    rebuilt = notebook_module.scaled(x).sum()  # a graph built anew, too
    again = compile_function([x], rebuilt, mode)(xv)
    np.testing.assert_allclose(again, 5.0 * np.sin(xv).sum(), rtol=1e-12)


# ====================================================== reads while tracing
#: A wrapped function whose trace reads an environment variable or a file.
READING_MODEL = """
import os
import jax.numpy as jnp
import numpy as np
from pytensor.compile.jax_ofg import as_jax_op


@as_jax_op
def solve(x, *, power):
    print("TRACED")
    k = {read}
    return k * jnp.sin(x) ** power + jnp.sum(np.array([1.0, 2.0, 3.0]) * x)
"""

READS = {
    "environment variable": ('float(os.environ["K"])', "os._Environ.__getitem__"),
    "file": ('float(np.load("traced_k.npy"))', "_io.open"),
}


def reading_expected(k, power=2):
    x = np.array([0.1, 0.2, 0.3])
    w = np.array([1.0, 2.0, 3.0])
    value = np.sum(k * np.sin(x) ** power + np.sum(w * x)) + np.sum(x**2)
    gradient = k * power * np.sin(x) ** (power - 1) * np.cos(x) + 3 * w + 2 * x
    return value, gradient


@pytest.mark.parametrize("changed", sorted(READS))
def test_a_trace_that_reads_the_environment_or_a_file_is_not_kept(tmp_path, changed):
    """What a trace reads from outside the program is no part of any key: such a
    function is traced in every process (and gives the value read now)."""
    project = Project(tmp_path)
    read, reason = READS[changed]
    project._write("model.py", READING_MODEL.format(read=read))
    np.save(tmp_path / "traced_k.npy", np.array(2.0))
    traces, result, cache = project.run(env={"K": "2.0"})
    np.testing.assert_allclose(result[0], reading_expected(2.0)[0], rtol=1e-12)
    reasons = [r for f, r in cache["uncached_functions"].items() if "solve" in f]
    assert reasons and all(reason in r for r in reasons), cache["uncached_functions"]
    traces, again, _ = project.run(env={"K": "2.0"})
    assert traces >= 1 and again == result  # nothing was kept: traced again
    np.save(tmp_path / "traced_k.npy", np.array(3.0))
    _, new, _ = project.run(env={"K": "3.0"})
    value, gradient = reading_expected(3.0)
    np.testing.assert_allclose(new[0], value, rtol=1e-12)
    np.testing.assert_allclose(new[1], gradient, rtol=1e-12)


def test_a_second_process_verifies_every_hit(project):
    _, first, _ = project.run()
    traces, again, cache = project.run(flags=",jax_ofg__trace_cache=verify")
    assert again == first
    assert cache["mode"] == "verify"
    assert cache["verified"] >= 2 and cache["verified"] == cache["hits"]
    assert traces >= 2  # verifying traces anyway


# ---------------------------------------------------------------- in-process
@pytest.fixture
def reading_function(tmp_path, monkeypatch):
    """A wrapped function reading ``$JAX_OFG_TEST_K`` and a file while traced."""
    weights = tmp_path / "weights.npy"
    np.save(weights, np.array([1.0, 2.0, 3.0]))
    monkeypatch.setenv("JAX_OFG_TEST_K", "2.0")

    from pytensor.compile.jax_ofg import as_jax_op

    def solve(x):
        k = float(os.environ["JAX_OFG_TEST_K"])
        return k * jnp.sin(x) + jnp.sum(np.load(weights) * x)

    return as_jax_op(solve), weights


@pytest.mark.parametrize("changed", ["environment variable", "file"])
def test_a_read_changed_between_two_compiles_gives_the_new_value(
    mode, reading_function, monkeypatch, changed
):
    solve, weights = reading_function
    x = pt.vector("x", shape=(3,))
    y = solve(x).sum()
    xv = np.array([0.1, 0.2, 0.3])
    before = compile_function([x], [y, pt.grad(y, x)], mode)(xv)
    np.testing.assert_allclose(before[0], 2.0 * np.sin(xv).sum() + 3 * 1.4)
    if changed == "file":
        np.save(weights, np.array([0.5, 0.5, 4.0]))
        k, w = 2.0, np.array([0.5, 0.5, 4.0])
    else:
        monkeypatch.setenv("JAX_OFG_TEST_K", "3.0")
        k, w = 3.0, np.array([1.0, 2.0, 3.0])
    value, gradient = compile_function([x], [y, pt.grad(y, x)], mode)(xv)
    np.testing.assert_allclose(value, k * np.sin(xv).sum() + 3 * (w @ xv), rtol=1e-12)
    np.testing.assert_allclose(gradient, k * np.cos(xv) + 3 * w, rtol=1e-12)
    rebuilt = solve(x).sum()  # a graph built anew, too
    again = compile_function([x], rebuilt, mode)(xv)
    np.testing.assert_allclose(again, value, rtol=1e-12)


def test_an_audit_event_the_recursion_limit_hides_refuses_the_trace(
    tmp_path, monkeypatch
):
    """An event the watch cannot attribute (no stack left) fails closed."""
    from pytensor.compile._jax_ofg.cache import watch as trace_watch

    def out_of_stack(*args, **kwargs):
        raise RecursionError

    path = tmp_path / "k.txt"
    path.write_text("2.0")
    monkeypatch.setattr(trace_watch, "_check_caller", out_of_stack)
    with trace_watch.watching(frozenset()) as watch:
        trace_watch._on_audit("open", (str(path), "r", 0))
    assert watch.refusal == "the audit event open at the recursion limit"


# -------------------------------------------------------------------- verify
def test_verify_names_the_function_whose_trace_it_cannot_reproduce(monkeypatch):
    """A blind spot of the watch is caught by verify: here the watch is made
    blind, and random state read while tracing slips through it."""
    import random

    from pytensor.compile._jax_ofg.cache import traces as trace_cache
    from pytensor.compile.jax_ofg import as_jax_op

    watched = trace_cache._watched
    monkeypatch.setattr(
        trace_cache,
        "_watched",
        lambda compute, covered: (watched(compute, covered)[0], None),
    )

    @as_jax_op
    def jittery(x):
        return x[: random.choice([1, 2, 3])]  # another output type per trace

    x = pt.vector("x", shape=(3,))
    random.seed(0)
    with pytensor.config.change_flags(jax_ofg__trace_cache="on"):
        jittery(x)
    with (
        pytensor.config.change_flags(jax_ofg__trace_cache="verify"),
        pytest.raises(
            trace_cache.StaleTraceError, match=r"stale types entry for jittery"
        ),
    ):
        for _ in range(20):  # a fresh trace draws another length, sooner or later
            jittery(x)


def test_the_flag_takes_on_off_verify_and_booleans():
    from pytensor.compile._jax_ofg.cache import traces as trace_cache

    for value, mode in [(True, "on"), (False, "off"), ("verify", "verify")]:
        with pytensor.config.change_flags(jax_ofg__trace_cache=value):
            assert trace_cache.mode() == mode
    with (
        pytest.raises(ValueError, match="'on', 'off' or 'verify'"),
        pytensor.config.change_flags(jax_ofg__trace_cache="sometimes"),
    ):
        pass


# ------------------------------------------------------------- fail closed
def test_an_undescribable_function_is_counted_and_logged(caplog):
    import threading

    from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

    lock = threading.Lock()

    @as_jax_op
    def locked(x):
        with lock:
            return 2 * x

    with caplog.at_level("DEBUG", logger="pytensor.compile.jax_ofg"):
        y = locked(pt.vector("x", shape=(2,)))
    reason = trace_cache_info()["uncached_functions"]["locked"]
    assert "lock" in reason
    assert any("locked is not cached" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(y.eval({y.owner.inputs[0]: np.ones(2)}), [2.0, 2.0])


# ============================================ equinox's raising checks (diffrax)
#: A diffrax solve with equinox's default checks (``throw=True``): a value and
#: gradient that pass, then a stiff one that runs out of steps and raises.
CHECKED_SCRIPT = """
import json
import diffrax, jax.numpy as jnp, numpy as np, pytensor, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info

@as_jax_op
def decay(k, *, max_steps):
    print("TRACED", flush=True)
    term = diffrax.ODETerm(lambda t, y, a: -k * y * jnp.array([1.0, 20.0]))
    solution = diffrax.diffeqsolve(
        term, diffrax.Tsit5(), 0.0, 10.0, 0.1, jnp.ones(2), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 5)),
    )
    return solution.ys

k = pt.scalar("k")
cost = pt.sum(decay(k, max_steps=64))
f = pytensor.function([k], [cost, pt.grad(cost, k)])
print("RESULT", json.dumps([float(v) for v in f(0.1)]), flush=True)
try:
    f(30.0)
except Exception as error:
    message = str(error).split("INTERNAL")[0].strip()
    print("ERROR", json.dumps([type(error).__name__, message]), flush=True)
print("CACHE", json.dumps(trace_cache_info()))
"""


#: The same with checks inside a linear solve's solve and a scan's body.
CHECKED_SCAN_SCRIPT = CHECKED_SCRIPT.replace(
    """    term = diffrax.ODETerm(lambda t, y, a: -k * y * jnp.array([1.0, 20.0]))
    solution = diffrax.diffeqsolve(
        term, diffrax.Tsit5(), 0.0, 10.0, 0.1, jnp.ones(2), max_steps=max_steps,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 5)),
    )
    return solution.ys
""",
    """    a = jnp.array([[2.0, 1.0], [0.5, 3.0]])
    def solve(matvec, b):
        x = jnp.linalg.solve(a, b)
        return eqx.error_if(x, x[1] > 1e6, "solution too large")
    def transpose_solve(vecmat, b):
        return jnp.linalg.solve(a.T, b)
    y0 = jax.lax.custom_linear_solve(
        lambda v: a @ v, jnp.stack([1.0, k]), solve, transpose_solve
    )
    def step(y, _):
        y = eqx.error_if(y, k > 10.0, "the rate must be at most 10")
        return y * jnp.exp(-k * 0.1), y
    return jax.lax.scan(step, y0, length=max_steps)[1]
""",
).replace("import diffrax,", "import equinox as eqx, jax,")
assert "diffeqsolve" not in CHECKED_SCAN_SCRIPT  # the replacement took place


@pytest.mark.parametrize(
    "script_text, messages",
    [
        (CHECKED_SCRIPT, ["maximum number of solver steps", "decay(max_steps=64)"]),
        (CHECKED_SCAN_SCRIPT, ["the rate must be at most 10", "decay(max_steps=64)"]),
    ],
    ids=["diffrax", "scan-and-linear-solve"],
)
def test_equinox_checks_are_served_and_raise_as_before(tmp_path, script_text, messages):
    """A second process traces nothing; a failed check raises the same error."""
    script = tmp_path / "checked.py"
    script.write_text(script_text)

    def run(flags: str = "") -> tuple[list[str], dict]:
        done = run_python(
            [str(script)],
            tmp_path,
            timeout=600,
            env={
                "PYTENSOR_FLAGS": f"{SERVE_HITS},base_compiledir={tmp_path / 'cd'}{flags}"
            },
        )
        lines = done.stdout.splitlines()
        marked = {
            line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
            for line in lines
            if line.startswith(("RESULT ", "ERROR ", "CACHE "))
        }
        before_result = lines[
            : lines.index(next(x for x in lines if x.startswith("RESULT")))
        ]
        return before_result, marked

    _, uncached = run(",jax_ofg__trace_cache=off")
    first_traces, first = run()
    second_traces, second = run()
    assert first_traces.count("TRACED") >= 1
    assert second_traces.count("TRACED") == 0  # served: nothing traced
    assert second["CACHE"]["hits"] >= 2 and second["CACHE"]["uncached"] == 0
    np.testing.assert_allclose(second["RESULT"], uncached["RESULT"], rtol=1e-12)
    assert first["RESULT"] == second["RESULT"]
    # The error a failed check raises: type and message as without the cache.
    assert uncached["ERROR"][0] == first["ERROR"][0] == second["ERROR"][0]
    assert uncached["ERROR"][1] == first["ERROR"][1] == second["ERROR"][1]
    for message in messages:
        assert message in second["ERROR"][1]


def _flagged_as_jax_computes(f, *args):
    """``f``'s program with its checks as a flag; on ``args`` it computes what
    ``f`` does, and no check failed."""
    import jax

    from pytensor.compile._jax_ofg.host.checks import flag_checks, holds_host_callbacks

    jaxpr = jax.make_jaxpr(f)(*args)
    assert holds_host_callbacks(jaxpr)
    flagged = flag_checks(jaxpr)
    outputs, failed = flagged(*args)
    want = jax.tree_util.tree_leaves(f(*args))
    assert len(outputs) == len(want)
    for got, expected in zip(outputs, want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert not bool(failed)
    return flagged


def test_equinox_checks_inside_a_scan_become_a_flag():
    """The flagged program computes what JAX does, and flags a failed check.

    A scan with constants, a pytree carry and scanned inputs (JAX 0.12 lays
    their counts out as ``ft_in``; this raised ``KeyError: 'num_consts'`` and
    left such programs uncached).
    """
    import equinox as eqx
    from jax import lax

    def f(x, w, xs):
        def step(carry, xi):
            a, b = carry
            a = eqx.error_if(a, a > 100.0, "too big")
            return (a * w + xi[0], b + xi[1]), a + w

        return lax.scan(step, (x, 2.0 * x), (xs, 3.0 * xs))

    flagged = _flagged_as_jax_computes(f, 1.0, 2.0, jnp.arange(4.0))
    _, failed = flagged(50.0, 2.0, jnp.arange(4.0))
    assert bool(failed)


def test_equinox_checks_inside_a_linear_solve_and_a_while_loop_become_a_flag():
    """Checks in a linear solve's solve and in a while loop's body are flagged.

    ``custom_linear_solve`` keeps its jaxprs in a namedtuple, which the search
    for callbacks skipped: such a program was never flagged, so never cached.
    """
    import equinox as eqx
    import jax
    from jax import lax

    def f(a, b):
        def solve(matvec, rhs):
            x = jnp.linalg.solve(a, rhs)
            return eqx.error_if(x, x[0] > 100.0, "too big")

        x = lax.custom_linear_solve(lambda v: a @ v, b, solve)

        def body(state):
            i, total = state
            total = eqx.error_if(total, total > 1e3, "diverged")
            return i + 1, total + x.sum()

        return x, lax.while_loop(lambda s: s[0] < 3, body, (0, 0.0))[1]

    a = jnp.array([[2.0, 1.0], [0.5, 3.0]])
    flagged = _flagged_as_jax_computes(f, a, jnp.array([1.0, 2.0]))
    for bad_b in (jnp.array([1e3, 0.0]), jnp.array([500.0, 0.0])):
        with pytest.raises(Exception, match=r"too big|diverged"):
            jax.block_until_ready(f(a, bad_b))
        _, failed = flagged(a, bad_b)
        assert bool(failed)


def test_the_oldest_entries_go_beyond_the_size_limit_and_clear_empties_it(
    tmp_path, monkeypatch
):
    """The folder stays under ``MAX_BYTES``; ``clear_trace_cache`` forgets everything."""
    from pytensor.compile._jax_ofg.cache import storage
    from pytensor.compile._jax_ofg.cache import traces as trace_cache

    monkeypatch.setattr(trace_cache, "mode", lambda: "on")
    monkeypatch.setattr(trace_cache, "trace_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(storage, "MAX_BYTES", 40_000)

    def lookup(i):
        compute = functools.partial(np.full, 1000, float(i))  # 8 kB pickled
        return trace_cache.cached(f"eviction-test-{i}", (i,), compute, name="f")

    def misses():
        return trace_cache.trace_cache_info()["misses"]

    before = misses()

    for i in range(10):
        np.testing.assert_array_equal(lookup(i), np.full(1000, float(i)))
    files = sorted(tmp_path.iterdir(), key=lambda p: p.stat().st_mtime)
    assert 0 < sum(p.stat().st_size for p in files) <= 40_000
    assert len(files) < 10
    assert files[-1].suffix == ".eviction-test-9"  # the newest stays
    assert ".eviction-test-0" not in {p.suffix for p in files}  # the oldest went

    assert lookup(9)[0] == 9.0 and misses() == before + 10  # served
    trace_cache.clear_trace_cache()
    assert list(tmp_path.iterdir()) == []
    assert lookup(9)[0] == 9.0 and misses() == before + 11  # traced again


def test_reset_forgets_what_the_cache_holds_in_memory_and_keeps_the_rest(tmp_path):
    """``reset()``: no entry in memory and no memo, as in a new process; the
    disk, the counts, what the process started with and the watch stay, in
    the same containers (the watch's callbacks hold them)."""
    from pytensor.compile._jax_ofg.cache import api
    from pytensor.compile.jax_ofg import as_jax_op

    state = api.STATE
    x = pt.vector("x", shape=(3,))
    with (
        pytensor.config.change_flags(jax_ofg__trace_cache="on"),
        api.trace_cache_dir_set_to(tmp_path),
    ):

        @as_jax_op
        def halve(x):
            return x / 2.0

        halve(x)  # a watched trace, kept: memos filled
        never = functools.partial(pytest.fail, "computed, not served")

        def lookup(where, compute, persist=True):
            return api.cached(
                "reset-test", (where,), compute, name="f", persist=persist
            )

        lookup("memory", functools.partial(float, 1.0), persist=False)
        lookup("disk", functools.partial(float, 2.0))
        assert lookup("memory", never, persist=False) == 1.0  # kept in memory
        memos = [
            state.module_kinds,
            state.code_info,
            state.describers,
            state.source_digests,
            state.callable_verdicts,
        ]
        assert all(len(memo) > 0 for memo in memos) and len(state.entries) > 0

        def kept():
            return {
                "counts": dict(state.counts),
                "uncached": dict(state.uncached),
                "distributions": dict(state.distributions),
                "code_verdicts": len(state.code_verdicts),
                "instrumented": len(state.instrumented),
                "tool_id": state.tool_id,
                "started_on": state.started_on,
            }

        before = kept()
        containers = {
            field: id(value)
            for field in state.__slots__
            if not isinstance(value := getattr(state, field), bool | int | Path | None)
        }

        api.reset()

        assert [len(memo) for memo in memos] == [0] * len(memos)
        assert len(state.entries) == 0
        assert kept() == before
        assert {field: id(getattr(state, field)) for field in containers} == containers
        # In memory only: computed again; on disk: served from there.
        assert lookup("memory", functools.partial(float, 3.0), persist=False) == 3.0
        assert lookup("disk", never) == 2.0


def test_the_suites_fresh_processes_verify_every_hit(tmp_path):
    # The suite's claim (conftest.py): fresh processes run with
    # jax_ofg__trace_cache=verify, read from the PYTENSORRC file it writes.
    done = run_python(
        [
            "-c",
            "import pytensor.compile.jax_ofg; "
            "from pytensor.compile._jax_ofg.cache.traces import mode; print(mode())",
        ],
        tmp_path,
        timeout=120,
    )
    assert done.stdout.split() == ["verify"]


def test_a_kept_program_is_what_jax_jit_compiles_and_others_exports_stay_portable():
    """A program the cache keeps is lowered as ``jax.jit`` lowers it for this jaxlib
    (the CPU kernels of lgamma and digamma), and computes what it computes to the
    last bit; an export anyone else makes stays as portable as JAX makes it.

    ``jax.export``'s forward-compatible lowering swapped the kernels for
    polynomial approximations: the SIR case study's program doubled in size,
    and XLA took twice as long to compile it, in every cold process.
    """
    import jax
    from jax.scipy.special import digamma, gammaln

    from pytensor.compile._jax_ofg.host.exports import Exported, export_jaxpr

    def f(x, y):
        return (gammaln(x) * y + digamma(y) - jax.lax.fmuladd(x, y, 1.0),)

    x, y = np.linspace(0.3, 40.0, 64), np.linspace(0.7, 9.0, 64)
    specs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in (x, y)]
    entry = export_jaxpr(jax.make_jaxpr(f)(*specs), specs, ((64,),), "cpu")
    assert isinstance(entry, Exported)
    program = entry.program()
    text = program.mlir_module()
    assert "cpu_lgamma_ffi" in text and "cpu_digamma_ffi" in text
    (got,) = program.call(x, y)
    (want,) = jax.jit(f)(x, y)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

    portable = jax.export.export(jax.jit(f))(*specs)
    assert "lgamma_ffi" not in portable.mlir_module()
    assert jax.export.deserialize(portable.serialize()).call(x, y)[0].shape == (64,)
