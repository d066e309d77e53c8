"""Speed of ``as_jax_op`` against the direct jitted JAX call and ``pytensor.wrap_jax``.

Side by side in one run: **per call** (medians of interleaved batches) of the
value, value+grad and grad of each function, directly jitted (with
``jax.block_until_ready``: the physical limit) and through ``as_jax_op`` and
``pytensor.wrap_jax`` compiled by ``pytensor.function`` in the Numba (default),
C VM and JAX linkers, each first checked against direct JAX (value+grad also
without the rewrite fusing an op's value and VJP); the **forward/backward
split**; each **JAX op** of the value+grad function on its inputs; **compile**
and **graph-build** times; a **breakdown** of the cheap function's per-call
cost under Numba. Functions: ``cheap`` (10-vector -> scalar), ``oscillator``
(a forced damped oscillator, Tsit5, its forcing interpolated from 16 knot
values that are an input), ``stiff`` (Robertson's kinetics, Kvaerno5).

Run::

    .venv/bin/python benchmarks/speed.py           # everything, ~5-8 minutes
    .venv/bin/python benchmarks/speed.py --quick   # a trial run, ~1.5 minutes
    .venv/bin/python benchmarks/speed.py --report  # the tables from the stored run

``--quick`` takes fewer, shorter batches, skips the stiff case and the
grad-alone task; ``--cases`` picks cases. Writes ``benchmarks/results/speed.json``
and ``speed.md`` (``speed_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import _report
import _room  # noqa: F401  (the checkout's modules)
import diffrax
import jax
import jax.numpy as jnp
import numba
import numpy as np
from _report import fill, format_ratio, format_seconds
from _timing import Call, Stats, interleaved_medians, median_of, time_once

import pytensor
import pytensor.tensor as pt
from pytensor.compile import Function, Mode
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.compile.mode import get_mode, optdb
from pytensor.graph.basic import Constant
from pytensor.link.numba.dispatch.basic import (
    get_numba_type,
    numba_funcify,
    numba_njit,
)


#: Linker name -> ``mode`` argument of ``pytensor.function``.
LINKERS: dict[str, str | None] = {"numba (default)": None, "cvm": "CVM", "jax": "JAX"}
#: Wrapper name -> decorator.
WRAPPERS: dict[str, Callable] = {"as_jax_op": as_jax_op, "wrap_jax": pytensor.wrap_jax}
DIRECT = "direct jax.jit"
#: The graph rewrite that fuses an op's value and VJP (when the checkout has it).
FUSION_REWRITE = "jax_ofg_fuse_value_and_vjp"
UNFUSED = "as_jax_op, fusion excluded | numba (default)"
VALUE, VALUE_GRAD, GRAD = "value", "value+grad", "grad"
CASE_NAMES = ("cheap", "oscillator", "stiff")


@dataclass(frozen=True)
class Settings:
    """How hard to measure, and what (a quick run is a noisy trial)."""

    quick: bool
    repeats: int  # rounds of interleaved batches per task
    batch_seconds: float  # target duration of one batch
    build_repeats: int  # samples of a graph build (each traces the function)
    breakdown_repeats: int  # rounds for the microsecond-scale breakdown
    breakdown_batch_seconds: float
    default_cases: tuple[str, ...]
    tasks: tuple[str, ...]

    @classmethod
    def make(cls, quick: bool) -> Settings:
        return cls(
            quick=quick,
            repeats=7 if quick else 21,
            batch_seconds=0.01 if quick else 0.05,
            build_repeats=3 if quick else 5,
            breakdown_repeats=15 if quick else 61,
            breakdown_batch_seconds=0.005 if quick else 0.01,
            default_cases=("cheap", "oscillator") if quick else CASE_NAMES,
            tasks=(VALUE, VALUE_GRAD) if quick else (VALUE, VALUE_GRAD, GRAD),
        )


# ---------------------------------------------------------------------------
# The functions
# ---------------------------------------------------------------------------
def cheap(x: jax.Array) -> jax.Array:
    """A cheap scalar function of a vector."""
    return jnp.sum(jnp.sin(x) ** 2 + jnp.log1p(x**2))


OSC_KNOT_TIMES = np.linspace(0.0, 20.0, 16)
OSC_SAVE_TIMES = np.linspace(0.0, 20.0, 100)


def oscillator_trajectory(theta: jax.Array, knots: jax.Array) -> jax.Array:
    """Position of x'' + 2 zeta omega x' + omega^2 x = F(t), F interpolated from knots."""
    omega, zeta = theta[0], theta[1]
    force = diffrax.LinearInterpolation(ts=OSC_KNOT_TIMES, ys=knots)

    def rhs(t, y, args):
        position, velocity = y[0], y[1]
        acceleration = (
            force.evaluate(t) - 2 * zeta * omega * velocity - omega**2 * position
        )
        return jnp.stack([velocity, acceleration])

    return solve(rhs, diffrax.Tsit5(), OSC_SAVE_TIMES, 0.05, [1.0, 0.0], 1e-8)[:, 0]


STIFF_KNOT_TIMES = np.linspace(0.0, 40.0, 16)
STIFF_SAVE_TIMES = np.linspace(0.0, 40.0, 100)


def stiff_trajectory(theta: jax.Array, knots: jax.Array) -> jax.Array:
    """Robertson's kinetics (rates 0.04, 3e7, 1e4 scaled by ``theta``), the slow
    rate modulated by ``exp(interpolated knots)``."""
    k1, k2, k3 = 0.04 * theta[0], 3e7 * theta[1], 1e4 * theta[2]
    log_modulation = diffrax.LinearInterpolation(ts=STIFF_KNOT_TIMES, ys=knots)

    def rhs(t, y, args):
        a, b, c = y[0], y[1], y[2]
        slow = k1 * jnp.exp(log_modulation.evaluate(t)) * a
        return jnp.stack([-slow + k3 * b * c, slow - k2 * b**2 - k3 * b * c, k2 * b**2])

    return solve(rhs, diffrax.Kvaerno5(), STIFF_SAVE_TIMES, 1e-4, [1.0, 0, 0], 1e-10)


def solve(rhs, solver, times, dt0, y0, atol) -> jax.Array:
    """The states at ``times`` (PID controller, rtol 1e-6)."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver,
        t0=times[0],
        t1=times[-1],
        dt0=dt0,
        y0=jnp.array(y0, dtype=float),
        saveat=diffrax.SaveAt(ts=times),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=atol),
        max_steps=100_000,
    ).ys


@dataclass(frozen=True)
class Case:
    """A JAX function of arrays returning a scalar, and where to evaluate it."""

    name: str
    description: str
    fn: Callable[..., jax.Array]
    values: tuple[np.ndarray, ...]
    input_names: tuple[str, ...]
    tasks: tuple[str, ...]
    unit: str  # of per-call times
    rtol: float  # tolerance of the correctness check
    heavy: bool  # shown in the forward/backward split

    def symbolic_inputs(self) -> list[pt.TensorVariable]:
        """Fresh PyTensor inputs with the values' static shapes and dtypes."""
        return [
            pt.tensor(name, shape=value.shape, dtype=str(value.dtype))
            for name, value in zip(self.input_names, self.values)
        ]


def ode_case(name: str, description: str, trajectory, truth, unit: str) -> Case:
    """A squared-error loss on data simulated at ``truth`` (theta, knots) with 1%
    noise (fixed seed), evaluated 10% off."""
    theta, knots = truth
    clean = np.asarray(jax.jit(trajectory)(theta, knots))
    noise = np.random.default_rng(0).normal(size=clean.shape)
    data = clean + 0.01 * np.abs(clean).mean() * noise

    def loss(theta: jax.Array, knots: jax.Array) -> jax.Array:
        return jnp.sum((trajectory(theta, knots) - data) ** 2)

    loss.__name__ = loss.__qualname__ = f"{name}_loss"
    values = (theta * 1.1, knots + 0.1)
    tasks = (VALUE, VALUE_GRAD, GRAD)
    return Case(
        name, description, loss, values, ("theta", "knots"), tasks, unit, 1e-6, True
    )


def make_cases() -> dict[str, Case]:
    """The benchmarked functions (the ODE data are simulated here)."""
    cases = [
        Case(
            "cheap",
            "sum(sin(x)**2 + log1p(x**2)), 10-vector -> scalar",
            cheap,
            (np.linspace(0.1, 1.0, 10),),
            ("x",),
            (VALUE, VALUE_GRAD),
            "us",
            1e-10,
            False,
        ),
        ode_case(
            "oscillator",
            "forced damped oscillator, Tsit5 + PID, 100 save points, "
            "forcing interpolated from 16 knots; inputs theta (2), knots (16)",
            oscillator_trajectory,
            (np.array([1.3, 0.1]), 0.5 * np.sin(OSC_KNOT_TIMES / 3)),
            unit="us",
        ),
        ode_case(
            "stiff",
            "Robertson kinetics, Kvaerno5 + PID, 100 save points, "
            "slow rate modulated by 16 interpolated knots; inputs theta (3), knots (16)",
            stiff_trajectory,
            (np.ones(3), 0.3 * np.sin(STIFF_KNOT_TIMES / 5)),
            unit="ms",
        ),
    ]
    return {case.name: case for case in cases}


# ---------------------------------------------------------------------------
# Building and checking the functions
# ---------------------------------------------------------------------------
def fresh_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object calling ``fn``: wrapped ops and their jitted functions
    are cached by the wrapped function, so a fresh one makes a compile cold."""

    def fresh(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    fresh.__name__ = fresh.__qualname__ = fn.__name__
    return fresh


def direct_function(case: Case, task: str) -> Callable[..., Any]:
    """The jitted JAX function for a task, waiting for its result."""
    argnums = tuple(range(len(case.values)))
    fn = {
        VALUE: case.fn,
        VALUE_GRAD: jax.value_and_grad(case.fn, argnums=argnums),
        GRAD: jax.grad(case.fn, argnums=argnums),
    }[task]
    return blocking(jax.jit(fn))


def blocking(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` followed by ``jax.block_until_ready`` of its result."""
    return lambda *args: jax.block_until_ready(fn(*args))


def check_equal(got: Any, expected: Any, rtol: float, label: str) -> None:
    """Assert a compiled function gave the direct JAX result."""
    got, expected = (
        [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(result)]
        for result in (got, expected)
    )
    if len(got) != len(expected):
        raise AssertionError(f"{label}: {len(got)} outputs, expected {len(expected)}")
    for k, (g, e) in enumerate(zip(got, expected)):
        atol = rtol * max(float(np.max(np.abs(e), initial=0.0)), 1e-300)
        np.testing.assert_allclose(g, e, rtol, atol, err_msg=f"{label}, output {k}")


@dataclass
class CompiledCase:
    """Every compiled function of a case, already checked against direct JAX."""

    case: Case
    #: task -> result of the direct JAX call
    references: dict[str, Any] = field(default_factory=dict)
    #: task -> candidate label -> timed call
    calls: dict[str, dict[str, Call]] = field(default_factory=dict)
    #: candidate label -> cold seconds of the value+grad function: graph build,
    #: pytensor.function(), first call (JAX's trace and XLA compile)
    compile_times: dict[str, list[float]] = field(default_factory=dict)
    #: (task, candidate label) -> compiled PyTensor function
    functions: dict[tuple[str, str], Function] = field(default_factory=dict)


def candidate_label(wrapper: str, linker: str) -> str:
    return f"{wrapper} | {linker}"


def compile_case(case: Case) -> CompiledCase:
    """Compile the direct and wrapped functions of every task; check them.

    The value+grad function is compiled first, with a fresh wrapper per linker,
    so its compile time is cold; the other tasks reuse its graph. When the
    value+grad fusion rewrite exists, a value+grad function without it is
    compiled too (Numba linker), to show what the fusion buys.
    """
    compiled = CompiledCase(case)
    tasks = (VALUE_GRAD, *(t for t in case.tasks if t != VALUE_GRAD))
    for task in tasks:
        fn = direct_function(case, task)
        seconds, compiled.references[task] = time_once(fn, *case.values)
        compiled.calls[task] = {DIRECT: Call(fn, case.values)}
        if task == VALUE_GRAD:
            compiled.compile_times[DIRECT] = [0.0, 0.0, seconds]
    for linker, mode in LINKERS.items():
        for wrapper_name, wrapper in WRAPPERS.items():
            label = candidate_label(wrapper_name, linker)
            compile_candidate(compiled, label, wrapper, mode, tasks)
    if FUSION_REWRITE in optdb.__db__:
        unfused = get_mode(None).excluding(FUSION_REWRITE)
        compile_candidate(compiled, UNFUSED, as_jax_op, unfused, (VALUE_GRAD,))
    return compiled


def compile_candidate(
    compiled: CompiledCase,
    label: str,
    wrapper: Callable,
    mode: str | Mode | None,
    tasks: Sequence[str],
) -> None:
    """Build, compile, call once and check one wrapper/linker for some tasks."""
    case = compiled.case
    start = time.perf_counter()
    inputs = case.symbolic_inputs()
    cost = wrapper(fresh_function(case.fn))(*inputs)
    gradients = pt.grad(cost, inputs)
    build = time.perf_counter() - start
    for task in tasks:
        outputs = {VALUE: [cost], VALUE_GRAD: [cost, *gradients], GRAD: gradients}
        function_seconds, f = time_once(
            pytensor.function, inputs, outputs[task], mode=mode, trust_input=True
        )
        call = blocking(f) if mode == "JAX" else f
        first_call, result = time_once(call, *case.values)
        reference = compiled.references[task]
        check_equal(result, reference, case.rtol, f"{case.name} {task} {label}")
        compiled.calls[task][label] = Call(call, case.values)
        compiled.functions[task, label] = f
        if task == VALUE_GRAD and label != UNFUSED:
            compiled.compile_times[label] = [build, function_seconds, first_call]


def warm_up_linkers() -> None:
    """Pay once-per-process costs (imports, Numba and XLA start-up) before timing."""

    def tiny(x):
        return jnp.sum(x**2)

    x = pt.vector("x", shape=(3,))
    for mode in LINKERS.values():
        for wrapper in WRAPPERS.values():
            cost = wrapper(tiny)(x)
            f = pytensor.function([x], [cost, pt.grad(cost, x)], mode=mode)
            f(np.ones(3))
    jax.jit(jax.value_and_grad(tiny))(np.ones(3))


# ---------------------------------------------------------------------------
# Measuring: the results as data
# ---------------------------------------------------------------------------
def stats_data(stats: Stats) -> dict[str, float]:
    return {
        "median": stats.median,
        "q25": stats.q25,
        "q75": stats.q75,
        "best": stats.best,
    }


def interleaved(calls: dict[str, Call], repeats: int, seconds: float) -> dict:
    """:func:`interleaved_medians` of ``calls``, as data."""
    stats = interleaved_medians(calls, repeats=repeats, batch_seconds=seconds)
    return {name: stats_data(s) for name, s in stats.items()}


def measure_calls(compiled: CompiledCase, settings: Settings) -> dict:
    """Per call, every candidate of one case, task by task, as data."""
    case, repeats = compiled.case, settings.repeats
    calls = {
        t: interleaved(compiled.calls[t], repeats, settings.batch_seconds)
        for t in case.tasks
    }
    return {
        "name": case.name,
        "description": case.description,
        "unit": case.unit,
        "tasks": list(case.tasks),
        "heavy": case.heavy,
        "calls": calls,
        "compile": compiled.compile_times,
    }


def call_seconds(wrapper: Callable, case: Case) -> float:
    """Seconds of one wrapped call on fresh inputs."""
    seconds, _ = time_once(wrapper, *case.symbolic_inputs())
    return seconds


def grad_seconds(wrapper: Callable, case: Case) -> float:
    """Seconds of ``pt.grad`` of a wrapped call with respect to its inputs."""
    inputs = case.symbolic_inputs()
    seconds, _ = time_once(pt.grad, wrapper(*inputs), inputs)
    return seconds


def build_seconds(case: Case, wrapper_name: str, settings: Settings) -> list[float]:
    """Graph-build medians of one wrapper: the first call, again, ``pt.grad``."""
    decorator = WRAPPERS[wrapper_name]
    used = decorator(fresh_function(case.fn))
    used(*case.symbolic_inputs())
    samples = (
        lambda: call_seconds(decorator(fresh_function(case.fn)), case),
        lambda: call_seconds(used, case),
        lambda: grad_seconds(used, case),
    )
    return [median_of(sample, settings.build_repeats).median for sample in samples]


def host_function(op: OpFromJax) -> Callable[..., list[np.ndarray]]:
    """What a compiled function calls per run of the op (``op.host_function()``
    where the op has it, else ``op.host_call``)."""
    make = getattr(op, "host_function", None)
    return make() if make is not None else op.host_call


def jax_op_calls(f: Function, values: Sequence[np.ndarray]) -> dict[str, Call]:
    """Each OpFromJax node of a compiled function: its host function on its inputs,
    computed by a Python-linker function of the compiled graph (no rewrites)."""
    fgraph = f.maker.fgraph
    nodes = [n for n in fgraph.toposort() if isinstance(n.op, OpFromJax)]
    needed = list(
        dict.fromkeys(v for n in nodes for v in n.inputs if not isinstance(v, Constant))
    )
    probe = pytensor.function(
        fgraph.inputs,
        needed,
        mode=Mode(linker="py", optimizer=None),
        on_unused_input="ignore",
    )
    known = dict(zip(needed, probe(*values)))
    calls = {}
    for node in nodes:
        args = tuple(
            v.data if isinstance(v, Constant) else known[v] for v in node.inputs
        )
        calls[str(node.op)] = Call(host_function(node.op), args)
    return calls


def ops_candidates(compiled: CompiledCase) -> dict[str, Call]:
    """The JAX ops of the Numba value+grad function, next to the direct calls."""
    case, calls = compiled.case, compiled.calls
    label = candidate_label("as_jax_op", "numba (default)")
    candidates = {
        "direct jax.jit(f)": calls[VALUE][DIRECT],
        "direct jax.jit(value_and_grad(f))": calls[VALUE_GRAD][DIRECT],
        **jax_op_calls(compiled.functions[VALUE_GRAD, label], case.values),
        "the whole value+grad function": calls[VALUE_GRAD][label],
    }
    if UNFUSED in calls[VALUE_GRAD]:
        unfused = jax_op_calls(compiled.functions[VALUE_GRAD, UNFUSED], case.values)
        candidates |= {f"fusion excluded: {n}": c for n, c in unfused.items()}
        whole = "fusion excluded: the whole value+grad function"
        candidates[whole] = calls[VALUE_GRAD][UNFUSED]
    return candidates


# ---------------------------------------------------------------- breakdown
def objmode_probes(node: Any) -> dict[str, Callable[[np.ndarray], Any]]:
    """Numba functions callable from Python, from empty to the op's own code (called
    from a small njit function, as the linker calls it)."""
    output_type = get_numba_type(node.outputs[0].type)
    prebuilt = np.zeros(node.outputs[0].type.shape)

    def trivial() -> np.ndarray:
        return prebuilt

    @numba_njit(final_function=True)
    def empty(x):
        return x[0]

    @numba_njit(final_function=True)
    def objmode_pass(x):
        with numba.objmode():
            pass
        return x[0]

    @numba_njit(final_function=True)
    def objmode_trivial(x):
        with numba.objmode(out=output_type):
            out = trivial()
        return out

    op_function = numba_funcify(node.op, node=node)

    @numba_njit(final_function=True)
    def op_in_numba(x):
        return op_function(x)

    return {"c0": empty, "c1": objmode_pass, "c2": objmode_trivial, "c3": op_in_numba}


#: The breakdown's rows: key, what (their calls: :func:`breakdown_calls`).
COMPONENTS = (
    ("a", "jax.jit(f)(x) + block_until_ready (direct)"),
    ("a2", "op.program(x), its packed outputs as NumPy arrays (the op's jit, no copy)"),
    (
        "b",
        "the op's host function (as the thunk holds it) = op.program + np.array copies",
    ),
    ("b2", "op.host_call(x) (the public method)"),
    ("c0", "njit function, empty (Numba dispatch from Python)"),
    ("c1", "njit: enter objmode, do nothing"),
    ("c2", "njit: objmode calling a trivial Python function returning a 0-d array"),
    ("c3", "njit: the op's Numba code (objmode + host function)"),
    ("d0", "compiled graph's njit function (f.vm.jit_fn)"),
    ("d1", "pytensor.function, trust_input=True"),
    ("d2", "pytensor.function, trust_input=False (default)"),
    ("e", "pytensor.function of the same math in PyTensor ops (Numba), trusted"),
    ("vg-a", "value+grad: jax.jit(value_and_grad(f)) (direct)"),
    ("vg-d1", "value+grad: pytensor.function, trust_input=True"),
)


def breakdown_calls(case: Case) -> tuple[dict[str, Call], str]:
    """Everything on the path of one call of the cheap case under Numba, by key of
    :data:`COMPONENTS`; and the JAX ops of its value+grad graph."""
    (xv,) = case.values
    (x,) = case.symbolic_inputs()
    cost = as_jax_op(case.fn)(x)
    trusted = pytensor.function([x], cost, trust_input=True)
    checked = pytensor.function([x], cost)
    value_grad = pytensor.function([x], [cost, pt.grad(cost, x)], trust_input=True)
    native = pytensor.function(
        [x], pt.sum(pt.sin(x) ** 2 + pt.log1p(x**2)), trust_input=True
    )
    nodes = trusted.maker.fgraph.toposort()
    node = next(n for n in nodes if isinstance(n.op, OpFromJax))
    probes, op = objmode_probes(node), node.op
    direct, direct_vg = (direct_function(case, task) for task in (VALUE, VALUE_GRAD))
    for fn in (trusted, checked, native, probes["c3"], host_function(op)):
        check_equal(fn(xv), direct(xv), case.rtol, "breakdown")
    check_equal(value_grad(xv), direct_vg(xv), case.rtol, "breakdown")
    functions = {
        "a": direct,
        "a2": op.program,
        "b": host_function(op),
        "b2": op.host_call,
        **probes,
        "d0": trusted.vm.jit_fn,
        "d1": trusted,
        "d2": checked,
        "e": native,
        "vg-a": direct_vg,
        "vg-d1": value_grad,
    }
    nodes = value_grad.maker.fgraph.toposort()
    ops = ", ".join(str(n.op) for n in nodes if isinstance(n.op, OpFromJax))
    return {key: Call(functions[key], (xv,)) for key, _ in COMPONENTS}, ops


#: (what, formula over the component keys of :data:`COMPONENTS`)
DERIVED_COSTS: tuple[tuple[str, str], ...] = (
    ("JAX call: dispatch, run and wait (the op's jit)", "a2"),
    ("np.array copies of the outputs (+ the host function's frame)", "b - a2"),
    ("op.host_call's lookups beyond the host function", "b2 - b"),
    ("Numba dispatch from Python (argument unboxing)", "c0"),
    ("objmode round trip: entry, exit, one 0-d array out", "c2 - c0"),
    ("the op's Numba glue beyond the host function", "c3 - c2 - b"),
    ("rest of the compiled graph", "d0 - c3"),
    ("Function.__call__ (trust_input=True)", "d1 - d0"),
    ("input validation (trust_input=False)", "d2 - d1"),
    ("total overhead over the direct call", "d1 - a"),
    ("value+grad: overhead over the direct call", "vg-d1 - vg-a"),
)


def evaluate(formula: str, values: dict[str, float]) -> float:
    """A formula like ``"c3 - c2 - b"`` over named values (terms joined by + and -)."""
    tokens = formula.split()
    total = values[tokens[0]]
    for sign, key in zip(tokens[1::2], tokens[2::2]):
        total += values[key] if sign == "+" else -values[key]
    return total


def measure_breakdown(case: Case, settings: Settings) -> dict:
    calls, ops = breakdown_calls(case)
    repeats, seconds = settings.breakdown_repeats, settings.breakdown_batch_seconds
    return {"stats": interleaved(calls, repeats, seconds), "ops": ops}


# ---------------------------------------------------------------------------
# The tables, from the data
# ---------------------------------------------------------------------------
def spread(stats: dict) -> float:
    """Interquartile range over the median: the noise of a measurement."""
    return (stats["q75"] - stats["q25"]) / stats["median"] if stats["median"] else 0.0


def noise(*stats: dict) -> str:
    """The largest :func:`spread`, in percent."""
    return f"{100 * max(spread(s) for s in stats):.0f}%"


def calls_rows(case: dict) -> list[list]:
    """Per-call medians of one case, one row per task and linker."""
    unit, rows = case["unit"], []
    for task in case["tasks"]:
        stats = case["calls"][task]
        direct = stats[DIRECT]
        for linker in LINKERS:
            ours = stats[candidate_label("as_jax_op", linker)]
            theirs = stats[candidate_label("wrap_jax", linker)]
            d, o, t = (s["median"] for s in (direct, ours, theirs))
            rows.append([task, linker, *(format_seconds(x, unit) for x in (d, o, t))])
            rows[-1] += [format_ratio(x) for x in (o / d, t / d, o / t)]
            rows[-1].append(noise(direct, ours, theirs))
        if UNFUSED in stats:
            d, u = direct["median"], stats[UNFUSED]["median"]
            rows.append([task, "numba (default), value+grad fusion excluded"])
            rows[-1] += [format_seconds(d, unit), format_seconds(u, unit), "-"]
            rows[-1] += [format_ratio(u / d), "-", "-", noise(direct, stats[UNFUSED])]
    return rows


def split_rows(cases: Sequence[dict]) -> list[list]:
    """Forward/backward cost split of the heavy cases."""
    rows = []
    for case in (c for c in cases if c["heavy"]):
        unit, value_grad = case["unit"], case["calls"][VALUE_GRAD]
        forward = case["calls"][VALUE][DIRECT]["median"]
        both = value_grad[DIRECT]["median"]
        row = [case["name"], format_seconds(forward, unit) + f" {unit}"]
        row += [format_seconds(both, unit) + f" {unit}"]
        row.append(format_ratio((both - forward) / forward))
        for label in (
            *(candidate_label(w, "numba (default)") for w in WRAPPERS),
            UNFUSED,
        ):
            extra = value_grad[label]["median"] - both if label in value_grad else None
            row.append("-" if extra is None else format_ratio(extra / forward))
        rows.append(row)
    return rows


def ops_rows(cases: Sequence[dict]) -> list[list]:
    """Per-call cost of each JAX op of the Numba value+grad function."""
    rows = []
    for case in cases:
        unit, forward = case["unit"], case["ops"]["direct jax.jit(f)"]["median"]
        rows += [
            [
                case["name"],
                name,
                format_seconds(s["median"], unit) + f" {unit}",
                format_ratio(s["median"] / forward),
                noise(s),
            ]
            for name, s in case["ops"].items()
        ]
    return rows


def compile_rows(cases: Sequence[dict]) -> list[list]:
    """Cold compile times of the value+grad function, per linker."""
    rows = []
    for case in cases:
        for label, (build, function, first_call) in case["compile"].items():
            wrapper, _, linker = label.partition(" | ")
            shown = [build, function] if linker else []
            rows.append([case["name"], wrapper, linker or "-"])
            rows[-1] += [format_seconds(s, "s") for s in shown] or ["-", "-"]
            rows[-1] += [format_seconds(first_call, "s")]
            rows[-1] += [format_seconds(build + function + first_call, "s")]
    return rows


def build_rows(cases: Sequence[dict]) -> list[list]:
    """Graph-build times of one wrapped call, first and repeated, and of pt.grad."""
    rows = [
        [case["name"], wrapper, *(format_seconds(s, "ms") for s in seconds)]
        for case in cases
        for wrapper, seconds in case["build"].items()
    ]
    return rows


def breakdown_tables(breakdown: dict, text: dict[str, str]) -> str:
    """The measured components and the costs derived from them."""
    stats = breakdown["stats"]
    median = {key: s["median"] * 1e6 for key, s in stats.items()}
    best = {key: s["best"] * 1e6 for key, s in stats.items()}
    measured = [
        [key, what, f"{median[key]:.2f}", f"{best[key]:.2f}", noise(stats[key])]
        for key, what in COMPONENTS
    ]
    derived = [
        [name, formula, *(f"{evaluate(formula, v):.2f}" for v in (median, best))]
        for name, formula in DERIVED_COSTS
    ]
    return (
        fill(text["breakdown"], measured)
        + "\n\n"
        + fill(text["derived"], derived, ops=breakdown["ops"])
    )


def report(data: dict) -> str:
    """The markdown report of a stored run."""
    text, meta, cases = _report.texts("speed"), data["meta"], data["cases"]
    batch_ms = meta["batch_seconds"] * 1e3
    sections = [fill(text["intro"], **meta, batch_ms=batch_ms)]
    sections += [fill(text["calls"], calls_rows(case), **case) for case in cases]
    if any(case["heavy"] for case in cases):
        sections.append(fill(text["split"], split_rows(cases)))
    sections.append(fill(text["ops"], ops_rows(cases)))
    sections.append(fill(text["compile"], compile_rows(cases)))
    sections.append(fill(text["build"], build_rows(cases)))
    if "breakdown" in data:
        sections.append(breakdown_tables(data["breakdown"], text))
    return "\n\n".join(sections) + "\n"


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer, shorter batches (a trial run)"
    )
    parser.add_argument(
        "--cases",
        help="comma-separated subset of: cheap, oscillator, stiff "
        "(default: all; with --quick: cheap, oscillator)",
    )
    parser.add_argument("--report", action="store_true", help="only the tables")
    return parser.parse_args(argv)


def progress(message: str, start: float) -> None:
    elapsed = time.perf_counter() - start
    print(f"[{elapsed:6.1f} s] {message}", file=sys.stderr, flush=True)


def measure(case_names: Sequence[str], settings: Settings) -> dict:
    """Every section's measurements, as data."""
    start = time.perf_counter()
    progress("preparing cases and warming up linkers", start)
    all_cases = make_cases()
    warm_up_linkers()
    cases, compiled = [], []
    for name in case_names:
        case = all_cases[name]
        case = replace(case, tasks=tuple(t for t in case.tasks if t in settings.tasks))
        progress(f"{case.name}: compiling and checking", start)
        compiled.append(compile_case(case))
        progress(f"{case.name}: timing calls", start)
        cases.append(measure_calls(compiled[-1], settings))
    progress("JAX ops inside the value+grad functions", start)
    for case, functions in zip(cases, compiled):
        candidates = ops_candidates(functions)
        case["ops"] = interleaved(candidates, settings.repeats, settings.batch_seconds)
    progress("graph-build times", start)
    for case, functions in zip(cases, compiled):
        builds = {w: build_seconds(functions.case, w, settings) for w in WRAPPERS}
        case["build"] = builds
    data: dict[str, Any] = {"cases": cases}
    if "cheap" in case_names:
        progress("breakdown of the cheap case", start)
        data["breakdown"] = measure_breakdown(all_cases["cheap"], settings)
    versions = {
        "PyTensor": pytensor.__version__,
        "JAX": jax.__version__,
        "Numba": numba.__version__,
        "diffrax": diffrax.__version__,
        "NumPy": np.__version__,
    }
    data["meta"] = _report.meta("python benchmarks/speed.py", versions) | {
        "run": "quick trial run (--quick)" if settings.quick else "full run",
        "elapsed": time.perf_counter() - start,
        "repeats": settings.repeats,
        "batch_seconds": settings.batch_seconds,
    }
    return data


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings.make(args.quick)
    name = "speed_quick" if settings.quick else "speed"
    if args.report:
        _report.write(name, report(_report.load(name)))
        return
    case_names = (
        [name.strip() for name in args.cases.split(",") if name.strip()]
        if args.cases
        else list(settings.default_cases)
    )
    unknown = set(case_names) - set(CASE_NAMES)
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}; choose from {CASE_NAMES}")
    with warnings.catch_warnings():
        # wrap_jax runs under Numba through the generic object-mode fallback,
        # which warns at every compile.
        warnings.filterwarnings("ignore", message="Numba will use object mode")
        data = measure(case_names, settings)
    _report.save(name, data)
    _report.write(name, report(data))


if __name__ == "__main__":
    main()
