"""Foundation: values, pytrees, static arguments, types, gradients, safety, errors."""

import warnings
from collections import namedtuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import LINKER_MODES, compile_function, jax_op_nodes

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import (
    OpFromJax,
    ShapeInferenceError,
    WrappedFunctionRuntimeWarning,
    as_jax_op,
)
from pytensor.gradient import (
    DisconnectedInputError,
    DisconnectedType,
    hessian,
    pushforward,
    verify_grad,
)
from pytensor.tensor.type import TensorType


RNG = np.random.default_rng(20261130)


def jax_model(params, x, kind="tanh"):
    h = params["w"] @ x + params["b"]
    h = jnp.tanh(h) if kind == "tanh" else h
    return {"mean": h, "norm": jnp.sum(h**2)}


model = as_jax_op(jax_model)


def model_inputs():
    w = pt.matrix("w", shape=(2, 3))
    b = pt.vector("b", shape=(2,))
    x = pt.vector("x", shape=(3,))
    values = [RNG.normal(size=(2, 3)), RNG.normal(size=2), RNG.normal(size=3)]
    return (w, b, x), values


def only_op(fn):
    """The single OpFromJax node of a compiled function's graph."""
    return jax_op_nodes(fn)


# --------------------------------------------------------------------- values
def test_values_and_gradient_every_linker(mode):
    (w, b, x), (wv, bv, xv) = model_inputs()
    out = model({"w": w, "b": b}, x, kind="tanh")
    f = compile_function([w, b, x], [out["mean"], pt.grad(out["norm"], w)], mode)
    mean, grad_w = f(wv, bv, xv)

    expected = jax_model({"w": wv, "b": bv}, xv)
    expected_grad = jax.grad(lambda w: jax_model({"w": w, "b": bv}, xv)["norm"])(wv)
    np.testing.assert_allclose(mean, expected["mean"], rtol=1e-12)
    np.testing.assert_allclose(grad_w, expected_grad, rtol=1e-12)


def test_default_mode_is_numba_and_warns_nothing(recwarn):
    (w, b, x), values = model_inputs()
    out = model({"w": w, "b": b}, x)
    f = pytensor.function([w, b, x], out["norm"])
    assert type(f.maker.linker).__name__ == "NumbaLinker"
    assert not [w for w in recwarn if "object mode" in str(w.message)]
    np.testing.assert_allclose(
        f(*values), jax_model({"w": values[0], "b": values[1]}, values[2])["norm"]
    )


def test_jax_linker_composes_the_inner_function():
    """Under JAX the op is traced into the graph's computation, not called back."""
    traces = []

    @as_jax_op
    def traced(x):
        traces.append(1)  # runs only while JAX traces
        return jnp.sin(x) * 2

    x = pt.vector("x", shape=(3,))
    f = pytensor.function([x], traced(x) + 1, mode="JAX")
    n_before = len(traces)
    for _ in range(3):
        np.testing.assert_allclose(f(np.ones(3)), np.sin(1.0) * 2 + 1)
    # Traced once when first called, then XLA runs it: no Python per call.
    assert len(traces) - n_before == 1


def test_float32_stays_float32_and_ints_stay_ints(mode):
    @as_jax_op
    def mixed(x, n):
        return x * 2, n + 1, jnp.sum(x.astype(jnp.float64))

    x = pt.vector("x", dtype="float32", shape=(3,))
    n = pt.scalar("n", dtype="int32")
    y, m, s = mixed(x, n)
    assert (y.type.dtype, m.type.dtype, s.type.dtype) == ("float32", "int32", "float64")
    f = compile_function([x, n], [y, m, s], mode)
    yv, mv, sv = f(np.ones(3, dtype="float32"), np.int32(4))
    assert (yv.dtype, mv.dtype, sv.dtype) == (np.float32, np.int32, np.float64)
    np.testing.assert_array_equal(yv, 2 * np.ones(3))
    assert mv == 5


def test_float64_stays_float64_without_the_jax_linker():
    """x64 is enabled by importing the module, not by PyTensor's JAX backend."""
    assert jax.config.jax_enable_x64

    @as_jax_op
    def precise(x):
        return x + 1e-12

    x = pt.scalar("x")
    out = precise(x)
    assert out.type.dtype == "float64"
    assert pytensor.function([x], out, mode="CVM")(1.0) != 1.0


# -------------------------------------------------------------------- pytrees
Pair = namedtuple("Pair", ["first", "second"])


def jax_pytree_fn(inputs, scale):
    (a, b), rest = inputs
    return {
        "pair": Pair(a * scale, jnp.sum(b)),
        "nested": [(rest["c"] + 1,), {"d": a[:2]}],
        "label": "kept",
        "count": 3,
        "nothing": None,
    }


def test_pytrees_in_and_out(mode):
    a, b, c = pt.vector("a", shape=(3,)), pt.matrix("b"), pt.scalar("c")
    out = as_jax_op(jax_pytree_fn)(((a, b), {"c": c}), 2.5)
    assert isinstance(out["pair"], Pair)
    assert out["label"] == "kept" and out["count"] == 3 and out["nothing"] is None
    leaves = [
        out["pair"].first,
        out["pair"].second,
        out["nested"][0][0],
        out["nested"][1]["d"],
    ]
    f = compile_function([a, b, c], leaves, mode)
    av, bv, cv = RNG.normal(size=3), RNG.normal(size=(2, 4)), 0.5
    expected = jax_pytree_fn(((av, bv), {"c": cv}), 2.5)
    results = f(av, bv, cv)
    for got, want in zip(
        results,
        [
            expected["pair"].first,
            expected["pair"].second,
            expected["nested"][0][0],
            expected["nested"][1]["d"],
        ],
    ):
        np.testing.assert_allclose(got, want)


class Affine(eqx.Module):
    weight: object
    bias: object
    activation: object = eqx.field(static=True, default=jnp.tanh)

    def __call__(self, x):
        return self.activation(self.weight @ x + self.bias)


def test_equinox_module_with_symbolic_leaves(mode):
    w = pt.matrix("w", shape=(2, 3))
    x = pt.vector("x", shape=(3,))
    bias = np.array([0.1, -0.2])  # a static array leaf inside the module
    layer = Affine(w, bias)

    @as_jax_op
    def apply(layer, x):
        return layer(x)

    y = apply(layer, x)
    f = compile_function([w, x], [y, pt.grad(y.sum(), w)], mode)
    wv, xv = RNG.normal(size=(2, 3)), RNG.normal(size=3)
    value, grad = f(wv, xv)
    np.testing.assert_allclose(value, Affine(wv, bias)(xv))
    np.testing.assert_allclose(
        grad, jax.grad(lambda w: Affine(w, bias)(xv).sum())(wv), rtol=1e-12
    )


def test_non_tensor_symbolic_argument_is_rejected():
    rng = pytensor.shared(np.random.default_rng())

    @as_jax_op
    def f(x):
        return x

    with pytest.raises(
        TypeError, match=r"JAX function 'f' was given .* only tensor variables"
    ):
        f(rng)


# ----------------------------------------------------------- static arguments
def test_equal_static_arguments_give_equal_ops():
    (w, b, x), _ = model_inputs()
    ops = []
    for kind in ["tanh", "tanh", "linear"]:
        out = as_jax_op(jax_model)({"w": w, "b": b}, x, kind=kind)
        ops.append(out["norm"].owner.op)
    assert ops[0] == ops[1] and hash(ops[0]) == hash(ops[1])
    assert ops[0] != ops[2]


@pytest.mark.parametrize(
    "first, second, equal",
    [
        (2, 2, True),
        (2, 3, False),
        (2, 2.0, False),  # int and float are different static values
        (np.arange(3.0), np.arange(3.0), True),
        (np.arange(3.0), np.arange(3.0) + 1, False),
        (np.arange(3.0), np.arange(3.0).astype("float32"), False),
        (jnp.arange(3.0), np.arange(3.0), True),  # same dtype, shape and bytes
        ("abc", "abc", True),
        (None, None, True),
        (jnp.sin, jnp.sin, True),
        (jnp.sin, jnp.cos, False),
        (float("nan"), float("nan"), True),
    ],
)
def test_static_argument_identity(first, second, equal):
    def fn(x, static):
        return x * 1.0

    wrapped = as_jax_op(fn)
    x = pt.vector("x", shape=(2,))
    op1 = wrapped(x, first).owner.op
    op2 = wrapped(x, second).owner.op
    assert (op1 == op2) is equal
    if equal:
        assert hash(op1) == hash(op2)


def test_unhashable_static_argument_is_compared_by_identity():
    class Config:  # unhashable on purpose
        __hash__ = None

        def __init__(self, factor):
            self.factor = factor

    @as_jax_op
    def scaled(x, config):
        return x * config.factor

    x = pt.scalar("x")
    config = Config(3.0)
    y1, y2, y3 = scaled(x, config), scaled(x, config), scaled(x, Config(3.0))
    assert y1.owner.op == y2.owner.op
    assert y1.owner.op != y3.owner.op
    assert pytensor.function([x], y1, mode="FAST_COMPILE")(2.0) == 6.0


def test_static_values_are_baked_in(mode):
    @as_jax_op
    def poly(x, coefficients, *, power):
        return jnp.polyval(coefficients, x) ** power

    x = pt.vector("x", shape=(4,))
    coefficients = np.array([1.0, -2.0, 0.5])
    f = compile_function([x], poly(x, coefficients, power=2), mode)
    xv = RNG.normal(size=4)
    np.testing.assert_allclose(f(xv), np.polyval(coefficients, xv) ** 2)


def test_merge_of_equal_calls(mode):
    (w, b, x), values = model_inputs()
    out1 = model({"w": w, "b": b}, x)["norm"]
    out2 = model({"w": w, "b": b}, x)["norm"]
    # the very same op: one jitted function, built once
    assert out1.owner.op is out2.owner.op
    f = compile_function([w, b, x], out1 + out2, mode)
    assert len(only_op(f)) == 1
    expected = 2 * jax_model({"w": values[0], "b": values[1]}, values[2])["norm"]
    np.testing.assert_allclose(f(*values), expected)


# ------------------------------------------------------------- type inference
def test_symbolic_dims_keep_constant_dims_static():
    @as_jax_op
    def shapes(x, y):
        return jnp.sum(x), jnp.outer(x, y), jnp.concatenate([x, x]), x[:3], x[1:]

    x, y = pt.vector("x"), pt.vector("y", shape=(3,))
    total, outer, doubled, head, tail = shapes(x, y)
    assert tail.type.shape == (None,)
    assert total.type.shape == ()
    assert outer.type.shape == (None, 3)
    assert doubled.type.shape == (None,)
    assert head.type.shape == (None,)
    op = total.owner.op
    assert op.output_dims == (
        (),
        ("s0_0", 3),
        ("2*s0_0",),
        ("min(s0_0, 3)",),
        ("s0_0 - 1",),
    )


def test_issue_example_running_mean(mode):
    @as_jax_op
    def smooth(y):
        return jnp.cumsum(y) / jnp.arange(1, y.shape[0] + 1), jnp.sum(y)

    y = pt.vector("y")
    s, total = smooth(y)
    assert s.type.shape == (None,) and total.type.shape == ()
    f = compile_function([y], [s, total], mode)
    for n in [1, 4, 9]:
        yv = RNG.normal(size=n)
        sv, tv = f(yv)
        np.testing.assert_allclose(sv, np.cumsum(yv) / np.arange(1, n + 1))
        np.testing.assert_allclose(tv, yv.sum())


def test_infer_shape_does_not_run_jax(mode, monkeypatch):
    @as_jax_op
    def shapes(x, y):
        return jnp.outer(jnp.concatenate([x, x]), y), x[:3]

    x, y = pt.vector("x"), pt.matrix("y")
    outer, head = shapes(x, y.ravel())

    def fail(*args, **kwargs):
        raise AssertionError("JAX ran to compute a shape")

    monkeypatch.setattr(OpFromJax, "perform", fail)
    monkeypatch.setattr(OpFromJax, "host_function", fail)
    monkeypatch.setattr(OpFromJax, "buffers_function", fail)
    f = compile_function([x, y], [outer.shape, head.shape], mode)
    assert not only_op(f)
    outer_shape, head_shape = f(np.ones(5), np.ones((2, 3)))
    np.testing.assert_array_equal(outer_shape, [10, 6])
    np.testing.assert_array_equal(head_shape, [3])


def test_shared_variable_changing_length(mode):
    data = pytensor.shared(np.arange(4.0), name="data")

    @as_jax_op
    def normalize(x):
        return (x - jnp.mean(x)) / jnp.std(x)

    out = normalize(data)
    assert out.type.shape == (None,)
    f = compile_function([], [out, out.shape[0]], mode)
    for n in [4, 7]:
        values = np.linspace(0, 1, n) ** 2
        data.set_value(values)
        z, length = f()
        np.testing.assert_allclose(z, (values - values.mean()) / values.std())
        assert length == n


def test_symbolic_failure_falls_back_to_static_shape_inference():
    """``jnp.convolve`` needs concrete sizes; PyTensor proves the input has length 5."""
    sort = OpFromJax(
        jnp.sort,
        [TensorType("float64", shape=(None,))],
        [TensorType("float64", shape=(None,))],
        output_dims=(("s0_0",),),  # the output is as long as the input
    )
    x = pt.vector("x", shape=(5,))
    sorted_x = sort(x)
    assert sorted_x.type.shape == (None,)  # the type forgot the length...

    @as_jax_op
    def smooth(x):
        return jnp.convolve(x, jnp.ones(3) / 3, mode="valid")

    out = smooth(sorted_x)
    assert out.type.shape == (3,)  # ...static shape inference found it
    xv = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    np.testing.assert_allclose(
        out.eval({x: xv}), np.convolve(np.sort(xv), np.ones(3) / 3, "valid")
    )


def test_symbolic_failure_falls_back_to_stand_in_sizes(mode):
    @as_jax_op
    def smooth(x, y):
        # x + y needs x and y of equal length, which separate symbols cannot prove
        return jnp.convolve(x + y, jnp.ones(3) / 3, mode="same"), jnp.ones(4) * x[0]

    x, y = pt.vector("x"), pt.vector("y")
    smoothed, constant_dim = smooth(x, y)
    assert smoothed.type.shape == (None,)
    assert constant_dim.type.shape == (4,)
    f = compile_function([x, y], [smoothed, smoothed.shape[0]], mode)
    xv, yv = RNG.normal(size=6), RNG.normal(size=6)
    value, length = f(xv, yv)
    np.testing.assert_allclose(value, np.convolve(xv + yv, np.ones(3) / 3, "same"))
    assert length == 6


def test_inference_never_evaluates_the_graph(monkeypatch):
    from pytensor.compile.maker import FunctionMaker

    def fail(*args, **kwargs):
        raise AssertionError("the graph was compiled to infer shapes")

    monkeypatch.setattr(FunctionMaker, "__init__", fail)

    @as_jax_op
    def smooth(x):
        return jnp.convolve(x, jnp.ones(2), mode="full")

    x = pt.vector("x")
    out = smooth(pt.exp(x))
    assert out.type.shape == (None,)


def test_data_dependent_shape_error_says_what_to_do():
    @as_jax_op
    def positives(x):
        return x[x > 0]

    with pytest.raises(ShapeInferenceError) as info:
        positives(pt.vector("x", shape=(4,)))
    message = str(info.value)
    assert "'positives'" in message and "depends on input values" in message
    assert "output_types=" in message and "pt.specify_shape" in message
    assert "Vector(float64, shape=(4,))" in message


def test_exception_while_tracing_is_chained_with_input_types():
    @as_jax_op
    def broken(x):
        raise RuntimeError("boom from user code")

    with pytest.raises(ShapeInferenceError) as info:
        broken(pt.matrix("x", shape=(2, 2)))
    assert "'broken'" in str(info.value) and "boom from user code" in str(info.value)
    assert "Matrix(float64, shape=(2, 2))" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_wrong_arguments_error_names_the_function():
    (w, b, x), _ = model_inputs()
    with pytest.raises(
        TypeError,
        match=r"'jax_model'\(params, x, kind='tanh'\) was called with wrong arguments",
    ):
        model({"w": w, "b": b})
    with pytest.raises(
        TypeError, match=r"'jax_model'.*unexpected keyword argument 'knd'"
    ):
        model({"w": w, "b": b}, x, knd="tanh")


# -------------------------------------------------------------- explicit types
def test_op_from_jax_directly(mode):
    op = OpFromJax(
        lambda x, y: (x * y, jnp.sum(x)),
        [TensorType("float64", shape=(None,)), TensorType("float64", shape=(None,))],
        [TensorType("float64", shape=(None,)), TensorType("float64", shape=())],
        name="mul_and_sum",
    )
    x, y = pt.vector("x"), pt.vector("y")
    product, total = op(x, y)
    assert str(op) == "OpFromJax{mul_and_sum}"
    f = compile_function(
        [x, y], [product, total, pt.grad(total + product.sum(), x)], mode
    )
    xv, yv = RNG.normal(size=5), RNG.normal(size=5)
    p, t, g = f(xv, yv)
    np.testing.assert_allclose(p, xv * yv)
    np.testing.assert_allclose(t, xv.sum())
    np.testing.assert_allclose(g, 1 + yv)


def test_op_from_jax_bare_array_output(mode):
    op = OpFromJax(
        jnp.cumsum,
        [TensorType("float64", shape=(3,))],
        TensorType("float64", shape=(3,)),
    )
    x = pt.vector("x", shape=(3,))
    f = compile_function([x], op(x), mode)
    np.testing.assert_allclose(f(np.ones(3)), [1, 2, 3])


def test_explicit_output_types_win_over_inference(mode, monkeypatch):
    import pytensor.compile._jax_ofg.op.wrapper as jax_ofg

    def fail(*args, **kwargs):
        raise AssertionError("traced despite explicit output_types")

    monkeypatch.setattr(jax_ofg, "trace_output_types", fail)

    @as_jax_op(output_types={"y": pt.dvector().type, "total": pt.dscalar().type})
    def f(x):
        return {"y": jnp.sort(x), "total": jnp.sum(x)}

    x = pt.vector("x")
    out = f(x)
    fn = compile_function([x], [out["y"], out["total"]], mode)
    y, total = fn(np.array([3.0, 1.0, 2.0]))
    np.testing.assert_allclose(y, [1, 2, 3])
    assert total == 6


def test_output_types_as_callable_of_input_types():
    calls = []

    def types_of(x, *, repeats):
        calls.append((x, repeats))
        return TensorType(x.dtype, shape=(None,))

    @as_jax_op(output_types=types_of)
    def repeat(x, *, repeats):
        return jnp.repeat(x, repeats)

    x = pt.vector("x", dtype="float32")
    y = repeat(x, repeats=2)
    assert calls == [(x.type, 2)]
    assert y.type.dtype == "float32"
    np.testing.assert_allclose(
        y.eval({x: np.array([1, 2], dtype="float32")}), [1, 1, 2, 2]
    )


def test_runtime_output_disagreeing_with_declared_type(host_mode):
    mode = host_mode
    op = OpFromJax(
        lambda x: x[:2],
        [TensorType("float64", shape=(None,))],
        [TensorType("float64", shape=(3,))],
        name="too_short",
    )
    x = pt.vector("x")
    f = compile_function([x], op(x), mode)
    with pytest.raises(
        TypeError,
        match=r"Output 0 of the JAX function 'too_short' has dtype float64 and shape \(2,\), but the op declares",
    ):
        f(np.ones(5))


def test_runtime_dtype_mismatch_under_jax_linker():
    op = OpFromJax(
        lambda x: x.astype(jnp.float32),
        [TensorType("float64", shape=(None,))],
        [TensorType("float64", shape=(None,))],
        name="narrowing",
    )
    x = pt.vector("x")
    with pytest.raises(
        TypeError, match=r"Output 0 of the JAX function 'narrowing' has dtype float32"
    ):
        pytensor.function([x], op(x), mode="JAX")(np.ones(2))


# -------------------------------------------------------------- reverse mode
def test_verify_grad_finite_differences(mode):
    @as_jax_op
    def energy(x, y):
        return jnp.sum(jnp.sin(x) * y**2) + jnp.prod(x)

    verify_grad(
        lambda x, y: energy(x, y),
        [RNG.normal(size=3), RNG.normal(size=3)],
        rng=np.random.default_rng(1),
        mode=mode,
    )


def test_disconnected_outputs_and_integer_inputs(mode):
    @as_jax_op
    def several(x, n, y):
        return x * n, jnp.sum(y**2), n * 2, jnp.sum(x) * jnp.sum(y)

    x, y = pt.vector("x", shape=(3,)), pt.vector("y", shape=(3,))
    n = pt.scalar("n", dtype="int64")
    scaled, sq, n2, cross = several(x, n, y)
    assert n2.type.dtype == "int64"
    # only `sq` is used: `scaled` and `cross` are disconnected outputs
    grads = pt.grad(sq, [x, y], disconnected_inputs="ignore")
    f = compile_function([x, n, y], grads, mode)
    xv, yv = RNG.normal(size=3), RNG.normal(size=3)
    gx, gy = f(xv, 3, yv)
    np.testing.assert_allclose(gx, np.zeros(3))
    np.testing.assert_allclose(gy, 2 * yv)
    # the integer input is disconnected, as in pytensor.wrap_jax
    with pytest.raises(DisconnectedInputError):
        pt.grad(scaled.sum(), n)
    with pytest.warns(UserWarning, match="non-differentiable operator: n"):
        pt.grad(scaled.sum(), n, disconnected_inputs="warn")
    g_all = pt.grad(scaled.sum() + cross, [x, y])
    f2 = compile_function([x, n, y], g_all, mode)
    gx, gy = f2(xv, 3, yv)
    np.testing.assert_allclose(gx, 3 + yv.sum())
    np.testing.assert_allclose(gy, np.full(3, xv.sum()))


def test_pullback_of_integer_inputs_and_disconnected_outputs():
    @as_jax_op
    def f(x, n):
        return x * n, n + 1

    x, n = pt.vector("x", shape=(2,)), pt.lscalar("n")
    out, m = f(x, n)
    grads = out.owner.op.pullback(
        [x, n], [out, m], [pt.ones(2), pytensor.gradient.disconnected_type()]
    )
    assert grads[0].owner.op.name == "vjp(f)"
    assert isinstance(grads[1].type, DisconnectedType)
    assert out.owner.op.connection_pattern(out.owner) == [[True, False], [False, False]]
    none = out.owner.op.pullback(
        [x, n],
        [out, m],
        [pytensor.gradient.disconnected_type(), pytensor.gradient.disconnected_type()],
    )
    assert all(isinstance(g.type, DisconnectedType) for g in none)


def test_hessian_matches_jax(mode):
    def jax_fn(x):
        return jnp.sum(jnp.exp(x[:-1] * x[1:])) + jnp.sum(x**3)

    x = pt.vector("x", shape=(4,))
    h = hessian(as_jax_op(jax_fn)(x), x)
    f = compile_function([x], h, mode)
    xv = RNG.normal(size=4) * 0.5
    np.testing.assert_allclose(f(xv), jax.hessian(jax_fn)(xv), rtol=1e-10)


def test_gradient_with_unknown_shapes(mode):
    def jax_fn(x, y):
        return jnp.sum(jnp.outer(x, y) ** 2)

    x, y = pt.vector("x"), pt.vector("y")
    cost = as_jax_op(jax_fn)(x, y)
    f = compile_function([x, y], pt.grad(cost, [x, y]), mode)
    xv, yv = RNG.normal(size=3), RNG.normal(size=5)
    gx, gy = f(xv, yv)
    ex, ey = jax.grad(jax_fn, argnums=(0, 1))(xv, yv)
    np.testing.assert_allclose(gx, ex)
    np.testing.assert_allclose(gy, ey)


def test_float32_gradient(mode):
    def jax_fn(x):
        return jnp.sum(jnp.tanh(x) ** 2)

    x = pt.vector("x", dtype="float32", shape=(3,))
    g = pt.grad(as_jax_op(jax_fn)(x), x)
    assert g.type.dtype == "float32"
    xv = np.array([0.1, -0.4, 2.0], dtype="float32")
    result = compile_function([x], g, mode)(xv)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, jax.grad(jax_fn)(xv), rtol=1e-6)


# -------------------------------------------------------------- forward mode
def test_pushforward_matches_jax_jvp(mode):
    def jax_fn(x, y):
        return jnp.sin(x) * y, jnp.sum(x * y)

    x, y = pt.vector("x", shape=(3,)), pt.vector("y", shape=(3,))
    tx, ty = pt.vector("tx", shape=(3,)), pt.vector("ty", shape=(3,))
    outputs = as_jax_op(jax_fn)(x, y)
    tangents = pushforward(list(outputs), [x, y], [tx, ty], use_op_pushforward=True)
    node_names = {
        v.owner.op.name
        for v in pytensor.graph.traversal.ancestors(tangents)
        if v.owner and isinstance(v.owner.op, OpFromJax)
    }
    assert "jvp(jax_fn)" in node_names
    f = compile_function([x, y, tx, ty], tangents, mode)
    values = [RNG.normal(size=3) for _ in range(4)]
    got = f(*values)
    _, expected = jax.jvp(jax_fn, tuple(values[:2]), tuple(values[2:]))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)


def test_pushforward_with_one_tangent(mode):
    def jax_fn(x, y):
        return jnp.sin(x) * y

    x, y = pt.vector("x", shape=(3,)), pt.vector("y", shape=(3,))
    tx = pt.vector("tx", shape=(3,))
    out = as_jax_op(jax_fn)(x, y)
    tangent = pushforward(out, x, tx, use_op_pushforward=True)
    f = compile_function([x, y, tx], tangent, mode)
    xv, yv, tv = (RNG.normal(size=3) for _ in range(3))
    _, expected = jax.jvp(lambda x: jax_fn(x, yv), (xv,), (tv,))
    np.testing.assert_allclose(f(xv, yv, tv), expected)


# ------------------------------------------------------------ output safety
def test_outputs_are_owned_writeable_and_typed(host_mode):
    mode = host_mode

    @as_jax_op
    def identity_and_constant(x):
        return x, jnp.arange(3.0)

    x = pt.vector("x", shape=(3,))
    same, constant = identity_and_constant(x)
    f = compile_function([x], [same, constant], mode)
    xv = np.array([1.0, 2.0, 3.0])
    a, c = f(xv)
    for array in (a, c):
        # Owned: by NumPy, or by Numba's allocator (as PyTensor's own Numba
        # outputs are), never a view of a JAX buffer.
        assert array.flags.writeable
        assert array.flags.owndata or type(array.base).__name__ == "_MemInfo"
    assert not np.shares_memory(a, xv)
    a[:] = -1
    c[:] = -1
    np.testing.assert_array_equal(xv, [1.0, 2.0, 3.0])
    a2, c2 = f(xv)
    np.testing.assert_array_equal(a2, xv)
    np.testing.assert_array_equal(c2, [0.0, 1.0, 2.0])


def test_downstream_inplace_op_does_not_touch_jax_buffers(mode):
    @as_jax_op
    def passthrough(x):
        return x, x * 1.0

    x = pt.vector("x", shape=(3,))
    a, b = passthrough(x)
    # inc_subtensor is made in place by the default rewrites
    out = pt.inc_subtensor(a[0], 10.0) + pt.inc_subtensor(b[1], 5.0)
    f = compile_function([x], out, mode)
    xv = np.array([1.0, 2.0, 3.0])
    for _ in range(2):
        np.testing.assert_allclose(f(xv), [12.0, 9.0, 6.0])
    np.testing.assert_array_equal(xv, [1.0, 2.0, 3.0])


def test_runtime_error_names_the_function(mode):
    @as_jax_op
    def checked(x):
        return eqx.error_if(x, x < 0, "negative input!")

    x = pt.vector("x", shape=(2,))
    f = compile_function([x], checked(x), mode)
    with (
        warnings.catch_warnings(),  # once per op and process: see test_jax_ofg_runtime_errors
        pytest.raises(Exception, match="negative input!") as info,
    ):
        warnings.simplefilter("ignore", WrappedFunctionRuntimeWarning)
        f(np.array([1.0, -1.0]))
    # The message itself names it (PyMC's worker errors keep only str()).
    assert "[pytensor-jax-ofg]" in str(info.value)
    assert "checked" in str(info.value).split("negative input!")[0]
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), [1.0, 2.0])


# --------------------------------------------------- shapes at the edges
def test_symbolic_shapes_are_right_for_empty_inputs(mode):
    """JAX assumes symbolic dims >= 1; x[1:] of an empty x has length 0, not -1."""

    @as_jax_op
    def trims(x, m):
        return x[1:], m[1:, :-1], jnp.outer(x, x)[::2]

    x, m = pt.vector("x"), pt.matrix("m")
    tail, inner, outer = trims(x, m)
    f = compile_function(
        [x, m], [tail.shape, inner.shape, outer.shape, pt.mean(tail)], mode
    )
    for n, (rows, cols) in [(0, (0, 0)), (0, (3, 0)), (1, (1, 4)), (5, (2, 3))]:
        tail_shape, inner_shape, outer_shape, mean = f(
            np.ones(n), np.ones((rows, cols))
        )
        np.testing.assert_array_equal(tail_shape, [max(n - 1, 0)])
        np.testing.assert_array_equal(inner_shape, [max(rows - 1, 0), max(cols - 1, 0)])
        np.testing.assert_array_equal(outer_shape, [(n + 1) // 2, n])
        assert np.isnan(mean) if n <= 1 else mean == 1.0


def test_square_dims_are_understood():
    @as_jax_op
    def flat_outer(x):
        return jnp.outer(x, x).ravel()

    x = pt.vector("x")
    out = flat_outer(x)
    assert out.owner.op.output_dims == (("s0_0^2",),)
    f = pytensor.function([x], out.shape, mode="FAST_COMPILE")
    assert not only_op(f)
    np.testing.assert_array_equal(f(np.ones(4)), [16])


@pytest.mark.parametrize(
    "body, lengths",
    [
        (lambda v: v[: min(v.shape[0], 6)], [2, 4, 9]),  # Python min: inconclusive
        (lambda v: v.reshape(-1, 3).sum(1), [3, 9]),  # needs a multiple of 3
        (lambda v: jnp.zeros(int(v.shape[0]) % 4), [4, 5, 7]),
    ],
    ids=["python-min", "reshape-by-3", "int-of-dim"],
)
def test_stand_in_sizes_do_not_fake_static_dims(body, lengths, host_mode):
    x = pt.vector("x")
    out = as_jax_op(body, name="body")(x)
    f = compile_function([x], out, host_mode)
    for n in lengths:
        value = np.arange(float(n))
        np.testing.assert_allclose(f(value), body(jnp.asarray(value)))


def test_size_dependent_non_array_output_is_an_error():
    @as_jax_op
    def with_length(v):
        return {"y": v * 2, "n": v.shape[0]}

    @as_jax_op
    def with_int_length(v):
        return {"y": v * 2, "n": int(v.shape[0])}

    for wrapped in (with_length, with_int_length):
        with pytest.raises(
            ShapeInferenceError,
            match=r"non-array value that depends on the input sizes.*jnp.asarray",
        ):
            wrapped(pt.vector("v"))
    # a size-independent non-array output is fine
    out = as_jax_op(lambda v: (v, "label"))(pt.vector("v"))
    assert out[1] == "label"


def test_static_fields_of_equal_value_but_other_type_give_other_ops():
    class Config(eqx.Module):
        factor: object = eqx.field(static=True)

    @as_jax_op
    def scale(x, config):
        return x * config.factor

    i = pt.lvector("i")
    as_int, as_float = scale(i, Config(2)), scale(i, Config(2.0))
    assert as_int.owner.op != as_float.owner.op
    assert (as_int.type.dtype, as_float.type.dtype) == ("int64", "float64")
    np.testing.assert_array_equal(as_float.eval({i: [1, 2]}), [2.0, 4.0])


def test_explicit_output_types_in_a_list_for_a_tuple_result(mode):
    @as_jax_op(output_types=[pt.dvector().type, pt.dscalar().type])
    def sort_and_sum(x):
        return jnp.sort(x), jnp.sum(x)

    x = pt.dvector("x")
    y, total = sort_and_sum(x)
    f = compile_function([x], [y, total], mode)
    y_value, total_value = f(np.array([2.0, 1.0]))
    np.testing.assert_allclose(y_value, [1.0, 2.0])
    assert total_value == 3.0


def test_explicit_output_types_with_the_wrong_count():
    @as_jax_op(output_types=[pt.dvector().type])
    def two(x):
        return x, x

    x = pt.dvector("x")
    with pytest.raises(TypeError, match=r"'two' returned 2 leaves.*declares 1 arrays"):
        pytensor.function([x], two(x)[0], mode="FAST_COMPILE")(np.ones(2))


def test_building_ops_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor

    @as_jax_op
    def scaled(x, factor):
        return x * factor

    scaled.cache_size = 2  # force evictions while other threads read
    x = pt.vector("x", shape=(2,))

    def build(i):
        factor = float(i % 5)
        out = scaled(x, factor)
        return float(out.eval({x: np.ones(2)})[0]), factor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(build, range(60)))
    assert all(value == factor for value, factor in results)


# ------------------------------------------------------------ graph citizenship
def test_graphs_read_well():
    x = pt.vector("x", shape=(3,))
    scale = np.linspace(0.0, 1.0, 3)

    @as_jax_op
    def model(v, weights, *, kind="tanh", options=None):
        return {"y": jnp.tanh(v * weights) if kind == "tanh" else v * weights}

    class Settings:  # its default repr holds an address
        pass

    y = model(x, scale, kind="linear", options=Settings())["y"]
    op = y.owner.op
    assert (
        str(op)
        == "OpFromJax{model(weights=float64[3], kind='linear', options=Settings)}"
    )
    assert repr(op) == (
        "OpFromJax(model(weights=float64[3], kind='linear', options=Settings), "
        "inputs=[Vector(float64, shape=(3,))], outputs=[Vector(float64, shape=(3,))])"
    )
    gradient = pt.grad(y.sum(), x)
    text = pytensor.dprint([y, gradient], print_type=True, file="str")
    assert "OpFromJax{vjp(model(weights=float64[3], kind='linear'" in text
    assert "Vector(float64, shape=(3,))" in text
    assert "0x" not in text  # no bare addresses
    tangent = pytensor.gradient.pushforward(y, x, pt.ones(3), use_op_pushforward=True)
    assert str(tangent.owner.op).startswith("OpFromJax{jvp(model(")


def test_closures_and_nested_callables_read_by_name():
    x = pt.vector("x", shape=(3,))

    @as_jax_op
    def make(v):
        return lambda t: v * t

    @as_jax_op
    def use(f, scale):
        return scale(f(2.0))

    out = use(make(x), jnp.sin)
    assert str(out.owner.op) == "OpFromJax{use(f=make, scale=sin)}"
    assert "0x" not in repr(out.owner.op)


@pytest.mark.parametrize("linker_mode", [m for _, m in LINKER_MODES])
def test_constant_inputs_are_folded(linker_mode):
    """Folding runs the op once on the host while compiling, in every linker."""

    @as_jax_op
    def scaled_cumsum(v, *, k):
        return jnp.cumsum(v) * k

    y = scaled_cumsum(pt.constant(np.arange(3.0)), k=2)
    x = pt.scalar("x")
    f = compile_function([x], [y * x, pt.grad((y * x).sum(), x)], linker_mode)
    assert not only_op(f)
    values, gradient = f(2.0)
    np.testing.assert_allclose(values, np.cumsum(np.arange(3.0)) * 4)
    np.testing.assert_allclose(gradient, np.cumsum(np.arange(3.0)).sum() * 2)
