"""Diagnostics, the time-to-posterior table and the figure of ``seir_time_varying.py``.

The machinery behind the example, kept out of the modeller's script: it knows
nothing of the model beyond the variable names ``beta_knots``, ``i0``,
``alpha``, ``beta_daily``, ``expected_cases`` and ``cases``.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import arviz as az
import matplotlib


matplotlib.use("Agg")  # write files only; never open a window

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pymc as pm
from xarray import DataArray, DataTree


#: What a trusted posterior needs, for every knot (PyMC's and Stan's advice).
MAX_R_HAT = 1.01
MIN_ESS_BULK = 400
#: The probability mass of the posterior intervals reported and drawn.
INTERVAL_PROB = 0.94
COLORS = {"pymc": "tab:blue", "nutpie": "tab:orange", "numpyro": "tab:green"}


@dataclass
class SamplerResult:
    """The outcome of one sampler: a posterior, or the reason it has none."""

    sampler: str
    seconds: float
    idata: DataTree | None = None
    error: str | None = None
    divergences: int = 0
    max_r_hat_knots: float = float("nan")
    min_ess_knots: float = float("nan")
    max_r_hat_derived: float = float("nan")
    knots_covered: np.ndarray | None = None
    summary: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ess_per_second(self) -> float:
        """Bulk ESS of the worst knot per second of ``pm.sample`` (compilation included)."""
        return self.min_ess_knots / self.seconds

    @property
    def trusted(self) -> bool:
        """R-hat <= :data:`MAX_R_HAT` and bulk ESS >= :data:`MIN_ESS_BULK` for every knot."""
        return (
            self.ok
            and self.max_r_hat_knots <= MAX_R_HAT
            and self.min_ess_knots >= MIN_ESS_BULK
        )


def posterior_interval(
    samples: DataArray, prob: float = INTERVAL_PROB
) -> tuple[DataArray, DataArray]:
    """Equal-tailed posterior interval over chains and draws (lower, upper)."""
    tails = [(1 - prob) / 2, (1 + prob) / 2]
    bounds = samples.quantile(tails, dim=("chain", "draw"))
    return bounds.isel(quantile=0), bounds.isel(quantile=1)


def diagnose(result: SamplerResult, true_knots: np.ndarray) -> None:
    """Fill in divergences, R-hat and ESS (per knot) and the coverage of the true knots."""
    idata = result.idata
    result.divergences = int(idata["sample_stats"]["diverging"].sum())
    result.summary = az.summary(
        idata,
        var_names=["beta_knots", "i0", "alpha"],
        ci_prob=INTERVAL_PROB,
        round_to="none",
    )
    knots = result.summary.loc[[i for i in result.summary.index if "knots" in i]]
    result.min_ess_knots = float(knots["ess_bulk"].min())
    # R-hat compares chains: a single chain has none (nan).
    result.max_r_hat_knots = float(knots["r_hat"].max())
    if idata["posterior"].sizes["chain"] > 1:
        derived = az.rhat(idata, var_names=["beta_daily", "expected_cases"])
        result.max_r_hat_derived = max(
            float(v.max()) for v in derived.data_vars.values()
        )
    lower, upper = posterior_interval(idata["posterior"]["beta_knots"])
    result.knots_covered = (lower.values <= true_knots) & (true_knots <= upper.values)


def run_sampler(
    sampler: str,
    draw: Callable[[], DataTree],
    model: pm.Model,
    true_knots: np.ndarray,
    seed: int,
) -> SamplerResult:
    """Time ``draw()``, add posterior predictive draws and diagnose; never raise.

    A sampler that cannot run here (missing package, unsupported option...)
    gives a result whose ``error`` says why, so the other samplers still run.
    """
    print(f"\n=== {sampler} ===", flush=True)
    start = time.perf_counter()
    try:
        idata = draw()
        seconds = time.perf_counter() - start
        pm.sample_posterior_predictive(
            idata,
            model=model,
            var_names=["cases"],
            extend_inferencedata=True,
            random_seed=seed,
            progressbar=False,
        )
        result = SamplerResult(sampler, seconds, idata=idata)
        diagnose(result, true_knots)
    except Exception as error:  # report and go on with the next sampler
        seconds = time.perf_counter() - start
        last = traceback.extract_tb(error.__traceback__)[-1]
        reason = f"{type(error).__name__}: {error} (at {last.filename}:{last.lineno})"
        print(f"{sampler} failed after {seconds:.0f} s: {reason}", file=sys.stderr)
        return SamplerResult(sampler, seconds, error=reason)
    table = readable(result.summary)
    formats = {
        column: (lambda x: f"{x:.0f}")
        if column == "ess_bulk"
        else (lambda x: f"{x:.3f}")
        if column == "r_hat"
        else (lambda x: f"{x:.4g}")
        for column in table.columns
    }
    print(table.to_string(formatters=formats))
    return result


def readable(summary: pd.DataFrame) -> pd.DataFrame:
    """The columns of an ArviZ summary a reader needs: mean, sd, the interval's
    bounds, bulk ESS and R-hat (the rest is in ``result.summary``)."""
    columns = [
        column
        for column in summary.columns
        if column in ("mean", "sd", "ess_bulk", "r_hat")
        or column.endswith(("_lb", "_ub"))
    ]
    return summary[columns]


def report(
    results: Sequence[SamplerResult],
    true_knots: np.ndarray,
    knot_times: np.ndarray,
    runs: str,
) -> None:
    """Print the time-to-posterior table: one line per sampler, then a verdict.

    ``runs`` describes the chains (e.g. "4 chains of 500 tuning + 500 draws").
    """
    percent = round(100 * INTERVAL_PROB)
    print(f"\nTime to posterior ({runs}):")
    print(
        f"{'sampler':<9}{'wall':>7}{'ESS/s':>8}{'divergent':>11}"
        f"{'R-hat':>8}{'min ESS':>9}{'trusted':>9}   true knots inside the "
        f"{percent}% interval"
    )
    for r in results:
        if not r.ok:
            print(f"{r.sampler:<9}{r.seconds:>6.0f}s   failed: {r.error}")
            continue
        covered = r.knots_covered
        missed = ", ".join(f"day {t:g}" for t in knot_times[~covered])
        coverage = f"{covered.sum()}/{covered.size}" + (
            f" (outside: {missed})" if missed else ""
        )
        print(
            f"{r.sampler:<9}{r.seconds:>6.0f}s{r.ess_per_second:>8.1f}"
            f"{r.divergences:>11d}{r.max_r_hat_knots:>8.3f}{r.min_ess_knots:>9.0f}"
            f"{'yes' if r.trusted else 'NO':>9}   {coverage}"
        )
    print(
        "wall: pm.sample, compilation included; ESS/s: min ESS / wall; R-hat, "
        "min ESS: the largest R-hat and the smallest bulk ESS over the knots."
    )
    fitted = [r for r in results if r.ok]
    untrusted = [r.sampler for r in fitted if not r.trusted]
    if untrusted:
        print(
            f"Not trusted ({', '.join(untrusted)}): a knot has R-hat > {MAX_R_HAT} "
            f"or bulk ESS < {MIN_ESS_BULK}. Run more chains or longer ones, e.g. "
            "--draws 1000 --tune 1000."
        )
    elif fitted:
        print(
            f"Every knot has R-hat <= {MAX_R_HAT} and bulk ESS >= {MIN_ESS_BULK} "
            f"with {', '.join(r.sampler for r in fitted)}."
        )
    expected_misses = len(true_knots) * (1 - INTERVAL_PROB)
    print(
        f"True knot values: {np.array2string(true_knots, precision=2)}. "
        f"With {len(true_knots)} knots and {percent}% intervals, about "
        f"{expected_misses:.1f} misses per data set are expected; the samplers "
        "should agree on them."
    )


# ---------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------


def _band(
    ax: plt.Axes, x: np.ndarray, samples: DataArray, color: str, label: str
) -> None:
    """Draw the posterior median and the equal-tailed interval of ``samples``."""
    lower, upper = posterior_interval(samples)
    median = samples.median(dim=("chain", "draw"))
    ax.fill_between(x, lower, upper, color=color, alpha=0.3, linewidth=0)
    ax.plot(x, median, color=color, linewidth=1.5, label=label)


def plot(
    results: Sequence[SamplerResult],
    *,
    days: np.ndarray,
    cases: np.ndarray,
    expected_cases: np.ndarray,
    beta_daily: np.ndarray,
    knot_times: np.ndarray,
    true_knots: np.ndarray,
    recovery_rate: float,
    out: Path,
) -> Path:
    """One column per sampler: predictive bands over the data, beta(t) over the truth.

    Parameters
    ----------
    results
        The samplers' results; failed ones are left out.
    days
        The times of the ODE solution (day 0 to the last day).
    cases, expected_cases
        The simulated daily cases (days 1 onwards) and their true mean.
    beta_daily
        The true transmission rate at ``days``.
    knot_times, true_knots
        Where the knots are, and their true values.
    recovery_rate
        Drawn as a reference line: beta above it means a growing epidemic.
    out
        The PNG file to write.

    Returns
    -------
    Path
        The file written.
    """
    fitted = [r for r in results if r.ok]
    percent = round(100 * INTERVAL_PROB)
    fig, axes = plt.subplots(
        2,
        len(fitted),
        figsize=(1 + 4.2 * len(fitted), 7.5),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    for (cases_ax, beta_ax), r in zip(axes.T, fitted):
        color = COLORS.get(r.sampler, "tab:gray")
        predicted = r.idata["posterior_predictive"]["cases"]
        _band(cases_ax, days[1:], predicted, color, f"posterior predictive, {percent}%")
        cases_ax.plot(days[1:], cases, "o", color="black", markersize=2.5)
        cases_ax.plot(days[1:], expected_cases, "--", color="black")
        cases_ax.set_title(
            f"{r.sampler}: {r.divergences} divergences, {r.seconds:.0f} s"
        )

        beta = r.idata["posterior"]["beta_daily"]
        _band(beta_ax, days, beta, color, f"posterior, {percent}%")
        beta_ax.plot(days, beta_daily, "--", color="black")
        beta_ax.plot(knot_times, true_knots, "s", color="black", markersize=5)
        beta_ax.axhline(recovery_rate, color="gray", linewidth=0.8, linestyle=":")
        beta_ax.set_xlabel("day")

    # The black markers mean the same in every column: name them once.
    first_cases, first_beta = axes[0, 0], axes[1, 0]
    first_cases.plot([], [], "o", color="black", markersize=2.5, label="data")
    first_cases.plot([], [], "--", color="black", label="true mean")
    first_beta.plot([], [], "--", color="black", label="true beta(t)")
    first_beta.plot([], [], "s", color="black", markersize=5, label="true knot values")
    first_beta.plot([], [], ":", color="gray", label="recovery rate")
    first_cases.set_ylabel("new cases per day")
    first_beta.set_ylabel("transmission rate beta(t) per day")
    first_cases.legend(loc="upper left", fontsize=8)
    first_beta.legend(loc="upper right", fontsize=8)
    fig.suptitle("SEIR model with an interpolated transmission rate (simulated data)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
