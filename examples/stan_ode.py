"""Coming from Stan: ODE settings and starting points that carry over, on the lynx-hare model.

Two helpers for porting a Stan ODE model to PyMC with diffrax inside
:func:`~pytensor.compile.jax_ofg.as_jax_op`, and the model they were made on.

:func:`diffrax_settings`
    diffrax keyword arguments (``solver``, ``stepsize_controller``, ``dt0``,
    ``max_steps``, ``adjoint``) from the name of Stan's ODE function, its
    tolerances, its ``max_num_steps`` and the number of output times. Stan's
    step budget is *per output interval* (CVODES and Boost's Runge-Kutta
    integrators count their steps from each output time to the next, and
    Stan's documentation says so: "the maximum number of steps the solver will
    take between output time points"); diffrax's ``max_steps`` covers the whole
    solve, and counts rejected steps too. A one-to-one port of the budget
    rejects solves that Stan accepts.
:func:`stan_initvals`
    Starting points as Stan draws them: each unconstrained coordinate uniform
    in (-2, 2), one dict per chain, for ``pm.sample(initvals=...)``.

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

The guide's "Coming from Stan" section explains the choices;
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import diffrax
import jax.numpy as jnp
import numpy as np

from pytensor.compile.jax_ofg import as_jax_op


# ---------------------------------------------------------------------------
# Stan's ODE functions and their diffrax counterparts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StanODE:
    """One of Stan's ODE functions: its integrator, defaults and a diffrax counterpart."""

    #: Stan's integrator, in words.
    method: str
    #: A diffrax solver of the same kind (explicit 5(4) pair, or implicit for stiff).
    solver: Callable[[], diffrax.AbstractSolver]
    #: Defaults of ``rtol``, ``atol`` and ``max_num_steps``; ``None`` when the
    #: function takes them as required arguments (the ``_tol`` variants).
    rtol: float | None
    atol: float | None
    max_num_steps: int | None
    #: Stan's first step (Boost's integrators start with 0.1); ``None``: the
    #: solver picks it (CVODES), as diffrax does with ``dt0=None``.
    dt0: float | None


_RK45 = "Dormand-Prince 5(4), Boost odeint (dense output)"
_CKRK = "Cash-Karp 5(4), Boost odeint"
_ADAMS = "Adams-Moulton, orders 1-12, CVODES"
_BDF = "BDF, orders 1-5, CVODES"

#: Stan's ODE functions (Stan 2.24 and later; the ``integrate_ode_*`` ones are
#: deprecated but still in published models). Defaults from Stan's Functions
#: Reference and User's Guide ("Control parameters for ODE solving"): the
#: ``ode_*`` functions use rtol = atol = 1e-6 and 1e6 steps; the old
#: ``integrate_ode_bdf`` and ``integrate_ode_adams`` use 1e-10, 1e-10 and 1e8.
#: diffrax has no Cash-Karp pair, no Adams and no BDF method: ``ode_ckrk`` and
#: ``ode_adams`` map to ``Tsit5`` (an explicit 5(4) pair for non-stiff
#: problems), ``ode_bdf`` to ``Kvaerno5`` (an implicit L-stable ESDIRK method
#: for stiff ones).
STAN_ODE_FUNCTIONS: dict[str, StanODE] = {
    "ode_rk45": StanODE(_RK45, diffrax.Dopri5, 1e-6, 1e-6, 10**6, 0.1),
    "ode_rk45_tol": StanODE(_RK45, diffrax.Dopri5, None, None, None, 0.1),
    "ode_ckrk": StanODE(_CKRK, diffrax.Tsit5, 1e-6, 1e-6, 10**6, 0.1),
    "ode_ckrk_tol": StanODE(_CKRK, diffrax.Tsit5, None, None, None, 0.1),
    "ode_adams": StanODE(_ADAMS, diffrax.Tsit5, 1e-6, 1e-6, 10**6, None),
    "ode_adams_tol": StanODE(_ADAMS, diffrax.Tsit5, None, None, None, None),
    "ode_bdf": StanODE(_BDF, diffrax.Kvaerno5, 1e-6, 1e-6, 10**6, None),
    "ode_bdf_tol": StanODE(_BDF, diffrax.Kvaerno5, None, None, None, None),
    "integrate_ode_rk45": StanODE(_RK45, diffrax.Dopri5, 1e-6, 1e-6, 10**6, 0.1),
    "integrate_ode_adams": StanODE(_ADAMS, diffrax.Tsit5, 1e-10, 1e-10, 10**8, None),
    "integrate_ode_bdf": StanODE(_BDF, diffrax.Kvaerno5, 1e-10, 1e-10, 10**8, None),
}

#: Checkpoints of diffrax's reverse pass (``RecursiveCheckpointAdjoint``) by
#: default: enough for every accepted step of most sampler solves, so the
#: reverse pass recomputes nothing. diffrax's own default sizes them from
#: ``max_steps`` (about ``sqrt(2 * max_steps)``: 14 000 for a budget of 1e8),
#: and a large buffer costs time in every gradient (the guide's "Coming from
#: Stan" has the figures). More steps than checkpoints is still correct, with
#: some steps recomputed.
CHECKPOINTS = 1000


def diffrax_settings(
    stan_function: str,
    rtol: float | None = None,
    atol: float | None = None,
    max_num_steps: int | None = None,
    *,
    n_outputs: int,
    checkpoints: int | None = CHECKPOINTS,
) -> dict:
    """diffrax keyword arguments that accept the solves Stan's ``stan_function`` accepts.

    Parameters
    ----------
    stan_function
        A key of :data:`STAN_ODE_FUNCTIONS`: ``"ode_rk45"``,
        ``"integrate_ode_bdf"``, ``"ode_bdf_tol"``, ...
    rtol, atol, max_num_steps
        Stan's control arguments; ``None`` takes the function's default
        (required for the ``_tol`` variants, as in Stan).
    n_outputs
        The number of output times (``size(ts)`` in Stan): Stan's budget is
        ``max_num_steps`` steps between consecutive output times (and from
        ``t0`` to the first), so ``n_outputs`` of them in all.
    checkpoints
        Checkpoints of the reverse pass (:data:`CHECKPOINTS`); ``None`` keeps
        diffrax's default, sized from ``max_steps``.

    Returns
    -------
    dict
        ``solver``, ``stepsize_controller``, ``dt0``, ``max_steps`` and
        ``adjoint``, to pass to :func:`diffrax.diffeqsolve` with the terms,
        ``t0``, ``t1``, ``y0`` and ``saveat``.

    Notes
    -----
    ``max_steps`` is ``2 * max_num_steps * n_outputs``. A solve that Stan
    accepts takes at most ``max_num_steps`` accepted steps in each interval,
    so at most ``max_num_steps * n_outputs`` in all; Stan's budget counts
    accepted steps (Boost's step checker and CVODES' ``mxstep``), diffrax's
    counts every attempt, rejected ones too, hence the factor 2. A solve that
    needs more than twice Stan's budget in every interval is rejected by both.
    (With a total budget, a solve that spends more than ``max_num_steps`` in one
    interval and few in the others is accepted here and rejected by Stan.)
    """
    try:
        spec = STAN_ODE_FUNCTIONS[stan_function]
    except KeyError:
        known = ", ".join(STAN_ODE_FUNCTIONS)
        raise ValueError(
            f"unknown Stan ODE function {stan_function!r}; one of {known}"
        ) from None
    given = {"rtol": rtol, "atol": atol, "max_num_steps": max_num_steps}
    settings = {
        name: getattr(spec, name) if value is None else value
        for name, value in given.items()
    }
    missing = [name for name, value in settings.items() if value is None]
    if missing:
        raise ValueError(f"{stan_function} has no default for {', '.join(missing)}")
    if n_outputs < 1:
        raise ValueError(f"n_outputs must be at least 1, got {n_outputs}")
    adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    return {
        "solver": spec.solver(),
        "stepsize_controller": diffrax.PIDController(
            rtol=settings["rtol"], atol=settings["atol"]
        ),
        "dt0": spec.dt0,
        "max_steps": 2 * int(settings["max_num_steps"]) * int(n_outputs),
        "adjoint": adjoint,
    }


def stan_initvals(model, chains: int, seed: int = 0, radius: float = 2.0) -> list[dict]:
    """Stan's starting points: every unconstrained coordinate uniform in (-radius, radius).

    Returns one dict per chain, keyed by the model's free variables, with the
    values on the constrained scale (as ``pm.sample(initvals=...)`` takes
    them). Stan draws its inits this way (``init=2``); numpyro's
    ``init_to_uniform(radius=2)`` is the same rule.
    """
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(chains):
        point = {}
        for rv in model.free_RVs:
            value_var = model.rvs_to_values[rv]
            shape = tuple(model.initial_point()[value_var.name].shape)
            unconstrained = rng.uniform(-radius, radius, size=shape)
            transform = model.rvs_to_transforms.get(rv)
            if transform is None:
                point[rv.name] = unconstrained
            else:
                value = transform.backward(unconstrained, *rv.owner.inputs)
                point[rv.name] = np.asarray(value.eval())
        points.append(point)
    return points


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
        from pytensor.compile.jax_ofg_chain_processes import sample_in_processes

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
