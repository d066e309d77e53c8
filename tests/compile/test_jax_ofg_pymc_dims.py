"""PyMC models as modellers write them: ``dims=`` lengths, shared dims, shape errors.

A variable with ``dims="knot"`` has an unknown static length: PyMC keeps it in
a shared variable. These tests cover how the wrapper traces such lengths
(issue 13): at their current size, one symbol per shared dim, honest types
when lengths change, errors in the model's words, and never by evaluating the
model.
"""

import gc
import weakref

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytest
from _linkers import compile_function, jax_op_nodes, without_islands

import pytensor
import pytensor.compile._jax_ofg.tracing.shapes as shapes
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import OpFromJax, ShapeInferenceError, as_jax_op
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.random.type import RandomGeneratorType


RNG = np.random.default_rng(20261213)
KNOT_TIMES = np.linspace(0.0, 10.0, 8)
T_OUT = np.linspace(0.0, 10.0, 5)


# ------------------------------------------------------- the issue's functions
def rate_jax(knot_times, knots):
    return diffrax.LinearInterpolation(ts=knot_times, ys=knots).evaluate


def decay_jax(beta, y0, *, t_out):
    term = diffrax.ODETerm(lambda t, y, _: -beta(t) * y)
    solution = diffrax.diffeqsolve(
        term, diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, saveat=diffrax.SaveAt(ts=t_out)
    )
    return solution.ys


rate = as_jax_op(rate_jax, name="rate")
decay = as_jax_op(decay_jax, name="decay")


def in_values(model, *outputs):
    """The outputs as functions of the model's value variables."""
    return model.replace_rvs_by_values(list(outputs))


def knot_model(n_knots=8):
    return pm.Model(coords={"knot": np.arange(n_knots)})


# =============================================== 1. current lengths as sizes
def test_issue_example_values_and_gradients_every_linker(mode):
    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        beta = rate(KNOT_TIMES, k)  # raised ShapeInferenceError before
        y = decay(beta, 1.0, t_out=T_OUT)
    assert y.type.shape == (5,)  # t_out's length: static
    y, gradient = in_values(model, y, pt.grad(y[-1], k))
    k_value = model.rvs_to_values[k]
    f = compile_function([k_value], [y, gradient], mode)

    knots = 0.2 + 0.1 * RNG.random(8)
    values, grad = f(knots)

    def direct(knots):
        return decay_jax(rate_jax(KNOT_TIMES, knots), 1.0, t_out=T_OUT)

    np.testing.assert_allclose(values, direct(knots), rtol=1e-10)
    np.testing.assert_allclose(
        grad, jax.grad(lambda k: direct(k)[-1])(knots), rtol=1e-8, atol=1e-12
    )


def test_random_walk_over_dims_is_traced_at_the_knot_length():
    """The SEIR example's prior: its shape graph indexes with scalar constants."""
    with knot_model() as model:
        log_beta = pm.GaussianRandomWalk(
            "log_beta", sigma=0.5, init_dist=pm.Normal.dist(0, 1), steps=7, dims="knot"
        )
        daily = rate(KNOT_TIMES, log_beta)(pt.as_tensor(T_OUT))
    assert daily.type.shape == (5,)
    assert daily.owner.op.traced_sizes == {"s0_0": 8}
    (daily_v,) = in_values(model, daily)
    knots = RNG.normal(size=8)
    np.testing.assert_allclose(
        pytensor.function([model.rvs_to_values[log_beta]], daily_v)(knots),
        rate_jax(KNOT_TIMES, knots)(T_OUT),
    )


def test_shared_length_without_pymc_is_traced_at_its_current_size():
    n = pytensor.shared(8, name="n")
    offset = pt.vector("offset", shape=(1,))
    knots = pt.zeros((n,)) + offset
    interpolated = rate(KNOT_TIMES, knots)(pt.as_tensor(T_OUT))
    assert interpolated.type.shape == (5,)
    assert interpolated.owner.op.traced_sizes == {"s0_0": 8}
    np.testing.assert_allclose(interpolated.eval({offset: [2.0]}), np.full(5, 2.0))


@pytest.fixture
def traced(monkeypatch) -> list[str]:
    """The labels of the shape traces tried, in order."""
    labels = []
    original = shapes._attempt

    def record(label, *args):
        labels.append(label)
        return original(label, *args)

    monkeypatch.setattr(shapes, "_attempt", record)
    return labels


def test_current_size_is_not_traced_when_the_symbolic_trace_works(traced):
    @as_jax_op
    def cumulative(x):
        return jnp.cumsum(x)

    with knot_model():
        k = pm.Normal("k", 0, 1, dims="knot")
        out = cumulative(k)
    assert traced == ["symbolic dims"]
    assert out.owner.op.output_dims == (("s0_0",),)
    assert out.owner.op.traced_sizes == {}


def test_static_shapes_trace_once_and_fold_nothing(monkeypatch, traced):
    import pytensor.compile._jax_ofg.tracing.dims as dims

    def fail(*args, **kwargs):
        raise AssertionError("folded a shape graph of a static shape")

    monkeypatch.setattr(dims, "_fold", fail)
    out = as_jax_op(lambda x: 2.0 * x, name="double")(pt.vector("x", shape=(3,)))
    assert out.type.shape == (3,)
    assert traced == ["static shapes"]


# ======================================================= 2. types stay honest
def test_output_dim_equal_to_the_pinned_length_is_no_static_dim(mode):
    @as_jax_op
    def weighted(knot_times, knots):
        return knot_times * knots  # broadcasting pins len(knots) to 8

    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        out = weighted(KNOT_TIMES, k)
    # the output is as long as `knot`: the type does not claim 8 ...
    assert out.type.shape == (None,)
    # ... its shape is the knot length, computed without running JAX
    assert out.owner.op.output_dims == (("s0_0",),)
    assert out.owner.op.traced_sizes == {"s0_0": 8}
    (out_v,) = in_values(model, out)
    f = compile_function([model.rvs_to_values[k]], [out_v, out_v.shape[0]], mode)
    knots = RNG.normal(size=8)
    value, length = f(knots)
    np.testing.assert_allclose(value, KNOT_TIMES * knots)
    assert length == 8


def test_static_only_when_the_current_trace_agrees_too():
    """Stand-ins 3, 12, 60 are all multiples of 3; the current length 8 is not."""

    @as_jax_op
    def by_remainder(x):
        return jnp.zeros(3 if int(x.shape[0]) % 3 == 0 else 5) + x[0]

    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        out = by_remainder(k)
    assert out.type.shape == (None,)  # the stand-ins alone would say (3,)
    (out_v,) = in_values(model, out)
    f = pytensor.function([model.rvs_to_values[k]], out_v)
    np.testing.assert_allclose(f(np.ones(8)), np.ones(5))


def test_set_dim_after_a_symbolic_trace_just_works(mode):
    @as_jax_op
    def normalize(x):
        return (x - jnp.mean(x)) / jnp.std(x)

    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        out = normalize(k)
    (out_v,) = in_values(model, out)
    k_value = model.rvs_to_values[k]
    for n in (8, 11):
        model.set_dim("knot", n, coord_values=np.arange(n))
        f = compile_function([k_value], [out_v, out_v.shape[0]], mode)
        knots = RNG.normal(size=n)
        value, length = f(knots)
        np.testing.assert_allclose(value, (knots - knots.mean()) / knots.std())
        assert length == n


def test_set_dim_past_a_pinned_length_names_the_function_and_dim(mode):
    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        y = decay(rate(KNOT_TIMES, k), 1.0, t_out=T_OUT)
    (y_v,) = in_values(model, y)
    model.set_dim("knot", 10, coord_values=np.arange(10))
    with pytest.raises(Exception) as info:
        f = compile_function([model.rvs_to_values[k]], y_v, mode)
        f(np.full(10, 0.2))
    text = str(info.value) + "\n".join(getattr(info.value, "__notes__", []))
    assert "decay" in text
    assert "dim 0 of input 0: 8" in text


def test_a_wrong_guess_from_the_current_trace_is_a_clear_error(host_mode):
    """Traces only at 8 and gives 8: taken to be the knot length, checked later."""

    @as_jax_op
    def eight_or_ten(x):
        if x.shape[0] not in (8, 10):
            raise ValueError("only 8 or 10")
        return jnp.zeros(8) + jnp.sum(x)

    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        out = eight_or_ten(k)
    assert out.owner.op.output_dims == (("s0_0",),)
    (out_v,) = in_values(model, out)
    f = compile_function([model.rvs_to_values[k]], out_v, host_mode)
    np.testing.assert_allclose(f(np.ones(8)), np.full(8, 8.0))
    model.set_dim("knot", 10, coord_values=np.arange(10))
    f = compile_function([model.rvs_to_values[k]], out_v, host_mode)
    with pytest.raises(TypeError) as info:
        f(np.ones(10))
    message = str(info.value)
    assert "Output 0 of the JAX function 'eight_or_ten' has shape (8,)" in message
    assert "dim 0 was inferred" in message and "s0_0 = 10" in message
    assert "dim 0 of input 0 was 8, is 10" in message


def test_new_lengths_get_their_own_trace():
    @as_jax_op
    def five_or_eight(x):
        if x.shape[0] not in (5, 8):
            raise ValueError("only 5 or 8")
        return 2.0 * x

    ops = {}
    for n in (8, 5, 8):
        with knot_model(n) as model:
            k = pm.Normal("k", 0, 1, dims="knot")
            out = five_or_eight(k)
        op = out.owner.op
        assert op.traced_sizes == {"s0_0": n}
        assert ops.setdefault(n, op) is op  # cached per current length
        (out_v,) = in_values(model, out)
        f = pytensor.function([model.rvs_to_values[k]], out_v)
        np.testing.assert_allclose(f(np.ones(n)), np.full(n, 2.0))
    assert ops[5] is not ops[8]
    model.set_dim("knot", 5, coord_values=np.arange(5))
    assert five_or_eight(k).owner.op is ops[5]


def test_value_and_gradient_of_a_pinned_function_share_one_forward_pass(mode):
    """The residual rewrite traces the VJP at the lengths the op was traced at."""
    calls = []

    @as_jax_op
    def weighted(knot_times, knots):
        jax.debug.callback(lambda: calls.append(1))
        return jnp.sin(knot_times * knots)

    with knot_model() as model:
        k = pm.Normal("k", 0, 1, dims="knot")
        out = weighted(KNOT_TIMES, k)
    cost = (out**2).sum()  # the cotangent needs the value: residuals
    cost, gradient = in_values(model, cost, pt.grad(cost, k))
    f = compile_function(
        [model.rvs_to_values[k]], [cost, gradient], without_islands(mode)
    )
    knots = RNG.normal(size=8)
    f(knots)
    jax.effects_barrier()
    calls.clear()
    value, grad = f(knots)
    jax.effects_barrier()
    assert len(calls) == 1
    if mode != "JAX":
        names = sorted(n.op.name for n in jax_op_nodes(f))
        assert [name.split("(")[0] for name in names] == ["vjp", "weighted"]
        assert names[1].endswith("+residuals")

    def direct(k):
        return jnp.sum(jnp.sin(KNOT_TIMES * k) ** 2)

    np.testing.assert_allclose(value, direct(knots), rtol=1e-12)
    np.testing.assert_allclose(grad, jax.grad(direct)(knots), rtol=1e-12)


# =========================================== 3. one symbol per shared dimension
def test_matmul_over_a_shared_feature_dim_keeps_symbolic_shapes(traced, mode):
    @as_jax_op
    def linear(X, beta):
        return X @ beta

    X_value = RNG.normal(size=(20, 3))
    with pm.Model() as model:
        X = pm.Data("X", X_value, dims=("obs", "feature"))
        beta = pm.Normal("beta", 0, 1, dims="feature")
        mu = linear(X, beta)
    assert traced == ["symbolic dims"]  # no stand-ins, no current lengths
    assert mu.type.shape == (None,)
    assert mu.owner.op.output_dims == (("s0_0",),)
    (mu_v,) = in_values(model, mu)
    f = compile_function([model.rvs_to_values[beta]], [mu_v, mu_v.shape], mode)
    beta_value = RNG.normal(size=3)
    value, shape = f(beta_value)
    np.testing.assert_allclose(value, X_value @ beta_value)
    np.testing.assert_array_equal(shape, [20])


def test_two_variables_with_the_same_dims_share_one_symbol():
    @as_jax_op
    def product(a, b):
        return a * b, jnp.outer(a, b)

    with knot_model():
        k1 = pm.Normal("k1", 0, 1, dims="knot")
        k2 = pm.Normal("k2", 0, 1, dims="knot")
        elementwise, outer = product(k1, k2)
    assert elementwise.owner.op is outer.owner.op
    assert outer.owner.op.output_dims == (("s0_0",), ("s0_0", "s0_0"))
    assert outer.owner.op.traced_sizes == {}


def test_dims_of_the_same_tensor_share_one_symbol_without_pymc():
    @as_jax_op
    def dot(a, b):
        return jnp.dot(a, b)

    x = pt.vector("x")
    out = dot(x, pt.exp(x))
    assert out.type.shape == ()
    xv = RNG.normal(size=4)
    np.testing.assert_allclose(out.eval({x: xv}), xv @ np.exp(xv))


def test_unrelated_unknown_lengths_stay_separate_symbols():
    @as_jax_op
    def outer(a, b):
        return jnp.outer(a, b)

    with knot_model():
        k = pm.Normal("k", 0, 1, dims="knot")
        z = pm.Normal("z", 0, 1, shape=k.shape[0] + 1)
        out = outer(k, z)
    assert out.owner.op.output_dims == (("s0_0", "s1_0"),)


# ================================================== 4. errors in model words
def test_error_names_the_model_variable_dims_and_current_length():
    with knot_model():
        k = pm.Normal("k", 0, 1, dims="knot")
        with pytest.raises(ShapeInferenceError) as info:
            rate(KNOT_TIMES[:7], k)  # 7 knot times, 8 knots
    message = str(info.value)
    assert "'rate(knot_times=float64[7])'" in message
    assert "k (dims ('knot',), length 8 now)" in message
    assert "Must have ts.shape[0] == ys.shape[0]" in message
    assert "traced with input shapes (8,)" in message
    assert (
        "Traced with symbolic dims; the current lengths; stand-in sizes 3, 12, 60"
        in message
    )
    assert "check that they agree with the function's other arguments" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_error_without_a_model_names_the_variable_and_says_to_fix_its_shape():
    x = pt.vector("x")
    with pytest.raises(ShapeInferenceError) as info:
        rate(KNOT_TIMES, x)
    message = str(info.value)
    assert "x (shape (?,), length unknown)" in message
    assert "Traced with symbolic dims; stand-in sizes 3, 12, 60" in message
    assert "pt.specify_shape" in message and "output_types=" in message


def test_error_names_data_dims_and_shared_lengths():
    @as_jax_op
    def needs_ten_rows(X, weights):
        return jnp.zeros(10) + X[:, 0] * weights.sum()

    with pm.Model(coords={"feature": range(3)}):
        X = pm.Data("X", np.ones((20, 3)), dims=("obs", "feature"))
        with pytest.raises(ShapeInferenceError) as info:
            needs_ten_rows(X, pt.ones(X.shape[1]))
    message = str(info.value)
    assert "X (dims ('obs', 'feature'), shape (20, 3) now)" in message
    assert "input 1 (shape (X.shape[1],), length 3 now)" in message


# ============================= 5. pm.set_data, then sample_posterior_predictive
@pytest.mark.parametrize("kind", ["symbolic", "pinned"])
def test_set_data_new_length_then_posterior_predictive(kind, mode):
    """``linear`` traces symbolically; ``at_times`` only at the current lengths."""

    @as_jax_op
    def linear(X, beta):
        return X @ beta

    @as_jax_op
    def at_times(knots, times):
        return rate_jax(KNOT_TIMES, knots)(times)

    X_old, t_old = RNG.normal(size=(20, 3)), np.linspace(0, 10, 20)
    with knot_model():
        X = pm.Data("X", X_old, dims=("obs", "feature"))
        t = pm.Data("t", t_old, dims="obs")
        beta = pm.Normal("beta", 0, 1, dims="feature")
        k = pm.Normal("k", 0, 1, dims="knot")
        mu = linear(X, beta) if kind == "symbolic" else at_times(k, t)
        pm.Normal("y", mu, 1e-3, observed=RNG.normal(size=20), dims="obs")
        prior = pm.sample_prior_predictive(
            draws=4, random_seed=1, compile_kwargs={"mode": mode}
        ).prior

        X_new, t_new = RNG.normal(size=(7, 3)), np.linspace(0.5, 9.5, 7)
        pm.set_data({"X": X_new, "t": t_new})
        predicted = pm.sample_posterior_predictive(
            prior, var_names=["y"], random_seed=2, compile_kwargs={"mode": mode}
        ).posterior_predictive["y"]
    assert predicted.shape == (1, 4, 7)
    if kind == "symbolic":
        expected = prior["beta"].values @ X_new.T
    else:
        expected = np.stack(
            [
                np.asarray(rate_jax(KNOT_TIMES, knots)(t_new))
                for knots in prior["k"].values[0]
            ]
        )[None]
    np.testing.assert_allclose(predicted.values, expected, atol=1e-2)


# ============================================ 6. the model is never evaluated
def test_shape_inference_never_compiles_the_model_graph(monkeypatch):
    from pytensor.compile.maker import FunctionMaker

    compiled = []
    original = FunctionMaker.__init__

    def record(self, inputs, outputs, *args, **kwargs):
        compiled.append(list(outputs))
        return original(self, inputs, outputs, *args, **kwargs)

    def no_jax(self, *args):
        raise AssertionError(f"{self} ran to infer shapes")

    monkeypatch.setattr(FunctionMaker, "__init__", record)
    monkeypatch.setattr(OpFromJax, "host_function", no_jax)
    monkeypatch.setattr(OpFromJax, "buffers_function", no_jax)
    with knot_model():
        k = pm.Normal("k", 0, 1, dims="knot")
        X = pm.Data("X", np.ones((20, 3)), dims=("obs", "feature"))
        decay(rate(KNOT_TIMES, k), 1.0, t_out=T_OUT)
        as_jax_op(lambda x, w: jnp.convolve(x[:, 0], w), name="smooth")(X, k)
    assert compiled  # the current lengths were computed...
    for outputs in compiled:  # ... from shape graphs of data and lengths alone
        variables = [getattr(o, "variable", o) for o in outputs]
        roots = list(graph_inputs(variables))
        assert all(isinstance(r, Constant | SharedVariable) for r in roots), roots
        assert not any(isinstance(r.type, RandomGeneratorType) for r in roots)
        nodes = applys_between(roots, variables)
        assert not any(isinstance(n.op, RandomVariable | OpFromJax) for n in nodes)
        assert all(o.type.dtype.startswith("int") for n in nodes for o in n.outputs)


def test_a_length_that_depends_on_a_random_variable_is_never_evaluated():
    @as_jax_op
    def needs_concrete(x):
        return jnp.convolve(x, jnp.ones(2))

    with pm.Model():
        sigma = pm.HalfNormal("sigma")
        w = pm.Normal("w", 0, 1, shape=pt.cast(pt.round(sigma) + 2, "int64"))
        out = needs_concrete(w)  # stand-ins only
    assert out.type.shape == (None,)
    assert out.owner.op.traced_sizes == {}


def test_shape_memo_does_not_keep_data_alive():
    data = pytensor.shared(np.ones((4, 2)), name="data")
    as_jax_op(lambda x: x.sum(0), name="colsum")(data)
    reference = weakref.ref(data)
    del data
    gc.collect()
    assert reference() is None
