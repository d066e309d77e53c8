"""Coming from Stan: ODE settings and starting points that carry over, on the lynx-hare model.

The model Stan's porting toolkit (:mod:`pytensor.compile._jax_ofg.stan`,
exported by :mod:`pytensor.compile.jax_ofg`) was made on, ported with it:
:func:`~pytensor.compile.jax_ofg.diffrax_settings` gives the solve Stan's
``integrate_ode_rk45`` settings (Stan's step budget is per output interval,
diffrax's covers the whole solve), and ``--start stan`` starts the chains
where :func:`~pytensor.compile.jax_ofg.stan_initvals` draws them, as Stan does.

The model is the predator-prey model of Stan's case study "Predator-Prey
Population Dynamics: the Lotka-Volterra model in Stan" (Bob Carpenter, 2018):
the pelts of Canadian lynx and snowshoe hares traded by the Hudson's Bay
Company, 1900-1920, in thousands,

    du/dt = (alpha - beta v) u,   dv/dt = (-gamma + delta u) v,

u the hares, v the lynx, both observed with log-normal error; 8 parameters
(the four rates, the two initial populations, the two error scales). The case
study solves the ODE with ``integrate_ode_rk45(..., 1e-5, 1e-3, 5e2)``.

Run it in the environment ``bash scripts/example`` creates::

    .venv/bin/python examples/stan_ode.py           # nutpie, from the priors' locations
    .venv/bin/python examples/stan_ode.py --quick   # a smoke run (CI)
    .venv/bin/python examples/stan_ode.py --sampler numpyro --start stan
    .venv/bin/python examples/stan_ode.py --sampler nutpie-processes

``--start default`` is PyMC's own start (the bound plus one for the predation
rates, far in the tails: see the guide); ``--start stan`` Stan's rule.

The how-to "Port a Stan model" (``doc/howto/stan.rst``) explains the choices;
``benchmarks/stan_ode.py`` measures them (``benchmarks/results/stan_ode.md``).
"""

import os


if __name__ == "__main__":
    # A failing equinox check gives NaN (a rejected proposal) instead of
    # raising, as in examples/boarding_school_sir.py.
    os.environ.setdefault("EQX_ON_ERROR", "nan")

import argparse
import sys
import time
from collections.abc import Sequence

import diffrax
import jax.numpy as jnp
import numpy as np

from pytensor.compile.jax_ofg import as_jax_op, diffrax_settings, stan_initvals


# ---------------------------------------------------------------------------
# The data: Hudson's Bay Company pelts, thousands, 1900-1920
# ---------------------------------------------------------------------------

#: From Carpenter's case study, which takes them from Howard, P. (2009),
#: "Modeling basics" (Texas A&M lecture notes), after Hewitt (1921) and Odum
#: (1953). Public; also in R's ``LynxHare`` data sets.
YEARS = np.arange(1900, 1921)
HARE = np.array([
    30.0, 47.2, 70.2, 77.4, 36.3, 20.6, 18.1, 21.4, 22.0, 25.4, 27.1,
    40.3, 57.0, 76.6, 52.3, 19.5, 11.2, 7.6, 14.6, 16.2, 24.7,
])  # fmt: skip
LYNX = np.array([
    4.0, 6.1, 9.8, 35.2, 59.4, 41.7, 19.0, 13.0, 8.3, 9.1, 7.4,
    8.0, 12.3, 19.5, 45.7, 51.1, 29.7, 15.8, 9.7, 10.1, 8.6,
])  # fmt: skip
#: Years after 1900 of the solve's outputs (the case study's ``ts``): 1..20.
TS = (YEARS[1:] - YEARS[0]).astype(float)
T0 = 0.0

#: The case study's integrator and its control arguments.
CASE_STUDY_SOLVER = ("integrate_ode_rk45", 1e-5, 1e-3, 500)


#: The priors' locations (``mu`` of the normals, ``exp(mu)`` of the log-normals):
#: a start near the middle of the prior, for ``pm.sample(initvals=...)``.
PRIOR_LOCATIONS = {
    "theta": np.array([1.0, 0.05, 1.0, 0.05]),
    "z_init": np.array([10.0, 10.0]),
    "sigma": np.exp([-1.0, -1.0]),
}


def lotka_volterra(t, z, theta):
    """The vector field: ``z = (hares, lynx)``, ``theta = (alpha, beta, gamma, delta)``."""
    u, v = z[0], z[1]
    alpha, beta, gamma, delta = theta[0], theta[1], theta[2], theta[3]
    return jnp.stack([(alpha - beta * v) * u, (-gamma + delta * u) * v])


@as_jax_op
def solve_lv(
    z_init,
    theta,
    *,
    ts: np.ndarray = TS,
    stan_function: str = CASE_STUDY_SOLVER[0],
    rtol: float | None = CASE_STUDY_SOLVER[1],
    atol: float | None = CASE_STUDY_SOLVER[2],
    max_num_steps: int | None = CASE_STUDY_SOLVER[3],
):
    """Populations at ``ts`` (shape ``(len(ts), 2)``), as Stan's ``stan_function`` would.

    NaN when the solve fails (out of steps): the sampler rejects the proposal,
    as Stan does.
    """
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, z, args: lotka_volterra(t, z, args)),
        t0=T0,
        t1=float(ts[-1]),
        y0=jnp.asarray(z_init),
        args=theta,
        saveat=diffrax.SaveAt(ts=ts),
        throw=False,
        **diffrax_settings(stan_function, rtol, atol, max_num_steps, n_outputs=len(ts)),
    )
    succeeded = solution.result == diffrax.RESULTS.successful
    return jnp.where(succeeded, solution.ys, jnp.nan)


def build_model(solver: Sequence = CASE_STUDY_SOLVER):
    """The case study's model in PyMC; ``solver`` = (Stan function, rtol, atol, max_num_steps)."""
    import pymc as pm

    stan_function, rtol, atol, max_num_steps = solver
    observed = np.stack([HARE, LYNX], axis=1)
    with pm.Model() as model:
        # real<lower=0> theta[4]; theta[{1, 3}] ~ normal(1, 0.5);
        # theta[{2, 4}] ~ normal(0.05, 0.05): truncated at 0 by the bound
        theta = pm.TruncatedNormal(
            "theta",
            mu=[1.0, 0.05, 1.0, 0.05],
            sigma=[0.5, 0.05, 0.5, 0.05],
            lower=0.0,
            shape=4,
        )
        z_init = pm.LogNormal("z_init", mu=np.log(10.0), sigma=1.0, shape=2)
        sigma = pm.LogNormal("sigma", mu=-1.0, sigma=1.0, shape=2)
        z = solve_lv(
            z_init,
            theta,
            stan_function=stan_function,
            rtol=rtol,
            atol=atol,
            max_num_steps=max_num_steps,
        )
        pm.LogNormal(
            "y_init", mu=pm.math.log(z_init), sigma=sigma, observed=observed[0]
        )
        pm.LogNormal("y", mu=pm.math.log(z), sigma=sigma, observed=observed[1:])
    return model


# ---------------------------------------------------------------------------
# The fit
# ---------------------------------------------------------------------------

STARTS = ("prior", "stan", "default")


def initvals_for(start: str, model, chains: int, sampler: str, seed: int = 1):
    """``pm.sample``'s ``initvals`` for a start: ``prior``, ``stan`` or ``default`` (None).

    nutpie takes one point for all chains (and jitters it by U(-1, 1) on the
    unconstrained scale): for ``stan`` it gets the first of Stan's points.
    """
    if start == "default":
        return None
    if start == "prior":
        return PRIOR_LOCATIONS
    points = stan_initvals(model, chains=chains, seed=seed)
    return points[0] if sampler == "nutpie" else points


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 chains of 100 + 100")
    parser.add_argument(
        "--sampler",
        choices=("nutpie", "nutpie-processes", "pymc", "numpyro"),
        default="nutpie",
        help="nutpie-processes: nutpie's chains in worker processes, one pinned "
        "to each core (sample_in_processes)",
    )
    parser.add_argument("--start", choices=STARTS, default="prior")
    parser.add_argument("--chains", type=int)
    parser.add_argument("--tune", type=int)
    parser.add_argument("--draws", type=int)
    args = parser.parse_args(argv)
    defaults = (2, 100, 100) if args.quick else (4, 1000, 1000)
    for name, default in zip(("chains", "tune", "draws"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def main(argv: Sequence[str] | None = None):
    import arviz as az
    import pymc as pm

    args = parse_args(argv)
    model = build_model()
    nutpie = args.sampler.startswith("nutpie")
    initvals = initvals_for(
        args.start, model, args.chains, "nutpie" if nutpie else args.sampler
    )
    print(
        f"Lynx and hares, {args.chains} chains of {args.tune} tuning + "
        f"{args.draws} draws ({args.sampler}, start: {args.start})",
        flush=True,
    )
    start = time.perf_counter()
    if args.sampler == "nutpie-processes":
        from pytensor.compile.jax_ofg import sample_in_processes

        idata = sample_in_processes(
            model,
            chains=args.chains,
            seed=1,
            compile_kwargs={} if initvals is None else {"initial_points": initvals},
            tune=args.tune,
            draws=args.draws,
            adaptation="draw_diag",  # as pm.sample's nutpie below
        )
    else:
        kwargs = {"nuts_sampler": args.sampler}
        if args.sampler == "pymc":
            kwargs["cores"] = min(args.chains, os.cpu_count() or 1)
        if nutpie:
            # Its default mass matrix, from draws and gradients, left a chain
            # stuck in half the fits at this atol; the draws' variances alone
            # (Stan's rule) did not (the guide's "The lynx-hare model and the
            # default sampler").
            kwargs["nuts"] = {"adaptation": "draw_diag"}
        if initvals is not None:
            kwargs["initvals"] = initvals
        with model:
            idata = pm.sample(
                draws=args.draws,
                tune=args.tune,
                chains=args.chains,
                random_seed=1,
                progressbar=False,
                **kwargs,
            )
    seconds = time.perf_counter() - start
    summary = az.summary(idata, var_names=["theta", "z_init", "sigma"])
    divergent = int(idata["sample_stats"]["diverging"].sum())
    print(summary.to_string())
    print(
        f"{seconds:.0f} s, {divergent} divergent, R-hat <= {summary['r_hat'].max()}, "
        f"bulk ESS >= {summary['ess_bulk'].min():.0f}"
    )
    return idata


if __name__ == "__main__":
    main(sys.argv[1:])
