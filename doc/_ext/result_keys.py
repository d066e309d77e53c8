"""What each stored benchmark result holds, by name: the keys behind every figure.

Each function here reads one kind of quantity (a route's whole fits, a call's
timing, an adaptation's fits) through :func:`stored_results.lookup`; the keys
and file names of ``benchmarks/results/`` appear nowhere else in the
documentation. A benchmark that stores its results differently is followed
by editing this module only.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

from stored_results import MissingResult, keys_of, lookup, stored_table


CHECKOUT = Path(__file__).resolve().parents[2]
#: Stan's budget (``ode_rk45``'s default) and ours (diffrax's default).
STAN_BUDGET, OUR_BUDGET = 1_000_000, 4096


def median(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise MissingResult("no stored runs to take a median of")
    return statistics.median(values)


def whole(run: dict) -> float:
    """Seconds from process start to the posterior in memory."""
    return lookup_in(run, "phases", "whole")


def lookup_in(run: dict, *path: str) -> float:
    for key in path:
        if key not in run:
            raise MissingResult(f"a stored run has no {key!r} (it has {list(run)})")
        run = run[key]
    return run


def min_ess(run: dict) -> float:
    return min(stats["ess_bulk"] for stats in run["summary"].values())


def max_r_hat(run: dict) -> float:
    return max(stats["r_hat"] for stats in run["summary"].values())


# ------------------------------------------- Stan's SIR case study (vs_stan)
SIR_ROUTES = {
    "ours_nutpie": "`as_jax_op`, `pm.sample()` (nutpie)",
    "ours_pymc": '`as_jax_op`, `pm.sample(nuts_sampler="pymc")`',
    "ours_numpyro": '`as_jax_op`, `pm.sample(nuts_sampler="numpyro")`',
    "wrap_jax_nutpie": "`pytensor.wrap_jax`, `pm.sample()` (nutpie)",
    "stan": "Stan (`ode_rk45`), PyStan 3",
}


def sir_routes() -> list[tuple[str, int]]:
    """Every stored route and budget, in the order of :data:`SIR_ROUTES`."""
    found = {
        (key.split("|")[0], int(key.split("|")[1]))
        for key in keys_of("vs_stan")
        if not key.endswith("|reference")
    }
    order = list(SIR_ROUTES)
    return sorted(
        found, key=lambda rb: (order.index(rb[0]) if rb[0] in order else 99, rb[1])
    )


def sir_runs(route: str, budget: int) -> tuple[dict | None, list[dict]]:
    """The first (cold) process of a route and its later processes."""
    keys = keys_of("vs_stan")
    prefix = f"{route}|{budget}|"
    cold = f"{prefix}cold"
    later = [lookup("vs_stan", k) for k in keys if k.startswith(prefix + "second")]
    if not later:
        raise MissingResult(f"vs_stan.json has no later process of {prefix}")
    return (lookup("vs_stan", cold) if cold in keys else None), later


def sir_median(route: str, budget: int) -> float:
    return median(whole(run) for run in sir_runs(route, budget)[1])


def ess_per_second(run: dict) -> float:
    return min_ess(run) / whole(run)


def _agree_rule():
    """The case study example's rule: 2 Monte Carlo errors or 3% of Stan's mean."""
    if str(CHECKOUT / "examples") not in sys.path:
        sys.path.append(str(CHECKOUT / "examples"))
    from _boarding_school_report import Reference, agrees

    return Reference, agrees


def agree(runs: Iterable[dict], reference: dict) -> bool:
    """Every run's posterior means agree with ``reference`` (a stored summary)."""
    Reference, agrees = _agree_rule()
    return all(
        agrees(
            stats["mean"],
            stats["mcse_mean"],
            Reference(
                **{k: reference[name][k] for k in ("mean", "sd")},
                mcse=reference[name]["mcse_mean"],
            ),
        )
        for run in runs
        for name, stats in run["summary"].items()
    )


def sir_agrees(route: str, budget: int) -> bool:
    """Every process of a route agrees with Stan's long reference run."""
    reference = lookup("vs_stan", f"stan|{STAN_BUDGET}|reference", "summary")
    cold, later = sir_runs(route, budget)
    return agree([*later, *([cold] if cold else [])], reference)


def fit_agrees(model: str, route: str) -> bool:
    """Every fit of a route agrees with the first of Stan's fits of the model."""
    return agree(fits(model, route), fits(model, "stan")[0]["summary"])


def budget_label(budget: int) -> str:
    return f"{budget:.0e}".replace("e+0", "e") if budget >= 10**5 else str(budget)


def sir_setup() -> str:
    """How many chains of how many tuning steps and draws every route ran."""
    run = sir_runs("stan", STAN_BUDGET)[1][0]
    return f"{run['chains']} chains of {run['tune']} + {run['draws']}"


# ------------------------------ predator-prey and stiff PK (small_odes)
MODELS = {"lv": "predator-prey", "pk": "stiff PK"}
#: Stored fits of a model the benchmark no longer has (its hand-written dense
#: solver gave way to the unrolled small linear algebra): not a route a user
#: can take today.
RETIRED_MODELS = {"pk_dense"}
FIT_ROUTES = {
    "pm_sample": "`as_jax_op`, `pm.sample()` as the guide calls it",
    "ours": "extra: `as_jax_op`, `nutpie.sample(cores=2)`",
    "processes": "`as_jax_op`, chains in processes",
    "stan": "Stan, cached build",
}
#: The Stan fit a model's fits are compared with.
FIT_STAN: dict[str, str] = {}


def _fit_keys() -> list[tuple[str, str]]:
    return [
        (key.split("|")[1], key.split("|")[2])
        for key in keys_of("small_odes")
        if key.startswith("fit|")
    ]


def small_ode_models() -> list[str]:
    models = [model for model, _ in _fit_keys() if model not in RETIRED_MODELS]
    return sorted(set(models), key=models.index)


def fit_routes(model: str) -> list[str]:
    """A model's routes, Stan's last (Stan's of the model it is compared with)."""
    routes = [route for m, route in _fit_keys() if m == model and route != "stan"]
    return [*routes, "stan"]


def fits(model: str, route: str) -> list[dict]:
    if route == "stan":
        model = FIT_STAN.get(model, model)
    return lookup("small_odes", f"fit|{model}|{route}")


# ------------------------------------------------- one call (speed)
DEFAULT_LINKER = "numba (default)"
LINKERS = {"numba (default)": "Numba (default)", "cvm": "C VM", "jax": "JAX"}
SPEED_LABELS = {
    "cheap": "cheap: 10-vector → scalar",
    "oscillator": "diffrax oscillator, 100 save points, interpolated forcing",
    "stiff": "stiff Robertson (`Kvaerno5`), 100 save points",
}


def speed_cases() -> list[dict]:
    return lookup("speed", "cases")


def speed_label(case: dict) -> str:
    return SPEED_LABELS.get(case["name"], case["description"])


def speed_rows(case: dict) -> list[tuple[str, str]]:
    """Each task and linker with both wrappers timed."""
    return [
        (task, key.split(" | ")[1])
        for task in case["tasks"]
        for key in case["calls"][task]
        if key.startswith("as_jax_op | ")
    ]


def call(case: dict, task: str, candidate: str) -> dict | None:
    """Median, quartiles and best of one candidate's calls (None: not timed)."""
    return case["calls"][task].get(candidate)


def iqr_over_median(stats: dict) -> float:
    return (stats["q75"] - stats["q25"]) / stats["median"]


# ---------------------------------------------- start-up and checks (stored)
def start_up_phase(model: str, route: str, phase: str) -> float:
    """A second process's start-up phase (small_odes), median over rounds."""
    return median(
        lookup_in(run, "phases", phase)
        for run in lookup("small_odes", f"startup|{model}|{route}")
    )


# ------------------------------------------------------------ JAX islands
#: The models of ``islands_quick``. The SEIR model left the run: its
#: ``mode="JAX"`` candidate fails to trace (``jnp.split`` of a traced size).
ISLAND_MODELS = {
    "sir": "SIR",
    "sir_nested": "SIR, nested",
    "boarding_school": "case study",
}
ISLAND_LINKERS = {
    "default, islands": "Numba (default), islands",
    "default, no islands": "Numba, islands excluded",
    "C VM, islands": "C VM, islands",
    'mode="JAX"': '`mode="JAX"` (the model frozen, one XLA program)',
    "wrap_jax, default": "`pytensor.wrap_jax`, Numba",
}


def island_table(model: str):
    return stored_table("islands_quick", f"{model}: `logp_dlogp` per call")


#: The default linker's row with the trace cache off (``islands.py``'s ``CACHE_OFF``).
CACHE_OFF = "default, islands, trace cache off"


def trace_cache_ratio(model: str) -> float:
    """``logp_dlogp`` per call, the trace cache on over off (a served program)."""
    found = island_table(model)
    on = float(found.cell("default, islands", "ms per call"))
    return on / float(found.cell(CACHE_OFF, "ms per call"))


# -------------------------------------------- start-up (cold_start_nutpie)
START_UP_VARIANTS = {
    "as_jax_op (diffrax, equinox's checks raise)": "`as_jax_op`, equinox's checks "
    "raise (its default)",
    "as_jax_op, EQX_ON_ERROR=nan": "`as_jax_op`, `EQX_ON_ERROR=nan`",
    "pure PyTensor (scan RK4, dt = 0.05 day)": "the same model in pure PyTensor "
    "(`scan` RK4)",
}


def start_up(variant: str) -> tuple[dict, dict]:
    """A first (cold) process and a later one (the median of later ones)."""
    runs = lookup("cold_start_nutpie", "nutpie", variant)
    return runs[0], runs[1]


# ------------------------------------------- adaptation over seeds
ADAPTATIONS = {"diag": '`"diag"` (nutpie\'s)', "draw_diag": '`"draw_diag"` (ours)'}


def adaptation_settings() -> list[tuple[str, str]]:
    pairs = [(fit["model"], fit["setting"]) for fit in lookup("default_route", "fits")]
    return sorted(set(pairs), key=pairs.index)


def adaptation_fits(model: str, setting: str) -> list[dict]:
    return [
        fit
        for fit in lookup("default_route", "fits")
        if fit["model"] == model and fit["setting"] == setting
    ]


def converged(fit: dict) -> bool:
    """R-hat at most 1.01 and no stuck chain (the benchmark's rule)."""
    return fit["rhat"] <= 1.01 and not fit["stuck"]


# ----------------------------------------------------------------- README
#: The call behind each model's figures, as the benchmarks make it.
HEADLINE_CALLS = (
    "`pm.sample()` as the guide writes it: 4 chains on nutpie, PyMC's default "
    "cores (2 for a model holding JAX ops on a 2-core machine)"
)
HEADLINE_MODELS = {
    "sir": "SIR, boarding-school influenza (`ode_rk45`)",
    "lv": "predator-prey, lynx and hares (`integrate_ode_rk45`)",
    "pk": "stiff pharmacokinetics (`integrate_ode_bdf`; `Kvaerno5`)",
}


def headline() -> dict[str, tuple[float, float | None, float]]:
    """Each model's later-process whole fit: ours, wrap_jax's (if run), Stan's."""
    sir = (
        sir_median("ours_nutpie", OUR_BUDGET),
        sir_median("wrap_jax_nutpie", OUR_BUDGET),
        sir_median("stan", STAN_BUDGET),
    )
    found = {"sir": sir}
    for model in ("lv", "pk"):
        found[model] = (
            median(whole(run) for run in fits(model, "pm_sample")),
            None,
            median(whole(run) for run in fits(model, "stan")),
        )
    return found
