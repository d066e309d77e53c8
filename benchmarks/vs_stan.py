"""PyMC + JAX against Stan: the boarding-school SIR case study along every route.

The model of Stan's case study "Bayesian workflow for disease transmission
modeling in Stan" (``examples/boarding_school_sir.py``), 4 chains of 1000 +
1000 along each route a modeller would pick (:data:`ROUTES`: ``as_jax_op``
with nutpie, PyMC's NUTS and numpyro; ``pytensor.wrap_jax``; ``pm.ode``;
Stan through PyStan 3), each in fresh processes (``_vs_stan_child.py``):
**cold**, with fresh caches, then **second processes** sharing them (three by
default; the tables give their medians). The diffrax routes run with
diffrax's default step budget and with Stan's. Every posterior is checked
against Stan's reference posterior (a last, untimed Stan process: 4 chains of
1000 + 10000). What each column means, and the settings that make the
comparison fair: the report's text, ``texts/vs_stan.md``.

Run (PyStan 3 from the project's ``stan`` extra; it builds with the machine's
C++ compiler)::

    .venv/bin/python benchmarks/vs_stan.py                  # everything, ~1.5 hours
    .venv/bin/python benchmarks/vs_stan.py --repeats 1      # one second process, ~45 min
    .venv/bin/python benchmarks/vs_stan.py --routes ours_nutpie,stan
    .venv/bin/python benchmarks/vs_stan.py --quick          # 2 chains x (200 + 200)
    .venv/bin/python benchmarks/vs_stan.py --report         # tables from stored runs

Runs are stored one by one in ``benchmarks/results/vs_stan.json`` (a run
already stored is not run again unless ``--force``: an interrupted run
resumes); the tables go to ``vs_stan.md`` (``--quick``: ``vs_stan_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import _report
import _room  # noqa: F401  (the checkout's modules; the examples')
from _boarding_school_report import Reference, agrees
from _chains import at_once
from _processes import ChildFailed, cache_env, run_python
from _report import fill, machine_header, package_versions
from _timing import median


CHILD = Path(__file__).resolve().parent / "_vs_stan_child.py"
PARAMETERS = ["beta", "gamma", "phi_inv", "R0", "recovery_time"]
DIFFRAX_DEFAULT, STAN_BUDGET = 4096, 10**6
#: The long Stan run every posterior is checked against.
REFERENCE = f"stan|{STAN_BUDGET}|reference"


@dataclass(frozen=True)
class Route:
    """A way to fit the model, and what it compiles where."""

    label: str
    compiled: str
    budgets: tuple[int, ...] = (DIFFRAX_DEFAULT, STAN_BUDGET)


ROUTES = {
    "ours_nutpie": Route(
        "`as_jax_op`, `pm.sample()` (nutpie)",
        "model in Numba, the solve, its VJP and the likelihood one XLA program "
        "(JAX island); NUTS in nutpie (Rust), chains in threads",
    ),
    "ours_pymc": Route(
        '`as_jax_op`, `pm.sample(nuts_sampler="pymc")`',
        "as above; NUTS in Python, chains in worker processes (forkserver, "
        "PyMC's default cores), each loading the compiled model",
    ),
    "ours_numpyro": Route(
        '`as_jax_op`, `pm.sample(nuts_sampler="numpyro")`',
        "model, solve and NUTS one XLA program (compiled in the sampling phase); "
        "chains in sequence",
    ),
    "wrap_jax_nutpie": Route(
        "`pytensor.wrap_jax`, `pm.sample()` (nutpie)",
        "model in Numba; the solve and its VJP two XLA programs called in "
        "Numba's object mode; no XLA cache on disk",
    ),
    "pm_ode": Route(
        "`pm.ode.DifferentialEquation`, `pm.sample()` (nutpie)",
        "model in Numba; SciPy's LSODA (Fortran) with forward sensitivities, "
        "calling a compiled PyTensor vector field from Python at each step, "
        "in Numba's object mode",
        budgets=(0,),
    ),
    "stan": Route(
        "Stan (`ode_rk45`), PyStan 3",
        "the whole model and NUTS in C++ (stanc, then g++); chains in 4 processes",
        budgets=(STAN_BUDGET,),
    ),
}
PROCESSES = ("cold", "second")


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_child(
    route: str,
    max_steps: int,
    cache: Path,
    settings: argparse.Namespace,
    draws: int | None = None,
) -> dict:
    """Run one route in a fresh process with its caches in ``cache``; never raise."""
    command = [
        CHILD,
        route,
        f"--max-steps={max_steps or DIFFRAX_DEFAULT}",
        f"--draws={draws or settings.draws}",
        f"--tune={settings.tune}",
        f"--chains={settings.chains}",
        f"--seed={settings.seed}",
    ]
    try:
        done = run_python(
            command, env=cache_env(cache), cwd=cache, timeout=settings.timeout
        )
    except ChildFailed as error:
        return {"error": str(error)}
    result, phases = done.result, done.result["phases"]
    phases["startup"] = result.pop("started_at") - done.started_at
    phases["whole"] = phases["startup"] + phases["fit"]
    phases["process"] = done.seconds
    return result


def run_interleaved(
    pairs: list[tuple[str, int]], settings: argparse.Namespace, store: dict, name: str
) -> None:
    """The routes' runs, round by round: every route's cold process, then each
    round of second processes (and Stan's reference last), each route in caches
    of its own that its cold process fills; stored as they end.

    Interleaved, so that the machine's drift within the hour falls on every
    route alike. A route whose run fails runs no more.
    """
    with tempfile.TemporaryDirectory(prefix="vs_stan-") as folder:
        keys = {pair: keys_of(*pair, settings) for pair in pairs}
        failed: set[tuple[str, int]] = set()
        for turn in range(max(len(k) for k in keys.values())):
            for pair in pairs:
                if pair in failed or turn >= len(keys[pair]):
                    continue
                key = keys[pair][turn]
                print(f"--- {key}", flush=True)
                draws = settings.reference_draws if key.endswith("|reference") else None
                cache = Path(folder) / f"{pair[0]}-{pair[1]}"
                cache.mkdir(exist_ok=True)
                store[key] = run_child(*pair, cache, settings, draws)
                save(store, name)
                print(describe(store[key]), flush=True)
                if "error" in store[key]:
                    failed.add(pair)


def key_of(route: str, max_steps: int, process: str, repeat: int = 0) -> str:
    suffix = f"#{repeat + 1}" if process == "second" else ""
    return f"{route}|{max_steps}|{process}{suffix}"


def keys_of(route: str, max_steps: int, settings: argparse.Namespace) -> list[str]:
    """The runs of one route and budget, in the order they run."""
    keys = [key_of(route, max_steps, "cold")]
    keys += [key_of(route, max_steps, "second", i) for i in range(settings.repeats)]
    if route == "stan":
        keys.append(REFERENCE)
    return keys


def describe(result: dict) -> str:
    if "error" in result:
        return "failed: " + result["error"].splitlines()[-1]
    phases, summary = result["phases"], result["summary"]
    means = ", ".join(f"{n} {summary[n]['mean']:.4g}" for n in PARAMETERS)
    return (
        f"whole {phases['whole']:.1f} s (compile {phases['compile']:.1f}, sampling "
        f"{phases['sampling']:.1f}), min ESS {min_ess(result):.0f}, "
        f"{result['divergences']} divergent; {means}"
    )


def save(store: dict, name: str) -> None:
    """Store the runs, and the machine they ran on."""
    store["meta"] = {"machine": machine_header(versions())}
    _report.save(name, store, sort_keys=True)


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def min_ess(result: dict) -> float:
    return min(result["summary"][n]["ess_bulk"] for n in PARAMETERS)


def max_r_hat(result: dict) -> float:
    return max(result["summary"][n]["r_hat"] for n in PARAMETERS)


def stan_reference(store: dict) -> tuple[str, dict[str, Reference]] | None:
    """Stan's posterior: its long reference run, else its cached build, else its first."""
    for key in (
        REFERENCE,
        key_of("stan", STAN_BUDGET, "second"),
        key_of("stan", STAN_BUDGET, "cold"),
    ):
        result = store.get(key, {})
        if "summary" in result:
            return key, {
                n: Reference(s["mean"], s["sd"], s["mcse_mean"])
                for n, s in result["summary"].items()
            }
    return None


def disagreements(result: dict, reference: dict[str, Reference]) -> list[str]:
    """The parameters whose mean does not agree with Stan's."""
    return [
        name
        for name in PARAMETERS
        if not agrees(
            result["summary"][name]["mean"],
            result["summary"][name]["mcse_mean"],
            reference[name],
        )
    ]


def budget_label(route: str, max_steps: int) -> str:
    if route == "pm_ode":
        return "odeint's (500 per output)"
    return (
        f"{max_steps:.0e}".replace("e+0", "e") if max_steps >= 10**5 else str(max_steps)
    )


def runs_of(store: dict, route: str, max_steps: int) -> tuple[dict | None, list[dict]]:
    """The cold run and the second-process runs of one route and budget."""
    cold = store.get(key_of(route, max_steps, "cold"))
    prefix = key_of(route, max_steps, "second", 0)[:-1]
    seconds = [v for k, v in sorted(store.items()) if k.startswith(prefix)]
    return cold, seconds


def median_phase(runs: list[dict], phase: str) -> float:
    return median([r["phases"][phase] for r in runs if "phases" in r])


def report(store: dict, settings: argparse.Namespace) -> str:
    """The markdown tables of every stored run."""
    text = _report.texts("vs_stan")
    reference = stan_reference(store)
    stan_cold, stan_seconds = runs_of(store, "stan", STAN_BUDGET)
    stan_whole = {
        "cold": median_phase([stan_cold or {}], "whole"),
        "second": median_phase(stan_seconds, "whole"),
    }
    rows, posterior_rows, compiled_rows = every_run(store, reference, stan_whole)
    timed = [r for k, r in store.items() if "summary" in r and k != REFERENCE]
    settings_seen = sorted({(r["chains"], r["tune"], r["draws"]) for r in timed})
    summary = summary_rows(store, reference, stan_whole["second"])
    sections = [
        fill(
            text["intro"],
            quick=" --quick" if settings.quick else "",
            settings=", ".join(map(str, settings_seen)),
            machine=machine_line(store, timed),
        ),
        fill(text["summary"], summary, repeats=repeats_text(store)),
        fill(text["every_run"], rows, reference=reference_text(store, reference)),
        text["fair"],
        fill(text["compiled"], compiled_rows),
        fill(text["posterior"], posterior_rows),
    ]
    return "\n\n".join(sections) + "\n"


def every_run(store: dict, reference, stan_whole: dict) -> tuple[list, list, list]:
    """The rows of the tables of every run, of the posteriors and of what is compiled."""
    rows, posterior_rows, compiled_rows = [], [], []
    for name, route in ROUTES.items():
        fitted = []  # (labels, run) of every successful run of the route
        for budget in route.budgets:
            cold, seconds = runs_of(store, name, budget)
            if cold is None:
                continue
            compiled_rows.append((route.label, route.compiled))
            for process, runs in (("cold", [cold]), ("second", seconds)):
                if not runs:
                    continue
                labels = [route.label, budget_label(name, budget), process]
                failed = [r["error"] for r in runs if "error" in r]
                if failed:
                    reason = failed[0].strip().splitlines()[-1][:200]
                    rows.append([*labels, f"failed: {reason}"] + [""] * 9)
                    continue
                rows.append(timing_row(labels, runs, reference, stan_whole[process]))
                fitted += [(labels, run) for run in runs]
        posterior_rows += posterior_rows_of(fitted)
    if REFERENCE in store and "summary" in store[REFERENCE]:
        long = store[REFERENCE]
        what = f"Stan, reference: {long['chains']} x ({long['tune']} + {long['draws']})"
        stan = budget_label("stan", STAN_BUDGET)
        posterior_rows.append([what, stan, "second", *posterior_cells(long)])
    return rows, posterior_rows, list(dict.fromkeys(compiled_rows))


def machine_line(store: dict, timed: list[dict]) -> str:
    """The machine the runs were stored on (this one's, for runs stored without),
    and the range of its load while they ran."""
    loads = [load for r in timed for load in r.get("load_average", [])]
    load_range = f"{min(loads):.1f} to {max(loads):.1f}" if loads else "n/a"
    machine = store.get("meta", {}).get("machine") or machine_header(versions())
    return (
        f"{machine}; 1-minute load average at the start and end of the runs: "
        f"{load_range} (a fit's own processes count: on two cores, about 2)."
    )


def reference_text(store: dict, reference) -> str:
    if not reference:
        return "none stored"
    key, _ = reference
    run = store[key]
    return (
        f"`{key}`: {run['chains']} chains of {run['tune']} tuning steps + "
        f"{run['draws']} draws, sampled in {run['phases']['sampling']:.0f} s "
        "with the cached build"
    )


def repeats_text(store: dict) -> str:
    """How many second processes each route and budget ran (e.g. "3")."""
    counts = {
        len(runs_of(store, name, budget)[1])
        for name, route in ROUTES.items()
        for budget in route.budgets
        if runs_of(store, name, budget)[0]
    }
    return " or ".join(map(str, sorted(counts))) or "0"


def summary_rows(store: dict, reference, stan_whole: float) -> list[list[str]]:
    """One row per route and budget: first and later processes, against Stan."""
    rows = []
    for name, route in ROUTES.items():
        for budget in route.budgets:
            cold, seconds = runs_of(store, name, budget)
            runs = [cold, *seconds] if cold else []
            if not runs:
                continue
            labels = [route.label, budget_label(name, budget)]
            failed = [r["error"] for r in runs if "error" in r]
            if failed or not seconds:
                reason = failed[0].strip().splitlines()[-1][:120] if failed else ""
                rows.append([*labels, f"failed: {reason}", *[""] * 6])
                continue
            later = median_phase(seconds, "whole")
            first, again = f"{cold['phases']['whole']:.0f} s", f"{later:.0f} s"
            if name == "stan":
                first, again = f"{first} (first build)", f"{again} (cached build)"
            disagree = disagreements(cold, reference[1]) if reference else ["?"]
            wholes = [r["phases"]["whole"] for r in seconds]
            rows.append([*labels, at_once(runs), first, again])
            rows[-1] += [_report.span(wholes, "{:.0f}"), f"{later / stan_whole:.2f}"]
            rows[-1].append(f"{min_ess(cold) / later:.0f}")
            rows[-1].append("yes" if not disagree else "NO: " + ", ".join(disagree))
    return rows


def timing_row(
    labels: list[str],
    runs: list[dict],
    reference: tuple[str, dict[str, Reference]] | None,
    stan_whole: float,
) -> list[str]:
    """One row of the main table: medians over ``runs``, the posterior of the first."""
    whole = median_phase(runs, "whole")
    run = runs[0]
    disagree = disagreements(run, reference[1]) if reference else ["no reference"]
    if len(runs) > 1:
        labels = [*labels[:2], f"{labels[2]} (median of {len(runs)})"]
    return [
        *labels,
        at_once(runs),
        f"{whole:.1f}",
        f"{whole / stan_whole:.2f}",
        f"{median_phase(runs, 'compile'):.1f}",
        f"{median_phase(runs, 'sampling'):.1f}",
        f"{min_ess(run):.0f}",
        f"{min_ess(run) / whole:.0f}",
        f"{max_r_hat(run):.3f}",
        str(run["divergences"]),
        "yes" if not disagree else "NO: " + ", ".join(disagree),
    ]


def posterior_rows_of(fitted: list[tuple[list[str], dict]]) -> list[list[str]]:
    """Posterior rows of one route: one row when every run drew the same posterior.

    With one seed, a route's processes and step budgets draw the same chains
    unless a solve ran out of steps under one budget and not the other.
    """
    if not fitted:
        return []
    summaries = [json.dumps(run["summary"], sort_keys=True) for _, run in fitted]
    if len(set(summaries)) == 1:
        labels, run = fitted[0]
        every = f"all {len(fitted)} runs (identical)" if len(fitted) > 1 else labels[2]
        budgets = list(dict.fromkeys(labels[1] for labels, _ in fitted))
        return [[labels[0], ", ".join(budgets), every, *posterior_cells(run)]]
    return [[*labels, *posterior_cells(run)] for labels, run in fitted]


def posterior_cells(run: dict) -> list[str]:
    return [
        f"{s['mean']:.4f} ± {s['sd']:.4f} ({s['mcse_mean']:.4f})"
        for s in (run["summary"][n] for n in PARAMETERS)
    ]


def versions() -> dict[str, str]:
    names = ["pymc", "pytensor", "jax", "diffrax", "nutpie", "numpyro", "pystan"]
    found = package_versions({name: name for name in [*names, "httpstan"]})
    try:
        compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True)
        found["g++"] = compiler.stdout.split("\n")[0].split()[-1]
    except OSError:
        pass
    return found


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--routes",
        default=",".join(ROUTES),
        help=f"comma-separated, from {','.join(ROUTES)} (default: all)",
    )
    parser.add_argument(
        "--max-steps",
        default=None,
        help=f"comma-separated budgets of the diffrax routes (default "
        f"{DIFFRAX_DEFAULT},{STAN_BUDGET})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 chains of 200 + 200, into vs_stan_quick.*",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="second processes per route and budget (default 3; the table "
        "gives their medians)",
    )
    parser.add_argument("--force", action="store_true", help="re-run stored runs")
    parser.add_argument("--report", action="store_true", help="only write the tables")
    parser.add_argument("--seed", type=int, default=1978)
    parser.add_argument(
        "--reference-draws",
        type=int,
        default=None,
        help="draws per chain of Stan's reference run (default 10000; quick: 1000)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds per process"
    )
    settings = parser.parse_args(argv)
    settings.chains, settings.tune, settings.draws = (
        (2, 200, 200) if settings.quick else (4, 1000, 1000)
    )
    if settings.reference_draws is None:
        settings.reference_draws = 1000 if settings.quick else 10_000
    chosen = [r.strip() for r in settings.routes.split(",") if r.strip()]
    unknown = sorted(set(chosen) - set(ROUTES))
    if unknown:
        parser.error(f"unknown route(s) {unknown}; choose from {list(ROUTES)}")
    settings.routes = chosen
    settings.budgets = (
        [int(float(b)) for b in settings.max_steps.split(",")]
        if settings.max_steps
        else None
    )
    return settings


def main(argv=None) -> None:
    settings = parse_args(argv)
    name = "vs_stan_quick" if settings.quick else "vs_stan"
    store = _report.load(name, {})
    pairs = []
    for route in [] if settings.report else settings.routes:
        for budget in ROUTES[route].budgets:
            if settings.budgets and budget and budget not in settings.budgets:
                continue
            runs = [store.get(key) for key in keys_of(route, budget, settings)]
            done = all(run is not None and "error" not in run for run in runs)
            if done and not settings.force:
                print(f"--- {route}|{budget}: stored, skipped (--force runs it again)")
                continue
            pairs.append((route, budget))
    if pairs:
        run_interleaved(pairs, settings, store, name)
    _report.write(name, report(store, settings))


if __name__ == "__main__":
    main()
