"""Stan's SIR case study in PyMC: influenza in a boarding school, the ODE solved by diffrax.

The model of "Bayesian workflow for disease transmission modeling in Stan"
(Grinsztajn, Semenova, Margossian and Riou, Statistics in Medicine, 2021):
an influenza outbreak in a British boarding school in January 1978, 763
students, one of them ill on day 0, and the number of students in bed on each
of the 14 days that followed. An SIR model,

    dS/dt = -beta I S / N,   dI/dt = beta I S / N - gamma I,   dR/dt = gamma I,

gives the number of infected students ``I(t)``, and the students in bed are
negative-binomial around it. Priors as in the case study: ``beta ~ N(2, 1)``
and ``gamma ~ N(0.4, 0.5)``, both truncated at 0, ``phi_inv ~ Exponential(5)``
(the inverse of the negative binomial's dispersion ``phi``). Derived:
``R0 = beta / gamma`` and the recovery time ``1 / gamma`` (days).

Stan solves the ODE with ``ode_rk45`` (Dormand-Prince 5(4), relative and
absolute tolerance 1e-6); here :func:`solve_sir` solves it with diffrax's
``Dopri5`` at the same tolerances, inside
:func:`~pytensor.compile.jax_ofg.as_jax_op`, and ``pm.sample()`` samples the
posterior (nutpie, when installed: PyMC 6 picks it). The script prints the
posterior of beta, gamma, phi_inv, R0 and the recovery time with R-hat and
ESS, sets it next to Stan's posterior of the same model, and draws the
posterior predictive cases over the data. The how-to "Port a Stan model"
(``doc/howto/stan.rst``) puts the Stan program next to this
model, line by line; ``benchmarks/vs_stan.py`` fits both, along every route.

Run it in the environment ``bash scripts/example`` creates (``.venv``, with
the project and its ``examples`` extra), or wherever the project is
installed::

    .venv/bin/python examples/boarding_school_sir.py             # 4 chains of 1000 + 1000
    .venv/bin/python examples/boarding_school_sir.py --quick     # a smoke run (CI)
    .venv/bin/python examples/boarding_school_sir.py --sampler numpyro
"""

import os


if __name__ == "__main__":
    # A failing equinox check inside diffrax's solve gives NaN instead of
    # raising: a rejected proposal, as a solve out of steps is (throw=False
    # below). Checks that raise are host callbacks, which keep the program out
    # of the trace cache; with NaN checks it is cached, and a second run
    # traces nothing (the guide's "Start-up"). Set before equinox is
    # imported; EQX_ON_ERROR=raise on the command line keeps equinox's default.
    os.environ.setdefault("EQX_ON_ERROR", "nan")

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import diffrax
import jax.numpy as jnp
import numpy as np
import pymc as pm
from _boarding_school_report import Reference, plot, report
from xarray import DataTree

from pytensor.compile.jax_ofg import as_jax_op


# ---------------------------------------------------------------------------
# The data (public: e.g. R's `outbreaks` package, influenza_england_1978_school)
# ---------------------------------------------------------------------------

N = 763  # students
T0 = 0.0
Y0 = np.array([762.0, 1.0, 0.0])  # S, I, R on day 0: one student ill
DAYS = np.arange(1.0, 15.0)  # days 1..14
CASES = np.array([3, 8, 26, 76, 225, 298, 258, 233, 189, 128, 68, 29, 14, 4])

#: Stan's ode_rk45 defaults: tolerances, and its step budget (max_num_steps).
RTOL = ATOL = 1e-6
STAN_MAX_NUM_STEPS = 10**6
#: diffrax's default step budget.
MAX_STEPS = 4096

#: Stan's posterior of this model: PyStan 3, 4 chains of 1000 + 10000 (the
#: reference run of benchmarks/vs_stan.py, seed 1978; recorded in
#: benchmarks/results/vs_stan.md and vs_stan.json).
STAN_POSTERIOR = {
    "beta": Reference(mean=1.7350, sd=0.0535, mcse=0.00037),
    "gamma": Reference(mean=0.54223, sd=0.04511, mcse=0.00029),
    "phi_inv": Reference(mean=0.13799, sd=0.07435, mcse=0.00050),
    "R0": Reference(mean=3.2209, sd=0.2781, mcse=0.0019),
    "recovery_time": Reference(mean=1.8570, sd=0.1555, mcse=0.0010),
}


# ---------------------------------------------------------------------------
# The ODE, solved by diffrax inside a PyTensor op
# ---------------------------------------------------------------------------


def sir(t: jnp.ndarray, y: jnp.ndarray, beta, gamma, n: int) -> jnp.ndarray:
    """The SIR vector field (Stan's ``functions`` block), in numbers of students."""
    s, i, _ = y
    infection = beta * i * s / n
    recovery = gamma * i
    return jnp.stack([-infection, infection - recovery, recovery])


@as_jax_op
def solve_sir(
    y0: np.ndarray,
    t0: float,
    ts: np.ndarray,
    beta: jnp.ndarray,
    gamma: jnp.ndarray,
    n: int,
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    max_steps: int = MAX_STEPS,
) -> jnp.ndarray:
    """Solve the SIR ODE from ``t0`` and return the states at ``ts``: Stan's ``ode_rk45``.

    Parameters
    ----------
    y0, t0, ts
        Initial state and time, and the output times (NumPy arrays and
        numbers: static arguments, baked into the op).
    beta, gamma
        Transmission and recovery rates per day (the op's inputs).
    n
        Population size (static).
    rtol, atol
        Tolerances of the adaptive step control (Stan's defaults).
    max_steps
        Step budget (static). diffrax's default is 4096, Stan's 1e6.

    Returns
    -------
    jax.Array
        ``(len(ts), 3)``: S, I and R at ``ts``; all NaN when the solver ran
        out of steps.
    """
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: sir(t, y, beta, gamma, n)),
        diffrax.Dopri5(),  # the Runge-Kutta pair of Stan's ode_rk45
        t0=t0,
        t1=ts[-1],
        dt0=0.1,  # ode_rk45's first step
        y0=jnp.asarray(y0),
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        # Early in warm-up a sampler may propose rates for which the solver
        # runs out of steps. throw=True would raise, and numpyro's compiled
        # program cannot recover from that; a NaN solution gives a non-finite
        # log-density, which every sampler rejects (Stan rejects such a
        # proposal too).
        throw=False,
    )
    succeeded = solution.result == diffrax.RESULTS.successful
    return jnp.where(succeeded, solution.ys, jnp.nan)


# ---------------------------------------------------------------------------
# The PyMC model
# ---------------------------------------------------------------------------


def build_model(
    *, max_steps: int = MAX_STEPS, cases: np.ndarray = CASES, data: bool = False
) -> pm.Model:
    """The case study's model, with the boarding-school data observed.

    Parameters
    ----------
    max_steps
        The solver's step budget: diffrax's default 4096, or Stan's 10**6.
    cases
        The students in bed on days 1..14 (default: the outbreak's;
        ``examples/sbc_boarding_school.py`` fits simulated ones).
    data
        Observe ``cases`` through ``pm.Data``: PyTensor's rewrites then see no
        values in them (constant counts let them fold whether a count is 0),
        so every dataset shares one XLA program.

    Returns
    -------
    pm.Model
        Free variables ``beta``, ``gamma``, ``phi_inv``; deterministics ``R0``
        and ``recovery_time``; observed ``cases``.
    """
    with pm.Model(coords={"day": DAYS.astype(int)}) as model:
        # Stan: real<lower=0> beta; beta ~ normal(2, 1); (likewise gamma)
        beta = pm.TruncatedNormal("beta", mu=2.0, sigma=1.0, lower=0.0)
        gamma = pm.TruncatedNormal("gamma", mu=0.4, sigma=0.5, lower=0.0)
        phi_inv = pm.Exponential("phi_inv", lam=5.0)

        y = solve_sir(Y0, T0, DAYS, beta, gamma, N, max_steps=max_steps)
        # Stan's neg_binomial_2(mu, phi) is PyMC's NegativeBinomial(mu, alpha=phi).
        pm.NegativeBinomial(
            "cases",
            mu=y[:, 1],
            alpha=1.0 / phi_inv,
            observed=pm.Data("cases_observed", cases, dims="day") if data else cases,
            dims="day",
        )

        # Stan's generated quantities
        pm.Deterministic("R0", beta / gamma)
        pm.Deterministic("recovery_time", 1.0 / gamma)
    return model


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------

SAMPLERS = ("nutpie", "pymc", "numpyro")
PARAMETERS = ["beta", "gamma", "phi_inv", "R0", "recovery_time"]


@dataclass
class Settings:
    """What to run; built from the command line by :func:`parse_args`."""

    sampler: str | None
    draws: int
    tune: int
    chains: int
    seed: int
    out: Path


def sample(model: pm.Model, settings: Settings) -> DataTree:
    """``pm.sample`` with the settings; then posterior predictive cases.

    Parameters
    ----------
    model
        The model of :func:`build_model`.
    settings
        Sampler (``None``: what ``pm.sample()`` picks, nutpie when installed),
        draws, tuning steps, chains and seed.

    Returns
    -------
    xarray.DataTree
        Posterior, sample stats and posterior predictive ``cases``.
    """
    options: dict = {}
    if settings.sampler is not None:
        options["nuts_sampler"] = settings.sampler
    if settings.sampler == "numpyro":
        # One CPU device: chains one after the other (its default, "parallel",
        # would warn and do the same; "vectorized" is slower for ODE solves).
        options["nuts"] = {"chain_method": "sequential"}
        options["progressbar"] = sys.stdout.isatty()
    with model:
        # PyMC's own NUTS runs its chains in worker processes started with
        # forkserver (pytensor-jax-ofg sees to it): they import this script
        # again, hence its `__main__` guard.
        idata = pm.sample(
            draws=settings.draws,
            tune=settings.tune,
            chains=settings.chains,
            random_seed=settings.seed,
            **options,
        )
        # Stan's pred_cases: neg_binomial_2_rng(I(t), phi) for every draw.
        pm.sample_posterior_predictive(
            idata,
            extend_inferencedata=True,
            random_seed=settings.seed,
            progressbar=False,
        )
    return idata


def main(argv: Sequence[str] | None = None) -> DataTree:
    """Fit the model, print the posterior next to Stan's, draw the figure.

    Parameters
    ----------
    argv
        Command-line arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    xarray.DataTree
        The posterior and posterior predictive draws.
    """
    settings = parse_args(argv)
    model = build_model()
    runs = (
        f"{settings.chains} chains of {settings.tune} tuning + {settings.draws} draws"
    )
    print(f"Boarding school, {len(DAYS)} days, N = {N}: {runs}.", flush=True)
    idata = sample(model, settings)
    report(idata, PARAMETERS, STAN_POSTERIOR)
    path = plot(idata, days=DAYS, cases=CASES, out=settings.out)
    print(f"\nFigure written to {path.resolve()}")
    return idata


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    """Read the command line; ``--quick`` changes the defaults, not explicit flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=None,
        help="default: what pm.sample() picks (nutpie when installed)",
    )
    parser.add_argument("--draws", type=int, help="default 1000 (quick: 100)")
    parser.add_argument("--tune", type=int, help="default 1000 (quick: 100)")
    parser.add_argument("--chains", type=int, help="default 4 (quick: 2)")
    parser.add_argument("--seed", type=int, default=1978, help="default 1978")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 2 chains of 100 + 100"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "output" / "boarding_school_sir.png",
        help="the figure (PNG; default output/boarding_school_sir.png next to "
        "this script)",
    )
    args = parser.parse_args(argv)

    def pick(value: int | None, normal: int, quick: int) -> int:
        return value if value is not None else (quick if args.quick else normal)

    return Settings(
        sampler=args.sampler,
        draws=pick(args.draws, 1000, 100),
        tune=pick(args.tune, 1000, 100),
        chains=pick(args.chains, 4, 2),
        seed=args.seed,
        out=args.out,
    )


if __name__ == "__main__":
    main()
