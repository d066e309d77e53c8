"""Every figure and table the documentation and the README state, by name.

No timing, ratio or count of a measurement is typed into a page: a page names
a figure (``:result:`sir.ours.later``` in reStructuredText,
``{result}`sir.ours.later``` in MyST) or a table (``.. results-table::
sir``), and the build renders it from ``benchmarks/results/`` through the
functions here (:mod:`results_sphinx` is the Sphinx side). The README's
figures sit between ``<!-- results:NAME -->`` markers and are written by
``python doc/_ext/figures.py --readme`` (``--check`` only compares).

Which key of which results file a figure reads is said once, in
:mod:`result_keys`; this module formats and arranges them.

>>> FIGURES["sir.setup"]()
'4 chains of 1000 + 1000'
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import result_keys as q
from stored_results import StoredTable, stored_table


README = Path(__file__).resolve().parents[2] / "README.md"


# ------------------------------------------------------------------ formats
def seconds(value: float) -> str:
    """Seconds, as a reader compares them: ``13 s``, ``4.2 s``, ``0.15 s``."""
    if value >= 10:
        return f"{value:.0f} s"
    return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"


def per_call(value: float, unit: str) -> str:
    """A per-call time in ``unit`` (``us``, ``ms``), three significant digits."""
    scaled = value * {"us": 1e6, "ms": 1e3}[unit]
    digits = 0 if scaled >= 100 else 1 if scaled >= 10 else 2
    return f"{scaled:.{digits}f} {'µs' if unit == 'us' else unit}"


def ratio(value: float) -> str:
    """A ratio: ``0.33×``."""
    return f"{value:.2f}×"


def ratio_range(values: list[float]) -> str:
    """The smallest and largest of some ratios: ``1.03-1.28×``."""
    return f"{min(values):.2f}-{max(values):.2f}×"


def seconds_fine(value: float) -> str:
    """Seconds to a tenth (spreads of whole fits): ``12.8 s``."""
    return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"


def spread(values: list[float], unit: Callable[[float], str] = seconds_fine) -> str:
    """The range of repeated measurements: ``12-14 s`` (one: ``one run``)."""
    if len(values) < 2:
        return "one run"
    low, high = unit(min(values)), unit(max(values))
    number, _, suffix = low.partition(" ")
    return f"{number}-{high}" if high.endswith(" " + suffix) else f"{low}-{high}"


def percent(value: float) -> str:
    return f"{100 * value:.0f}%"


# ------------------------------------------------------------------- tables
def table(header: list[str], rows: list[list[str]], text_columns: int = 1):
    """A rendered table: the first ``text_columns`` left-aligned, the rest right."""
    align = [i >= text_columns for i in range(len(header))]
    return StoredTable(header, align, rows)


def sir_table() -> StoredTable:
    """Stan's SIR case study along every route: first and later processes."""
    stan = q.sir_median("stan", q.STAN_BUDGET)
    rows = []
    for route, budget in q.sir_routes():
        cold, later = q.sir_runs(route, budget)
        wholes = [q.whole(run) for run in later]
        first = seconds_fine(q.whole(cold)) if cold else "not run"
        rows.append(
            [
                q.SIR_ROUTES.get(route, route),
                q.budget_label(budget),
                first + (" (first build)" if route == "stan" and cold else ""),
                seconds_fine(q.sir_median(route, budget)),
                spread(wholes),
                ratio(q.sir_median(route, budget) / stan),
                f"{q.median([q.ess_per_second(run) for run in later]):.0f}",
                "yes" if q.sir_agrees(route, budget) else "no",
            ]
        )
    header = [
        "route",
        "max_steps",
        "1st process",
        "later processes",
        "spread",
        "× Stan",
        "ESS/s",
        "agrees with Stan",
    ]
    return table(header, rows, text_columns=2)


def small_ode_table() -> StoredTable:
    """Predator-prey and stiff PK, every route, whole fits with warm caches."""
    rows = []
    for model in q.small_ode_models():
        stan = q.median(q.whole(run) for run in q.fits(model, "stan"))
        for number, route in enumerate(q.fit_routes(model)):
            runs = q.fits(model, route)
            wholes = [q.whole(run) for run in runs]
            rows.append(
                [
                    "" if number else q.MODELS.get(model, model),
                    q.FIT_ROUTES.get(route, route),
                    seconds_fine(q.median(wholes)),
                    spread(wholes),
                    ratio(q.median(wholes) / stan),
                    f"{q.median(q.min_ess(run) for run in runs):.0f}",
                    f"{max(q.max_r_hat(run) for run in runs):.3f}",
                    f"{q.median(run['gradients per draw'] for run in runs):.1f}",
                    str(sum(run["divergences"] for run in runs)),
                    "yes" if q.fit_agrees(model, route) else "no",
                ]
            )
    header = [
        "model",
        "route",
        "whole fit",
        "spread",
        "× Stan",
        "min bulk ESS",
        "worst R-hat",
        "gradients per draw",
        "divergences",
        "agrees with Stan",
    ]
    return table(header, rows, text_columns=2)


def per_call_table() -> StoredTable:
    """One wrapped function's call against the direct jitted call and wrap_jax."""
    rows = []
    for case in q.speed_cases():
        unit, first = case["unit"], True
        for task, linker in q.speed_rows(case):
            direct = q.call(case, task, "direct jax.jit")
            ours = q.call(case, task, f"as_jax_op | {linker}")
            theirs = q.call(case, task, f"wrap_jax | {linker}")
            spreads = [q.iqr_over_median(c) for c in (direct, ours, theirs) if c]
            rows.append(
                [
                    q.speed_label(case) if first else "",
                    task,
                    q.LINKERS.get(linker, linker),
                    per_call(direct["median"], unit),
                    per_call(ours["median"], unit),
                    ratio(ours["median"] / direct["median"]),
                    per_call(theirs["median"], unit) if theirs else "not run",
                    ratio(theirs["median"] / direct["median"]) if theirs else "",
                    percent(max(spreads)),
                ]
            )
            first = False
    header = [
        "function",
        "task",
        "linker",
        "direct",
        "`as_jax_op`",
        "× direct",
        "`wrap_jax`",
        "× direct",
        "spread",
    ]
    return table(header, rows, text_columns=3)


def islands_table() -> StoredTable:
    """``logp_dlogp`` per call of three PyMC models, each linker."""
    models = q.ISLAND_MODELS
    rows = []
    for linker, label in q.ISLAND_LINKERS.items():
        row = [label]
        for model in models:
            found = q.island_table(model)
            row += [
                f"{found.cell(linker, 'ms per call')} ms "
                f"({found.cell(linker, 'spread')})",
                found.cell(linker, 'x mode="JAX"') + "×",
            ]
        rows.append(row)
    header = ["ms per `logp_dlogp` call (spread)"]
    for label in models.values():
        header += [label, '× `mode="JAX"`']
    return table(header, rows)


def trace_cache_table() -> StoredTable:
    """``logp_dlogp`` per call in the default linker, the trace cache on and off."""
    rows = []
    for model, label in q.ISLAND_MODELS.items():
        found = q.island_table(model)
        rows.append(
            [
                label,
                f"{found.cell('default, islands', 'ms per call')} ms",
                f"{found.cell(q.CACHE_OFF, 'ms per call')} ms",
                ratio(q.trace_cache_ratio(model)),
            ]
        )
    header = ["model", "trace cache on", "trace cache off", "on / off"]
    return table(header, rows)


def start_up_table() -> StoredTable:
    """Stan's case study through nutpie: a first process and a later one."""
    rows = []
    for variant, label in q.START_UP_VARIANTS.items():
        first, later = q.start_up(variant)
        rows.append(
            [
                label,
                seconds(first["to_first_draw"]),
                seconds(later["to_first_draw"]),
                seconds(first["total"]),
                seconds(later["total"]),
            ]
        )
    header = [
        "case study, `pm.sample()` (nutpie)",
        "first process: to the first draw",
        "later: to the first draw",
        "first process: whole fit",
        "later: whole fit",
    ]
    return table(header, rows)


def default_route_table() -> StoredTable:
    """nutpie's default adaptation against Stan's rule, over seeds."""
    rows: list[list[str]] = []
    for model, setting in q.adaptation_settings():
        label = q.MODELS.get(model, model)
        fits = q.adaptation_fits(model, setting)
        converged = [fit for fit in fits if q.converged(fit)]
        rows.append(
            [
                "" if rows and label in (row[0] for row in rows) else label,
                q.ADAPTATIONS.get(setting, setting),
                f"{len(converged)} of {len(fits)}",
                f"{max(fit['rhat'] for fit in fits):.3f}",
                f"{q.median(fit['ess'] for fit in fits):.0f}",
                f"{q.median(fit['gradients_per_draw'] for fit in fits):.1f}",
                str(sum(fit["divergences"] for fit in fits)),
            ]
        )
    header = [
        "model",
        "adaptation",
        "converged",
        "worst R-hat",
        "median min bulk ESS",
        "gradients / draw",
        "divergences",
    ]
    return table(header, rows, text_columns=2)


def headline_table() -> StoredTable:
    """The README's table: each model's whole fit, ours, wrap_jax's and Stan's."""

    def cell(value: float | None, stan: float) -> str:
        return f"{seconds(value)} ({ratio(value / stan)})" if value else ""

    rows = [
        [q.HEADLINE_MODELS[model], cell(ours, stan), cell(theirs, stan), seconds(stan)]
        for model, (ours, theirs, stan) in q.headline().items()
    ]
    header = [
        "ODE model (Stan case study)",
        "`as_jax_op`",
        "`pytensor.wrap_jax`",
        "Stan",
    ]
    return table(header, rows)


def stored(name: str, heading: str, index: int = 0) -> Callable[[], StoredTable]:
    """A table as a benchmark's own report renders it."""
    return lambda: stored_table(name, heading, index)


TABLES: dict[str, Callable[[], StoredTable]] = {
    "headline": headline_table,
    "sir": sir_table,
    "small_odes": small_ode_table,
    "per_call": per_call_table,
    "islands": islands_table,
    "islands.trace_cache": trace_cache_table,
    "start_up": start_up_table,
    "default_route": default_route_table,
    "small_odes.start_up": stored("small_odes", "Start-up of a second process"),
    "small_odes.owners": stored("small_odes", "Whose code a second process runs"),
    "small_odes.two_chains": stored("small_odes", "Two chains (1000 + 1000)"),
    "small_odes.breakdown": stored("small_odes", "Where a gradient's time goes"),
    "small_odes.per_call": stored("small_odes", "Value and gradient per call"),
    "cold_start.phases": stored("cold_start_first_value", "Where a first process's"),
    "cold_start.wrapped_calls": stored("cold_start", "Compile time against"),
    "cold_start.first_value": stored("cold_start_first_value", "Fresh process to"),
    "small_linalg.by_size": stored("small_linalg", "Per solve, by size"),
    "small_linalg.pk": stored("small_linalg", "Where the time goes"),
    "small_linalg.op": stored("small_linalg", "Through the op"),
    "small_linalg.threads": stored("small_linalg", "Two threads"),
    "stan_ode.budget": stored("stan_ode", "The price of a large step budget"),
    "stan_ode.log_density": stored("stan_ode", "The lynx-hare log-density"),
    "stan_ode.starts": stored("stan_ode", "The lynx-hare model: starts"),
    "forward_mode.per_call": stored("forward_mode", "Value+grad per call"),
    "forward_mode.by_parameters": stored("forward_mode", "Pure JAX value+grad by"),
    "forward_mode.fits": stored("forward_mode", "Whole fit"),
    "forward_scaling": stored("forward_scaling", "Forward-mode cost"),
    "many_fits.rate": stored("many_fits", "Many fits on Dask", 0),
    "many_fits.start_up": stored("many_fits", "Many fits on Dask", 1),
    "islands.fixed_cost": stored("islands_quick", "Fixed cost"),
    "routes": stored("routes", "Every route but nutpie's"),
}


# ------------------------------------------------------------------ figures
def _sir(route: str, budget: int = q.OUR_BUDGET) -> float:
    return q.sir_median(route, budget)


def _sir_stan() -> float:
    return q.sir_median("stan", q.STAN_BUDGET)


def _fit(model: str, route: str) -> float:
    return q.median(q.whole(run) for run in q.fits(model, route))


def _call_ratios(library: str) -> list[float]:
    return [
        q.call(case, "value+grad", f"{library} | {q.DEFAULT_LINKER}")["median"]
        / q.call(case, "value+grad", "direct jax.jit")["median"]
        for case in q.speed_cases()
    ]


FIGURES: dict[str, Callable[[], str]] = {
    "sir.setup": q.sir_setup,
    "sir.ours.later": lambda: seconds(_sir("ours_nutpie")),
    "sir.ours.first": lambda: seconds(q.whole(q.sir_runs("ours_nutpie", 4096)[0])),
    "sir.ours.x_stan": lambda: ratio(_sir("ours_nutpie") / _sir_stan()),
    "sir.ours.first.x_stan": lambda: ratio(
        q.whole(q.sir_runs("ours_nutpie", q.OUR_BUDGET)[0]) / _sir_stan()
    ),
    "sir.wrap_jax.later": lambda: seconds(_sir("wrap_jax_nutpie")),
    "sir.stan.later": lambda: seconds(_sir_stan()),
    "sir.stan.first": lambda: seconds(q.whole(q.sir_runs("stan", q.STAN_BUDGET)[0])),
    "lv.pm_sample": lambda: seconds(_fit("lv", "pm_sample")),
    "lv.pm_sample.x_stan": lambda: ratio(_fit("lv", "pm_sample") / _fit("lv", "stan")),
    "pk.pm_sample": lambda: seconds(_fit("pk", "pm_sample")),
    "pk.pm_sample.x_stan": lambda: ratio(_fit("pk", "pm_sample") / _fit("pk", "stan")),
    "lv.ours": lambda: seconds(_fit("lv", "ours")),
    "lv.ours.x_stan": lambda: ratio(_fit("lv", "ours") / _fit("lv", "stan")),
    "lv.stan": lambda: seconds(_fit("lv", "stan")),
    "pk.ours": lambda: seconds(_fit("pk", "ours")),
    "pk.ours.x_stan": lambda: ratio(_fit("pk", "ours") / _fit("pk", "stan")),
    "pk.stan": lambda: seconds(_fit("pk", "stan")),
    "lv.processes": lambda: seconds(_fit("lv", "processes")),
    "pk.processes": lambda: seconds(_fit("pk", "processes")),
    "lv.start_up.cfunc_compile": lambda: seconds(
        q.start_up_phase("lv", "cfunc", "compile")
    ),
    "lv.start_up.host_compile": lambda: seconds(
        q.start_up_phase("lv", "ours", "compile")
    ),
    "islands.trace_cache.sir": lambda: ratio(q.trace_cache_ratio("sir")),
    "lv.processes.start_up": lambda: seconds(
        q.median(
            q.lookup_in(run, "phases", "workers' start-up")
            for run in q.fits("lv", "processes")
        )
    ),
    "call.ours.range": lambda: ratio_range(_call_ratios("as_jax_op")),
    "call.wrap_jax.range": lambda: ratio_range(_call_ratios("wrap_jax")),
}


def figure(name: str) -> str:
    """The text of the figure ``name``, rendered from the stored results."""
    try:
        return FIGURES[name]()
    except KeyError:
        if name in FIGURES:
            raise
        raise KeyError(f"no figure named {name!r}; known: {sorted(FIGURES)}") from None


def results_table(name: str) -> StoredTable:
    """The table ``name``, rendered from the stored results."""
    if name not in TABLES:
        raise KeyError(f"no table named {name!r}; known: {sorted(TABLES)}")
    return TABLES[name]()


# ------------------------------------------------------------------- README
def markdown(found: StoredTable) -> str:
    """A table as GitHub's markdown writes it."""
    align = ["---:" if right else "---" for right in found.right_aligned]
    lines = [
        "| " + " | ".join(found.header) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(cells) + " |" for cells in found.rows),
    ]
    return "\n".join(lines)


def readme_headline() -> str:
    """The README's results: its table and what a first process and a call cost."""
    before = (
        f"Seconds from process start to the posterior ({figure('sir.setup')}) and "
        "the ratio to Stan's: medians of later processes with warm caches (Stan's "
        "cached build), each route's processes interleaved with Stan's on a 2-core "
        f"machine with nothing else running. {q.HEADLINE_CALLS}."
    )
    after = (
        f"A first process, its caches empty, takes {figure('sir.ours.first')} on "
        f"the SIR model ({figure('sir.ours.first.x_stan')} Stan's cached build; "
        f"Stan's own first build takes {figure('sir.stan.first')}). Per call, a "
        f"wrapped function's value and gradient costs {figure('call.ours.range')} "
        "the direct `jax.jit(jax.value_and_grad(f))` in PyTensor's default "
        f"linker, where `pytensor.wrap_jax` costs {figure('call.wrap_jax.range')}."
    )
    return "\n\n".join(
        [
            textwrap.fill(before, 78),
            markdown(headline_table()),
            textwrap.fill(after, 78),
        ]
    )


README_BLOCKS: dict[str, Callable[[], str]] = {"headline": readme_headline}
_BLOCK = re.compile(
    r"(<!-- results:(?P<name>[\w.]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)",
    re.S,
)


def readme_rendered(text: str) -> str:
    """``text`` with every results block written anew from the stored results."""
    return _BLOCK.sub(lambda m: m[1] + README_BLOCKS[m["name"]]() + "\n" + m[4], text)


def readme_without_blocks(text: str) -> str:
    """``text`` without its results blocks (what is typed by hand)."""
    return _BLOCK.sub("", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", action="store_true", help="rewrite README.md")
    parser.add_argument("--check", action="store_true", help="only compare")
    parser.add_argument("names", nargs="*", help="figures or tables to print")
    arguments = parser.parse_args(argv)
    for name in arguments.names:
        print(markdown(results_table(name)) if name in TABLES else figure(name))
    if arguments.readme:
        text = README.read_text()
        rendered = readme_rendered(text)
        if arguments.check:
            print("README up to date" if rendered == text else "README out of date")
            return int(rendered != text)
        README.write_text(rendered)
    return 0


if __name__ == "__main__":
    sys.exit(main())
