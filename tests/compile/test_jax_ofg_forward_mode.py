"""Forward-mode gradients (``gradient="forward" | "reverse" | "auto"``).

Values and gradients against the direct JAX function (``jax.grad``,
``jax.jacfwd``) and finite differences, in every linker; a diffrax solve with
``adjoint=diffrax.ForwardMode()`` (which reverse mode cannot go through) in
every linker and sampler; the automatic choice; the errors of a forced mode
the function cannot do; inputs that are not differentiated (data, constants)
held constant: no basis direction for them, and no NaN from their infinite
derivatives.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytest
from _conjugate_model import PRIOR_SD, SIGMA, TIMES, A, check_posterior, observed_data
from _linkers import compile_function, jax_op_nodes, without_islands

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.op.transforms import (
    ChosenGradient,
    GradientModeError,
    _reverse_error,
)
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.gradient import DisconnectedInputError
from pytensor.tensor.type import TensorType


MODES = ["forward", "reverse", "auto"]


def finite_difference_gradient(f, x, eps=1e-6):
    x = np.asarray(x, dtype="float64")
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        grad[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


# ------------------------------------------------------ a plain function
def mixed(w, b, k):
    """A matrix, a vector and an integer in; two float outputs and an int one."""
    h = jnp.tanh(w @ b) * k
    return h, jnp.sum(h**2) + jnp.prod(b), jnp.asarray(k * 2, "int64")


def mixed_cost(w, b, k):
    h, s, _ = mixed(w, b, k)
    return jnp.sum(jnp.sin(h)) + s**2


W = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]])
B = np.array([0.7, -1.1, 0.2])


@pytest.mark.parametrize("gradient", MODES)
def test_gradients_match_jax_and_finite_differences(mode, gradient):
    op = as_jax_op(mixed, gradient=gradient)
    w = pt.matrix("w", shape=(2, 3))
    b = pt.vector("b", shape=(3,))
    k = pt.scalar("k", dtype="int64")
    h, s, doubled = op(w, b, k)
    cost = pt.sum(pt.sin(h)) + s**2
    with pytest.raises(DisconnectedInputError):  # as in pytensor.wrap_jax
        pt.grad(cost, k)
    f = compile_function([w, b, k], [cost, doubled, *pt.grad(cost, [w, b])], mode)
    value, doubled_value, grad_w, grad_b = f(W, B, 3)
    assert doubled_value == 6
    np.testing.assert_allclose(value, mixed_cost(W, B, 3), rtol=1e-12)
    expected_w, expected_b = jax.grad(mixed_cost, argnums=(0, 1))(W, B, 3)
    np.testing.assert_allclose(grad_w, expected_w, rtol=1e-10)
    np.testing.assert_allclose(grad_b, expected_b, rtol=1e-10)
    fd = finite_difference_gradient(lambda x: float(mixed_cost(W, x, 3)), B)
    np.testing.assert_allclose(grad_b, fd, rtol=1e-6)


@pytest.mark.parametrize("gradient", ["forward", "reverse"])
def test_forced_mode_gives_the_same_gradient_of_many_inputs(gradient):
    """Many inputs, either mode forced: the same gradient."""
    n = 20
    op = as_jax_op(lambda x: jnp.cumsum(jnp.exp(x)), gradient=gradient)
    x = pt.vector("x", shape=(n,))
    cost = pt.sum(op(x) ** 2)
    f = pytensor.function([x], pt.grad(cost, x))
    value = np.linspace(-1, 1, n)
    expected = jax.grad(lambda v: jnp.sum(jnp.cumsum(jnp.exp(v)) ** 2))(value)
    np.testing.assert_allclose(f(value), expected, rtol=1e-12)


def test_op_identity_includes_the_mode():
    types = [TensorType("float64", shape=(2,))]
    ops = {g: OpFromJax(jnp.sin, types, types, gradient=g) for g in MODES}
    assert ops["forward"] == OpFromJax(jnp.sin, types, types, gradient="forward")
    assert ops["forward"] != ops["reverse"] != ops["auto"] != ops["forward"]
    x = pt.vector("x", shape=(2,))
    assert as_jax_op(jnp.sin, gradient="forward")(x).owner.op.gradient == "forward"
    with pytest.raises(ValueError, match="gradient must be one of"):
        OpFromJax(jnp.sin, types, types, gradient="backward")


# ------------------------------------------------------ the automatic choice
def _mode_at(fn, gradient, *shapes):
    chosen = ChosenGradient(fn, gradient, "f")
    mode, _ = chosen.mode([jax.ShapeDtypeStruct(s, "float64") for s in shapes])
    return mode


def dynamic_loop(x):
    """A loop reverse mode cannot go through (its trip count is a traced value)."""
    n = jnp.asarray(jnp.sum(jnp.abs(x)) > -1, "int32") * 3
    return (jax.lax.fori_loop(0, n, lambda i, y: jnp.sin(y) + x, x),)


@jax.custom_vjp
def reverse_only(x):
    return jnp.sin(x)


reverse_only.defvjp(lambda x: (jnp.sin(x), x), lambda x, ct: (jnp.cos(x) * ct,))


def test_auto_keeps_reverse_mode_where_it_works():
    def plain(x, y):
        return (jnp.sum(x) * y,)

    assert _mode_at(plain, "auto", (2,), (2,)) == "reverse"
    assert _mode_at(plain, "auto", (100,), (100,)) == "reverse"
    assert _mode_at(plain, "forward", (100,), (100,)) == "forward"
    assert _mode_at(plain, "reverse", (2,), (2,)) == "reverse"


def test_auto_takes_forward_mode_when_reverse_mode_fails():
    n = 17
    assert _mode_at(dynamic_loop, "auto", (n,)) == "forward"
    x = pt.vector("x", shape=(n,))
    cost = pt.sum(as_jax_op(dynamic_loop)(x)[0] ** 2)
    f = pytensor.function([x], pt.grad(cost, x))
    value = np.linspace(0.1, 0.9, n)
    expected = jax.jit(jax.grad(lambda v: jnp.sum(dynamic_loop(v)[0] ** 2)))
    with pytest.raises(ValueError, match="Reverse-mode differentiation"):
        expected(value)  # what the test is about
    jacobian = jax.jacfwd(lambda v: dynamic_loop(v)[0])(value)
    np.testing.assert_allclose(
        f(value), 2 * jacobian.T @ dynamic_loop(value)[0], rtol=1e-12
    )


def test_choosing_reverse_mode_traces_no_pullback():
    """The choice reads the linearized function: a transpose (here, the custom
    VJP's backward pass) is traced only where a loop may make it fail."""
    backward_traced = []

    @jax.custom_vjp
    def sine(x):
        return jnp.sin(x)

    def backward(x, cotangent):
        backward_traced.append(x.shape)
        return (jnp.cos(x) * cotangent,)

    sine.defvjp(lambda x: (jnp.sin(x), x), backward)

    def looped_sine(x):
        n = jnp.asarray(jnp.sum(jnp.abs(x)) > -1, "int32") * 3
        return (jax.lax.fori_loop(0, n, lambda i, y: sine(y) + x, x),)

    specs = [jax.ShapeDtypeStruct((3,), "float64")]
    assert _reverse_error(lambda x: (sine(x) * 2.0,), specs) is None
    assert backward_traced == []
    failure = _reverse_error(looped_sine, specs)
    assert failure.startswith("Reverse-mode differentiation does not work")


def test_auto_keeps_reverse_mode_for_a_custom_vjp():
    op = as_jax_op(lambda x: reverse_only(x) * 2.0)  # few inputs: prefers forward
    x = pt.vector("x", shape=(3,))
    f = pytensor.function([x], pt.grad(pt.sum(op(x)), x))
    value = np.array([0.1, 0.5, 2.0])
    np.testing.assert_allclose(f(value), 2 * np.cos(value), rtol=1e-12)


def test_forced_forward_mode_on_a_custom_vjp_names_the_function():
    op = as_jax_op(lambda x: reverse_only(x) * 2.0, name="reverse_only_fn")
    x = pt.vector("x", shape=(3,))
    op_forward = as_jax_op(
        lambda x: reverse_only(x) * 2.0, name="reverse_only_fn", gradient="forward"
    )
    assert op(x).owner.op != op_forward(x).owner.op
    f = pytensor.function([x], pt.grad(pt.sum(op_forward(x)), x))
    with pytest.raises(GradientModeError) as error:
        f(np.ones(3))
    message = str(error.value)
    assert "'reverse_only_fn'" in message
    assert "forward mode (gradient='forward')" in message
    assert "custom_vjp" in message
    assert "Pass gradient='reverse' or 'auto'" in message


def test_forced_reverse_mode_on_a_forward_only_loop_names_the_function(mode):
    op = as_jax_op(dynamic_loop, name="looping", gradient="reverse")
    x = pt.vector("x", shape=(3,))
    with pytest.raises(GradientModeError) as error:
        f = pytensor.function([x], pt.grad(pt.sum(op(x)[0]), x), mode=mode)
        f(np.ones(3))
    message = str(error.value)
    assert "'looping'" in message
    assert "reverse mode (gradient='reverse')" in message
    assert "Reverse-mode differentiation does not work for lax.while_loop" in message
    assert "Pass gradient='forward' or 'auto'" in message


def test_complex_inputs_need_reverse_mode():
    assert _mode_at(lambda x: (jnp.sin(x),), "auto", ()) == "reverse"
    chosen = ChosenGradient(jnp.sin, "forward", "csin")
    with pytest.raises(GradientModeError, match="'csin' has complex inputs"):
        chosen.mode([jax.ShapeDtypeStruct((2,), "complex128")])


# ----------------------------------- inputs that are not differentiated
#: Data where ``sqrt`` has an infinite derivative: a zero tangent meeting it
#: is NaN (``0 * inf``), which forward mode must never compute.
Y_DATA = np.array([0.0, 1.0, 4.0])
THETA_0 = 2.0


def sqrt_data(theta, y):
    return theta * jnp.sqrt(y)


def looped_sqrt_data(theta, y):
    """``2 * sqrt_data``, in a loop reverse mode cannot go through: ``"auto"``
    takes forward mode."""
    n = jnp.asarray(jnp.abs(theta) > -1, "int32") * 2
    return jax.lax.fori_loop(
        0, n, lambda i, total: total + theta * jnp.sqrt(y), jnp.zeros_like(y)
    )


#: Per gradient mode, a function that mode differentiates forward, and its
#: gradient in theta by JAX itself (reverse mode where it goes through).
HELD_CONSTANT = {
    "forward": (sqrt_data, jax.grad),
    "auto": (looped_sqrt_data, jax.jacfwd),
}


def expected_theta_gradient(gradient: str) -> float:
    fn, differentiate = HELD_CONSTANT[gradient]
    expected = differentiate(lambda t: jnp.sum(fn(t, Y_DATA)))(THETA_0)
    fd = finite_difference_gradient(
        lambda t: float(jnp.sum(fn(t[0], Y_DATA))), [THETA_0]
    )
    np.testing.assert_allclose(expected, fd[0], rtol=1e-8)
    data_gradient = jax.grad(lambda y: jnp.sum(sqrt_data(THETA_0, y)))(Y_DATA)
    assert not np.isfinite(data_gradient[0])  # what the test is about
    return float(expected)


def data_graph(gradient: str, data: str):
    """``(inputs, arguments, theta, cost)``: the data a constant or an input."""
    theta = pt.scalar("theta")
    y = pt.vector("y", shape=(3,))
    ys = pt.constant(Y_DATA) if data == "constant" else y
    cost = pt.sum(as_jax_op(HELD_CONSTANT[gradient][0], gradient=gradient)(theta, ys))
    if data == "constant":
        return [theta], [THETA_0], theta, cost
    return [theta, y], [THETA_0, Y_DATA], theta, cost


@pytest.mark.parametrize("data", ["constant", "input"])
@pytest.mark.parametrize("gradient", ["forward", "auto"])
def test_forward_mode_holds_data_constant_at_an_infinite_derivative(
    mode, gradient, data
):
    """``pt.grad(cost, theta)``: the data's gradient, NaN, is not computed."""
    expected = expected_theta_gradient(gradient)
    inputs, arguments, theta, cost = data_graph(gradient, data)
    for compile_mode in {mode, without_islands(mode)}:
        f = compile_function(inputs, [cost, pt.grad(cost, theta)], compile_mode)
        loss = (cost - 1.0) ** 2  # the cotangent needs the value: residuals
        g = compile_function(inputs, [pt.grad(loss, theta)], compile_mode)
        value, gradient_value = f(*arguments)
        np.testing.assert_allclose(value, THETA_0 * expected, rtol=1e-12)
        np.testing.assert_allclose(gradient_value, expected, rtol=1e-12)
        np.testing.assert_allclose(
            g(*arguments)[0], 2 * (value - 1.0) * expected, rtol=1e-12
        )


@pytest.mark.parametrize("data", ["constant", "input"])
@pytest.mark.parametrize("gradient", ["forward", "auto"])
def test_jax_grad_of_a_jax_compiled_graph_holds_data_constant(gradient, data):
    """numpyro's route: the data get symbolic zero tangents from ``jax.grad``."""
    from pymc.sampling.jax import get_jaxified_graph

    expected = expected_theta_gradient(gradient)
    inputs, arguments, _, cost = data_graph(gradient, data)
    jaxified = get_jaxified_graph(inputs, [cost])
    grad = jax.jit(jax.grad(lambda *args: jaxified(*args)[0]))
    np.testing.assert_allclose(grad(*arguments), expected, rtol=1e-12)


def iota_shapes(jaxpr) -> list[tuple[int, ...]]:
    """The shapes of the ``iota``\\ s in ``jaxpr`` and its sub-jaxprs.

    Forward mode's basis, an identity matrix with one row per direction, is
    built from them; the functions below use no other.
    """
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "iota":
            shapes.append(tuple(eqn.params["shape"]))
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else [param]:
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    shapes += iota_shapes(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    shapes += iota_shapes(sub)
    return shapes


def two_parameter_fit(theta, y):
    return theta[0] * jnp.sqrt(y) + theta[1] * jnp.sin(y)


@pytest.mark.parametrize("length", [10, 1000])
@pytest.mark.parametrize("route", ["pullback", "value_and_pullback", "jax.grad"])
def test_forward_mode_directions_do_not_grow_with_the_data(route, length):
    """One basis direction per parameter, at any length of the data."""
    from pymc.sampling.jax import get_jaxified_graph

    data, theta_value = np.linspace(0.0, 3.0, length), np.array([0.5, 1.5])
    theta = pt.vector("theta", shape=(2,))
    y = pt.vector("y", shape=(length,))
    cost = pt.sum(as_jax_op(two_parameter_fit, gradient="forward")(theta, y))
    if route == "jax.grad":
        jaxified = get_jaxified_graph([theta, y], [cost])
        grad = jax.grad(lambda t, v: jaxified(t, v)[0])
        jaxprs = [jax.make_jaxpr(grad)(theta_value, data).jaxpr]
        got = grad(theta_value, data)
    else:
        outputs = [pt.grad(cost, theta)]
        if route == "value_and_pullback":
            outputs.insert(0, cost)
        f = compile_function([theta, y], outputs, without_islands(None))
        # Every op's inputs have static shapes: trace each abstractly.
        jaxprs = [
            jax.make_jaxpr(node.op.jax_callable())(
                *(jax.ShapeDtypeStruct(x.type.shape, x.type.dtype) for x in node.inputs)
            ).jaxpr
            for node in jax_op_nodes(f)
        ]
        got = f(theta_value, data)[-1]
    expected = jax.grad(lambda t: jnp.sum(two_parameter_fit(t, data)))(theta_value)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    shapes = [s for jaxpr in jaxprs for s in iota_shapes(jaxpr)]
    assert shapes, "no forward-mode basis found: not forward mode?"
    assert set(shapes) == {(2, 2)}, shapes


# ------------------------------------------- a diffrax ForwardMode solve
def decay_solve(theta):
    """A two-state linear ODE, theta = (rate, coupling, y0), ForwardMode adjoint."""
    rate, coupling, y0 = theta[0], theta[1], theta[2]
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: jnp.stack([-a[0] * y[0], a[1] * y[0] - y[1]])),
        diffrax.Kvaerno5(),
        t0=0.0,
        t1=2.0,
        dt0=0.05,
        y0=jnp.stack([y0, 0.0]),
        args=(rate, coupling),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.2, 2.0, 6)),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
        adjoint=diffrax.ForwardMode(),
    )
    return solution.ys


THETA = np.array([0.8, 1.3, 2.0])


def decay_cost(theta):
    return jnp.sum(jnp.sin(decay_solve(theta)))


def test_reverse_mode_cannot_go_through_diffrax_forward_mode():
    """What this feature is for (fails today without forward-mode pullbacks)."""
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not"):
        jax.grad(decay_cost)(THETA)


@pytest.mark.parametrize("gradient", ["auto", "forward"])
def test_diffrax_forward_mode_solve_every_linker(mode, gradient):
    op = as_jax_op(decay_solve, gradient=gradient)
    theta = pt.vector("theta", shape=(3,))
    cost = pt.sum(pt.sin(op(theta)))
    expected_grad = jax.jacfwd(decay_cost)(THETA)
    fd = finite_difference_gradient(lambda x: float(decay_cost(x)), THETA)
    np.testing.assert_allclose(expected_grad, fd, rtol=1e-6)
    for compile_mode in {mode, without_islands(mode)}:  # islands and residuals
        f = compile_function([theta], [cost, pt.grad(cost, theta)], compile_mode)
        value, grad = f(THETA)
        np.testing.assert_allclose(value, decay_cost(THETA), rtol=1e-9)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-9)


def test_jax_grad_of_a_jax_compiled_graph_takes_the_ops_mode():
    """numpyro's route: ``jax.grad`` of PyMC's JAX log-density."""
    from pymc.sampling.jax import get_jaxified_logp

    with pm.Model() as model:
        theta = pm.Normal("theta", THETA, 0.1, shape=3)
        ys = as_jax_op(decay_solve)(theta)
        pm.Normal("y", ys, 0.5, observed=np.ones((6, 2)))
    logp = jax.jit(lambda x: get_jaxified_logp(model)([x]))
    grad = jax.jit(jax.grad(logp))(jnp.asarray(THETA))
    fd = finite_difference_gradient(lambda x: float(logp(jnp.asarray(x))), THETA)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


@pytest.mark.parametrize(
    "solve", ["plain", pytest.param("diffrax", marks=pytest.mark.slow)]
)
def test_hessian_through_forward_mode(solve):
    if solve == "plain":
        fn, value = (lambda x: jnp.exp(x) * jnp.roll(x, 1)), np.array([0.3, -0.2, 0.5])
    else:
        fn, value = decay_solve, THETA
    op = as_jax_op(fn, gradient="forward")
    x = pt.vector("x", shape=(3,))
    cost = pt.sum(pt.sin(op(x)))
    f = pytensor.function([x], pytensor.gradient.hessian(cost, x))
    expected = jax.jacfwd(jax.jacfwd(lambda v: jnp.sum(jnp.sin(fn(v)))))(value)
    np.testing.assert_allclose(f(value), expected, rtol=1e-7, atol=1e-10)


# -------------------------------------------------------------- samplers
DRAWS = TUNE = 300


def forward_trajectory(theta):
    """``_conjugate_model``'s solve (y' = A y, y(0) = theta) with the ForwardMode adjoint."""
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: jnp.asarray(A) @ y),
        diffrax.Tsit5(),
        t0=0.0,
        t1=float(TIMES[-1]),
        dt0=0.1,
        y0=theta,
        saveat=diffrax.SaveAt(ts=jnp.asarray(TIMES)),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        adjoint=diffrax.ForwardMode(),
        throw=False,
    )
    return solution.ys


@pytest.fixture(scope="module")
def forward_model():
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD, shape=2)
        mean = as_jax_op(forward_trajectory)(theta)
        pm.Normal("y", mean, SIGMA, observed=observed_data())
    return model


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["nutpie", "pymc", "numpyro"])
def test_samplers_on_a_forward_mode_solve(forward_model, sampler):
    idata = pm.sample(
        nuts_sampler=sampler,
        draws=DRAWS,
        tune=TUNE,
        chains=2,
        cores=1,
        random_seed=1,
        progressbar=False,
        compute_convergence_checks=False,
        model=forward_model,
    )
    check_posterior(idata["posterior"]["theta"].values)


def test_auto_mode_on_both_sides_of_the_threshold_with_unknown_lengths(host_mode):
    """The residual route of one op at a length taking forward mode and at one
    taking reverse mode (its residual dtypes were traced at neither)."""

    def f(v):
        return jnp.interp(0.5, v, jnp.sin(v))

    x = pt.vector("x")
    cost = as_jax_op(f)(x) ** 2  # the cotangent needs the value: residuals
    g = compile_function([x], [cost, pt.grad(cost, x)], without_islands(host_mode))
    for n in (5, 26):
        xv = np.linspace(0.0, 1.0, n)
        value, gradient = g(xv)
        np.testing.assert_allclose(value, f(xv) ** 2)
        np.testing.assert_allclose(gradient, jax.grad(lambda v: f(v) ** 2)(xv))
