"""Speed of ``as_jax_op`` against the direct jitted JAX call and ``pytensor.wrap_jax``.

Everything is measured side by side in one run, on the same machine state:

* **Per call** (medians of interleaved batches): for each function and task
  (value, value+grad, grad alone), the direct jitted JAX call
  (``jax.jit(f)``, ``jax.jit(jax.value_and_grad(f))``, ``jax.jit(jax.grad(f))``
  with ``jax.block_until_ready``: the physical limit), and ``as_jax_op`` and
  ``pytensor.wrap_jax`` compiled by ``pytensor.function`` in the default
  (Numba), C VM and JAX linkers, exactly as a user compiles them:
  ``pytensor.function(inputs, [cost, *pt.grad(cost, inputs)])``. Every compiled
  function is first checked against the direct JAX result. When the checkout
  has the rewrite fusing an op's value and VJP, value+grad is also timed with
  it excluded (Numba linker).
* **Forward/backward split** of the ODE functions: the cost of the backward
  pass relative to the forward one, and how many forward passes a wrapped
  value+grad spends beyond the direct one.
* **JAX ops inside the value+grad function**: each op's host function (what
  the compiled function calls) on the inputs it receives, next to ``jit(f)``
  and ``jit(value_and_grad(f))``.
* **Compile time**: graph build, ``pytensor.function()`` and the first call
  (which includes JAX's trace and XLA compile) of the value+grad function, per
  linker, each with a fresh wrapper (nothing cached).
* **Graph-build time** of one wrapped call: the first (which traces the JAX
  function to infer output types), the same call again with inputs of the same
  types, and ``pt.grad``.
* **Breakdown** of the cheap function's per-call cost under the Numba linker:
  JAX dispatch, the op's host function, Numba's object-mode entry, the
  compiled graph and PyTensor's ``Function`` wrapper.

Functions:

* ``cheap``: 10-element vector -> scalar;
* ``oscillator``: a forced damped oscillator (Tsit5, adaptive steps, 100 save
  points); the forcing is a ``diffrax.LinearInterpolation`` of 16 knot values,
  which are an input like the two parameters; the loss is the sum of squared
  errors to data;
* ``stiff``: Robertson's stiff chemical kinetics (Kvaerno5 + PID controller,
  100 save points) with a time-varying rate interpolated from 16 knots: an
  expensive forward solve.

Run::

    .venv/bin/python benchmarks/speed.py           # everything, ~5-8 minutes
    .venv/bin/python benchmarks/speed.py --quick   # a trial run, ~1.5 minutes

``--quick`` takes fewer, shorter batches, skips the stiff case (which spends
minutes in XLA compiles) and the grad-alone task; ``--cases`` picks cases. The
tables are printed and written to ``benchmarks/results/speed.md``
(``speed_quick.md`` with ``--quick``; see ``--output``). Inside the checkout,
the checkout's modules are used.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
from _timing import (  # noqa: E402
    Call,
    Stats,
    format_ratio,
    format_seconds,
    interleaved_medians,
    machine_header,
    markdown_table,
    median_of,
    time_once,
)

import conftest  # noqa: E402, F401 - puts this checkout's modules first
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.compile import Function, Mode  # noqa: E402
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op  # noqa: E402
from pytensor.compile.mode import get_mode, optdb  # noqa: E402
from pytensor.graph.basic import Constant  # noqa: E402
from pytensor.link.numba.dispatch.basic import (  # noqa: E402
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
    """How hard to measure, and what.

    A quick run is a trial: fewer and shorter batches, only the cheap and
    oscillator cases (unless ``--cases`` says otherwise) and no grad-alone task,
    whose compilations dominate the run time.
    """

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
    """Position of x'' + 2 zeta omega x' + omega^2 x = F(t), F interpolated from knots.

    ``theta = (omega, zeta)``; ``knots`` are F at ``OSC_KNOT_TIMES``.
    """
    omega, zeta = theta[0], theta[1]
    force = diffrax.LinearInterpolation(ts=OSC_KNOT_TIMES, ys=knots)

    def rhs(t, y, args):
        position, velocity = y[0], y[1]
        acceleration = (
            force.evaluate(t) - 2 * zeta * omega * velocity - omega**2 * position
        )
        return jnp.stack([velocity, acceleration])

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        t0=OSC_SAVE_TIMES[0],
        t1=OSC_SAVE_TIMES[-1],
        dt0=0.05,
        y0=jnp.array([1.0, 0.0]),
        saveat=diffrax.SaveAt(ts=OSC_SAVE_TIMES),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        max_steps=100_000,
    )
    return solution.ys[:, 0]


STIFF_KNOT_TIMES = np.linspace(0.0, 40.0, 16)
STIFF_SAVE_TIMES = np.linspace(0.0, 40.0, 100)


def stiff_trajectory(theta: jax.Array, knots: jax.Array) -> jax.Array:
    """Robertson's kinetics; the slow rate is modulated by ``exp(interpolated knots)``.

    ``theta`` scales the three classic rates (0.04, 3e7, 1e4).
    """
    k1, k2, k3 = 0.04 * theta[0], 3e7 * theta[1], 1e4 * theta[2]
    log_modulation = diffrax.LinearInterpolation(ts=STIFF_KNOT_TIMES, ys=knots)

    def rhs(t, y, args):
        a, b, c = y[0], y[1], y[2]
        slow = k1 * jnp.exp(log_modulation.evaluate(t)) * a
        return jnp.stack([-slow + k3 * b * c, slow - k2 * b**2 - k3 * b * c, k2 * b**2])

    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Kvaerno5(),
        t0=STIFF_SAVE_TIMES[0],
        t1=STIFF_SAVE_TIMES[-1],
        dt0=1e-4,
        y0=jnp.array([1.0, 0.0, 0.0]),
        saveat=diffrax.SaveAt(ts=STIFF_SAVE_TIMES),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-10),
        max_steps=100_000,
    )
    return solution.ys


def squared_error_loss(
    trajectory: Callable[..., jax.Array], data: np.ndarray, name: str
) -> Callable[..., jax.Array]:
    """``sum((trajectory(theta, knots) - data) ** 2)``, named ``name``."""

    def loss(theta: jax.Array, knots: jax.Array) -> jax.Array:
        return jnp.sum((trajectory(theta, knots) - data) ** 2)

    loss.__name__ = loss.__qualname__ = name
    return loss


def synthetic_data(
    trajectory: Callable[..., jax.Array], theta: np.ndarray, knots: np.ndarray
) -> np.ndarray:
    """The trajectory at the true parameters plus 1% relative noise (fixed seed)."""
    clean = np.asarray(jax.jit(trajectory)(theta, knots))
    noise = np.random.default_rng(0).normal(size=clean.shape)
    return clean + 0.01 * np.abs(clean).mean() * noise


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


def ode_case(
    name: str,
    description: str,
    trajectory: Callable[..., jax.Array],
    truth: tuple[np.ndarray, np.ndarray],
    unit: str,
) -> Case:
    """A squared-error loss on data simulated at ``truth`` (theta, knots), off by 10%."""
    theta, knots = truth
    data = synthetic_data(trajectory, theta, knots)
    return Case(
        name=name,
        description=description,
        fn=squared_error_loss(trajectory, data, f"{name}_loss"),
        values=(theta * 1.1, knots + 0.1),
        input_names=("theta", "knots"),
        tasks=(VALUE, VALUE_GRAD, GRAD),
        unit=unit,
        rtol=1e-6,
        heavy=True,
    )


def make_cases() -> dict[str, Case]:
    """The benchmarked functions (the ODE data are simulated here)."""
    cases = [
        Case(
            name="cheap",
            description="sum(sin(x)**2 + log1p(x**2)), 10-vector -> scalar",
            fn=cheap,
            values=(np.linspace(0.1, 1.0, 10),),
            input_names=("x",),
            tasks=(VALUE, VALUE_GRAD),
            unit="us",
            rtol=1e-10,
            heavy=False,
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
    """A new function object calling ``fn``.

    Wrapped ops and their jitted functions are cached by the wrapped function
    (equal calls share them), so a fresh function makes a compile cold.
    """

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

    def call(*args: Any) -> Any:
        return jax.block_until_ready(fn(*args))

    return call


def viewing(fn: Callable[..., Sequence[jax.Array]]) -> Callable[..., list[np.ndarray]]:
    """``fn``, its outputs viewed as NumPy arrays (waiting for them, not copying)."""

    def call(*args: Any) -> list[np.ndarray]:
        return [np.asarray(output) for output in fn(*args)]

    return call


def task_outputs(
    task: str, cost: pt.TensorVariable, gradients: Sequence[pt.TensorVariable]
) -> list[pt.TensorVariable]:
    """What a user compiles for a task."""
    return {
        VALUE: [cost],
        VALUE_GRAD: [cost, *gradients],
        GRAD: list(gradients),
    }[task]


def flat_results(result: Any) -> list[np.ndarray]:
    """The arrays of a (possibly nested) result, as NumPy arrays."""
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(result)]


def check_equal(got: Any, expected: Any, rtol: float, label: str) -> None:
    """Assert a compiled function gave the direct JAX result."""
    got, expected = flat_results(got), flat_results(expected)
    if len(got) != len(expected):
        raise AssertionError(f"{label}: {len(got)} outputs, expected {len(expected)}")
    for k, (g, e) in enumerate(zip(got, expected)):
        atol = rtol * max(float(np.max(np.abs(e), initial=0.0)), 1e-300)
        np.testing.assert_allclose(
            g, e, rtol=rtol, atol=atol, err_msg=f"{label}, output {k}"
        )


@dataclass
class CompileTimes:
    """Seconds spent getting a value+grad function to its first result."""

    build: float  # wrapped call + pt.grad (for direct: 0)
    function: float  # pytensor.function() (for direct: 0)
    first_call: float  # includes JAX's trace and XLA compile


@dataclass
class CompiledCase:
    """Every compiled function of a case, already checked against direct JAX."""

    case: Case
    #: task -> result of the direct JAX call
    references: dict[str, Any] = field(default_factory=dict)
    #: task -> candidate label -> timed call
    calls: dict[str, dict[str, Call]] = field(default_factory=dict)
    #: candidate label -> cold compile times of the value+grad function
    compile_times: dict[str, CompileTimes] = field(default_factory=dict)
    #: (task, candidate label) -> compiled PyTensor function
    functions: dict[tuple[str, str], Function] = field(default_factory=dict)


def candidate_label(wrapper: str, linker: str) -> str:
    return f"{wrapper} | {linker}"


def fusion_rewrite_registered() -> bool:
    """Whether this checkout fuses an op's value and VJP (then also time it off)."""
    return FUSION_REWRITE in optdb.__db__


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
            compiled.compile_times[DIRECT] = CompileTimes(0.0, 0.0, seconds)
    for linker, mode in LINKERS.items():
        for wrapper_name, wrapper in WRAPPERS.items():
            label = candidate_label(wrapper_name, linker)
            compile_candidate(compiled, label, wrapper, mode, tasks)
    if fusion_rewrite_registered():
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
        function_seconds, f = time_once(
            pytensor.function,
            inputs,
            task_outputs(task, cost, gradients),
            mode=mode,
            trust_input=True,
        )
        call = blocking(f) if mode == "JAX" else f
        first_call, result = time_once(call, *case.values)
        check_equal(
            result, compiled.references[task], case.rtol, f"{case.name} {task} {label}"
        )
        compiled.calls[task][label] = Call(call, case.values)
        compiled.functions[task, label] = f
        if task == VALUE_GRAD and label != UNFUSED:
            compiled.compile_times[label] = CompileTimes(
                build, function_seconds, first_call
            )


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
# Sections
# ---------------------------------------------------------------------------


@dataclass
class CallStats:
    """Per-call statistics of one case: task -> candidate label -> stats."""

    case: Case
    stats: dict[str, dict[str, Stats]]


def measure_calls(compiled: CompiledCase, settings: Settings) -> CallStats:
    """Interleaved medians of every candidate, task by task."""
    stats = {
        task: interleaved_medians(
            compiled.calls[task],
            repeats=settings.repeats,
            batch_seconds=settings.batch_seconds,
        )
        for task in compiled.case.tasks
    }
    return CallStats(compiled.case, stats)


def calls_table(result: CallStats) -> str:
    """Per-call medians of one case, one row per task and linker."""
    unit = result.case.unit
    rows = []
    for task in result.case.tasks:
        stats = result.stats[task]
        direct = stats[DIRECT]
        for linker in LINKERS:
            ours = stats[candidate_label("as_jax_op", linker)]
            theirs = stats[candidate_label("wrap_jax", linker)]
            noise = max(direct.spread, ours.spread, theirs.spread)
            rows.append(
                [
                    task,
                    linker,
                    format_seconds(direct.median, unit),
                    format_seconds(ours.median, unit),
                    format_seconds(theirs.median, unit),
                    format_ratio(ours.median / direct.median),
                    format_ratio(theirs.median / direct.median),
                    format_ratio(ours.median / theirs.median),
                    f"{100 * noise:.0f}%",
                ]
            )
        if UNFUSED in stats:
            unfused = stats[UNFUSED]
            rows.append(
                [
                    task,
                    "numba (default), value+grad fusion excluded",
                    format_seconds(direct.median, unit),
                    format_seconds(unfused.median, unit),
                    "-",
                    format_ratio(unfused.median / direct.median),
                    "-",
                    "-",
                    f"{100 * max(direct.spread, unfused.spread):.0f}%",
                ]
            )
    headers = [
        "task",
        "linker",
        f"direct {unit}",
        f"as_jax_op {unit}",
        f"wrap_jax {unit}",
        "as_jax_op x direct",
        "wrap_jax x direct",
        "as_jax_op / wrap_jax",
        "noise",
    ]
    return markdown_table(headers, rows, numeric_from=2)


def split_table(results: Sequence[CallStats]) -> str:
    """Forward/backward cost split of the heavy cases."""
    rows = []
    for result in results:
        if not result.case.heavy:
            continue
        unit = result.case.unit
        value, value_grad = result.stats[VALUE], result.stats[VALUE_GRAD]
        forward = value[DIRECT].median
        backward = value_grad[DIRECT].median - forward
        row = [
            result.case.name,
            format_seconds(forward, unit) + f" {unit}",
            format_seconds(value_grad[DIRECT].median, unit) + f" {unit}",
            format_ratio(backward / forward),
        ]
        for label in (
            *(candidate_label(w, "numba (default)") for w in WRAPPERS),
            UNFUSED,
        ):
            if label in value_grad:
                extra = value_grad[label].median - value_grad[DIRECT].median
                row.append(format_ratio(extra / forward))
            else:
                row.append("-")
        rows.append(row)
    headers = [
        "case",
        "forward: jit(f)",
        "jit(value_and_grad(f))",
        "backward / forward",
        "extra forward passes: as_jax_op (numba)",
        "wrap_jax (numba)",
        "as_jax_op, fusion excluded (numba)",
    ]
    return markdown_table(headers, rows)


def compile_table(compiled_cases: Sequence[CompiledCase]) -> str:
    """Cold compile times of the value+grad function, per linker."""
    rows = []
    for compiled in compiled_cases:
        for label, times in compiled.compile_times.items():
            wrapper, _, linker = label.partition(" | ")
            total = times.build + times.function + times.first_call
            rows.append(
                [
                    compiled.case.name,
                    wrapper,
                    linker or "-",
                    format_seconds(times.build, "s") if linker else "-",
                    format_seconds(times.function, "s") if linker else "-",
                    format_seconds(times.first_call, "s"),
                    format_seconds(total, "s"),
                ]
            )
    headers = [
        "case",
        "wrapper",
        "linker",
        "graph build s",
        "pytensor.function() s",
        "first call s",
        "total s",
    ]
    return markdown_table(headers, rows, numeric_from=3)


def call_seconds(wrapper: Callable, case: Case) -> float:
    """Seconds of one wrapped call on fresh inputs."""
    seconds, _ = time_once(wrapper, *case.symbolic_inputs())
    return seconds


def grad_seconds(wrapper: Callable, case: Case) -> float:
    """Seconds of ``pt.grad`` of a wrapped call with respect to its inputs."""
    inputs = case.symbolic_inputs()
    cost = wrapper(*inputs)
    seconds, _ = time_once(pt.grad, cost, inputs)
    return seconds


def build_row(case: Case, wrapper_name: str, settings: Settings) -> list[str]:
    """Graph-build medians of one wrapper on one case, in milliseconds."""
    decorator = WRAPPERS[wrapper_name]
    used = decorator(fresh_function(case.fn))
    used(*case.symbolic_inputs())
    first = median_of(
        lambda: call_seconds(decorator(fresh_function(case.fn)), case),
        settings.build_repeats,
    )
    again = median_of(lambda: call_seconds(used, case), settings.build_repeats)
    grad = median_of(lambda: grad_seconds(used, case), settings.build_repeats)
    return [
        case.name,
        wrapper_name,
        format_seconds(first.median, "ms"),
        format_seconds(again.median, "ms"),
        format_seconds(grad.median, "ms"),
    ]


def build_table(cases: Sequence[Case], settings: Settings) -> str:
    """Graph-build times of one wrapped call, first and repeated, and of pt.grad."""
    rows = [
        build_row(case, wrapper_name, settings)
        for case in cases
        for wrapper_name in WRAPPERS
    ]
    headers = [
        "case",
        "wrapper",
        "first call ms (fresh wrapper: traces)",
        "again, same input types ms",
        "pt.grad ms",
    ]
    return markdown_table(headers, rows, numeric_from=2)


# ------------------------------------------------- ops inside value+grad
def host_function(op: OpFromJax) -> Callable[..., list[np.ndarray]]:
    """What a compiled function calls per run of the op.

    ``op.host_function()`` where the op has it (thunks hold its result),
    else ``op.host_call``.
    """
    make = getattr(op, "host_function", None)
    return make() if make is not None else op.host_call


def jax_op_calls(f: Function, values: Sequence[np.ndarray]) -> dict[str, Call]:
    """Each OpFromJax node of a compiled function: its host function on its inputs.

    The nodes' input values are computed by a Python-linker function of the
    compiled graph itself (no rewrites), so they are what the nodes receive.
    """
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


def ops_table(compiled_cases: Sequence[CompiledCase], settings: Settings) -> str:
    """Per-call cost of each JAX op of the Numba value+grad function."""
    rows = []
    for compiled in compiled_cases:
        case = compiled.case
        label = candidate_label("as_jax_op", "numba (default)")
        f = compiled.functions[VALUE_GRAD, label]
        candidates = {
            "direct jax.jit(f)": compiled.calls[VALUE][DIRECT],
            "direct jax.jit(value_and_grad(f))": compiled.calls[VALUE_GRAD][DIRECT],
            **jax_op_calls(f, case.values),
            "the whole value+grad function": compiled.calls[VALUE_GRAD][label],
        }
        if UNFUSED in compiled.calls[VALUE_GRAD]:
            unfused = compiled.functions[VALUE_GRAD, UNFUSED]
            candidates |= {
                f"fusion excluded: {name}": call
                for name, call in jax_op_calls(unfused, case.values).items()
            }
            candidates["fusion excluded: the whole value+grad function"] = (
                compiled.calls[VALUE_GRAD][UNFUSED]
            )
        stats = interleaved_medians(
            candidates, repeats=settings.repeats, batch_seconds=settings.batch_seconds
        )
        forward = stats["direct jax.jit(f)"].median
        rows += [
            [
                case.name,
                name,
                format_seconds(s.median, case.unit) + f" {case.unit}",
                format_ratio(s.median / forward),
                f"{100 * s.spread:.0f}%",
            ]
            for name, s in stats.items()
        ]
    headers = ["case", "call", "per call", "x direct jit(f)", "noise"]
    return markdown_table(headers, rows, numeric_from=2)


# ---------------------------------------------------------------- breakdown
def jax_ofg_node(f: Function) -> Any:
    """The (first) OpFromJax node of a compiled function."""
    for node in f.maker.fgraph.toposort():
        if isinstance(node.op, OpFromJax):
            return node
    raise LookupError("no OpFromJax in the compiled graph")


def objmode_probes(node: Any) -> dict[str, Callable[[np.ndarray], Any]]:
    """Numba functions callable from Python, from empty to the op's own code.

    The op's function (``numba_funcify``) is not callable from Python on its
    own, so it is called from a small njit function, as the linker does.
    """
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

    return {
        "empty": empty,
        "objmode_pass": objmode_pass,
        "objmode_trivial": objmode_trivial,
        "op_in_numba": op_in_numba,
    }


@dataclass(frozen=True)
class Component:
    """One row of the breakdown."""

    key: str
    description: str
    call: Call


def breakdown_components(case: Case) -> list[Component]:
    """Everything on the path of one call of the cheap case under Numba."""
    (xv,) = case.values
    (x,) = case.symbolic_inputs()
    cost = as_jax_op(case.fn)(x)
    trusted = pytensor.function([x], cost, trust_input=True)
    checked = pytensor.function([x], cost)
    value_grad = pytensor.function([x], [cost, pt.grad(cost, x)], trust_input=True)
    native = pytensor.function(
        [x], pt.sum(pt.sin(x) ** 2 + pt.log1p(x**2)), trust_input=True
    )
    node = jax_ofg_node(trusted)
    op = node.op
    probes = objmode_probes(node)
    direct = direct_function(case, VALUE)
    expected = direct(xv)
    for fn in (trusted, checked, native, probes["op_in_numba"], host_function(op)):
        check_equal(fn(xv), expected, case.rtol, "breakdown")
    check_equal(
        value_grad(xv), direct_function(case, VALUE_GRAD)(xv), case.rtol, "breakdown"
    )
    return [
        Component(
            "a", "jax.jit(f)(x) + block_until_ready (direct)", Call(direct, (xv,))
        ),
        Component(
            "a2",
            "op.jitted(x), outputs viewed by np.asarray (the op's own jit, no copy)",
            Call(viewing(op.jitted), (xv,)),
        ),
        Component(
            "b",
            "the op's host function (as the thunk holds it) = op.jitted + np.array copies",
            Call(host_function(op), (xv,)),
        ),
        Component(
            "b2", "op.host_call(x) (the public method)", Call(op.host_call, (xv,))
        ),
        Component(
            "c0",
            "njit function, empty (Numba dispatch from Python)",
            Call(probes["empty"], (xv,)),
        ),
        Component(
            "c1", "njit: enter objmode, do nothing", Call(probes["objmode_pass"], (xv,))
        ),
        Component(
            "c2",
            "njit: objmode calling a trivial Python function returning a 0-d array",
            Call(probes["objmode_trivial"], (xv,)),
        ),
        Component(
            "c3",
            "njit: the op's Numba code (objmode + host function)",
            Call(probes["op_in_numba"], (xv,)),
        ),
        Component(
            "d0",
            "compiled graph's njit function (f.vm.jit_fn)",
            Call(trusted.vm.jit_fn, (xv,)),
        ),
        Component("d1", "pytensor.function, trust_input=True", Call(trusted, (xv,))),
        Component(
            "d2", "pytensor.function, trust_input=False (default)", Call(checked, (xv,))
        ),
        Component(
            "e",
            "pytensor.function of the same math in PyTensor ops (Numba), trusted",
            Call(native, (xv,)),
        ),
        Component(
            "vg-a",
            "value+grad: jax.jit(value_and_grad(f)) (direct)",
            Call(direct_function(case, VALUE_GRAD), (xv,)),
        ),
        Component(
            "vg-d1",
            "value+grad: pytensor.function, trust_input=True",
            Call(value_grad, (xv,)),
        ),
    ]


#: (what, formula over the component keys of :func:`breakdown_components`)
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


def breakdown_tables(case: Case, settings: Settings) -> str:
    """The measured components and the costs derived from them."""
    components = breakdown_components(case)
    stats = interleaved_medians(
        {c.key: c.call for c in components},
        repeats=settings.breakdown_repeats,
        batch_seconds=settings.breakdown_batch_seconds,
    )
    median = {key: s.median * 1e6 for key, s in stats.items()}
    best = {key: s.best * 1e6 for key, s in stats.items()}
    measured = markdown_table(
        ["", "component", "median us", "best batch us", "noise"],
        [
            [
                c.key,
                c.description,
                f"{median[c.key]:.2f}",
                f"{best[c.key]:.2f}",
                f"{100 * stats[c.key].spread:.0f}%",
            ]
            for c in components
        ],
        numeric_from=2,
    )
    derived = markdown_table(
        [
            "where the time goes",
            "derived as",
            "from medians us",
            "from best batches us",
        ],
        [
            [
                name,
                formula,
                f"{evaluate(formula, median):.2f}",
                f"{evaluate(formula, best):.2f}",
            ]
            for name, formula in DERIVED_COSTS
        ],
        numeric_from=2,
    )
    ops = ", ".join(
        str(node.op)
        for node in components[-1].call.fn.maker.fgraph.toposort()
        if isinstance(node.op, OpFromJax)
    )
    return (
        f"{measured}\n\n{derived}\n\nJAX ops in the compiled value+grad graph: {ops}."
    )


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer, shorter batches (a noisy trial run)",
    )
    parser.add_argument(
        "--cases",
        help="comma-separated subset of: cheap, oscillator, stiff "
        "(default: all; with --quick: cheap, oscillator)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="markdown file to write (default: benchmarks/results/speed.md, or speed_quick.md with --quick)",
    )
    return parser.parse_args(argv)


def progress(message: str, start: float) -> None:
    print(
        f"[{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True
    )


def run(case_names: Sequence[str], settings: Settings, start: float) -> list[str]:
    """Run every section; return the report's markdown sections."""
    progress("preparing cases and warming up linkers", start)
    all_cases = make_cases()
    cases = [
        replace(case, tasks=tuple(t for t in case.tasks if t in settings.tasks))
        for case in (all_cases[name] for name in case_names)
    ]
    warm_up_linkers()
    sections = []
    compiled_cases, call_results = [], []
    for case in cases:
        progress(f"{case.name}: compiling and checking", start)
        compiled = compile_case(case)
        compiled_cases.append(compiled)
        progress(f"{case.name}: timing calls", start)
        result = measure_calls(compiled, settings)
        call_results.append(result)
        sections.append(
            f"### Per call: {case.name}: {case.description}\n\n{calls_table(result)}"
        )
    if any(case.heavy for case in cases):
        sections.append(
            "### Forward/backward split (direct JAX), and the forward passes a "
            "wrapped value+grad spends beyond it\n\n" + split_table(call_results)
        )
    progress("JAX ops inside the value+grad functions", start)
    sections.append(
        "### JAX ops inside the value+grad function (as_jax_op, Numba linker): "
        "host function of each on its actual inputs\n\n"
        + ops_table(compiled_cases, settings)
    )
    sections.append(
        "### Compile time of the value+grad function (cold: fresh wrapper per row)\n\n"
        + compile_table(compiled_cases)
    )
    progress("graph-build times", start)
    sections.append(
        "### Graph-build time of one wrapped call (median)\n\n"
        + build_table(cases, settings)
    )
    if "cheap" in case_names:
        progress("breakdown of the cheap case", start)
        sections.append(
            "### Breakdown: cheap function, value, Numba linker (median us per call)\n\n"
            + breakdown_tables(all_cases["cheap"], settings)
        )
    return sections


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings.make(args.quick)
    case_names = (
        [name.strip() for name in args.cases.split(",") if name.strip()]
        if args.cases
        else list(settings.default_cases)
    )
    unknown = set(case_names) - set(CASE_NAMES)
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}; choose from {CASE_NAMES}")
    start = time.perf_counter()
    with warnings.catch_warnings():
        # wrap_jax runs under Numba through the generic object-mode fallback,
        # which warns at every compile.
        warnings.filterwarnings("ignore", message="Numba will use object mode")
        sections = run(case_names, settings, start)
    elapsed = time.perf_counter() - start
    versions = {
        "PyTensor": pytensor.__version__,
        "JAX": jax.__version__,
        "Numba": numba.__version__,
        "diffrax": diffrax.__version__,
        "NumPy": np.__version__,
    }
    run_kind = "quick trial run (--quick)" if settings.quick else "full run"
    header = (
        "## Speed of as_jax_op vs direct jax.jit and pytensor.wrap_jax\n\n"
        f"{machine_header(versions)}\n\n"
        f"{run_kind}, {elapsed:.0f} s. Per-call times: median of {settings.repeats} "
        f"interleaved batches of ~{settings.batch_seconds * 1e3:.0f} ms per candidate; "
        "'noise' is the largest interquartile range / median in the row. Compiled "
        "functions use trust_input=True and are checked against direct JAX before timing."
    )
    report = "\n\n".join([header, *sections]) + "\n"
    print(report)
    output = args.output or ROOT / "benchmarks" / "results" / (
        "speed_quick.md" if settings.quick else "speed.md"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
