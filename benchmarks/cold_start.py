"""Cold start: a fresh process's time to the first ``logp_dlogp`` value, first and second run.

PyTensor caches compiled Numba code under its ``compiledir``; this package
makes graphs holding its ops cacheable there too and puts JAX's persistent
compilation cache next to it. Each model is run in a fresh process twice in a
row with a fresh, shared ``base_compiledir`` (the second run is what every
notebook restart, script run and sampler worker pays), broken down into:

* **import**: ``pymc``, ``pytensor``, this package and the model's JAX code;
* **build**: the PyMC model (for ours: wrapping, i.e. shape traces);
* **rewrite** and **link**: ``model.logp_dlogp_function()`` (PyTensor's rewrites,
  then Numba compiling or loading the graph), from PyTensor's compile profile;
* **first call**: the first evaluation (JAX traces the wrapped functions and
  XLA compiles, or loads, the programs).

Models: ``sir`` (the islands benchmark's SIR model: 8 interpolated knots,
diffrax Tsit5 + PID, 50 days, NB likelihood) with ``as_jax_op``, with
``pytensor.wrap_jax``, and as a pure-PyTensor model of the same epidemic
(fixed-step RK4 in ``pytensor.scan``, linear interpolation); ``seir`` (the main
job's model) with ``as_jax_op`` and ``wrap_jax``. Finally the wall time of a
short ``pm.sample(nuts_sampler="pymc", cores=2, mp_ctx="forkserver")`` run of
the SIR model, twice (its two workers each start a process).

Run::

    .venv/bin/python benchmarks/cold_start.py            # ~6 minutes
    .venv/bin/python benchmarks/cold_start.py --quick    # sir only

Results are printed and written to ``benchmarks/results/cold_start.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _timing import format_ratio, machine_header, markdown_table  # noqa: E402


#: Runs in each fresh process: times the phases, prints them as JSON.
CHILD = """
import time
start = time.perf_counter()
import sys
sys.path[:0] = [{root!r}, {here!r}, {examples!r}]
if {in_checkout!r}:
    import conftest  # the checkout's modules
import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.debug.profiling import ProfileStats
import _models as models
imported = time.perf_counter()
model = models.MODELS[{model!r}]()
built = time.perf_counter()
profile = ProfileStats(atexit_print=False)
f = model.logp_dlogp_function(ravel_inputs=True, profile=profile)._pytensor_function
compiled = time.perf_counter()
x = np.concatenate([np.ravel(v) for v in model.initial_point().values()])
value, gradient = f(x)
called = time.perf_counter()
print(json.dumps(dict(
    imports=imported - start, build=built - imported,
    rewrite=profile.rewriting_time, link=compiled - built - profile.rewriting_time,
    first_call=called - compiled, total=called - start, value=float(value),
)))
"""

SAMPLE = """
import time
start = time.perf_counter()
import sys
sys.path[:0] = [{root!r}, {here!r}]
if {in_checkout!r}:
    import conftest
import pymc as pm
import _models as models

if __name__ == "__main__":
    model = models.MODELS["sir"]()
    with model:
        pm.sample(draws=50, tune=50, chains=2, cores=2, nuts_sampler="pymc",
                  mp_ctx="forkserver", progressbar=False, random_seed=1,
                  compute_convergence_checks=False)
    print(json.dumps(dict(total=time.perf_counter() - start)))
"""

#: Where a fresh process's build and compile time goes, by cProfile.
BREAKDOWN = """
import cProfile, pstats, sys
sys.path[:0] = [{root!r}, {here!r}, {examples!r}]
if {in_checkout!r}:
    import conftest
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

#: Compile time against the number of wrapped calls: a chain of N calls with a
#: PyTensor node between each, value and gradient, in a fresh process with
#: cold caches (fresh compiledir, no persistent XLA cache).
SCALING = """
import time
start = time.perf_counter()
import sys
sys.path[:0] = [{root!r}, {here!r}]
if {in_checkout!r}:
    import conftest
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

RUNS = {
    "sir": ["sir", "sir_wrap_jax", "sir_pytensor"],
    "seir": ["seir", "seir_wrap_jax"],
}
LABELS = {
    "sir": "SIR, as_jax_op",
    "sir_wrap_jax": "SIR, pytensor.wrap_jax",
    "sir_pytensor": "SIR, pure PyTensor (scan RK4)",
    "seir": "SEIR (main job), as_jax_op",
    "seir_wrap_jax": "SEIR (main job), pytensor.wrap_jax",
}
PHASES = ["imports", "build", "rewrite", "link", "first_call", "total"]


def run_child(
    source: str, compiledir: Path, script: Path, env: dict | None = None
) -> dict:
    script.write_text("import json\n" + textwrap.dedent(source))
    env = {
        **os.environ,
        "PYTENSOR_FLAGS": f"base_compiledir={compiledir}",
        **(env or {}),
    }
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        cwd=script.parent,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def fill(source: str, **values) -> str:
    common = {
        "root": str(ROOT),
        "here": str(HERE),
        "examples": str(ROOT / "examples"),
        "in_checkout": (ROOT / "conftest.py").exists(),
    }
    return source.format(**common, **values)


def measure(names: list[str], folder: Path) -> dict[str, list[dict]]:
    results = {}
    for name in names:
        compiledir = folder / f"cache-{name}"
        script = folder / f"run_{name}.py"
        runs = [
            run_child(fill(CHILD, model=name), compiledir, script) for _ in range(2)
        ]
        if abs(runs[0]["value"] - runs[1]["value"]) > 1e-9 * abs(runs[0]["value"]):
            raise AssertionError(f"{name}: the two processes disagree: {runs}")
        results[name] = runs
        print(name, json.dumps(runs), flush=True)
    return results


def scaling_table(folder: Path) -> str:
    """Compile + first call against the number of wrapped calls, default vs JAX."""
    rows = []
    for n in SCALING_CALLS:
        runs = {}
        for label, mode in (("default", None), ("JAX", "JAX")):
            script = folder / f"scaling_{n}_{label}.py"
            runs[label] = run_child(
                fill(SCALING, n=n, mode=mode),
                folder / f"cache-scaling-{n}-{label}",
                script,
                env={"JAX_ENABLE_COMPILATION_CACHE": "false"},
            )
        if abs(runs["default"]["value"] - runs["JAX"]["value"]) > 1e-9:
            raise AssertionError(f"N={n}: default and JAX disagree: {runs}")
        ours, theirs = runs["default"], runs["JAX"]
        rows.append(
            [
                n,
                f"{ours['build']:.2f}",
                f"{ours['compile']:.2f}",
                f"{ours['first_call']:.2f}",
                f"{ours['total']:.2f}",
                f"{theirs['total']:.2f}",
                format_ratio(ours["total"] / theirs["total"]),
            ]
        )
        print("scaling", n, json.dumps(runs), flush=True)
    return markdown_table(
        [
            "wrapped calls",
            "build (s)",
            "compile (s)",
            "first call (s)",
            "build to value (s)",
            'mode="JAX" (s)',
            'x mode="JAX"',
        ],
        rows,
        numeric_from=1,
    )


def phase_table(results: dict[str, list[dict]]) -> str:
    rows = []
    for name, (first, second) in results.items():
        for label, run in (("1st", first), ("2nd", second)):
            rows.append(
                [f"{LABELS[name]}", label]
                + [f"{run[p]:.2f}" for p in PHASES]
                + [
                    format_ratio(second["total"] / first["total"])
                    if label == "2nd"
                    else ""
                ]
            )
    return markdown_table(
        ["model", "process", *(f"{p} (s)" for p in PHASES), "2nd / 1st"],
        rows,
        numeric_from=2,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the SIR models only")
    parser.add_argument("--no-sampling", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    names = RUNS["sir"] + ([] if args.quick else RUNS["seir"])
    import jax
    import pymc

    import pytensor

    header = machine_header(
        {
            "PyTensor": pytensor.__version__,
            "JAX": jax.__version__,
            "PyMC": pymc.__version__,
        }
    )
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        results = measure(names, folder)
        sections = [
            "# Cold start: fresh process to the first `logp_dlogp` value",
            "",
            f"`python benchmarks/cold_start.py{' --quick' if args.quick else ''}`; "
            "each model twice in a row, in fresh processes sharing a fresh "
            "`base_compiledir`. Seconds; `rewrite` and `link` from PyTensor's "
            "compile profile.",
            "",
            header,
            "",
            phase_table(results),
            "",
        ]
        ours, pure = results["sir"][1]["total"], results["sir_pytensor"][1]["total"]
        sections.append(
            f"SIR, second process: ours / pure PyTensor = {format_ratio(ours / pure)}; "
            f"ours / wrap_jax (first process) = "
            f"{format_ratio(results['sir'][0]['total'] / results['sir_wrap_jax'][0]['total'])}."
        )
        sections += [
            "",
            "Compile time against the number of wrapped calls (a chain of N "
            "calls, a PyTensor node between each, value and gradient; fresh "
            "process, cold caches, no persistent XLA cache; seconds from the "
            "graph's build to the first value):",
            "",
            scaling_table(folder),
        ]
        breakdown = run_child(
            fill(BREAKDOWN, model="sir"), folder / "cache-breakdown", folder / "b.py"
        )
        sections += [
            "",
            "Where a first process's graph build and compile go (SIR, as_jax_op; "
            "cumulative seconds under cProfile, which slows Python down, so read "
            "them as shares):",
            "",
            markdown_table(
                ["phase", "seconds"],
                [(label, f"{seconds:.2f}") for label, seconds in breakdown.items()],
            ),
        ]
        if not args.no_sampling:
            compiledir = folder / "cache-sample"
            script = folder / "sample.py"
            runs = [run_child(fill(SAMPLE), compiledir, script) for _ in range(2)]
            sections += [
                "",
                'Wall time of `pm.sample(nuts_sampler="pymc", chains=2, cores=2, '
                'mp_ctx="forkserver")`, 50 tuning + 50 draws, SIR model (whole '
                f"script): first run {runs[0]['total']:.1f} s, second run "
                f"{runs[1]['total']:.1f} s.",
            ]
    text = "\n".join(sections) + "\n"
    print(text)
    output = args.output or HERE / "results" / "cold_start.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
