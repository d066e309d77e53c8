"""Per call on equinox's default path: our ops against the jitted original.

Equinox's raising checks (``eqx.error_if``, in every diffrax solve) are host
callbacks, which :mod:`jax.export` cannot keep; the trace cache keeps such a
program with each check setting a flag (``_jax_ofg.host.checks``). Measured
side by side in one process (medians of interleaved batches, outputs read as
NumPy arrays), with equinox's default ``EQX_ON_ERROR=raise`` and, in a child
process, ``EQX_ON_ERROR=nan``:

* ``sir``: value and gradient of a small diffrax solve (:mod:`_models`) in the
  default linker against ``jax.jit(jax.value_and_grad(loss))``; its op's
  program alone;
* ``seir``: the main job's ``logp_dlogp`` against ``mode="JAX"``;
* ``chain``: 32 chained wrapped ``tanh`` calls (one island, no checks);
* for each, the trace cache's machinery: ``jax_ofg__trace_cache`` on against off.

Run::

    .venv/bin/python benchmarks/checks_per_call.py           # ~6 minutes
    .venv/bin/python benchmarks/checks_per_call.py --quick   # ~3 minutes

``--cpu-time`` times the process's CPU seconds (all threads) instead of wall
time. Writes ``benchmarks/results/checks_per_call.json`` and ``.md``
(``checks_per_call_quick.*`` with ``--quick``, ``..._cpu.*`` with ``--cpu-time``).
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

import _checkout  # noqa: F401  (the checkout's modules)
import _report
import islands  # no persistent XLA cache
import jax
import jax.numpy as jnp
import numpy as np
from _models import (
    MODELS,
    SIR_DAYS,
    SIR_KNOTS,
    SIR_OBSERVED,
    SIR_TRUE_KNOTS,
    SIR_Y0,
    sir_rate,
    sir_rate_jax,
    sir_solve,
    sir_solve_jax,
)
from _processes import run_python
from _report import fill, format_ratio, format_seconds
from _timing import Call, Stats, interleaved_medians
from pymc.model.transform.optimization import freeze_dims_and_data

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.graph.basic import Constant


CHECKS = os.environ.get("EQX_ON_ERROR", "raise")


# ------------------------------------------------------------------ building
def sir_loss(knots: jax.Array, gamma: jax.Array) -> jax.Array:
    """Squared error of the SIR model's daily cases (scaled), in JAX."""
    ys = sir_solve_jax(sir_rate_jax(SIR_KNOTS, knots), SIR_Y0, SIR_DAYS, gamma)
    cases = 10_000.0 * (ys[:-1, 0] - ys[1:, 0])
    return 1e-4 * jnp.sum((cases - SIR_OBSERVED) ** 2)


def sir_function(trace_cache: str) -> Callable:
    """The same loss and gradient with our ops, in the default linker."""
    knots, gamma = pt.vector("knots", shape=(8,)), pt.dscalar("gamma")
    ys = sir_solve(sir_rate(SIR_KNOTS, knots), SIR_Y0, SIR_DAYS, gamma)
    cases = 10_000.0 * (ys[:-1, 0] - ys[1:, 0])
    loss = 1e-4 * pt.sum((cases - SIR_OBSERVED) ** 2)
    with cache_set(trace_cache):
        function = pytensor.function(
            [knots, gamma], [loss, *pt.grad(loss, [knots, gamma])]
        )
    function.trust_input = True
    return function


@contextlib.contextmanager
def cache_set(value: str) -> Iterator[None]:
    """``jax_ofg__trace_cache`` set while functions compile, their programs unshared:
    the trace cache forgets what it holds in this process (equal ops share
    programs) before and after."""
    trace_cache.reset()
    try:
        with pytensor.config.change_flags(jax_ofg__trace_cache=value):
            yield
    finally:
        trace_cache.reset()


def on_host(function: Callable) -> Callable:
    """``function`` with every output read as a NumPy array (waits for it)."""

    def call(*args):
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(function(*args))]

    return call


def sir_candidates() -> dict[str, Call]:
    knots, gamma = SIR_TRUE_KNOTS.copy(), np.float64(0.12)
    value_and_grad = jax.value_and_grad(sir_loss, argnums=(0, 1))
    ours = sir_function("on")
    (node,) = ours.maker.fgraph.toposort()  # one island
    values = iter((knots, gamma))
    inputs = [x.data if isinstance(x, Constant) else next(values) for x in node.inputs]
    candidates = {
        "jit": Call(on_host(jax.jit(value_and_grad)), (knots, gamma)),
        "ours": Call(ours, (knots, gamma)),
        # What the op's thunk calls (its outputs packed in one buffer).
        "our op's program": Call(node.op.program, tuple(inputs)),
        "ours, cache off": Call(sir_function("off"), (knots, gamma)),
    }
    want = candidates["jit"]()
    for name, call in candidates.items():
        if name != "our op's program":  # the op's, checked through "ours"
            for got, expected in zip(call(), want, strict=True):
                np.testing.assert_allclose(got, expected, rtol=1e-9, err_msg=name)
    return candidates


def seir_candidates() -> dict[str, Call]:
    model = MODELS["seir"]()
    point = model.initial_point()
    x = islands.raveled(model, point)
    frozen = freeze_dims_and_data(model)
    candidates = {
        'mode="JAX"': Call(
            islands.compile_logp_dlogp(
                frozen, "JAX", islands.raveled(frozen, point)
            ).function,
            (islands.raveled(frozen, point),),
        ),
        "ours": Call(islands.compile_logp_dlogp(model, None, x).function, (x,)),
    }
    with cache_set("off"):
        off = islands.compile_logp_dlogp(model, None, x).function
    candidates["ours, cache off"] = Call(off, (x,))
    value, gradient = candidates['mode="JAX"']()
    gradient = islands.by_name(frozen, point, gradient)
    for name, call in candidates.items():
        got_value, got_gradient = call()
        np.testing.assert_allclose(got_value, value, rtol=1e-8, err_msg=name)
        got_gradient = islands.by_name(
            frozen if name == 'mode="JAX"' else model, point, got_gradient
        )
        for var, want in gradient.items():
            np.testing.assert_allclose(got_gradient[var], want, rtol=1e-6, err_msg=name)
    return candidates


def chain_candidates() -> dict[str, Call]:
    """``islands.py``'s fixed-cost graph (no checks): microseconds around XLA."""
    x0, outputs = islands.chain_graph(32)
    x = np.linspace(-1.0, 1.0, 8)
    functions = {}
    for name, mode, cache in (
        ('mode="JAX"', "JAX", "on"),
        ("ours", None, "on"),
        ("ours, cache off", None, "off"),
    ):
        with cache_set(cache):
            function = pytensor.function([x0], outputs, mode=mode)
        function.trust_input = True
        functions[name] = on_host(function)
    want = functions['mode="JAX"'](x)
    for name, function in functions.items():
        for got, expected in zip(function(x), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-10, err_msg=name)
    return {name: Call(function, (x,)) for name, function in functions.items()}


# ----------------------------------------------------------------- measuring
def measure(args) -> dict[str, dict[str, float]]:
    """Median seconds per call (and spread) of every candidate, per case."""
    results = {}
    cases = {"sir": sir_candidates, "seir": seir_candidates, "chain": chain_candidates}
    for case, candidates in cases.items():
        if case not in args.cases:
            continue
        stats = interleaved_medians(
            candidates(),
            repeats=args.repeats,
            batch_seconds=args.batch_seconds,
            clock=time.process_time if args.cpu_time else time.perf_counter,
        )
        results[case] = {name: _stats_dict(s) for name, s in stats.items()}
    return results


def _stats_dict(stats: Stats) -> dict[str, float]:
    return {"median": stats.median, "spread": stats.spread}


def in_child(argv: list[str], checks: str) -> dict:
    """:func:`measure` in a fresh process with ``EQX_ON_ERROR=checks``."""
    return run_python([__file__, *argv, "--json"], env={"EQX_ON_ERROR": checks}).result


# ------------------------------------------------------------------- report
#: Rows: case, label, candidate, reference.
ROWS = [
    ("sir", "our op (default linker) vs jit(value_and_grad)", "ours", "jit"),
    ("seir", 'logp_dlogp, default linker vs mode="JAX"', "ours", 'mode="JAX"'),
    ("sir", "trace cache machinery: cache on vs off", "ours", "ours, cache off"),
    ("seir", "trace cache machinery: cache on vs off", "ours", "ours, cache off"),
    ("chain", "trace cache machinery: cache on vs off", "ours", "ours, cache off"),
    ("chain", 'default linker vs mode="JAX"', "ours", 'mode="JAX"'),
    ("sir", "our op's program alone vs jit", "our op's program", "jit"),
]


def report(data: dict) -> str:
    rows = []
    for case, label, candidate, reference in ROWS:
        for checks, by_case in data["results"].items():
            stats = by_case.get(case, {})
            if candidate not in stats or reference not in stats:
                continue
            ours, theirs = stats[candidate], stats[reference]
            rows.append(
                [f"{case}: {label}", f"EQX_ON_ERROR={checks}"]
                + [format_seconds(s["median"], "us") for s in (ours, theirs)]
                + [format_ratio(ours["median"] / theirs["median"])]
                + [f"{100 * max(ours['spread'], theirs['spread']):.0f}%"]
            )
    return fill(_report.texts("checks_per_call")["report"], rows, **data["meta"]) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=["sir", "seir", "chain"],
        default=["sir", "seir", "chain"],
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time CPU seconds of the process (all threads), not wall-clock ones",
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true", help="only the table")
    args = parser.parse_args(argv)
    args.repeats = 11 if args.quick else 41
    args.batch_seconds = 0.1 if args.quick else 0.2
    args.name = "checks_per_call" + "_quick" * args.quick + "_cpu" * args.cpu_time
    return args


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.json:
        print(json.dumps(measure(args)))
        return
    name = args.name
    if not args.report:
        results = {"raise": measure(args)}
        results["nan"] = in_child([a for a in argv if a != "--json"], "nan")
        versions = {"PyTensor": pytensor.__version__, "JAX": jax.__version__}
        command = " ".join(["python benchmarks/checks_per_call.py", *argv])
        clock = "CPU time (all threads)" if args.cpu_time else "wall-clock"
        meta = _report.meta(command, versions) | {"clock": clock}
        meta |= {"repeats": args.repeats, "batch_seconds": args.batch_seconds}
        _report.save(name, {"meta": meta, "results": results})
    _report.write(name, report(_report.load(name)))


if __name__ == "__main__":
    main()
