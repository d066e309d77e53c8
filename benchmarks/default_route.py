"""The default route over seeds: does ``pm.sample()`` converge on a ported Stan ODE model?

For each model (``lv``: ``examples/stan_ode.py`` as written; ``pk``:
``benchmarks/_pk_model.py``, ``diffrax.Kvaerno5()``, forward mode) and
setting (``diag``: nutpie's own adaptation; ``draw_diag``: what
``pm.sample()`` gives a model holding wrapped functions), ``pm.sample()``
with seeds 0..N-1 in one process, warm caches; per fit, the worst R-hat,
smallest bulk ESS, stuck chains, divergences, gradients per draw, seconds.

Run::

    .venv/bin/python benchmarks/default_route.py --models lv --seeds 10

Writes ``benchmarks/results/default_route.md`` and the fits as
``default_route.json`` (a run replaces the stored fits of its models,
settings and seeds, and keeps the others).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import _report
import _room  # noqa: F401  (the checkout's modules; the examples')
import numpy as np
from _report import fill, package_versions
from _timing import median


os.environ.setdefault("EQX_ON_ERROR", "nan")  # as the examples


#: pm.sample()'s extra arguments per setting: ``draw_diag`` is ``pm.sample()``
#: as it is (this package's default for models holding wrapped functions),
#: ``diag`` nutpie's own default, named.
SETTINGS = {"diag": {"nuts": {"adaptation": "diag"}}, "draw_diag": {}}


def model_and_kwargs(name: str):
    """The PyMC model and ``pm.sample``'s arguments as the example writes them."""
    if name == "lv":
        import stan_ode

        return stan_ode.build_model(), {"initvals": stan_ode.PRIOR_LOCATIONS}
    import _pk_model as pk

    from pytensor.compile.jax_ofg import as_jax_op

    return pk.build_model(as_jax_op(pk.solve_forward_mode, name="pk_solve")), {}


def summary(idata, seconds: float) -> dict:
    import arviz as az

    posterior = idata.posterior
    rhat = az.rhat(posterior)
    ess = az.ess(posterior, method="bulk")
    worst_rhat = max(float(np.nanmax(rhat[v].values)) for v in rhat.data_vars)
    min_ess = min(float(np.nanmin(ess[v].values)) for v in ess.data_vars)
    stuck = 0
    chains = posterior.sizes["chain"]
    for chain in range(chains):
        others = [c for c in range(chains) if c != chain]
        for v in posterior.data_vars:
            values = posterior[v].values
            own = values[chain].reshape(values.shape[1], -1)
            if np.any([len(np.unique(col)) < 5 for col in own.T]):
                stuck += 1
                break
            rest = values[others].reshape(len(others) * values.shape[1], -1)
            spread = rest.std(axis=0) + 1e-12
            if np.any(np.abs(own.mean(axis=0) - rest.mean(axis=0)) / spread > 3):
                stuck += 1
                break
    stats = idata.sample_stats
    steps = stats["n_steps"].values if "n_steps" in stats else stats["tree_size"].values
    return {
        "rhat": worst_rhat,
        "ess": min_ess,
        "stuck": stuck,
        "divergences": int(stats["diverging"].values.sum()),
        "gradients_per_draw": float(np.mean(steps)),
        "seconds": seconds,
    }


def run(name: str, setting: str, seeds: range, chains: int, length: int) -> list[dict]:
    import pymc as pm

    model, kwargs = model_and_kwargs(name)
    with model:  # compile once, untimed: the fits below find every cache warm
        pm.sample(draws=10, tune=10, chains=1, progressbar=False, **kwargs)
    fits = []
    for seed in seeds:
        with model:
            start = time.perf_counter()
            idata = pm.sample(
                draws=length,
                tune=length,
                chains=chains,
                cores=2,
                random_seed=seed,
                progressbar=False,
                **kwargs,
                **SETTINGS[setting],
            )
            seconds = time.perf_counter() - start
        fit = {
            "model": name,
            "setting": setting,
            "seed": seed,
            **summary(idata, seconds),
        }
        print(json.dumps(fit), flush=True)
        fits.append(fit)
    return fits


def report(data: dict) -> str:
    rows = []
    fits = data["fits"]
    for name in dict.fromkeys(f["model"] for f in fits):
        for setting in SETTINGS:
            group = [f for f in fits if f["model"] == name and f["setting"] == setting]
            if not group:
                continue
            converged = sum(f["rhat"] <= 1.01 and f["stuck"] == 0 for f in group)
            rows.append([name, setting, f"{converged} of {len(group)}"])
            rows[-1].append(f"{max(f['rhat'] for f in group):.3f}")
            rows[-1].append(f"{median([f['ess'] for f in group]):.0f}")
            rows[-1].append(f"{median([f['gradients_per_draw'] for f in group]):.1f}")
            rows[-1].append(f"{median([f['seconds'] for f in group]):.1f}")
            rows[-1].append(f"{median([f['ess'] / f['seconds'] for f in group]):.0f}")
            rows[-1].append(sum(f["divergences"] for f in group))
    return fill(_report.texts("default_route")["report"], rows, **data["meta"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=["lv", "pk"])
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--report", action="store_true", help="only the table")
    args = parser.parse_args()
    data = _report.load("default_route", {"fits": []})
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for name in [] if args.report else args.models:
        for setting in args.settings:
            data["fits"] = [
                f
                for f in data["fits"]
                if (f["model"], f["setting"]) != (name, setting)
                or f["seed"] not in seeds
            ]
            data["fits"] += run(name, setting, seeds, args.chains, args.length)
            command = "python benchmarks/default_route.py " + " ".join(sys.argv[1:])
            versions = {"JAX": "jax", "PyMC": "pymc"}
            data["meta"] = _report.meta(command.strip(), package_versions(versions))
            _report.save("default_route", data)
    _report.write("default_route", report(data))


if __name__ == "__main__":
    if sys.platform.startswith("linux"):
        import multiprocessing

        multiprocessing.set_start_method("forkserver", force=True)
    main()
