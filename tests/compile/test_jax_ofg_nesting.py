"""Nesting: callables returned by wrapped functions, composed by other wrapped functions."""

import diffrax
import equinox as eqx
import interpax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import compile_function, jax_op_nodes

import pytensor
import pytensor.tensor as pt
from examples._sir_models import interpolate_jax, solve_jax
from pytensor.compile.jax_ofg import SymbolicCallable, as_jax_op


RNG = np.random.default_rng(7)
KNOT_TIMES = np.linspace(0.0, 60.0, 8)
DAYS = np.arange(61.0)
Y0 = np.array([0.99, 0.01])


# --- the SIR example, as plain JAX (the reference) and wrapped --------
interpolate = as_jax_op(interpolate_jax)
solve = as_jax_op(solve_jax)


def daily_cases(trajectory, population=10_000.0):
    """New infections per day: the drop in susceptibles."""
    return population * (trajectory[:-1, 0] - trajectory[1:, 0])


def poisson_loglike(rate, observed):
    return jnp.sum(
        observed * jnp.log(rate) - rate - jax.scipy.special.gammaln(observed + 1)
    )


def reference_loglike(knot_values, gamma, observed):
    trajectory = solve_jax(interpolate_jax(KNOT_TIMES, knot_values), Y0, DAYS, gamma)
    return poisson_loglike(daily_cases(trajectory), observed)


def true_knots():
    return 0.35 + 0.1 * np.sin(np.linspace(0, 3, 8))


def test_sir_acceptance_values_and_gradients(mode):
    """The issue's acceptance scenario: 8 knots, 60 days, Poisson likelihood."""
    knots = pt.vector("knots", shape=(8,))
    gamma = pt.scalar("gamma")
    beta_t = interpolate(KNOT_TIMES, knots)
    assert isinstance(beta_t, SymbolicCallable)
    trajectory = solve(beta_t, Y0, DAYS, gamma)
    assert trajectory.type.shape == (61, 2)

    knot_values, gamma_value = true_knots(), 0.12
    clean = daily_cases(
        solve_jax(interpolate_jax(KNOT_TIMES, knot_values), Y0, DAYS, gamma_value)
    )
    observed = np.random.default_rng(0).poisson(np.asarray(clean)).astype("float64")

    rate = 10_000.0 * (trajectory[:-1, 0] - trajectory[1:, 0])
    loglike = pt.sum(observed * pt.log(rate) - rate - pt.gammaln(observed + 1))
    f = compile_function(
        [knots, gamma], [trajectory, loglike, *pt.grad(loglike, [knots, gamma])], mode
    )
    trial_knots, trial_gamma = knot_values * 1.1, 0.1
    traj, ll, grad_knots, grad_gamma = f(trial_knots, trial_gamma)

    np.testing.assert_allclose(
        traj,
        solve_jax(interpolate_jax(KNOT_TIMES, trial_knots), Y0, DAYS, trial_gamma),
        rtol=1e-10,
    )
    expected_ll = reference_loglike(trial_knots, trial_gamma, observed)
    expected_grads = jax.grad(reference_loglike, argnums=(0, 1))(
        trial_knots, trial_gamma, observed
    )
    np.testing.assert_allclose(ll, expected_ll, rtol=1e-10)
    np.testing.assert_allclose(grad_knots, expected_grads[0], rtol=1e-7)
    np.testing.assert_allclose(grad_gamma, expected_grads[1], rtol=1e-7)
    # the nested producer's inputs became inputs of the single solve op
    assert trajectory.owner.op.name == "solve_jax"
    assert trajectory.owner.inputs == [knots, gamma]


def test_calling_a_symbolic_callable_directly(mode):
    knots = pt.vector("knots", shape=(8,))
    beta_t = interpolate(KNOT_TIMES, knots)
    daily_beta = beta_t(DAYS)
    assert daily_beta.type.shape == (61,)
    t = pt.scalar("t")
    at_t = beta_t(t)
    f = compile_function([knots, t], [daily_beta, at_t, pt.grad(at_t, knots)], mode)
    knot_values = true_knots()
    values, value_at, grad = f(knot_values, 12.5)
    reference = interpolate_jax(KNOT_TIMES, knot_values)
    np.testing.assert_allclose(values, jax.vmap(reference)(DAYS))
    np.testing.assert_allclose(value_at, reference(12.5))
    np.testing.assert_allclose(
        grad, jax.grad(lambda k: interpolate_jax(KNOT_TIMES, k)(12.5))(knot_values)
    )


# --- the kinds of callables a wrapped function can return ----------------------
class Scaled(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        return jnp.tanh(self.weight * x)


def returns_kinds(a, ts, ys):
    return {
        "closure": lambda t: a * t**2,
        "module": Scaled(a),
        "interpax": interpax.Interpolator1D(ts, ys, method="cubic"),
        "bound": diffrax.CubicInterpolation(
            ts, diffrax.backward_hermite_coefficients(ts, ys)
        ).evaluate,
        "array": a * 2.0,
    }


def apply_all(functions, t):
    return sum(f(t) for f in functions.values())


def test_every_kind_of_callable(mode):
    a = pt.scalar("a")
    ys = pt.vector("ys", shape=(6,))
    ts = np.linspace(0.0, 5.0, 6)
    out = as_jax_op(returns_kinds)(a, ts, ys)
    array = out.pop("array")
    assert isinstance(array, pytensor.graph.basic.Variable)
    assert all(isinstance(f, SymbolicCallable) for f in out.values())

    t = pt.scalar("t")
    total = as_jax_op(apply_all)(out, t)  # a dict of symbolic callables
    direct = {name: f(t) for name, f in out.items()}
    f = compile_function(
        [a, ys, t],
        [array, total, *direct.values(), *pt.grad(total, [a, ys])],
        mode,
    )
    av, ysv, tv = 0.7, RNG.normal(size=6), 2.3
    results = f(av, ysv, tv)

    reference = returns_kinds(av, ts, ysv)
    np.testing.assert_allclose(results[0], 1.4)
    np.testing.assert_allclose(
        results[1], apply_all({k: v for k, v in reference.items() if k != "array"}, tv)
    )
    for got, name in zip(results[2:6], direct):
        np.testing.assert_allclose(got, reference[name](tv), err_msg=name)

    def reference_total(av, ysv):
        kinds = returns_kinds(av, ts, ysv)
        kinds.pop("array")
        return apply_all(kinds, tv)

    grad_a, grad_ys = jax.grad(reference_total, argnums=(0, 1))(av, ysv)
    np.testing.assert_allclose(results[6], grad_a, rtol=1e-10)
    np.testing.assert_allclose(results[7], grad_ys, rtol=1e-10)


def test_non_callable_module_comes_back_with_symbolic_leaves(mode):
    """A diffrax.LinearInterpolation is a pytree: its arrays become variables."""

    @as_jax_op
    def linear(ts, ys):
        return diffrax.LinearInterpolation(ts, ys)

    @as_jax_op
    def integrate(path, t1):
        return jax.vmap(path.evaluate)(jnp.linspace(0.0, t1, 11)).sum()

    ys = pt.vector("ys", shape=(5,))
    path = linear(np.linspace(0.0, 4.0, 5), ys)
    assert isinstance(path, diffrax.LinearInterpolation)
    assert path.ys.type.shape == (5,)
    total = integrate(path, 3.0)
    f = compile_function([ys], [total, pt.grad(total, ys)], mode)
    ysv = RNG.normal(size=5)

    def reference(ysv):
        path = diffrax.LinearInterpolation(jnp.linspace(0.0, 4.0, 5), ysv)
        return jax.vmap(path.evaluate)(jnp.linspace(0.0, 3.0, 11)).sum()

    value, grad = f(ysv)
    np.testing.assert_allclose(value, reference(ysv))
    np.testing.assert_allclose(grad, jax.grad(reference)(ysv))


# --- recursion and reuse --------------------------------------------------------
@as_jax_op
def seasonal(beta_t, amplitude):
    """A forcing function that itself calls an interpolator."""
    return lambda t: beta_t(t) * (1.0 + amplitude * jnp.sin(2 * jnp.pi * t / 30.0))


def test_recursive_nesting_and_reuse(mode):
    knots = pt.vector("knots", shape=(8,))
    amplitude, gamma = pt.scalar("amplitude"), pt.scalar("gamma")
    beta_t = interpolate(KNOT_TIMES, knots)
    forced = seasonal(beta_t, amplitude)
    days = DAYS[:31]
    traj_forced = solve(forced, Y0, days, gamma)
    traj_plain = solve(beta_t, Y0, days, gamma)
    # the same symbolic callable twice in one call
    both = as_jax_op(lambda f, g, t: f(t) + g(t))(beta_t, beta_t, pt.constant(3.0))
    cost = traj_forced[:, 1].sum() + traj_plain[:, 1].sum() + both
    f = compile_function(
        [knots, amplitude, gamma],
        [traj_forced, traj_plain, both, *pt.grad(cost, [knots, amplitude, gamma])],
        mode,
    )
    kv, av, gv = true_knots(), 0.2, 0.1

    def reference(kv, av, gv):
        beta = interpolate_jax(KNOT_TIMES, kv)

        def forced(t):
            return beta(t) * (1.0 + av * jnp.sin(2 * jnp.pi * t / 30.0))

        tf = solve_jax(forced, Y0, days, gv)
        tp = solve_jax(beta, Y0, days, gv)
        return tf, tp, 2 * beta(3.0)

    tf, tp, b, *grads = f(kv, av, gv)
    rf, rp, rb = reference(kv, av, gv)
    np.testing.assert_allclose(tf, rf, rtol=1e-10)
    np.testing.assert_allclose(tp, rp, rtol=1e-10)
    np.testing.assert_allclose(b, rb)

    def reference_cost(kv, av, gv):
        tf, tp, b = reference(kv, av, gv)
        return tf[:, 1].sum() + tp[:, 1].sum() + b

    expected = jax.grad(reference_cost, argnums=(0, 1, 2))(kv, av, gv)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-7)


def test_readable_repr_names_nested_producers():
    knots = pt.vector("knots", shape=(8,))
    amplitude, gamma = pt.scalar("amplitude"), pt.scalar("gamma")
    forced = seasonal(interpolate(KNOT_TIMES, knots), amplitude)
    traj = solve(forced, Y0, DAYS, gamma)
    text = repr(traj.owner.op)
    described = "solve_jax(beta_t=seasonal, y0=float64[2], t_out=float64[61])"
    assert text.startswith(f"OpFromJax({described}, inputs=[Vector(float64")
    assert "0x" not in text
    producer = traj.owner.op.fn.leaves[0].producer
    assert producer.describe() == "seasonal(beta_t=interpolate_jax)"
    printed = pytensor.dprint(traj, file="str")
    assert f"OpFromJax{{{described}}}" in printed
    assert "0x" not in printed


def test_equal_producers_give_equal_ops():
    knots = pt.vector("knots", shape=(8,))
    gamma = pt.scalar("gamma")
    first = solve(interpolate(KNOT_TIMES, knots), Y0, DAYS, gamma)
    second = solve(interpolate(KNOT_TIMES, knots), Y0, DAYS, gamma)
    other = solve(interpolate(KNOT_TIMES * 0.5, knots), Y0, DAYS, gamma)
    assert first.owner.op == second.owner.op
    assert hash(first.owner.op) == hash(second.owner.op)
    assert first.owner.op != other.owner.op
    f = pytensor.function([knots, gamma], first + second, mode="CVM")
    assert len(jax_op_nodes(f)) == 1


def test_symbolic_callable_in_a_pytensor_expression_is_a_clear_error():
    beta_t = interpolate(KNOT_TIMES, pt.vector("knots", shape=(8,)))
    message = r"SymbolicCallable\(interpolate_jax\) is a function, not a tensor.*Call it with tensors"
    with pytest.raises(TypeError, match=message):
        pt.exp(beta_t)
    with pytest.raises(TypeError, match=message):
        pt.vector("x") + beta_t
    # PyTensor's own check names it too
    with pytest.raises(
        TypeError, match=r"Received SymbolicCallable\(interpolate_jax\)"
    ):
        pytensor.function([], beta_t)
