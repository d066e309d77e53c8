"""JAX islands: a PyMC ``logp_dlogp`` in the default linker against ``mode="JAX"``.

A PyMC model whose ODE is a wrapped JAX function computes its likelihood in
PyTensor. Without islands, the default (Numba) linker runs the forward op, the
likelihood and its gradient in Numba, and the pullback as two XLA programs
glued through the host; the ``jax_islands`` rewrite makes all of it one XLA
program. Measured side by side in one run, for four models:

* ``sir``: the issue's model: 8 knots of a cubic-interpolated transmission
  rate (a symbolic callable) inside a diffrax SIR solve (Tsit5 + PID, 50 daily
  saves), negative-binomial daily cases;
* ``boarding_school``: Stan's SIR case study (``examples/boarding_school_sir.py``:
  diffrax ``Dopri5``, two rates, 14 daily counts);
* ``sir_nested``: the same epidemic as a modeller nests it (issue #50): the
  log-knots a PyTensor ``cumsum`` of PyMC increments, the interpolator a
  closure built by one wrapped function and called in a second one's diffrax
  solve, equinox's default checks on (``throw=True``, ``EQX_ON_ERROR`` unset);
* ``seir``: the main job's model (``examples/seir_time_varying.py``).

Per call of ``model.logp_dlogp_function()`` at the initial point (medians of
interleaved batches): default linker with islands, without islands, the C VM
with islands, ``mode="JAX"`` (the whole model as one XLA program, its dims
frozen as numpyro and nutpie's JAX backend compile it: the target) and
``pytensor.wrap_jax`` (one wrapped function for interpolation and solve, as a
``wrap_jax`` user writes it) in the default linker, all of one raveled point
(``ravel_inputs=True``, as PyMC's samplers and nutpie compile it); and the
default linker and ``mode="JAX"`` of one array per value variable (rows
"unraveled": ``model.logp_dlogp_function()``'s default; their ratio is to
``mode="JAX"`` unraveled). Every candidate is first checked to give the same
value and gradient, and its outputs are read as NumPy arrays, as a sampler
reads them.

Also: the compile time (``pytensor.function`` and the first call, which traces
and compiles XLA; the persistent XLA cache is off here) with and without
islands; and nutpie (PyMC's default sampler, Numba backend) with and without
islands, and with its JAX backend: wall time of a fixed run and time per
gradient evaluation.

Run::

    .venv/bin/python benchmarks/islands.py            # ~10 minutes
    .venv/bin/python benchmarks/islands.py --quick    # ~4 minutes
    .venv/bin/python benchmarks/islands.py --quick --models sir_nested --no-nutpie

Results are printed and written to ``benchmarks/results/islands.md``
(``islands_quick.md`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np


# Compile times are measured, not read back: no persistent XLA cache
# (benchmarks/cold_start.py measures the cache).
os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "conftest.py").exists():  # inside the checkout: use its modules
    sys.path.insert(0, str(ROOT))
    import conftest  # noqa: F401
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _models  # noqa: E402
import nutpie  # noqa: E402
import pymc as pm  # noqa: E402
from _timing import (  # noqa: E402
    Call,
    format_ratio,
    format_seconds,
    interleaved_medians,
    machine_header,
    markdown_table,
    package_versions,
)
from pymc.model.transform.optimization import freeze_dims_and_data  # noqa: E402

import pytensor  # noqa: E402
import pytensor.compile.mode as pytensor_modes  # noqa: E402
from pytensor.compile._jax_ofg.islands.op import JaxIsland  # noqa: E402


# -------------------------------------------------------------- compiling
def no_islands(mode: str = "NUMBA"):
    return pytensor_modes.get_mode(mode).excluding("jax_islands")


@contextlib.contextmanager
def numba_mode_without_islands() -> Iterator[None]:
    """nutpie compiles with ``mode="NUMBA"``: exclude islands from that mode."""
    saved = pytensor_modes.predefined_modes["NUMBA"]
    pytensor_modes.predefined_modes["NUMBA"] = saved.excluding("jax_islands")
    try:
        yield
    finally:
        pytensor_modes.predefined_modes["NUMBA"] = saved


@dataclass
class Compiled:
    function: Callable
    build_seconds: float
    first_call_seconds: float
    n_islands: int
    n_nodes: int


def host_values(function: Callable) -> Callable:
    """``function`` with its outputs as NumPy arrays, as a sampler reads them:
    under the JAX linker they are JAX arrays, still being computed."""

    def call(*inputs: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(output) for output in function(*inputs)]

    return call


def compile_logp_dlogp(
    model: pm.Model, mode, *inputs: np.ndarray, ravel_inputs: bool = True
) -> Compiled:
    """``model``'s ``logp_dlogp`` of one raveled point (what PyMC's samplers and
    nutpie compile) or, with ``ravel_inputs=False``, of one array per value
    variable (``model.logp_dlogp_function()``'s default)."""
    start = time.perf_counter()
    function = model.logp_dlogp_function(ravel_inputs=ravel_inputs, mode=mode)
    function = function._pytensor_function
    function.trust_input = True
    built = time.perf_counter()
    on_host = host_values(function)
    on_host(*inputs)
    first = time.perf_counter()
    nodes = function.maker.fgraph.apply_nodes
    return Compiled(
        on_host,
        built - start,
        first - built,
        sum(isinstance(n.op, JaxIsland) for n in nodes),
        len(nodes),
    )


# --------------------------------------------------------------- measuring
#: Label suffix of the candidates called with one array per value variable.
UNRAVELED = ", unraveled"


def raveled(model: pm.Model, point: dict[str, np.ndarray]) -> np.ndarray:
    """``point`` as the raveled input of ``model``'s ``logp_dlogp``: freezing a
    model can reorder its value variables."""
    return np.concatenate([np.ravel(point[v.name]) for v in model.value_vars])


#: XLA's CPU client takes host memory aligned to this many bytes as it is.
ALIGNMENT = 64


def aligned(x: np.ndarray) -> np.ndarray:
    """A copy of ``x`` aligned to :data:`ALIGNMENT` bytes.

    JAX passes an aligned NumPy argument to XLA as it is, and copies any
    other first: on ``sir_nested`` a misaligned point made a call about 7%
    slower (in the default linker as under ``mode="JAX"``). NumPy aligns
    small arrays to 16 bytes only, so every candidate gets aligned inputs:
    no ratio is decided by where an allocation happened to land.
    """
    x = np.asarray(x)
    raw = np.empty(x.nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    copy = raw[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
    copy[...] = x
    return copy


def arguments(model: pm.Model, point: dict[str, np.ndarray], ravel: bool) -> tuple:
    """``point`` as the arguments of ``model``'s ``logp_dlogp``, raveled or not
    (:func:`aligned`)."""
    if ravel:
        return (aligned(raveled(model, point)),)
    return tuple(aligned(point[v.name]) for v in model.value_vars)


def by_name(
    model: pm.Model, point: dict[str, np.ndarray], raveled_values: np.ndarray
) -> dict[str, np.ndarray]:
    sizes = [np.size(point[v.name]) for v in model.value_vars]
    parts = np.split(raveled_values, np.cumsum(sizes)[:-1])
    return {v.name: part for v, part in zip(model.value_vars, parts)}


def per_call(name: str, models: dict[str, pm.Model], args) -> tuple[str, dict]:
    ours, theirs = models["ours"], models["wrap_jax"]
    point = ours.initial_point()
    # dims as constants, as pm.sample(nuts_sampler="numpyro") and nutpie's
    # JAX backend compile it: JAX cannot take lengths from shared variables
    frozen = freeze_dims_and_data(ours)
    candidates = {  # label: (model, mode, raveled inputs)
        "default, islands": (ours, None, True),
        "default, no islands": (ours, no_islands(), True),
        "C VM, islands": (ours, "CVM", True),
        'mode="JAX"': (frozen, "JAX", True),
        "wrap_jax, default": (theirs, None, True),
        # model.logp_dlogp_function()'s default: one input per value variable
        f"default, islands{UNRAVELED}": (ours, None, False),
        f'mode="JAX"{UNRAVELED}': (frozen, "JAX", False),
    }
    inputs = {
        label: arguments(m, point, ravel) for label, (m, _, ravel) in candidates.items()
    }
    compiled = {
        label: compile_logp_dlogp(model, mode, *inputs[label], ravel_inputs=ravel)
        for label, (model, mode, ravel) in candidates.items()
    }
    value, gradient = compiled['mode="JAX"'].function(*inputs['mode="JAX"'])
    reference = (value, by_name(frozen, point, gradient))
    for label, c in compiled.items():
        value, gradient = c.function(*inputs[label])
        gradient = by_name(candidates[label][0], point, gradient)
        np.testing.assert_allclose(value, reference[0], rtol=1e-8, err_msg=label)
        for var, want in reference[1].items():
            np.testing.assert_allclose(
                gradient[var], want, rtol=1e-6, err_msg=f"{label}: {var}"
            )

    stats = interleaved_medians(
        {label: Call(c.function, inputs[label]) for label, c in compiled.items()},
        repeats=args.repeats,
        batch_seconds=args.batch_seconds,
    )
    wrap = stats["wrap_jax, default"].median

    def target(label: str) -> float:  # mode="JAX" with the same inputs
        suffix = UNRAVELED if label.endswith(UNRAVELED) else ""
        return stats[f'mode="JAX"{suffix}'].median

    rows = [
        (
            label,
            compiled[label].n_islands,
            format_seconds(s.median, "ms"),
            f"{100 * s.spread:.0f}%",
            format_ratio(s.median / target(label)),
            format_ratio(s.median / wrap),
        )
        for label, s in stats.items()
    ]
    table = markdown_table(
        ["linker", "islands", "ms per call", "spread", 'x mode="JAX"', "x wrap_jax"],
        rows,
        numeric_from=1,
    )
    compile_rows = [
        (
            label,
            compiled[label].n_nodes,
            format_seconds(compiled[label].build_seconds, "s"),
            format_seconds(compiled[label].first_call_seconds, "s"),
        )
        for label in ("default, islands", "default, no islands", 'mode="JAX"')
    ]
    compile_table = markdown_table(
        ["linker", "nodes", "pytensor.function (s)", "first call (s)"],
        compile_rows,
    )
    text = (
        f"### {name}: `logp_dlogp` per call\n\n{table}\n\n"
        f"Compile time (the first call traces and compiles the XLA programs):\n\n"
        f"{compile_table}\n"
    )
    return text, {label: s.median for label, s in stats.items()}


def nutpie_run(model: pm.Model, args, **compile_kwargs) -> tuple[float, float, int]:
    """Wall time of one chain, seconds per gradient evaluation, divergences."""
    compiled = nutpie.compile_pymc_model(model, **compile_kwargs)
    start = time.perf_counter()
    trace = nutpie.sample(
        compiled,
        draws=args.draws,
        tune=args.tune,
        chains=1,
        cores=1,
        seed=1,
        progress_bar=False,
    )
    seconds = time.perf_counter() - start
    stats = (
        trace.sample_stats if hasattr(trace, "sample_stats") else trace["sample_stats"]
    )
    warmup = (
        trace.warmup_sample_stats
        if hasattr(trace, "warmup_sample_stats")
        else trace["warmup_sample_stats"]
    )
    n_gradients = int(stats["n_steps"].sum() + warmup["n_steps"].sum())
    divergences = int(stats["diverging"].sum())
    return seconds, seconds / n_gradients, divergences


def nutpie_sampling_table(model: pm.Model, args) -> str:
    """nutpie's Numba backend with and without islands, and its JAX backend."""
    runs = {"Numba backend, islands": nutpie_run(model, args)}
    with numba_mode_without_islands():
        runs["Numba backend, no islands"] = nutpie_run(model, args)
    runs["JAX backend"] = nutpie_run(model, args, backend="jax", gradient_backend="jax")
    target = runs["JAX backend"][1]
    rows = [
        (
            label,
            format_seconds(seconds, "s"),
            format_seconds(per_gradient, "ms"),
            format_ratio(per_gradient / target),
            divergences,
        )
        for label, (seconds, per_gradient, divergences) in runs.items()
    ]
    table = markdown_table(
        ["nutpie", "wall (s)", "ms per gradient", "x JAX backend", "divergences"], rows
    )
    return (
        f"nutpie, one chain, {args.tune} tuning + {args.draws} draws "
        f"(sampling only; compile excluded):\n\n{table}\n"
    )


# -------------------------------------------------------------- fixed cost
def chain_graph(n_calls: int):
    """``n_calls`` wrapped calls with a PyTensor node between each, on an 8-vector."""
    import pytensor.tensor as pt

    x0 = pt.vector("x", shape=(8,))
    x = x0
    for i in range(n_calls):
        x = _models.chain_step(x) + 0.01 * i
    cost = (x**2).sum()
    return x0, [cost, pt.grad(cost, x0)]


def fixed_cost_table(args) -> str:
    """A graph that is one island: the cost around XLA, against ``mode="JAX"``."""
    x0, outputs = chain_graph(32)
    xv = aligned(np.linspace(-1.0, 1.0, 8))
    functions = {}
    for label, mode in (("default (one island)", None), ('mode="JAX"', "JAX")):
        function = pytensor.function([x0], outputs, mode=mode)
        function.trust_input = True
        functions[label] = host_values(function)
    reference = functions['mode="JAX"'](xv)
    for label, function in functions.items():
        for got, want in zip(function(xv), reference):
            np.testing.assert_allclose(got, want, rtol=1e-10, err_msg=label)
    stats = interleaved_medians(
        {label: Call(f, (xv,)) for label, f in functions.items()},
        repeats=args.repeats,
        batch_seconds=args.batch_seconds,
    )
    target = stats['mode="JAX"']
    rows = [
        (
            label,
            format_seconds(s.median, "us"),
            format_seconds(s.best, "us"),
            format_ratio(s.median / target.median),
            format_seconds(s.median - target.median, "us"),
        )
        for label, s in stats.items()
    ]
    table = markdown_table(
        ["linker", "us per call", "best batch", 'x mode="JAX"', "over JAX"], rows
    )
    return (
        "### Fixed cost: a graph that is one island\n\n32 chained wrapped calls "
        "(`tanh`, a PyTensor `add` between each) on an 8-vector, value and "
        f"gradient; outputs read as NumPy in both:\n\n{table}\n"
    )


# ------------------------------------------------------------------- main
MODEL_NAMES = ["sir", "sir_nested", "boarding_school", "seir"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    parser.add_argument("--models", nargs="+", choices=MODEL_NAMES, default=None)
    parser.add_argument(
        "--no-nutpie", action="store_true", help="per call only: no nutpie runs"
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    args.models = args.models or MODEL_NAMES
    args.repeats = 9 if args.quick else 21
    args.batch_seconds = 0.1 if args.quick else 0.25
    args.draws = 100 if args.quick else 300
    args.tune = 100 if args.quick else 300
    name = "islands_quick.md" if args.quick else "islands.md"
    args.output = args.output or ROOT / "benchmarks" / "results" / name
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    versions = package_versions(
        {"PyTensor": "pytensor", "JAX": "jax", "PyMC": "pymc", "nutpie": "nutpie"}
    )
    sections = [
        "# JAX islands: `logp_dlogp` per call and nutpie",
        "",
        f"`python benchmarks/islands.py{' '.join(['', *(argv or sys.argv[1:])])}`; "
        f"medians of {args.repeats} interleaved batches of about "
        f"{args.batch_seconds} s; spread = interquartile range / median.",
        "",
        machine_header(versions),
        "",
    ]
    sections += [fixed_cost_table(args), ""]
    print(sections[-2], flush=True)
    for name in args.models:
        models = {
            "ours": _models.MODELS[name](),
            "wrap_jax": _models.MODELS[f"{name}_wrap_jax"](),
        }
        text, _ = per_call(name, models, args)
        sampling = "" if args.no_nutpie else nutpie_sampling_table(models["ours"], args)
        sections += [text, sampling, ""]
        print("\n".join(sections[-3:]), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(sections))
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
