"""Coming from Stan: Stan's ODE settings, starting points and bounds, for PyMC and diffrax.

The toolkit for porting a Stan model whose hard part is an ODE solve: what
carries Stan's settings over, installed with the package and exported by
:mod:`pytensor.compile.jax_ofg`. The how-to "Port a Stan model" explains each
choice.

:func:`diffrax_settings`
    diffrax keyword arguments (``solver``, ``stepsize_controller``, ``dt0``,
    ``max_steps``, ``adjoint``) from the name of Stan's ODE function, its
    tolerances, its ``max_num_steps`` and the number of output times. Stan's
    step budget is *per output interval*; diffrax's ``max_steps`` covers the
    whole solve.
:func:`stan_initvals`
    Starting points as Stan draws them: each unconstrained coordinate uniform
    in (-2, 2), drawn again while the log-density or its gradient is not
    finite (up to 100 times), one dict per chain, for
    ``pm.sample(initvals=...)``.
:func:`stan_bound`
    Stan's bounds on computed quantities (``array[N, 4] real<lower=0> y``):
    a ``pm.Potential`` that rejects a proposal breaking one (-inf) and is 0
    elsewhere.

diffrax and PyMC (the ``examples`` extra) are imported by the functions that
need them, so importing this module (and the facade) needs neither.

Notes
-----
:func:`diffrax_settings`'s ``max_steps`` is ``2 * max_num_steps *
n_outputs``. A solve that Stan accepts takes at most ``max_num_steps``
accepted steps in each interval, so at most ``max_num_steps * n_outputs`` in
all; Stan's budget counts accepted steps (Boost's step checker and CVODES'
``mxstep``), diffrax's counts every attempt, rejected ones too, hence the
factor 2. A solve that needs more than twice Stan's budget in every interval
is rejected by both. (With a total budget, a solve that spends more than
``max_num_steps`` in one interval and few in the others is accepted here and
rejected by Stan.)

Stan's ``ode_adjoint_tol_ctl`` (CVODES' adjoint method, with tolerances for
each of its phases) has no counterpart here: port it as ``ode_bdf_tol`` (or
``ode_adams_tol``) with its forward tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pytensor.tensor as pt


__all__ = [
    "CHECKPOINTS",
    "INIT_ATTEMPTS",
    "STAN_ODE_FUNCTIONS",
    "StanODE",
    "diffrax_settings",
    "stan_bound",
    "stan_initvals",
]


# ---------------------------------------------------------------------------
# Stan's ODE functions and their diffrax counterparts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StanODE:
    """One of Stan's ODE functions: its integrator, defaults and a diffrax counterpart."""

    #: Stan's integrator, in words.
    method: str
    #: The name of a diffrax solver of the same kind (an explicit 5(4) pair,
    #: or an implicit one for stiff problems), looked up in :mod:`diffrax`
    #: when settings are made.
    solver: str
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
    "ode_rk45": StanODE(_RK45, "Dopri5", 1e-6, 1e-6, 10**6, 0.1),
    "ode_rk45_tol": StanODE(_RK45, "Dopri5", None, None, None, 0.1),
    "ode_ckrk": StanODE(_CKRK, "Tsit5", 1e-6, 1e-6, 10**6, 0.1),
    "ode_ckrk_tol": StanODE(_CKRK, "Tsit5", None, None, None, 0.1),
    "ode_adams": StanODE(_ADAMS, "Tsit5", 1e-6, 1e-6, 10**6, None),
    "ode_adams_tol": StanODE(_ADAMS, "Tsit5", None, None, None, None),
    "ode_bdf": StanODE(_BDF, "Kvaerno5", 1e-6, 1e-6, 10**6, None),
    "ode_bdf_tol": StanODE(_BDF, "Kvaerno5", None, None, None, None),
    "integrate_ode_rk45": StanODE(_RK45, "Dopri5", 1e-6, 1e-6, 10**6, 0.1),
    "integrate_ode_adams": StanODE(_ADAMS, "Tsit5", 1e-10, 1e-10, 10**8, None),
    "integrate_ode_bdf": StanODE(_BDF, "Kvaerno5", 1e-10, 1e-10, 10**8, None),
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
    stan_function : str
        Stan's function, a key of :data:`STAN_ODE_FUNCTIONS` (``"ode_rk45"``,
        ``"ode_bdf_tol"``, ``"integrate_ode_bdf"``...).
    rtol, atol, max_num_steps : float, float, int, optional
        Stan's control arguments, positive; ``None`` takes the function's
        default (required for the ``_tol`` forms, as in Stan). ``atol`` may
        be an array, one tolerance per state (diffrax takes that too).
    n_outputs : int
        The number of output times (``size(ts)`` in Stan): Stan's budget is
        ``max_num_steps`` steps per interval between them (from ``t0`` on).
    checkpoints : int or None, optional
        Checkpoints of the reverse pass (:data:`CHECKPOINTS`, 1000); ``None``
        keeps diffrax's default, about ``sqrt(2 * max_steps)`` of them, which
        with a Stan-sized budget makes every gradient slower and larger.

    Returns
    -------
    dict
        ``solver``, ``stepsize_controller``, ``dt0``, ``max_steps`` and
        ``adjoint``, to pass to :func:`diffrax.diffeqsolve` with the terms,
        ``t0``, ``t1``, ``y0`` and ``saveat``.

    ``max_steps`` is ``2 * max_num_steps * n_outputs`` (the module's notes say
    why); Stan's ``ode_adjoint_tol_ctl`` has no counterpart here.

    Examples
    --------
    Stan's ``ode_rk45(f, y0, t0, ts, ...)``, with its defaults:

    >>> import diffrax, jax.numpy as jnp
    >>> from pytensor.compile.jax_ofg import diffrax_settings
    >>> ts = jnp.array([1.0, 2.0, 3.0, 4.0])
    >>> settings = diffrax_settings("ode_rk45", n_outputs=len(ts))
    >>> type(settings["solver"]).__name__, settings["dt0"]
    ('Dopri5', 0.1)
    >>> settings["max_steps"] == 2 * 10**6 * len(ts)  # 1e6 steps per interval
    True
    >>> solution = diffrax.diffeqsolve(
    ...     diffrax.ODETerm(lambda t, y, args: -y), t0=0.0, t1=ts[-1], y0=1.0,
    ...     saveat=diffrax.SaveAt(ts=ts), **settings,
    ... )
    >>> bool(jnp.allclose(solution.ys, jnp.exp(-ts), atol=1e-5))
    True
    """
    try:
        import diffrax
    except ImportError as error:
        raise ImportError(_needs("diffrax_settings", "diffrax")) from error

    spec = _stan_ode(stan_function)
    settings = _controls(
        stan_function,
        spec,
        {"rtol": rtol, "atol": atol, "max_num_steps": max_num_steps},
    )
    if n_outputs < 1:
        raise ValueError(f"n_outputs must be at least 1, got {n_outputs}")
    adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    return {
        "solver": getattr(diffrax, spec.solver)(),
        "stepsize_controller": diffrax.PIDController(
            rtol=settings["rtol"], atol=settings["atol"]
        ),
        "dt0": spec.dt0,
        "max_steps": 2 * int(settings["max_num_steps"]) * int(n_outputs),
        "adjoint": adjoint,
    }


def _stan_ode(stan_function: str) -> StanODE:
    """The entry of :data:`STAN_ODE_FUNCTIONS`, or a ValueError naming them."""
    try:
        return STAN_ODE_FUNCTIONS[stan_function]
    except KeyError:
        known = ", ".join(STAN_ODE_FUNCTIONS)
        hint = (
            " (CVODES' adjoint method has no counterpart here: port it as "
            "ode_bdf_tol or ode_adams_tol with its forward tolerances)"
            if stan_function == "ode_adjoint_tol_ctl"
            else ""
        )
        raise ValueError(
            f"unknown Stan ODE function {stan_function!r}{hint}; one of {known}"
        ) from None


def _controls(stan_function: str, spec: StanODE, given: dict) -> dict:
    """Stan's control arguments: those given, else the function's defaults; checked."""
    settings = {
        name: getattr(spec, name) if value is None else value
        for name, value in given.items()
    }
    missing = [name for name, value in settings.items() if value is None]
    if missing:
        raise ValueError(f"{stan_function} has no default for {', '.join(missing)}")
    for name, value in settings.items():
        # numbers only: a traced or array atol is diffrax's to check
        if isinstance(value, int | float) and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    return settings


def _needs(function: str, package: str) -> str:
    return (
        f"{function} needs {package}, which is not installed: it comes with "
        "the examples extra, `pip install 'pytensor-jax-ofg[examples]'`"
    )


#: Draws per chain before :func:`stan_initvals` gives up, as Stan does.
INIT_ATTEMPTS = 100


def stan_initvals(
    model, chains: int, seed=0, radius: float = 2.0, *, attempts: int = INIT_ATTEMPTS
) -> list[dict[str, np.ndarray]]:
    """Starting points as Stan draws them: uniform in (-radius, radius), unconstrained.

    For each chain, every coordinate of the model's free variables on the
    unconstrained scale (the scale the samplers move on: ``log(sigma)`` for a
    positive ``sigma``) is drawn uniformly in ``(-radius, radius)``, and drawn
    again while the log-density or its gradient is not finite there, up to
    ``attempts`` times -- Stan's rule (``init=2``; numpyro's
    ``init_to_uniform(radius=2)`` draws the same way). The log-density and
    its gradient are compiled once, with the model's other terms
    (``pm.Potential``, :func:`stan_bound`).

    Parameters
    ----------
    model : pymc.Model
        A model whose free variables are all continuous (Stan has no discrete
        parameters).
    chains : int
        The number of points, one per chain.
    seed : int or numpy.random.SeedSequence, optional
        Seeds the draws (:func:`numpy.random.default_rng`): the same seed gives
        the same points.
    radius : float, optional
        Half-width of the interval, 2 in Stan.
    attempts : int, optional
        Draws per chain before giving up (:data:`INIT_ATTEMPTS`, 100 as in
        Stan).

    Returns
    -------
    list of dict
        One dict per chain, keyed by the names of the free variables, with
        values on the constrained scale, as ``pm.sample(initvals=...)`` takes
        them. The log-density and its gradient are finite at every point.

    Raises
    ------
    ValueError
        When no draw of ``attempts`` for a chain gave a finite log-density and
        gradient: the message names the model's free variables and the terms
        that were not finite at the last draw. Or when the model has discrete
        free variables, or ``chains``, ``attempts`` or ``radius`` is not
        positive.

    Examples
    --------
    >>> import numpy as np
    >>> import pymc as pm
    >>> from pytensor.compile.jax_ofg import stan_initvals
    >>> with pm.Model() as model:
    ...     sigma = pm.HalfNormal("sigma", sigma=1.0)
    ...     p = pm.Beta("p", alpha=2.0, beta=2.0)
    >>> points = stan_initvals(model, chains=4, seed=1)
    >>> len(points), sorted(points[0])
    (4, ['p', 'sigma'])
    >>> all(np.exp(-2) < point["sigma"] < np.exp(2) for point in points)
    True

    ``pm.sample(initvals=points)`` starts each chain at its point (nutpie
    takes one dict for all chains and jitters it: ``initvals=points[0]``).
    """
    _check_start_arguments(model, chains, attempts, radius)
    free = list(model.free_RVs)
    value_vars = [model.rvs_to_values[rv] for rv in free]
    shapes = {name: np.shape(value) for name, value in model.initial_point().items()}
    terms = [*model.basic_RVs, *model.potentials]
    function = _start_function(model, free, value_vars, terms)
    rng = np.random.default_rng(seed)
    sizes = [(shapes[v.name], v.dtype) for v in value_vars]
    points = []
    for chain in range(chains):
        point, logps = _start_point(function, rng, radius, sizes, free, attempts)
        if point is None:
            message = _no_start_message(model, chain, attempts, radius, terms, logps)
            raise ValueError(message)
        points.append(point)
    return points


def _start_point(function, rng, radius: float, sizes: list, free: list, attempts: int):
    """A point where the log-density and its gradient are finite (None when no draw
    of ``attempts`` gave one), and the terms' log-densities at the last draw."""
    for _ in range(attempts):
        draw = [rng.uniform(-radius, radius, size=s).astype(d) for s, d in sizes]
        gradient, *rest = function(*draw)
        logps = np.array(rest[: len(rest) - len(free)], dtype=float)
        if np.isfinite(logps.sum()) and np.isfinite(gradient).all():
            values = rest[len(logps) :]
            point = {rv.name: np.array(v) for rv, v in zip(free, values, strict=True)}
            return point, logps
    return None, logps


def _check_start_arguments(model, chains: int, attempts: int, radius: float) -> None:
    if chains < 1 or attempts < 1:
        raise ValueError(
            f"chains and attempts must be at least 1, got {chains} and {attempts}"
        )
    if not radius > 0:
        raise ValueError(f"radius must be positive, got {radius}")
    discrete = [v.name for v in model.discrete_value_vars]
    if discrete:
        raise ValueError(
            "stan_initvals draws continuous parameters, as Stan has no other; "
            f"discrete free variables: {', '.join(discrete)}"
        )


def _start_function(model, free: list, value_vars: list, terms: list):
    """One function, compiled once: the gradient, each term's log-density (their
    sum is the model's, Jacobians included) and the free variables on the
    constrained scale."""
    term_logps = [pt.sum(logp) for logp in model.logp(terms, sum=False)]
    constrained = model.replace_rvs_by_values(free)
    return model.compile_fn(
        [model.dlogp(), *term_logps, *constrained],
        inputs=value_vars,
        point_fn=False,
        on_unused_input="ignore",
    )


def stan_bound(name: str, value, lower=None, upper=None, *, model=None):
    """Stan's bound on a computed quantity: a proposal that breaks it is rejected.

    Stan checks the bounds declared on transformed parameters (``array[N, 4]
    real<lower=0> y = ode_rk45(...);``) every time it evaluates the model, and
    rejects a proposal where one does not hold. This adds the same to the
    model in context: a ``pm.Potential`` named ``name`` that is -inf when any
    element of ``value`` is below ``lower``, above ``upper`` or NaN, and 0
    where every element holds. Where the bound holds, the log-density and its
    gradient are those of the model without it (the potential is a constant
    0 there, and its gradient 0 everywhere); :func:`stan_initvals` draws
    again where it does not hold.

    A potential, not a distribution or a transform: ``value`` is computed
    from the parameters, not a parameter, so a bound on it is a constraint
    on the model (no Jacobian, no change of variables), and not a clip, which
    would change the model where the bound breaks instead of rejecting it.

    Parameters
    ----------
    name : str
        The potential's name (in ``model.potentials``).
    value : TensorVariable or array_like
        The computed quantity: an ODE solution, a transformed parameter.
    lower, upper : float or array_like, optional
        The bounds, inclusive as Stan's (``y >= lower``, ``y <= upper``);
        broadcast against ``value``. At least one.
    model : pymc.Model, optional
        The model to add the potential to; the model in context by default.

    Returns
    -------
    TensorVariable
        ``value``, unchanged, so that a port reads like Stan's declaration:
        ``y = stan_bound("y_nonnegative", solve(...), lower=0)``.

    Examples
    --------
    >>> import numpy as np
    >>> import pymc as pm
    >>> from pytensor.compile.jax_ofg import stan_bound
    >>> with pm.Model() as model:
    ...     k = pm.Normal("k", mu=0.5, sigma=1.0)
    ...     y = stan_bound("y_nonnegative", 1.0 - k * np.arange(3.0), lower=0)
    >>> logp = model.compile_logp()
    >>> prior = pm.logp(pm.Normal.dist(mu=0.5, sigma=1.0), 0.5).eval()
    >>> bool(np.isclose(logp({"k": 0.5}), prior))  # 1 - 0.5 * 2 >= 0: holds
    True
    >>> float(logp({"k": 0.6}))  # 1 - 0.6 * 2 < 0: rejected
    -inf
    """
    try:
        import pymc as pm
    except ImportError as error:
        raise ImportError(_needs("stan_bound", "pymc")) from error

    if lower is None and upper is None:
        raise ValueError(f"stan_bound {name!r}: give lower, upper or both")
    value = pt.as_tensor_variable(value)
    # A comparison with NaN is false: NaN (a failed solve) breaks every bound.
    checks = []
    if lower is not None:
        checks.append(pt.all(pt.ge(value, lower)))
    if upper is not None:
        checks.append(pt.all(pt.le(value, upper)))
    holds = checks[0] if len(checks) == 1 else pt.and_(*checks)
    pm.Potential(name, pt.switch(holds, 0.0, -np.inf), model=model)
    return value


def _no_start_message(model, chain, attempts, radius, terms, logps) -> str:
    variables = []
    for rv in model.free_RVs:
        value_name = model.rvs_to_values[rv].name
        variables.append(
            rv.name if value_name == rv.name else f"{rv.name} (as {value_name})"
        )
    broken = [t.name for t, logp in zip(terms, logps, strict=True)]
    broken = [
        name for name, logp in zip(broken, logps, strict=True) if not np.isfinite(logp)
    ]
    where = (
        f"at the last draw the log-density of {', '.join(broken)} was not finite"
        if broken
        else "at the last draw the gradient was not finite"
    )
    return (
        f"stan_initvals found no starting point for chain {chain}: in {attempts} "
        f"draws uniform in (-{radius:g}, {radius:g}) on the unconstrained scale "
        "the log-density or its gradient was never finite "
        f"({where}). The model's free variables: {', '.join(variables)}. Give "
        "starting points of your own (initvals=..., e.g. each prior's median), "
        "draw in a smaller radius, or check the model's bounds and potentials: "
        "can they all hold at once?"
    )
