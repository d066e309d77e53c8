"""The benchmarks page's chart, drawn while the docs build from the stored runs.

Seconds from process start to the posterior for each model and route: the
median of the later processes (caches warm) as a solid bar labelled with its
ratio to Stan's, and the first process (caches empty; Stan's first build)
as a light bar beside it, where the benchmark stored one. The axis is
linear, so a bar twice as long took twice as long. Every value comes from
:mod:`result_keys`; nothing is typed here.
"""

from __future__ import annotations

import result_keys as q
from figures import ratio, seconds


COLORS = {
    "as_jax_op": "#1f77b4",
    "pytensor.wrap_jax": "#9467bd",
    "Stan": "#555555",
}
GROUPS = {
    "sir": "SIR, boarding school\n(Stan's ode_rk45)",
    "lv": "predator-prey, lynx and hares\n(integrate_ode_rk45)",
    "pk": "stiff pharmacokinetics\n(integrate_ode_bdf)",
}


def _sir_bars() -> dict[str, tuple[float, float | None]]:
    bars = {}
    for label, route, budget in (
        ("as_jax_op", "ours_nutpie", q.OUR_BUDGET),
        ("pytensor.wrap_jax", "wrap_jax_nutpie", q.OUR_BUDGET),
        ("Stan", "stan", q.STAN_BUDGET),
    ):
        cold, _ = q.sir_runs(route, budget)
        bars[label] = (q.sir_median(route, budget), q.whole(cold) if cold else None)
    return bars


def _fit_bars(model: str) -> dict[str, tuple[float, float | None]]:
    """Later processes only: the benchmark stores no first process of these fits."""
    return {
        label: (q.median(q.whole(run) for run in q.fits(model, route)), None)
        for label, route in (("as_jax_op", "pm_sample"), ("Stan", "stan"))
    }


def bars() -> dict[str, dict[str, tuple[float, float | None]]]:
    """Per model, per route: (later processes' median, first process or None)."""
    return {"sir": _sir_bars(), "lv": _fit_bars("lv"), "pk": _fit_bars("pk")}


def time_to_posterior_chart():
    """Horizontal bars, one group per model, seconds on a linear axis."""
    import matplotlib.pyplot as plt

    data = bars()
    longest = max(v for g in data.values() for pair in g.values() for v in pair if v)
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    y, ticks = 0.0, []
    for model, routes in data.items():
        top, stan = y, routes["Stan"][0]
        for route, (later, first) in routes.items():
            ax.barh(y, later, color=COLORS[route], height=0.42)
            text = f"{seconds(later)}  {route}"
            if route != "Stan":
                text += f"  {ratio(later / stan)} Stan"
            ax.text(later + longest * 0.01, y, text, va="center", fontsize=8)
            if first is not None:
                ax.barh(y + 0.42, first, color=COLORS[route], alpha=0.3, height=0.42)
                ax.text(
                    first + longest * 0.01,
                    y + 0.42,
                    f"{seconds(first)}  first process"
                    + (", its build" if route == "Stan" else ""),
                    va="center",
                    fontsize=7,
                    color="#444444",
                )
                y += 0.42
            y += 0.62
        ticks.append(((top + y - 0.62) / 2, GROUPS[model]))
        y += 0.6
    ax.set_yticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.45)
    ax.set_xlabel("seconds from process start to the posterior")
    ax.set_title(
        f"{q.sir_setup()}, caches warm; light: a first process. Lower is better",
        fontsize=8.5,
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
