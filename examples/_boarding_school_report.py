"""The posterior table, the comparison with Stan and the figure of ``boarding_school_sir.py``.

Kept out of the modeller's script; ``benchmarks/vs_stan.py`` uses the same
agreement rule (:func:`agrees`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import arviz as az
import matplotlib


matplotlib.use("Agg")  # write files only; never open a window

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from xarray import DataTree


#: What a trusted posterior needs (PyMC's and Stan's advice).
MAX_R_HAT = 1.01
MIN_ESS_BULK = 400
#: Two posterior means agree when they differ by at most this many Monte
#: Carlo standard errors (of the difference) ...
AGREE_MCSE = 2.0
#: ... or by at most this fraction of the reference mean.
AGREE_RELATIVE = 0.03


@dataclass(frozen=True)
class Reference:
    """A reference posterior mean, its standard deviation and its Monte Carlo error."""

    mean: float
    sd: float
    mcse: float


def agrees(mean: float, mcse: float, reference: Reference) -> bool:
    """Whether ``mean`` agrees with ``reference.mean``: 2 MCSE or 3%.

    The Monte Carlo standard error of the difference of two independent
    estimates is ``sqrt(mcse**2 + reference.mcse**2)``.
    """
    difference = abs(mean - reference.mean)
    return difference <= AGREE_MCSE * math.hypot(mcse, reference.mcse) or (
        difference <= AGREE_RELATIVE * abs(reference.mean)
    )


def summarize(idata: DataTree, parameters: Sequence[str]) -> pd.DataFrame:
    """Mean, sd, MCSE of the mean, bulk and tail ESS and R-hat of each parameter."""
    summary = az.summary(idata, var_names=list(parameters), round_to="none")
    return summary[["mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"]]


def report(
    idata: DataTree, parameters: Sequence[str], stan: Mapping[str, Reference]
) -> pd.DataFrame:
    """Print the posterior, then each mean next to Stan's; return the summary."""
    summary = summarize(idata, parameters)
    divergences = int(idata["sample_stats"]["diverging"].sum())
    library = idata["posterior"].attrs.get("inference_library", "?")
    print(f"\nPosterior ({library}, {divergences} divergences):")
    print(summary.to_string(float_format=lambda x: f"{x:.4g}"))
    trusted = (summary["r_hat"] <= MAX_R_HAT).all() and (
        summary["ess_bulk"] >= MIN_ESS_BULK
    ).all()
    print(
        f"R-hat <= {MAX_R_HAT} and bulk ESS >= {MIN_ESS_BULK} for every parameter: "
        f"{'yes' if trusted else 'no'}"
    )

    print(
        "\nNext to Stan's posterior of the same model (PyStan 3, ode_rk45; "
        "4 chains of 10000 draws):"
    )
    print(f"{'':<15}{'PyMC':>9}{'Stan':>9}{'diff':>9}{'2 MCSE':>9}  agrees")
    for name in parameters:
        row, ref = summary.loc[name], stan[name]
        within = agrees(row["mean"], row["mcse_mean"], ref)
        two_mcse = AGREE_MCSE * math.hypot(row["mcse_mean"], ref.mcse)
        print(
            f"{name:<15}{row['mean']:>9.4f}{ref.mean:>9.4f}"
            f"{row['mean'] - ref.mean:>+9.4f}{two_mcse:>9.4f}  "
            f"{'yes' if within else 'NO'}"
        )
    print(
        f"agrees: the means differ by at most {AGREE_MCSE:g} Monte Carlo standard "
        f"errors of the difference, or by {AGREE_RELATIVE:.0%} of Stan's."
    )
    return summary


def plot(idata: DataTree, *, days: np.ndarray, cases: np.ndarray, out: Path) -> Path:
    """The posterior predictive cases (mean, median, 50% and 90% bands) over the data.

    Parameters
    ----------
    idata
        Holds a ``posterior_predictive`` group with ``cases``.
    days, cases
        The observed days and numbers of students in bed.
    out
        The PNG file to write.

    Returns
    -------
    Path
        The file written.
    """
    predicted = idata["posterior_predictive"]["cases"]
    quantiles = predicted.quantile([0.05, 0.25, 0.5, 0.75, 0.95], dim=("chain", "draw"))
    q05, q25, median, q75, q95 = quantiles.values
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.fill_between(
        days,
        q05,
        q95,
        color="tab:blue",
        alpha=0.2,
        linewidth=0,
        label="posterior predictive, 90%",
    )
    ax.fill_between(
        days, q25, q75, color="tab:blue", alpha=0.4, linewidth=0, label="50%"
    )
    ax.plot(days, median, color="tab:blue", label="median")
    # The negative binomial is skewed: its median lies below its mean, the
    # expected number in bed, I(t).
    mean = predicted.mean(dim=("chain", "draw")).values
    ax.plot(days, mean, "--", color="tab:blue", label="mean")
    ax.plot(days, cases, "o", color="black", markersize=4, label="students in bed")
    ax.set_xlabel("day")
    ax.set_ylabel("students in bed")
    ax.set_title("Influenza in a boarding school (1978), SIR model")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
