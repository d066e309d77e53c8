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

import _room  # noqa: E402, F401  (the checkout's modules; the examples')
import _stan  # noqa: E402  (imports neither this package nor PyTensor)
from _chains import KEY, chains_recorded, stan_at_once  # noqa: E402
from _report import load_averages  # noqa: E402


PARAMETERS = ["beta", "gamma", "phi_inv", "R0", "recovery_time"]
#: Routes whose model is this package's example (the others must not import it).
OURS = ("ours_nutpie", "ours_pymc", "ours_numpyro")
ROUTES = (*OURS, "wrap_jax_nutpie", "pm_ode", "stan")


def since_start() -> float:
    return time.perf_counter() - START


def pymc_route(args: argparse.Namespace, phases: dict) -> dict:
    """Build the route's PyMC model and ``pm.sample`` it; return the posterior arrays."""
    if args.route in OURS:
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

    # As examples/boarding_school_sir.py calls pm.sample for its --sampler; the
    # nutpie routes and pm_ode: pm.sample() as it is (nutpie when installed).
    options = {
        "ours_pymc": {"nuts_sampler": "pymc"},
        "ours_numpyro": {
            "nuts_sampler": "numpyro",
            "nuts": {"chain_method": "sequential"},
        },
    }.get(args.route, {})
    chains: dict = {}
    before = since_start()
    with chains_recorded(chains, nutpie="nuts_sampler" not in options), model:
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
    if args.route == "ours_numpyro":  # one program, its chains one after the other
        chains |= {"passed": "numpyro: chain_method='sequential'", "at once": 1}
    return {
        KEY: chains,
        "library": posterior.attrs.get("inference_library", "?"),
        "draws": {name: posterior[name].values for name in PARAMETERS},
        "diverging": idata["sample_stats"]["diverging"].values,
    }


def stan_route(args: argparse.Namespace, phases: dict) -> dict:
    """Build the case study's Stan program with PyStan 3 and sample it."""
    import _vs_stan_models as models
    import stan  # noqa: F401  (timed with the imports)

    phases["imports"] = since_start()
    phases["build"] = 0.0
    posterior = _stan.build(models.STAN_PROGRAM, models.stan_data(), args.seed)
    phases["compile"] = since_start() - phases["imports"]
    before = since_start()
    fit = _stan.sample(
        posterior, PARAMETERS, chains=args.chains, draws=args.draws, tune=args.tune
    )
    phases["sampling"] = since_start() - before
    phases["fit"] = since_start()
    return {
        KEY: stan_at_once(args.chains),
        "library": _stan.library(),
        "draws": fit.draws,
        "diverging": fit.diverging,
    }


def summarize(result: dict) -> dict:
    """Mean, sd, MCSE, ESS and R-hat of each parameter (ArviZ, as for every route)."""
    columns = ["mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"]
    summary = _stan.posterior_summary(result.pop("draws"), columns)
    result["summary"] = {name: summary[name] for name in PARAMETERS}
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
    load_start = load_averages()[0]
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
        load_average=[load_start, load_averages()[0]],
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":  # PyMC's forkserver workers import this file again
    main()
