"""JAX islands: a PyMC ``logp_dlogp`` in the default linker against ``mode="JAX"``.

Without islands, the default (Numba) linker runs a model's forward op, its
likelihood and gradient in Numba and the pullback as XLA programs glued
through the host; the ``jax_islands`` rewrite makes all of it one XLA program.
Measured side by side, for the models of :mod:`_models` (``sir``,
``sir_nested``, ``boarding_school``, ``seir``): the per-call cost of
``logp_dlogp`` in each linker (every candidate first checked to give the same
value and gradient), its compile time, and nutpie with and without islands;
also the fixed cost of a graph that is one island, and the default linker
with the trace cache off. Run it with ``EQX_ON_ERROR=nan`` for equinox's
checks as NaN instead of raising. What each row is: the report's
introduction, ``texts/islands.md``.

Run::

    .venv/bin/python benchmarks/islands.py            # ~10 minutes
    .venv/bin/python benchmarks/islands.py --quick    # ~4 minutes
    .venv/bin/python benchmarks/islands.py --quick --models sir_nested --no-nutpie

Writes ``benchmarks/results/islands.json`` and ``.md`` (``islands_quick.*``
with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import _room  # noqa: F401  (the checkout's modules; the examples')
import numpy as np


# Compile times are measured, not read back: no persistent XLA cache
# (benchmarks/cold_start.py measures the cache).
os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"

import _models
import _report
import nutpie
import pymc as pm
from _report import fill, format_ratio, format_seconds, package_versions
from _timing import Call, interleaved_medians
from pymc.model.transform.optimization import freeze_dims_and_data

import pytensor
import pytensor.compile.mode as pytensor_modes
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.islands.op import JaxIsland


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
#: The default linker's candidate compiled with the trace cache off.
CACHE_OFF = "default, islands, trace cache off"


@contextlib.contextmanager
def trace_cache_off() -> Iterator[None]:
    """``jax_ofg__trace_cache=off`` while functions compile, their programs not
    shared with the others': the trace cache forgets what this process holds
    (equal ops share programs) before and after."""
    trace_cache.reset()
    try:
        with pytensor.config.change_flags(jax_ofg__trace_cache="off"):
            yield
    finally:
        trace_cache.reset()


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


def per_call(models: dict[str, pm.Model], args) -> dict:
    """Per call of every candidate (checked first), and what it compiled, as data."""
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
    with trace_cache_off():  # what the trace cache's machinery costs per call
        default = "default, islands"
        compiled[CACHE_OFF] = compile_logp_dlogp(ours, None, *inputs[default])
    candidates[CACHE_OFF], inputs[CACHE_OFF] = candidates[default], inputs[default]
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
    return {
        "per_call": {
            label: [compiled[label].n_islands, s.median, s.spread]
            for label, s in stats.items()
        },
        "compile": {
            label: [c.n_nodes, c.build_seconds, c.first_call_seconds]
            for label, c in compiled.items()
            if label in ("default, islands", "default, no islands", 'mode="JAX"')
        },
    }


def per_call_rows(per_call: dict[str, list]) -> list[list]:
    wrap = per_call["wrap_jax, default"][1]

    def target(label: str) -> float:  # mode="JAX" with the same inputs
        suffix = UNRAVELED if label.endswith(UNRAVELED) else ""
        return per_call[f'mode="JAX"{suffix}'][1]

    return [
        [
            label,
            islands,
            format_seconds(median, "ms"),
            f"{100 * spread:.0f}%",
            format_ratio(median / target(label)),
            format_ratio(median / wrap),
        ]
        for label, (islands, median, spread) in per_call.items()
    ]


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


def nutpie_sampling(model: pm.Model, args) -> dict[str, tuple | str]:
    """nutpie's Numba backend with and without islands, and its JAX backend."""
    runs = {"Numba backend, islands": attempt(lambda: nutpie_run(model, args))}
    with numba_mode_without_islands():
        runs["Numba backend, no islands"] = attempt(lambda: nutpie_run(model, args))
    runs["JAX backend"] = attempt(
        lambda: nutpie_run(model, args, backend="jax", gradient_backend="jax")
    )
    return runs


def attempt(run: Callable[[], tuple]) -> tuple | str:
    """A run's result, or why it failed: nutpie panics (pyo3's
    ``PanicException``, a ``BaseException``) when a log-density call raises,
    as its JAX backend does on a solve that hits ``max_steps``."""
    try:
        return run()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        return f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}"


def nutpie_rows(runs: dict[str, list | str]) -> list[list]:
    target = runs["JAX backend"]
    rows = []
    for label, run in runs.items():
        if isinstance(run, str):
            rows.append([label, run, "", "", ""])
            continue
        seconds, per_gradient, divergences = run
        ratio = (
            "" if isinstance(target, str) else format_ratio(per_gradient / target[1])
        )
        rows.append(
            [
                label,
                format_seconds(seconds, "s"),
                format_seconds(per_gradient, "ms"),
                ratio,
                divergences,
            ]
        )
    return rows


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


def fixed_cost(args) -> dict[str, list[float]]:
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
    return {label: [s.median, s.best] for label, s in stats.items()}


def fixed_cost_rows(stats: dict[str, list[float]]) -> list[list]:
    target = stats['mode="JAX"'][0]
    return [
        [
            label,
            format_seconds(median, "us"),
            format_seconds(best, "us"),
            format_ratio(median / target),
            format_seconds(median - target, "us"),
        ]
        for label, (median, best) in stats.items()
    ]


# ------------------------------------------------------------------- main
MODEL_NAMES = ["sir", "sir_nested", "boarding_school", "seir"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    parser.add_argument("--models", nargs="+", choices=MODEL_NAMES, default=None)
    parser.add_argument(
        "--no-nutpie", action="store_true", help="per call only: no nutpie runs"
    )
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.models = args.models or MODEL_NAMES
    args.repeats = 9 if args.quick else 21
    args.batch_seconds = 0.1 if args.quick else 0.25
    args.draws = 100 if args.quick else 300
    args.tune = 100 if args.quick else 300
    return args


def measure(args) -> dict:
    versions = package_versions(
        {"PyTensor": "pytensor", "JAX": "jax", "PyMC": "pymc", "nutpie": "nutpie"}
    )
    command = " ".join(["python benchmarks/islands.py", *args.argv])
    data: dict = {"meta": _report.meta(command, versions)}
    data["meta"] |= {"repeats": args.repeats, "batch_seconds": args.batch_seconds}
    data["meta"] |= {"tune": args.tune, "draws": args.draws}
    data["fixed_cost"] = fixed_cost(args)
    data["models"] = {}
    for name in args.models:
        models = {
            "ours": _models.MODELS[name](),
            "wrap_jax": _models.MODELS[f"{name}_wrap_jax"](),
        }
        data["models"][name] = per_call(models, args)
        if not args.no_nutpie:
            data["models"][name]["nutpie"] = nutpie_sampling(models["ours"], args)
        print(json.dumps({name: data["models"][name]}), flush=True)
    return data


def report(data: dict) -> str:
    text, meta = _report.texts("islands"), data["meta"]
    sections = [fill(text["intro"], **meta)]
    sections.append(fill(text["fixed_cost"], fixed_cost_rows(data["fixed_cost"])))
    for name, results in data["models"].items():
        sections.append(
            fill(text["per_call"], per_call_rows(results["per_call"]), name=name)
        )
        rows = [
            [label, nodes, format_seconds(build, "s"), format_seconds(first, "s")]
            for label, (nodes, build, first) in results["compile"].items()
        ]
        sections.append(fill(text["compile"], rows))
        if "nutpie" in results:
            rows = nutpie_rows(results["nutpie"])
            sections.append(fill(text["nutpie"], rows, **meta))
    return "\n\n".join(sections) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    name = "islands_quick" if args.quick else "islands"
    if not args.report:
        _report.save(name, measure(args))
    _report.write(name, report(_report.load(name)))


if __name__ == "__main__":
    main()
