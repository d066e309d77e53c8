"""Cold start: fresh processes, their first and second run, and compile-time scaling.

PyTensor caches compiled Numba code under its ``compiledir``; this package
makes graphs holding its ops cacheable there too, puts JAX's persistent
compilation cache next to it, and keeps the traces of wrapped functions
there (the trace cache). Every run below is a fresh process, run twice in a
row with a fresh, shared ``base_compiledir`` (the second run is what every
notebook restart, script run and sampler worker pays):

1. **Stan's SIR case study through nutpie** (``pm.sample()``'s path): imports,
   build, ``nutpie.compile_pymc_model``, the first draw, 4 chains of 1000 +
   1000; ours with equinox's default (raising) checks, whose programs are
   cached with each check turned into a flag, ours with
   ``EQX_ON_ERROR=nan``, and the same model in pure PyTensor (scan RK4),
   whose difference is our start-up overhead.
2. **The first ``logp_dlogp`` value** of each model, by phase: imports, build
   (for ours: wrapping, i.e. shape traces), PyTensor's rewrites and link
   (Numba compiling or loading), the first call (JAX traces and XLA compiles,
   or loads); with ``as_jax_op``, ``mode="JAX"``, ``pytensor.wrap_jax`` and
   pure PyTensor. ``sir``: the islands benchmark's SIR model; ``seir``: the
   main job's.
3. **Compile time against the number of wrapped calls** (32, 64, 128 chained
   calls), default linker against ``mode="JAX"``, cold caches.
4. Where a first process's build and compile go (cProfile shares), and the
   wall time of a short ``pm.sample(nuts_sampler="pymc", cores=2)`` run.

Run::

    .venv/bin/python benchmarks/cold_start.py                # ~20 minutes
    .venv/bin/python benchmarks/cold_start.py --quick        # no SEIR
    .venv/bin/python benchmarks/cold_start.py --only nutpie  # one section

Results are printed and written to ``benchmarks/results/cold_start.md``
(``--only S``: ``cold_start_S.md``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _processes import IN_CHECKOUT, run_python  # noqa: E402
from _timing import format_ratio, machine_header, markdown_table  # noqa: E402


#: The first lines of every script below: ``start`` is its first line's time,
#: and it imports the checkout's modules (the benchmarks', the examples').
PREAMBLE = f"""
import json
import time
start = time.perf_counter()
import sys
sys.path[:0] = [{str(ROOT)!r}, {str(HERE)!r}, {str(ROOT / "examples")!r}]
if {IN_CHECKOUT!r}:
    import conftest  # the checkout's modules
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

SAMPLE = """
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
    (
        "as_jax_op, EQX_ON_ERROR=nan",
        "boarding_school",
        {"EQX_ON_ERROR": "nan"},
    ),
    ("pure PyTensor (scan RK4, dt = 0.05 day)", "boarding_school_pytensor", {}),
]

NUTPIE_PHASES = ["imports", "build", "compile", "first_draw", "to_first_draw", "total"]


def nutpie_startup_table(folder: Path, repeats: int) -> tuple[str, dict]:
    """The case study through nutpie: a cold compiledir, then second processes.

    The cold process of each model first, then ``repeats`` rounds of second
    processes, one per model in each round (interleaved, so that a noisy
    minute hits every model); the table gives each phase's median.
    """
    runs: dict[str, list[dict]] = {}
    for index, (label, model, env) in enumerate(NUTPIE_RUNS):
        runs[label] = [nutpie_child(folder, index, model, env)]
    for _ in range(repeats):
        for index, (label, model, env) in enumerate(NUTPIE_RUNS):
            runs[label].append(nutpie_child(folder, index, model, env))
    for label, model_runs in runs.items():
        print("nutpie", label, json.dumps(model_runs), flush=True)
    results = {
        label: [cold, {p: statistics.median(r[p] for r in seconds) for p in cold}]
        for label, (cold, *seconds) in runs.items()
    }
    pure = results[NUTPIE_RUNS[-1][0]]
    rows = []
    for label, runs in results.items():
        for process, run, reference in zip(
            ("cold", f"second (median of {repeats})"), runs, pure
        ):
            over = run["to_first_draw"] - reference["to_first_draw"]
            over_after_imports = over - (run["imports"] - reference["imports"])
            rows.append(
                [label, process]
                + [f"{run[p]:.2f}" for p in NUTPIE_PHASES]
                + [f"{over:+.2f}", f"{over_after_imports:+.2f}"]
            )
    table = markdown_table(
        [
            "model",
            "process",
            *(f"{p} (s)" for p in NUTPIE_PHASES),
            "over pure, to first draw (s)",
            "same, imports aside (s)",
        ],
        rows,
        numeric_from=2,
    )
    return table, results


def nutpie_child(folder: Path, index: int, model: str, env: dict) -> dict:
    """One process of the nutpie section, sharing the compiledir of its model."""
    script = folder / f"nutpie_{index}.py"
    compiledir = folder / f"cache-nutpie-{index}"
    return run_child(fill(NUTPIE, model=model), compiledir, script, env=env)


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


def fill(source: str, **values) -> str:
    """A script: :data:`PREAMBLE`, then ``source`` with ``values`` filled in."""
    return PREAMBLE + textwrap.dedent(source).format(**values)


def measure(runs: list[tuple[str, str | None]], folder: Path) -> dict[str, list[dict]]:
    results = {}
    for name, mode in runs:
        tag = f"{name}-{mode or 'default'}"
        compiledir = folder / f"cache-{tag}"
        script = folder / f"run_{tag}.py"
        pair = [
            run_child(fill(CHILD, model=name, mode=mode), compiledir, script)
            for _ in range(2)
        ]
        if abs(pair[0]["value"] - pair[1]["value"]) > 1e-9 * abs(pair[0]["value"]):
            raise AssertionError(f"{tag}: the two processes disagree: {pair}")
        results[label(name, mode)] = pair
        print(tag, json.dumps(pair), flush=True)
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
                [name, label]
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
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    wanted = {args.only} if args.only else set(SECTIONS)
    if args.no_nutpie:
        wanted.discard("nutpie")
    runs = RUNS["sir"] + ([] if args.quick else RUNS["seir"])
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
        sections = [
            "# Cold start: fresh processes, first and second run",
            "",
            f"`python benchmarks/cold_start.py{' '.join(['', *(argv or sys.argv[1:])])}`; "
            "each run twice in a row, in fresh processes sharing a fresh "
            "`base_compiledir` (the second is what every notebook restart, "
            "script run and worker pays). Seconds.",
            "",
            header,
            "",
        ]
        if "nutpie" in wanted:
            table, _ = nutpie_startup_table(folder, args.repeats)
            sections += [
                "## Stan's SIR case study through nutpie (`pm.sample()`)",
                "",
                "From the script's first line: imports, the model's build, "
                "`nutpie.compile_pymc_model`, the first draw (one chain, one "
                "step), then 4 chains of 1000 + 1000 (`total`); a cold "
                f"process, then the median of {args.repeats} second processes "
                "(interleaved rounds). The last two "
                "columns: time to the first draw over the pure-PyTensor "
                "model's in the same kind of process, and the same without "
                "the difference in imports (JAX, diffrax, equinox: the "
                "model's own, which the pure model does not import).",
                "",
                table,
                "",
            ]
        if "first_value" in wanted:
            results = measure(runs, folder)
            sections += [
                "## Fresh process to the first `logp_dlogp` value",
                "",
                "`rewrite` and `link` from PyTensor's compile profile; "
                '`mode="JAX"` compiles the model frozen with '
                "`freeze_dims_and_data`, as numpyro and nutpie's JAX backend do.",
                "",
                phase_table(results),
                "",
            ]
            ours = results[label("sir", None)]
            pure = results[label("sir_pytensor", None)]
            wrap = results[label("sir_wrap_jax", None)]
            sections.append(
                "SIR, second process: ours / pure PyTensor = "
                f"{format_ratio(ours[1]['total'] / pure[1]['total'])}; ours / "
                "wrap_jax (first process) = "
                f"{format_ratio(ours[0]['total'] / wrap[0]['total'])}."
            )
        if "scaling" in wanted:
            sections += [
                "",
                "## Compile time against the number of wrapped calls",
                "",
                "A chain of N calls, a PyTensor node between each, value and "
                "gradient; fresh process, cold caches, no persistent XLA cache; "
                "seconds from the graph's build to the first value:",
                "",
                scaling_table(folder),
            ]
        if "first_value" in wanted:
            breakdown = run_child(
                fill(BREAKDOWN, model="sir"),
                folder / "cache-breakdown",
                folder / "b.py",
            )
            sections += [
                "",
                "## Where a first process's build and compile go",
                "",
                "SIR, as_jax_op; "
                "cumulative seconds under cProfile, which slows Python down, so read "
                "them as shares):",
                "",
                markdown_table(
                    ["phase", "seconds"],
                    [(label, f"{seconds:.2f}") for label, seconds in breakdown.items()],
                ),
            ]
        if "first_value" in wanted and not args.no_sampling:
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
    name = f"cold_start_{args.only}" if args.only else "cold_start"
    output = args.output or HERE / "results" / f"{name}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
