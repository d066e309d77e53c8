"""Cold start: fresh processes, their first and second run, and compile-time scaling.

Every run is a fresh process, run twice in a row with a fresh, shared
``base_compiledir`` (the second is what every notebook restart, script run and
sampler worker pays), in sections (``--only``):

* ``nutpie``: Stan's SIR case study through nutpie, as ``pm.sample()`` runs
  it, to the first draw and the posterior: ours with equinox's checks, with
  ``EQX_ON_ERROR=nan``, and the model in pure PyTensor (scan RK4);
* ``first_value``: the first ``logp_dlogp`` value of each model by phase
  (imports, build, rewrites, link, first call) with ``as_jax_op``,
  ``mode="JAX"``, ``pytensor.wrap_jax`` and pure PyTensor; where a first
  process's build and compile go (cProfile);
* ``scaling``: compile time against the number of wrapped calls (32 to 128),
  default linker against ``mode="JAX"``, cold caches.

Run::

    .venv/bin/python benchmarks/cold_start.py                # ~20 minutes
    .venv/bin/python benchmarks/cold_start.py --quick        # no SEIR
    .venv/bin/python benchmarks/cold_start.py --only nutpie  # one section

Writes ``benchmarks/results/cold_start.json`` and ``.md`` (``--only S``:
``cold_start_S.*``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

import _report
from _processes import run_python
from _report import fill, format_ratio, package_versions


#: The first lines of every script below: ``start`` is its first line's time
#: (it starts as every benchmark's process does: the checkout's modules, the
#: benchmarks' and the examples', :func:`_processes.startup_env`).
PREAMBLE = """
import json
import time
start = time.perf_counter()
"""


#: Runs in each fresh process: times the phases, prints them as JSON.
CHILD = """
import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.debug.profiling import ProfileStats
import _models as models
imported = time.perf_counter()
model = models.MODELS[{model!r}]()
if {mode!r} == "JAX":  # as numpyro and nutpie's JAX backend compile it
    from pymc.model.transform.optimization import freeze_dims_and_data
    model = freeze_dims_and_data(model)
built = time.perf_counter()
profile = ProfileStats(atexit_print=False)
f = model.logp_dlogp_function(
    ravel_inputs=True, profile=profile, mode={mode!r}
)._pytensor_function
compiled = time.perf_counter()
point = model.initial_point()
x = np.concatenate([np.ravel(point[v.name]) for v in model.value_vars])
value, gradient = f(x)
called = time.perf_counter()
print(json.dumps(dict(
    imports=imported - start, build=built - imported,
    rewrite=profile.rewriting_time, link=compiled - built - profile.rewriting_time,
    first_call=called - compiled, total=called - start, value=float(value),
)))
"""

#: Where a fresh process's build and compile time goes, by cProfile.
BREAKDOWN = """
import cProfile, pstats
import numpy as np
import _models as models
profile = cProfile.Profile()
profile.enable()
model = models.MODELS[{model!r}]()
f = model.logp_dlogp_function(ravel_inputs=True)._pytensor_function
profile.disable()
stats = pstats.Stats(profile)
total = sum(v[3] for k, v in stats.stats.items() if k[2] == "<module>") or 1
wanted = {{
    "shape traces (as_jax_op)": "trace_output_types",
    "dims: shape graphs, current lengths": "input_dims",
    "residual-dtype traces (value+grad rewrite)": "residual_dtypes",
    "island selection": "find_islands",
    "JAX-lowering probes (islands)": "joins_islands",
    "PyTensor rewrites, all": "prepare_fgraph",
    "Numba funcify + compile/load": "create",
}}
found = {{}}
for (path, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
    for label, function in wanted.items():
        if name == function:
            found[label] = max(found.get(label, 0.0), ct)
print(json.dumps(found))
"""

#: The case study through nutpie, as ``pm.sample()`` runs it: phases from the
#: first line of the script to the posterior.
NUTPIE = """
import numpy as np
import nutpie
import pymc as pm
import _models as models
imported = time.perf_counter()
model = models.MODELS[{model!r}]()
built = time.perf_counter()
compiled = nutpie.compile_pymc_model(model)
compiled_at = time.perf_counter()
nutpie.sample(compiled, draws=1, tune=1, chains=1, seed=1, progress_bar=False)
first_draw = time.perf_counter()
trace = nutpie.sample(
    compiled, draws=1000, tune=1000, chains=4, seed=1, progress_bar=False
)
sampled = time.perf_counter()
posterior = trace.posterior if hasattr(trace, "posterior") else trace["posterior"]
print(json.dumps(dict(
    imports=imported - start, build=built - imported,
    compile=compiled_at - built, first_draw=first_draw - compiled_at,
    to_first_draw=first_draw - start, sampling=sampled - first_draw,
    total=sampled - start, beta=float(posterior["beta"].mean()),
)))
"""

#: (label, model, environment) of the nutpie runs.
NUTPIE_RUNS = [
    ("as_jax_op (diffrax, equinox's checks raise)", "boarding_school", {}),
    ("as_jax_op, EQX_ON_ERROR=nan", "boarding_school", {"EQX_ON_ERROR": "nan"}),
    ("pure PyTensor (scan RK4, dt = 0.05 day)", "boarding_school_pytensor", {}),
]

NUTPIE_PHASES = ["imports", "build", "compile", "first_draw", "to_first_draw", "total"]


def measure_nutpie(folder: Path, repeats: int) -> dict[str, list[dict]]:
    """The case study through nutpie: a cold compiledir, then second processes.

    The cold process of each model first, then ``repeats`` rounds of second
    processes, one per model in each round (interleaved, so that a noisy
    minute hits every model); per model, the cold run and each phase's median.
    """
    runs: dict[str, list[dict]] = {}
    for _ in range(1 + repeats):
        for index, (label, model, env) in enumerate(NUTPIE_RUNS):
            runs.setdefault(label, []).append(nutpie_child(folder, index, model, env))
    for label, model_runs in runs.items():
        print("nutpie", label, json.dumps(model_runs), flush=True)
    return {
        label: [cold, {p: statistics.median(r[p] for r in seconds) for p in cold}]
        for label, (cold, *seconds) in runs.items()
    }


def nutpie_rows(results: dict[str, list[dict]], repeats: int) -> list[list]:
    pure = results[NUTPIE_RUNS[-1][0]]
    rows = []
    for label, runs in results.items():
        processes = ("cold", f"second (median of {repeats})")
        for process, run, reference in zip(processes, runs, pure):
            over = run["to_first_draw"] - reference["to_first_draw"]
            over_after_imports = over - (run["imports"] - reference["imports"])
            rows.append([label, process, *(f"{run[p]:.2f}" for p in NUTPIE_PHASES)])
            rows[-1] += [f"{over:+.2f}", f"{over_after_imports:+.2f}"]
    return rows


def nutpie_child(folder: Path, index: int, model: str, env: dict) -> dict:
    """One process of the nutpie section, sharing the compiledir of its model."""
    script = folder / f"nutpie_{index}.py"
    compiledir = folder / f"cache-nutpie-{index}"
    return run_child(fill_script(NUTPIE, model=model), compiledir, script, env=env)


#: Compile time against the number of wrapped calls: a chain of N calls with a
#: PyTensor node between each, value and gradient, in a fresh process with
#: cold caches (fresh compiledir, no persistent XLA cache).
SCALING = """
import numpy as np
import pytensor, pytensor.tensor as pt
import _models as models
imported = time.perf_counter()
x0 = pt.vector("x", shape=(8,))
x = x0
for i in range({n}):
    x = models.chain_step(x) + 0.01 * i
cost = (x**2).sum()
outputs = [cost, pt.grad(cost, x0)]
built = time.perf_counter()
f = pytensor.function([x0], outputs, mode={mode!r})
compiled = time.perf_counter()
value = f(np.linspace(-1.0, 1.0, 8))[0]
called = time.perf_counter()
print(json.dumps(dict(
    build=built - imported, compile=compiled - built, first_call=called - compiled,
    total=called - built, value=float(value),
)))
"""

SCALING_CALLS = (32, 64, 128)

#: (model, mode) pairs, by benchmark selection; None is PyTensor's default mode.
RUNS = {
    "sir": [
        ("sir", None),
        ("sir", "JAX"),
        ("sir_wrap_jax", None),
        ("sir_pytensor", None),
    ],
    "seir": [("seir", None), ("seir", "JAX"), ("seir_wrap_jax", None)],
}
LABELS = {
    "sir": "SIR, as_jax_op",
    "sir_wrap_jax": "SIR, pytensor.wrap_jax",
    "sir_pytensor": "SIR, pure PyTensor (scan RK4)",
    "seir": "SEIR (main job), as_jax_op",
    "seir_wrap_jax": "SEIR (main job), pytensor.wrap_jax",
}


def label(name: str, mode: str | None) -> str:
    return LABELS[name] + (', mode="JAX"' if mode == "JAX" else "")


PHASES = ["imports", "build", "rewrite", "link", "first_call", "total"]

#: The benchmark's sections (``--only`` runs one).
SECTIONS = ("nutpie", "first_value", "scaling")


def run_child(
    source: str, compiledir: Path, script: Path, env: dict | None = None
) -> dict:
    """Run ``source`` as ``script`` in a fresh process with ``compiledir``; its JSON."""
    script.write_text(textwrap.dedent(source))
    env = {"PYTENSOR_FLAGS": f"base_compiledir={compiledir}", **(env or {})}
    return run_python([script], env=env, cwd=script.parent, timeout=1800).result


def fill_script(source: str, **values) -> str:
    """A script: :data:`PREAMBLE`, then ``source`` with ``values`` filled in."""
    return PREAMBLE + textwrap.dedent(source).format(**values)


def measure_first_value(
    runs: list[tuple[str, str | None]], folder: Path
) -> dict[str, list[dict]]:
    results = {}
    for name, mode in runs:
        tag = f"{name}-{mode or 'default'}"
        compiledir = folder / f"cache-{tag}"
        script = folder / f"run_{tag}.py"
        pair = [
            run_child(fill_script(CHILD, model=name, mode=mode), compiledir, script)
            for _ in range(2)
        ]
        if abs(pair[0]["value"] - pair[1]["value"]) > 1e-9 * abs(pair[0]["value"]):
            raise AssertionError(f"{tag}: the two processes disagree: {pair}")
        results[label(name, mode)] = pair
        print(tag, json.dumps(pair), flush=True)
    return results


def measure_scaling(folder: Path) -> dict[str, dict]:
    """Compile + first call against the number of wrapped calls, default vs JAX."""
    results = {}
    for n in SCALING_CALLS:
        runs = {}
        for label, mode in (("default", None), ("JAX", "JAX")):
            runs[label] = run_child(
                fill_script(SCALING, n=n, mode=mode),
                folder / f"cache-scaling-{n}-{label}",
                folder / f"scaling_{n}_{label}.py",
                env={"JAX_ENABLE_COMPILATION_CACHE": "false"},
            )
        if abs(runs["default"]["value"] - runs["JAX"]["value"]) > 1e-9:
            raise AssertionError(f"N={n}: default and JAX disagree: {runs}")
        results[str(n)] = runs
        print("scaling", n, json.dumps(runs), flush=True)
    return results


def scaling_rows(results: dict[str, dict]) -> list[list]:
    rows = []
    for n, runs in results.items():
        ours, theirs = runs["default"], runs["JAX"]
        times = [ours[p] for p in ("build", "compile", "first_call", "total")]
        rows.append([n, *(f"{t:.2f}" for t in times), f"{theirs['total']:.2f}"])
        rows[-1].append(format_ratio(ours["total"] / theirs["total"]))
    return rows


def phase_rows(results: dict[str, list[dict]]) -> list[list]:
    rows = []
    for name, (first, second) in results.items():
        for label, run in (("1st", first), ("2nd", second)):
            ratio = (
                format_ratio(second["total"] / first["total"]) if label == "2nd" else ""
            )
            rows.append([name, label, *(f"{run[p]:.2f}" for p in PHASES), ratio])
    return rows


def measure(args: argparse.Namespace, wanted: set[str], command: str) -> dict:
    """Every section asked for, as data."""
    versions = package_versions({"PyTensor": "pytensor", "JAX": "jax", "PyMC": "pymc"})
    data: dict = {"meta": _report.meta(command, versions) | {"repeats": args.repeats}}
    runs = RUNS["sir"] + ([] if args.quick else RUNS["seir"])
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        if "nutpie" in wanted:
            data["nutpie"] = measure_nutpie(folder, args.repeats)
        if "first_value" in wanted:
            data["first_value"] = measure_first_value(runs, folder)
        if "scaling" in wanted:
            data["scaling"] = measure_scaling(folder)
        if "first_value" in wanted:
            breakdown = fill_script(BREAKDOWN, model="sir")
            cache, script = folder / "cache-breakdown", folder / "b.py"
            data["breakdown"] = run_child(breakdown, cache, script)
    return data


def report(data: dict) -> str:
    text, meta = _report.texts("cold_start"), data["meta"]
    sections = [fill(text["intro"], **meta)]
    if "nutpie" in data:
        rows = nutpie_rows(data["nutpie"], meta["repeats"])
        sections.append(fill(text["nutpie"], rows, repeats=meta["repeats"]))
    if "first_value" in data:
        results = data["first_value"]
        ours, pure, wrap = (
            results[label(name, None)]
            for name in ("sir", "sir_pytensor", "sir_wrap_jax")
        )
        sections.append(
            fill(
                text["first_value"],
                phase_rows(results),
                ours_over_pure=format_ratio(ours[1]["total"] / pure[1]["total"]),
                ours_over_wrap_jax=format_ratio(ours[0]["total"] / wrap[0]["total"]),
            )
        )
    if "scaling" in data:
        sections.append(fill(text["scaling"], scaling_rows(data["scaling"])))
    if "breakdown" in data:
        rows = [
            (phase, f"{seconds:.2f}") for phase, seconds in data["breakdown"].items()
        ]
        sections.append(fill(text["breakdown"], rows))
    return "\n\n".join(sections) + "\n" + _report.transcribed(meta)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the SIR models only")
    parser.add_argument("--no-nutpie", action="store_true")
    parser.add_argument(
        "--only",
        choices=SECTIONS,
        default=None,
        help="one section, into cold_start_<section>.md",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="second processes per model in the nutpie section (medians)",
    )
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args(argv)
    name = f"cold_start_{args.only}" if args.only else "cold_start"
    if not args.report:
        wanted = {args.only} if args.only else set(SECTIONS)
        if args.no_nutpie:
            wanted.discard("nutpie")
        command = " ".join(["python benchmarks/cold_start.py", *(argv or sys.argv[1:])])
        _report.save(name, measure(args, wanted, command))
    _report.write(name, report(_report.load(name)))


if __name__ == "__main__":
    main()
