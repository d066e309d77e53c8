"""The PyMC models the benchmarks measure (see ``islands.py`` and ``cold_start.py``).

* ``sir``: 8 knots of a cubic-interpolated transmission rate (a symbolic
  callable) inside a diffrax SIR solve (Tsit5 + PID, 50 daily saves),
  negative-binomial daily cases; ``sir_wrap_jax``: the same with
  ``pytensor.wrap_jax`` (one function for interpolation and solve, as a
  ``wrap_jax`` user writes it); ``sir_pytensor``: the same epidemic in pure
  PyTensor (fixed-step RK4 in ``pytensor.scan``, linear interpolation).
* ``sir_nested``: the same epidemic as a modeller nests it, the tests' model
  (``examples/_sir_models.py``, where the SIR solve and interpolation are defined
  once for both): the 8 log-knots a PyTensor ``cumsum`` of PyMC
  increments, a closure over a cubic interpolation built by one wrapped
  function and called inside a second wrapped function's diffrax solve, left
  with equinox's default checks (``throw=True``; ``EQX_ON_ERROR`` unset:
  ``raise``); ``sir_nested_wrap_jax``: the same with ``pytensor.wrap_jax``.
* ``seir``: the main job's model (``examples/seir_time_varying.py``);
  ``seir_wrap_jax``: the same with ``pytensor.wrap_jax``.
"""

from __future__ import annotations

from collections.abc import Callable

import _room  # noqa: F401  (the checkout's modules; the examples')
import _sir_models
import jax.numpy as jnp
import numpy as np
import pymc as pm

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


SIR_KNOTS = np.linspace(0.0, 50.0, 8)
SIR_DAYS = np.arange(51.0)
SIR_Y0 = _sir_models.SIR_Y0
SIR_TRUE_KNOTS = np.array([0.45, 0.42, 0.35, 0.25, 0.2, 0.24, 0.3, 0.28])
#: The tests' cubic interpolation of knot values: a closure, ``beta(t)``.
sir_rate_jax = _sir_models.interpolate_jax


def sir_solve_jax(beta, y0, days, gamma, *, throw=False):
    """The tests' SIR trajectory; ``throw=False``: a failed solve (during warm-up)
    gives an infinite log-density, a rejection, where diffrax's default raises."""
    return _sir_models.solve_jax(beta, y0, days, gamma, throw=throw)


@as_jax_op
def chain_step(x):
    """One step of the chained-calls graphs (islands' fixed cost, compile scaling)."""
    return jnp.tanh(x) * 1.1


sir_rate = as_jax_op(sir_rate_jax)
sir_solve = as_jax_op(sir_solve_jax)


def sir_trajectory_wrap_jax(knots, gamma):
    """What a ``pytensor.wrap_jax`` user writes: one function, no nesting."""
    beta = sir_rate_jax(SIR_KNOTS, knots)
    return sir_solve_jax(beta, SIR_Y0, SIR_DAYS, gamma)


#: Daily cases simulated from ``SIR_TRUE_KNOTS``, gamma 0.12 and NB(alpha 20)
#: noise (seed 3) with ``sir_trajectory_wrap_jax``; fixed here so that building
#: a model runs no JAX.
SIR_OBSERVED = _sir_models.SIR_NESTED_OBSERVED


def sir_model(trajectory_of: Callable, observed: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        knots = pm.LogNormal("knots", np.log(0.3), 0.3, shape=8)
        gamma = pm.LogNormal("gamma", np.log(0.1), 0.2)
        trajectory = trajectory_of(knots, gamma)
        cases = 10_000.0 * (trajectory[:-1, 0] - trajectory[1:, 0])
        pm.NegativeBinomial("cases", mu=cases, alpha=20.0, observed=observed)
    return model


def sir() -> pm.Model:
    return sir_model(
        lambda k, g: sir_solve(sir_rate(SIR_KNOTS, k), SIR_Y0, SIR_DAYS, g),
        SIR_OBSERVED,
    )


def sir_wrap_jax() -> pm.Model:
    return sir_model(pytensor.wrap_jax(sir_trajectory_wrap_jax), SIR_OBSERVED)


def sir_pytensor(steps_per_day: int = 4) -> pm.Model:
    """The SIR model in pure PyTensor: RK4 in ``scan``, linear interpolation."""
    dt = 1.0 / steps_per_day
    spacing = SIR_KNOTS[1] - SIR_KNOTS[0]

    def trajectory(knots, gamma):
        def beta(t, knots):
            position = pt.clip(t / spacing, 0, len(SIR_KNOTS) - 1 - 1e-9)
            left = pt.cast(pt.floor(position), "int64")
            weight = position - left
            return (1 - weight) * knots[left] + weight * knots[left + 1]

        def rhs(t, y, knots, gamma):
            infections = beta(t, knots) * y[0] * y[1]
            return pt.stack([-infections, infections - gamma * y[1]])

        def step(t, y, knots, gamma):
            k1 = rhs(t, y, knots, gamma)
            k2 = rhs(t + dt / 2, y + dt / 2 * k1, knots, gamma)
            k3 = rhs(t + dt / 2, y + dt / 2 * k2, knots, gamma)
            k4 = rhs(t + dt, y + dt * k3, knots, gamma)
            return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        times = np.arange(len(SIR_DAYS) * steps_per_day - steps_per_day) * dt
        states = pytensor.scan(
            step,
            sequences=[pt.as_tensor(times)],
            outputs_info=[pt.as_tensor(SIR_Y0)],
            non_sequences=[knots, gamma],
            return_updates=False,
        )
        states = pt.concatenate([pt.as_tensor(SIR_Y0)[None], states])
        return states[::steps_per_day]

    return sir_model(trajectory, SIR_OBSERVED)


def sir_nested_trajectory_wrap_jax(log_knots, gamma):
    """``sir_nested`` as a ``pytensor.wrap_jax`` user writes it: one function."""
    beta = _sir_models.interpolated_rate_jax(SIR_KNOTS, log_knots)
    return _sir_models.solve_jax(beta, SIR_Y0, SIR_DAYS, gamma)


def sir_nested() -> pm.Model:
    return _sir_models.sir_nested_model()


def sir_nested_wrap_jax() -> pm.Model:
    return _sir_models.sir_nested_model(
        pytensor.wrap_jax(sir_nested_trajectory_wrap_jax)
    )


def _seir_data():
    import seir_time_varying as seir

    return seir.simulate_data(seir.Truth(), seed=1)


def seir() -> pm.Model:
    import seir_time_varying as seir

    return seir.build_model(_seir_data().cases)


def seir_wrap_jax() -> pm.Model:
    import seir_time_varying as seir

    data = _seir_data()
    ours = seir.build_model(data.cases)

    def states_wrap_jax(log_beta, i0):
        beta = seir.transmission_rate.__wrapped__(seir.KNOT_TIMES, log_beta)
        return seir.solve_seir.__wrapped__(
            beta,
            i0,
            seir.DAYS,
            incubation_rate=seir.INCUBATION_RATE,
            recovery_rate=seir.RECOVERY_RATE,
        )

    solve = pytensor.wrap_jax(states_wrap_jax)
    with pm.Model(coords=ours.coords) as theirs:  # the same model, wrap_jax'd
        log_beta = pm.GaussianRandomWalk(
            "log_beta",
            mu=0.0,
            sigma=seir.RANDOM_WALK_SIGMA,
            init_dist=pm.Normal.dist(np.log(0.4), 0.5),
            steps=seir.N_KNOTS - 1,
            dims="knot",
        )
        i0 = pm.LogNormal("i0", mu=np.log(1e-4), sigma=1.0)
        alpha = pm.Exponential("alpha", scale=20.0)
        states = solve(pt.specify_shape(log_beta, (seir.N_KNOTS,)), i0)
        onsets = seir.POPULATION * pt.diff(states[:, 4])
        pm.NegativeBinomial(
            "cases", mu=pt.maximum(onsets, 1e-6), alpha=alpha, observed=data.cases
        )
    return theirs


def boarding_school() -> pm.Model:
    """Stan's SIR case study (``examples/boarding_school_sir.py``), as its example builds it."""
    import boarding_school_sir as case_study

    return case_study.build_model()


def boarding_school_wrap_jax() -> pm.Model:
    """The case study with ``pytensor.wrap_jax`` around the same diffrax solve."""
    import _vs_stan_models

    return _vs_stan_models.build_model(
        _vs_stan_models.wrap_jax_solver(_vs_stan_models.MAX_STEPS)
    )


def boarding_school_pytensor(steps_per_day: int = 20) -> pm.Model:
    """The same model in pure PyTensor: fixed-step RK4 in ``pytensor.scan``."""
    import _vs_stan_models as case_study

    dt = 1.0 / steps_per_day
    n_steps = int(case_study.DAYS[-1] * steps_per_day)

    def trajectory(beta, gamma):
        def rhs(y, beta, gamma):
            infection = beta * y[1] * y[0] / case_study.N
            recovery = gamma * y[1]
            return pt.stack([-infection, infection - recovery, recovery])

        def step(y, beta, gamma):
            k1 = rhs(y, beta, gamma)
            k2 = rhs(y + dt / 2 * k1, beta, gamma)
            k3 = rhs(y + dt / 2 * k2, beta, gamma)
            k4 = rhs(y + dt * k3, beta, gamma)
            return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        # The rates are passed, not closed over: PyMC replaces them by their
        # value variables in the log-density, which it cannot inside a closure.
        states = pytensor.scan(
            step,
            outputs_info=[pt.as_tensor(case_study.Y0)],
            non_sequences=[beta, gamma],
            n_steps=n_steps,
            return_updates=False,
        )
        return states[steps_per_day - 1 :: steps_per_day]  # days 1..14

    return case_study.build_model(trajectory)


MODELS: dict[str, Callable[[], pm.Model]] = {
    "sir": sir,
    "sir_wrap_jax": sir_wrap_jax,
    "sir_pytensor": sir_pytensor,
    "sir_nested": sir_nested,
    "sir_nested_wrap_jax": sir_nested_wrap_jax,
    "seir": seir,
    "seir_wrap_jax": seir_wrap_jax,
    "boarding_school": boarding_school,
    "boarding_school_wrap_jax": boarding_school_wrap_jax,
    "boarding_school_pytensor": boarding_school_pytensor,
}
