"""An SEIR epidemic with a time-varying transmission rate, fitted with three NUTS samplers.

The transmission rate ``beta(t)`` is a cubic interpolation of its values at
eight knots (on the log scale, so it stays positive). It drives an SEIR ODE
solved with diffrax, and the daily number of new symptomatic cases is observed
with negative-binomial noise. Both JAX pieces are wrapped with
:func:`~pytensor.compile.jax_ofg.as_jax_op`:

* :func:`transmission_rate` builds the interpolator and *returns a function*;
  PyTensor gets it back as a symbolic callable;
* :func:`solve_seir` takes that function as an argument and calls it inside
  the ODE's vector field. The two are composed inside one JAX trace, and
  gradients flow from the likelihood through the solver to the knot values.

The script simulates its own data from known parameters (fixed seed, no
downloads), fits the model with PyMC's own NUTS (chains in worker processes;
the JAX code called from the Numba-compiled model), nutpie (Numba, chains in
threads) and numpyro (the whole model compiled to one XLA program), 4 chains
each, then prints a time-to-posterior table (wall time, ESS per second,
divergences, R-hat and ESS of the knots), whether the true knot values fall
inside the 94% posterior intervals, and draws a figure. The diagnostics and
the figure are in ``_seir_report.py`` next to this file.

Run it with ``bash scripts/example`` (which installs the project and its
``examples`` extra into ``.venv``), or in an environment where the project is
installed::

    python examples/seir_time_varying.py                 # all three samplers
    python examples/seir_time_varying.py --quick         # a tiny smoke run
    python examples/seir_time_varying.py --samplers nutpie --draws 1000 --tune 1000
"""

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import diffrax
import jax.numpy as jnp
import numpy as np
import pymc as pm
from _seir_report import SamplerResult, plot, report, run_sampler
from xarray import DataTree

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


# ---------------------------------------------------------------------------
# The epidemic and the truth the data are simulated from
# ---------------------------------------------------------------------------

POPULATION = 1_000_000
N_DAYS = 98  # 14 weeks: the eight knots fall on whole days, 2 weeks apart
#: The ODE solution is saved at the start of every day; day ``d``'s new cases
#: are the onsets between ``DAYS[d - 1]`` and ``DAYS[d]``.
DAYS = np.arange(N_DAYS + 1, dtype="float64")
N_KNOTS = 8
KNOT_TIMES = np.linspace(0.0, N_DAYS, N_KNOTS)
#: Known from the literature in this story: 4 days' incubation, 5 days infectious.
INCUBATION_RATE = 1 / 4
RECOVERY_RATE = 1 / 5
#: Prior scale of the day-to-knot changes of log(beta) (a Gaussian random walk).
RANDOM_WALK_SIGMA = 0.5


@dataclass(frozen=True)
class Truth:
    """The parameters the synthetic data are simulated from.

    Attributes
    ----------
    beta_knots
        Transmission rate (per day) at :data:`KNOT_TIMES`: a fast first wave,
        interventions that push it below the recovery rate, a relaxation that
        starts a second wave, and new measures.
    i0
        Initial fraction of the population exposed, and also infectious.
    alpha
        Negative-binomial dispersion of the reported daily cases.
    """

    beta_knots: np.ndarray = field(
        default_factory=lambda: np.array(
            [0.55, 0.45, 0.26, 0.17, 0.22, 0.32, 0.24, 0.15]
        )
    )
    i0: float = 1e-4
    alpha: float = 20.0

    def as_model_values(self) -> dict[str, np.ndarray | float]:
        """The values of the model's free random variables, by name."""
        return {"log_beta": np.log(self.beta_knots), "i0": self.i0, "alpha": self.alpha}


# ---------------------------------------------------------------------------
# The JAX pieces, wrapped as PyTensor ops
# ---------------------------------------------------------------------------


@as_jax_op
def transmission_rate(
    knot_times: np.ndarray, log_beta: jnp.ndarray
) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """Build ``beta(t)``: a cubic Hermite interpolation of log(beta) at the knots.

    Parameters
    ----------
    knot_times
        The knot times (a NumPy array: a static argument, baked into the op).
    log_beta
        log(beta) at the knots (a PyTensor vector: the op's input).

    Returns
    -------
    callable
        ``beta(t)`` for a scalar or an array of times. Called from PyTensor,
        :func:`as_jax_op` returns it as a symbolic callable that can be passed
        to :func:`solve_seir` or called with tensors.
    """
    coefficients = diffrax.backward_hermite_coefficients(knot_times, log_beta)
    log_path = diffrax.CubicInterpolation(knot_times, coefficients)
    log_beta_at = jnp.vectorize(log_path.evaluate)
    return lambda t: jnp.exp(log_beta_at(t))


@as_jax_op
def solve_seir(
    beta: Callable[[jnp.ndarray], jnp.ndarray],
    i0: jnp.ndarray,
    days: np.ndarray,
    *,
    incubation_rate: float,
    recovery_rate: float,
    max_steps: int = 4096,
    throw: bool = False,
) -> jnp.ndarray:
    """Solve the SEIR equations with a time-varying transmission rate.

    The state holds population fractions ``(S, E, I, R, C)``, where ``C`` counts
    the cumulative symptom onsets (E -> I), so that daily new cases are the
    increments of ``C``.

    Parameters
    ----------
    beta
        The transmission rate ``beta(t)``, e.g. the symbolic callable returned
        by :func:`transmission_rate`.
    i0
        Initial fraction exposed, and also infectious.
    days
        The times at which to save the solution (static).
    incubation_rate, recovery_rate
        E -> I and I -> R rates per day (static).
    max_steps
        Step budget of the adaptive solver (static).
    throw
        Whether a failed solve raises (static). Keep it ``False`` for
        sampling: early in warm-up a sampler may propose values for which the
        solver runs out of steps. With ``throw=True`` that raises an error
        (a ``JaxRuntimeError`` from the solve), which ends the whole run, in
        numpyro's compiled program as in PyMC's; here the solution becomes
        NaN instead, the log-density is not finite, and the sampler rejects
        the proposal (reported as a divergence).

    Returns
    -------
    jax.Array
        The states, shape ``(len(days), 5)``; all NaN when the solve failed.
    """

    def vector_field(t, state, args):
        s, e, i, _, _ = state
        infections = beta(t) * s * i
        onsets = incubation_rate * e
        recoveries = recovery_rate * i
        return jnp.stack(
            [-infections, infections - onsets, onsets - recoveries, recoveries, onsets]
        )

    zero = jnp.zeros_like(i0)
    initial_state = jnp.stack([1.0 - 2.0 * i0, i0, i0, zero, zero])
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        diffrax.Tsit5(),
        t0=days[0],
        t1=days[-1],
        dt0=0.5,
        y0=initial_state,
        saveat=diffrax.SaveAt(ts=days),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-9),
        max_steps=max_steps,
        throw=throw,
    )
    succeeded = solution.result == diffrax.RESULTS.successful
    return jnp.where(succeeded, solution.ys, jnp.nan)


# ---------------------------------------------------------------------------
# The PyMC model
# ---------------------------------------------------------------------------


def build_model(observed_cases: np.ndarray | None = None) -> pm.Model:
    """The generative model; ``observed_cases=None`` leaves the cases unobserved.

    Parameters
    ----------
    observed_cases
        Daily new cases for days ``1..N_DAYS``, or ``None`` for the prior
        predictive model (used to simulate the data).

    Returns
    -------
    pm.Model
        Free variables ``log_beta`` (knot values), ``i0`` and ``alpha``;
        deterministics ``beta_knots``, ``beta_daily`` (beta(t) at every day)
        and ``expected_cases``.
    """
    coords = {
        "knot": KNOT_TIMES.astype(int),
        "time": DAYS.astype(int),
        "day": DAYS[1:].astype(int),
    }
    with pm.Model(coords=coords) as model:
        log_beta = pm.GaussianRandomWalk(
            "log_beta",
            mu=0.0,
            sigma=RANDOM_WALK_SIGMA,
            init_dist=pm.Normal.dist(np.log(0.4), 0.5),
            steps=N_KNOTS - 1,
            dims="knot",
        )
        i0 = pm.LogNormal("i0", mu=np.log(1e-4), sigma=1.0)
        alpha = pm.Exponential("alpha", scale=20.0)
        pm.Deterministic("beta_knots", pt.exp(log_beta), dims="knot")

        beta = transmission_rate(KNOT_TIMES, log_beta)
        # A symbolic callable can also be called directly with tensors.
        pm.Deterministic("beta_daily", beta(pt.as_tensor(DAYS)), dims="time")

        states = solve_seir(
            beta,
            i0,
            DAYS,
            incubation_rate=INCUBATION_RATE,
            recovery_rate=RECOVERY_RATE,
        )
        onsets = POPULATION * pt.diff(states[:, 4])
        # Onsets are positive; the floor only guards against round-off.
        expected_cases = pm.Deterministic(
            "expected_cases", pt.maximum(onsets, 1e-6), dims="day"
        )
        pm.NegativeBinomial(
            "cases", mu=expected_cases, alpha=alpha, observed=observed_cases, dims="day"
        )
    return model


@dataclass(frozen=True)
class SyntheticData:
    """Simulated observations and the true curves behind them."""

    cases: np.ndarray
    expected_cases: np.ndarray
    beta_daily: np.ndarray


def simulate_data(truth: Truth, seed: int) -> SyntheticData:
    """Simulate daily cases by fixing the model's parameters at the truth (``pm.do``).

    Parameters
    ----------
    truth
        The parameter values.
    seed
        Random seed of the negative-binomial noise.

    Returns
    -------
    SyntheticData
    """
    true_model = pm.do(build_model(), truth.as_model_values())
    cases, expected, beta = pm.draw(
        [true_model["cases"], true_model["expected_cases"], true_model["beta_daily"]],
        random_seed=seed,
    )
    return SyntheticData(cases=cases, expected_cases=expected, beta_daily=beta)


def true_point(model: pm.Model, truth: Truth) -> dict[str, np.ndarray]:
    """The true parameters in the model's sampling space (log-transformed ones logged)."""
    point = model.initial_point()
    point.update(
        log_beta=np.log(truth.beta_knots),
        i0_log__=np.log(truth.i0),
        alpha_log__=np.log(truth.alpha),
    )
    return point


def check_model(model: pm.Model, truth: Truth) -> dict[str, tuple[float, np.ndarray]]:
    """logp and its gradient at the initial point and at the true parameters.

    Parameters
    ----------
    model
        The observed model.
    truth
        The true parameter values.

    Returns
    -------
    dict
        ``{"initial point": (logp, dlogp), "truth": (logp, dlogp)}``, computed
        with the default (Numba) linker; all of it should be finite.
    """
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    points = {"initial point": model.initial_point(), "truth": true_point(model, truth)}
    return {name: (float(logp(p)), dlogp(p)) for name, p in points.items()}


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------

SAMPLERS = ("pymc", "nutpie", "numpyro")


@dataclass
class Settings:
    """What to run; built from the command line by :func:`parse_args`."""

    samplers: list[str]
    draws: int
    tune: int
    chains: int
    cores: int
    seed: int
    out: Path


def sample(sampler: str, model: pm.Model, settings: Settings) -> DataTree:
    """Draw from the posterior with one NUTS implementation via ``pm.sample``.

    Parameters
    ----------
    sampler
        ``"pymc"``, ``"nutpie"`` or ``"numpyro"``.
    model
        The observed model.
    settings
        Draws, tuning steps, chains, cores and seed.

    Returns
    -------
    xarray.DataTree
        The posterior.
    """
    options: dict = {}
    if sampler == "numpyro":
        # numpyro's default, "parallel", needs one JAX device per chain and
        # there is one here: it would warn and run the chains one after the
        # other, which is what "sequential" does. ("vectorized" runs them in
        # lockstep, and is slower for an adaptive ODE solve.)
        options = {"nuts": {"chain_method": "sequential"}}
    # PyMC's own NUTS runs its chains in `cores` worker processes. Nothing to
    # pass for them: PyMC's default start method, fork, would deadlock once
    # JAX runs, and pytensor-jax-ofg makes PyMC start them with forkserver
    # instead; they import this script again, hence the `__main__` guard.
    return pm.sample(
        draws=settings.draws,
        tune=settings.tune,
        chains=settings.chains,
        cores=settings.cores,
        random_seed=settings.seed,
        # Progress bars draw on a terminal; written to a file or a pipe they
        # are line after line of truncated columns.
        progressbar=sys.stdout.isatty(),
        # PyMC >= 6 runs nutpie when it is installed unless told otherwise:
        # name the sampler every time.
        nuts_sampler=sampler,
        model=model,
        **options,
    )


def main(argv: Sequence[str] | None = None) -> dict[str, SamplerResult]:
    """Simulate, fit with each sampler, report and plot.

    Parameters
    ----------
    argv
        Command-line arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    dict
        The result of each sampler, by name.
    """
    settings = parse_args(argv)
    truth = Truth()
    data = simulate_data(truth, seed=settings.seed)
    print(
        f"Simulated {N_DAYS} days of cases in a population of {POPULATION:,} "
        f"(total {data.cases.sum():,}, peak {data.cases.max():,}/day)."
    )
    model = pm.observe(build_model(), {"cases": data.cases})
    for name, (logp, grad) in check_model(model, truth).items():
        print(f"logp at the {name}: {logp:.2f}, max |dlogp|: {np.abs(grad).max():.3g}")
    runs = (
        f"{settings.chains} chain(s) of {settings.tune} tuning + {settings.draws} "
        f"draws, cores={settings.cores}"
    )
    print(f"Sampling with {', '.join(settings.samplers)}: {runs}.")

    results = {
        sampler: run_sampler(
            sampler,
            lambda sampler=sampler: sample(sampler, model, settings),
            model,
            truth.beta_knots,
            seed=settings.seed,
        )
        for sampler in settings.samplers
    }
    report(list(results.values()), truth.beta_knots, KNOT_TIMES, runs)
    if any(r.ok for r in results.values()):
        path = plot(
            list(results.values()),
            days=DAYS,
            cases=data.cases,
            expected_cases=data.expected_cases,
            beta_daily=data.beta_daily,
            knot_times=KNOT_TIMES,
            true_knots=truth.beta_knots,
            recovery_rate=RECOVERY_RATE,
            out=settings.out,
        )
        print(f"\nFigure written to {path.resolve()}")
    else:
        print("\nNo sampler succeeded: no figure.")
    return results


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

#: The default run: 4 chains (PyMC's advice for R-hat), long enough for
#: R-hat <= 1.01 and a bulk ESS >= 400 on every knot with each sampler.
DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS, DEFAULT_CORES = 500, 500, 4, 2
#: Where the figure goes unless ``--out`` says otherwise.
OUTPUT = Path(__file__).resolve().parent / "output"


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    """Read the command line; ``--quick`` changes the defaults, not explicit flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--samplers",
        default=None,
        help="comma-separated, from pymc,nutpie,numpyro "
        "(default: all three; with --quick: pymc)",
    )
    parser.add_argument(
        "--draws", type=int, default=None, help=f"default {DEFAULT_DRAWS} (quick: 30)"
    )
    parser.add_argument(
        "--tune", type=int, default=None, help=f"default {DEFAULT_TUNE} (quick: 30)"
    )
    parser.add_argument(
        "--chains", type=int, default=None, help=f"default {DEFAULT_CHAINS} (quick: 1)"
    )
    parser.add_argument(
        "--cores", type=int, default=None, help=f"default {DEFAULT_CORES} (quick: 1)"
    )
    parser.add_argument(
        "--seed", type=int, default=2024, help="data and sampler seed (default 2024)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny smoke run: PyMC's NUTS, 1 chain, 30 tuning + 30 draws",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the figure (PNG; default output/seir_time_varying.png "
        "next to this script, output/seir_time_varying_quick.png with --quick, "
        "so that a smoke run keeps the full run's figure)",
    )
    args = parser.parse_args(argv)

    quick = args.quick
    samplers = args.samplers or ("pymc" if quick else ",".join(SAMPLERS))
    chosen = [s.strip() for s in samplers.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SAMPLERS))
    if unknown:
        parser.error(f"unknown sampler(s) {unknown}; choose from {list(SAMPLERS)}")

    def pick(value: int | None, normal: int, tiny: int) -> int:
        return value if value is not None else (tiny if quick else normal)

    return Settings(
        samplers=chosen,
        draws=pick(args.draws, DEFAULT_DRAWS, 30),
        tune=pick(args.tune, DEFAULT_TUNE, 30),
        chains=pick(args.chains, DEFAULT_CHAINS, 1),
        cores=pick(args.cores, DEFAULT_CORES, 1),
        seed=args.seed,
        out=args.out or OUTPUT / f"seir_time_varying{'_quick' if quick else ''}.png",
    )


if __name__ == "__main__":
    outcome = main()
    sys.exit(0 if all(r.ok for r in outcome.values()) else 1)
