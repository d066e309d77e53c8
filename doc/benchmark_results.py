"""The benchmarks page's chart, drawn while the docs build from the stored runs.

Reads ``benchmarks/results/vs_stan.json`` (Stan's SIR case study along every
route) and ``benchmarks/results/small_odes.json`` (the predator-prey and
stiff PK models against Stan) and draws the time from process start to the
posterior: the median over the later processes of each route (their caches
warm), as the benchmarks report it. Only routes re-measured on a machine with
nothing else running are drawn (not ``pm.ode``'s: its fits, 7 minutes each,
were not re-measured). No figure is typed in: edit the results files (by
running the benchmarks) and the chart follows.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _runs(name: str) -> dict:
    runs = json.loads((RESULTS / f"{name}.json").read_text())
    runs.pop("meta", None)
    return runs


def case_study_seconds() -> dict[str, float]:
    """SIR case study: median whole-fit seconds of each route's later processes."""
    runs = _runs("vs_stan")
    routes = {
        "as_jax_op": "ours_nutpie|4096",
        "pytensor.wrap_jax": "wrap_jax_nutpie|4096",
        "Stan": "stan|1000000",
    }
    return {
        label: statistics.median(
            run["phases"]["whole"]
            for key, run in runs.items()
            if key.startswith(prefix + "|second")
        )
        for label, prefix in routes.items()
    }


def small_ode_seconds(model: str) -> dict[str, float]:
    """Predator-prey (``lv``) or stiff PK (``pk``): median whole-fit seconds."""
    runs = _runs("small_odes")
    return {
        label: statistics.median(fit["phases"]["whole"] for fit in runs[key])
        for label, key in (
            ("as_jax_op", f"fit|{model}|ours"),
            ("Stan", f"fit|{model}|stan"),
        )
    }


COLORS = {
    "as_jax_op": "#1f77b4",
    "pytensor.wrap_jax": "#9467bd",
    "Stan": "#555555",
}


def time_to_posterior_chart():
    """Horizontal bars, one group per model, seconds on a log scale."""
    import matplotlib.pyplot as plt

    groups = [
        ("SIR, boarding school\n(Stan's ode_rk45)", case_study_seconds()),
        (
            "predator-prey, lynx and hares\n(integrate_ode_rk45)",
            small_ode_seconds("lv"),
        ),
        ("stiff pharmacokinetics\n(integrate_ode_bdf)", small_ode_seconds("pk")),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    y, ticks, labels = 0.0, [], []
    for title, seconds in groups:
        top = y
        for route, value in seconds.items():
            ax.barh(y, value, color=COLORS[route], height=0.8)
            ax.text(value * 1.04, y, f"{value:.0f} s  {route}", va="center", fontsize=8)
            y += 1
        ticks.append((top + y - 1) / 2)
        labels.append(title)
        y += 0.8
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(5, 250)
    ax.set_xlabel("seconds from process start to the posterior (log scale)")
    ax.set_title("4 chains of 1000 + 1000, caches warm: lower is better", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
