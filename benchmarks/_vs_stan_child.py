"""One route of ``vs_stan.py``, in a fresh process: fit, then print phase times and the posterior.

``vs_stan.py`` starts this script once per route and process (with its own
``PYTENSOR_FLAGS=base_compiledir=...``, ``NUMBA_CACHE_DIR`` and, for Stan,
``XDG_CACHE_HOME``), and reads the JSON object it prints on its last line::

    python benchmarks/_vs_stan_child.py ROUTE [--max-steps N] [--draws D] [--tune T]
        [--chains C] [--seed S]

Phases, in seconds from the first line of this script: ``imports`` (the
libraries of the route), ``build`` (the PyMC model, or nothing for Stan),
``compile`` (``pm.sample`` until its sampling loop starts: PyTensor's
rewrites, Numba, nutpie's compile; ``stan.build`` for Stan: stanc and the C++
compiler, or the cached extension module), ``sampling`` (PyMC's
``sampling_time``; ``fit.sample`` for Stan) and ``fit`` (the first line to the
posterior in memory). Then the posterior summary of each parameter, computed
after ``fit`` and not timed.
"""

import time


START = time.perf_counter()
STARTED_AT = time.time()  # the parent measures process start-up with it

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PARAMETERS = ["beta", "gamma", "phi_inv", "R0", "recovery_time"]
#: Routes whose model is this package's example (the others must not import it).
OURS = ("ours_nutpie", "ours_pymc", "ours_numpyro")
ROUTES = (*OURS, "wrap_jax_nutpie", "pm_ode", "stan")


def since_start() -> float:
    return time.perf_counter() - START


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def pymc_route(args: argparse.Namespace, phases: dict) -> dict:
    """Build the route's PyMC model and ``pm.sample`` it; return the posterior arrays."""
    sys.path.insert(0, str(HERE))
    if args.route in OURS:
        if (ROOT / "conftest.py").exists():
            sys.path.insert(0, str(ROOT))
            import conftest  # noqa: F401  (the checkout's modules, not a stale copy)
        sys.path.insert(0, str(ROOT / "examples"))
        # As the example sets it when run as a script (its programs are then
        # exportable: a later process traces nothing).
        os.environ.setdefault("EQX_ON_ERROR", "nan")
        import boarding_school_sir as example
        import pymc as pm

        phases["imports"] = since_start()
        model = example.build_model(max_steps=args.max_steps)
    else:
        import _vs_stan_models as models
        import pymc as pm

        if args.route == "wrap_jax_nutpie":
            import jax  # noqa: F401

            phases["imports"] = since_start()
            model = models.build_model(models.wrap_jax_solver(args.max_steps))
        else:
            phases["imports"] = since_start()
            model = models.build_model(models.pm_ode_solver())
    phases["build"] = since_start() - phases["imports"]

    options: dict = {}
    if args.route == "ours_pymc":
        options = {"nuts_sampler": "pymc", "cores": 2}
    elif args.route == "ours_numpyro":
        options = {"nuts_sampler": "numpyro", "nuts": {"chain_method": "sequential"}}
    # the nutpie routes and pm_ode: pm.sample() as it is (nutpie when installed)
    before = since_start()
    with model:
        idata = pm.sample(
            draws=args.draws,
            tune=args.tune,
            chains=args.chains,
            random_seed=args.seed,
            progressbar=False,
            **options,
        )
    sampling = float(idata["posterior"].attrs["sampling_time"])
    phases["fit"] = since_start()
    phases["sampling"] = sampling
    phases["compile"] = phases["fit"] - before - sampling
    posterior = idata["posterior"]
    return {
        "library": posterior.attrs.get("inference_library", "?"),
        "draws": {name: posterior[name].values for name in PARAMETERS},
        "diverging": idata["sample_stats"]["diverging"].values,
    }


def stan_route(args: argparse.Namespace, phases: dict) -> dict:
    """Build the case study's Stan program with PyStan 3 and sample it."""
    sys.path.insert(0, str(HERE))
    import _vs_stan_models as models
    import stan

    phases["imports"] = since_start()
    phases["build"] = 0.0
    # httpstan keeps every fit of a seeded run and would serve the second
    # process from it without sampling: keep the compiled model, drop the fits.
    for fits in Path(os.environ.get("XDG_CACHE_HOME", "/nonexistent")).rglob("fits"):
        shutil.rmtree(fits)
    posterior = stan.build(
        models.STAN_PROGRAM, data=models.stan_data(), random_seed=args.seed
    )
    phases["compile"] = since_start() - phases["imports"]
    before = since_start()
    fit = posterior.sample(
        num_chains=args.chains, num_samples=args.draws, num_warmup=args.tune
    )
    phases["sampling"] = since_start() - before
    phases["fit"] = since_start()

    def by_chain(name: str):
        # fit[name] has one row per scalar and draws of all chains in a row,
        # the chain index running fastest.
        return fit[name].reshape(args.draws, args.chains).T

    import stan as _stan

    return {
        "library": f"PyStan {_stan.__version__}",
        "draws": {name: by_chain(name) for name in PARAMETERS},
        "diverging": by_chain("divergent__").astype(bool),
    }


def summarize(result: dict) -> dict:
    """Mean, sd, MCSE, ESS and R-hat of each parameter (ArviZ, as for every route)."""
    import arviz as az

    draws = result.pop("draws")
    idata = az.from_dict({"posterior": draws})
    summary = az.summary(idata, round_to="none")
    columns = ["mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"]
    result["summary"] = {
        name: {column: float(summary.loc[name, column]) for column in columns}
        for name in PARAMETERS
    }
    result["divergences"] = int(result.pop("diverging").sum())
    return result


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("route", choices=ROUTES)
    parser.add_argument("--max-steps", type=int, default=4096)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1978)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    phases: dict = {}
    load_start = load_average()
    run = stan_route if args.route == "stan" else pymc_route
    result = run(args, phases)
    result = summarize(result)
    result.update(
        route=args.route,
        max_steps=args.max_steps,
        chains=args.chains,
        draws=args.draws,
        tune=args.tune,
        phases=phases,
        started_at=STARTED_AT,
        load_average=[load_start, load_average()],
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":  # PyMC's forkserver workers import this file again
    main()
