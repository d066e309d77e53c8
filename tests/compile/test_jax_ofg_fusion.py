"""Value and gradient share one forward pass (the VJP-residual rewrite)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import compile_function, jax_op_nodes, without_islands

import pytensor.tensor as pt
from pytensor.compile._jax_ofg.host.packing import DtypePacking
from pytensor.compile._jax_ofg.islands.op import JaxIsland
from pytensor.compile._jax_ofg.op.transforms import (
    VJPForward,
    VJPFromResiduals,
    residual_dtypes,
)
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op


class BodyCounter:
    """Counts executions of a wrapped function's body with `jax.debug.callback`."""

    def __init__(self):
        self.count = 0

    def tick(self):
        jax.debug.callback(self._increment)

    def _increment(self):
        self.count += 1

    def runs(self, f, *args):
        """How many times the body runs during one call of ``f``."""
        f(*args)  # compile and warm up
        jax.effects_barrier()
        self.count = 0
        result = f(*args)
        jax.effects_barrier()
        return self.count, result


def jax_ops(f) -> list[OpFromJax]:
    return [n.op for n in jax_op_nodes(f)]


def make_model(counter):
    def model(x, k):
        counter.tick()
        return {"energy": jnp.sum(jnp.sin(x) ** 2) * k, "path": jnp.cumsum(x)}

    return model


def reference_cost(x, k):
    out = make_model(BodyCounter())(x, k)
    return out["energy"] + jnp.sum(out["path"] ** 2)


@pytest.mark.parametrize("islands", [True, False], ids=["islands", "no-islands"])
@pytest.mark.parametrize("shape", [(4,), (None,)], ids=["static", "unknown"])
def test_value_and_gradient_run_the_body_once(mode, shape, islands):
    """Between ops, through residuals; inside an island, one shared jax.vjp."""
    counter = BodyCounter()
    x, k = pt.tensor("x", shape=shape), pt.scalar("k")
    out = as_jax_op(make_model(counter))(x, k)
    cost = out["energy"] + (out["path"] ** 2).sum()
    mode = mode if islands else without_islands(mode)
    f = compile_function([x, k], [cost, *pt.grad(cost, [x, k])], mode)

    xv, kv = np.linspace(0.1, 1.0, 4), 1.7
    runs, (value, grad_x, grad_k) = counter.runs(f, xv, kv)
    assert runs == 1
    in_island = any(isinstance(n.op, JaxIsland) for n in f.maker.fgraph.apply_nodes)
    assert in_island == (islands and mode not in ("JAX", "FAST_COMPILE"))
    forward = "model" if in_island else "model+residuals"
    assert sorted(op.name for op in jax_ops(f)) == [forward, "vjp(model)"]
    want_value, (want_x, want_k) = jax.value_and_grad(reference_cost, (0, 1))(xv, kv)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad_x, want_x, rtol=1e-12)
    np.testing.assert_allclose(grad_k, want_k, rtol=1e-12)


def test_without_the_rewrite_the_body_runs_twice(host_mode):
    """What the rewrite saves (and proof that the counter counts)."""
    from pytensor.compile.mode import get_mode

    counter = BodyCounter()
    x, k = pt.vector("x"), pt.scalar("k")
    out = as_jax_op(make_model(counter))(x, k)
    cost = out["energy"]
    unfused = get_mode(host_mode).excluding("jax_ofg_fuse_value_and_vjp")
    f = compile_function([x, k], [cost, pt.grad(cost, x)], unfused)
    assert counter.runs(f, np.ones(3), 2.0)[0] == 2


def test_a_cost_computed_in_jax_is_one_value_and_grad_op(mode):
    """The cotangent (1.0) does not need the value: one op, jax.value_and_grad."""
    counter = BodyCounter()
    x, k = pt.vector("x"), pt.scalar("k")
    cost = as_jax_op(make_model(counter))(x, k)["energy"]
    f = compile_function([x, k], [cost, *pt.grad(cost, [x, k])], mode)
    assert [op.name for op in jax_ops(f)] == ["value_and_vjp(model)"]
    xv = np.array([0.3, -0.5, 1.2])
    runs, (value, grad_x, grad_k) = counter.runs(f, xv, 2.0)
    assert runs == 1

    def energy(x, k):
        return make_model(BodyCounter())(x, k)["energy"]

    want, (want_x, want_k) = jax.value_and_grad(energy, (0, 1))(xv, 2.0)
    np.testing.assert_allclose(value, want)
    np.testing.assert_allclose(grad_x, want_x)
    np.testing.assert_allclose(grad_k, want_k)


def test_value_alone_and_gradient_alone_make_no_residuals(mode):
    counter = BodyCounter()
    x, k = pt.vector("x"), pt.scalar("k")
    cost = as_jax_op(make_model(counter))(x, k)["energy"]

    value_only = compile_function([x, k], cost, mode)
    assert [op.name for op in jax_ops(value_only)] == ["model"]
    gradient_only = compile_function([x, k], pt.grad(cost, x), mode)
    assert [op.name for op in jax_ops(gradient_only)] == ["vjp(model)"]

    xv = np.array([0.3, 0.5])
    np.testing.assert_allclose(
        gradient_only(xv, 2.0), jax.grad(lambda v: 2.0 * jnp.sum(jnp.sin(v) ** 2))(xv)
    )
    assert counter.runs(gradient_only, xv, 2.0)[0] == 1


def test_two_gradients_share_the_residuals(host_mode):
    counter = BodyCounter()
    x, k = pt.vector("x"), pt.scalar("k")
    out = as_jax_op(make_model(counter))(x, k)
    first = pt.grad(out["energy"] ** 2, x)
    second = pt.grad(3.0 * out["energy"] ** 2, x)  # another cotangent, same vjp
    outputs = [out["energy"], first, second]
    f = compile_function([x, k], outputs, without_islands(host_mode))
    runs, (_, g1, g2) = counter.runs(f, np.array([0.2, 0.4]), 1.5)
    assert runs == 1
    np.testing.assert_allclose(g2, 3 * g1)
    assert [op.name for op in jax_ops(f)].count("model+residuals") == 1


@pytest.mark.parametrize(
    "host_mode", ["CVM", "NUMBA", None], ids=["cvm", "numba", "default"]
)
def test_pullbacks_of_other_outputs_and_inputs_share_one_vjp_in_an_island(host_mode):
    """Pullbacks of one op with different outputs and inputs: one forward pass."""
    counter = BodyCounter()
    x, k = pt.vector("x"), pt.scalar("k")
    out = as_jax_op(make_model(counter))(x, k)
    by_energy = pt.grad(out["energy"] ** 2, x)
    by_path = pt.grad((out["path"] ** 2).sum() * out["energy"], [x, k])
    f = compile_function([x, k], [out["energy"], by_energy, *by_path], host_mode)
    assert any(isinstance(n.op, JaxIsland) for n in f.maker.fgraph.apply_nodes)
    assert sorted(op.name for op in jax_ops(f)).count("model") == 1
    xv, kv = np.array([0.2, 0.4, 0.9]), 1.5
    runs, (energy, g_energy, g_path_x, g_path_k) = counter.runs(f, xv, kv)
    assert runs == 1

    def model(x, k):
        return make_model(BodyCounter())(x, k)

    def cost_path(x, k):
        out = model(x, k)
        return jnp.sum(out["path"] ** 2) * out["energy"]

    np.testing.assert_allclose(energy, model(xv, kv)["energy"], rtol=1e-12)
    want_energy = jax.grad(lambda v: model(v, kv)["energy"] ** 2)(xv)
    np.testing.assert_allclose(g_energy, want_energy, rtol=1e-12)
    want_x, want_k = jax.grad(cost_path, (0, 1))(xv, kv)
    np.testing.assert_allclose(g_path_x, want_x, rtol=1e-12)
    np.testing.assert_allclose(g_path_k, want_k, rtol=1e-12)


def test_fusion_through_nesting(mode):
    """The outer op's body runs once; the gradient reaches the producer's input."""
    counter = BodyCounter()
    knots = pt.vector("knots", shape=(5,))

    @as_jax_op
    def interpolator(ys):
        return lambda t: jnp.interp(t, jnp.arange(5.0), ys)

    @as_jax_op
    def integral(f, scale):
        counter.tick()
        return scale * jnp.sum(jax.vmap(f)(jnp.linspace(0.0, 4.0, 9)))

    scale = pt.scalar("scale")
    cost = integral(interpolator(knots), scale)
    f = compile_function([knots, scale], [cost, *pt.grad(cost, [knots, scale])], mode)
    ys = np.array([0.0, 1.0, -1.0, 2.0, 0.5])
    runs, (value, grad_knots, grad_scale) = counter.runs(f, ys, 2.0)
    assert runs == 1

    def reference(ys, scale):
        grid = jnp.linspace(0.0, 4.0, 9)
        return scale * jnp.sum(jnp.interp(grid, jnp.arange(5.0), ys))

    want, (want_knots, want_scale) = jax.value_and_grad(reference, (0, 1))(ys, 2.0)
    np.testing.assert_allclose(value, want)
    np.testing.assert_allclose(grad_knots, want_knots)
    np.testing.assert_allclose(grad_scale, want_scale)


def test_repeated_inputs_under_the_jax_linker():
    """One variable passed twice is one tracer; residuals must still line up."""

    @as_jax_op
    def both(a, b, t):
        return a * t**2 + jnp.tanh(b * t)

    a, t = pt.scalar("a"), pt.scalar("t")
    cost = both(a, a, t) ** 2  # the cotangent needs the value: residuals
    f = compile_function([a, t], [cost, *pt.grad(cost, [a, t])], "JAX")
    assert sorted(op.name for op in jax_ops(f)) == ["both+residuals", "vjp(both)"]
    want = jax.value_and_grad(lambda a, t: both.fn(a, a, t) ** 2, (0, 1))(0.7, 2.3)
    value, grad_a, grad_t = f(0.7, 2.3)
    np.testing.assert_allclose(value, want[0])
    np.testing.assert_allclose([grad_a, grad_t], want[1])


def test_pymc_logp_dlogp_runs_the_body_once():
    import pymc as pm

    counter = BodyCounter()

    @as_jax_op
    def mean(theta):
        counter.tick()
        return jnp.stack([theta, 2 * theta, theta**2])

    with pm.Model() as model:
        theta = pm.Normal("theta")
        pm.Normal("y", mu=mean(theta), observed=[0.5, 1.0, 0.2])
    logp_dlogp = model.logp_dlogp_function(ravel_inputs=True)
    logp_dlogp.set_extra_values({})
    point = np.array([0.4])
    runs, (logp, dlogp) = counter.runs(logp_dlogp, point)
    assert runs == 1

    def reference(th):
        mu = jnp.stack([th, 2 * th, th**2])
        y = jnp.array([0.5, 1.0, 0.2])
        return jnp.sum(
            jax.scipy.stats.norm.logpdf(y, mu)
        ) + jax.scipy.stats.norm.logpdf(th)

    np.testing.assert_allclose(logp, reference(0.4))
    np.testing.assert_allclose(dlogp, [jax.grad(reference)(0.4)])


@pytest.mark.parametrize(
    "leaves",
    [
        [],
        [np.float64(1.5)],
        [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])],
        [np.zeros((0, 3)), np.array([1 + 2j, -3j]), np.arange(4, dtype=np.int8)],
        [np.array([-7, 2**40]), np.ones((2, 2)), np.array([[3]], dtype=np.int64)],
    ],
    ids=["none", "scalar", "f32-bool", "empty-c128-i8", "i64-f64-i64"],
)
def test_residuals_pack_into_one_vector_per_dtype(leaves):
    like = [jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in leaves]
    dtypes = tuple(sorted({np.asarray(x).dtype.name for x in leaves} | {"float64"}))
    packing = DtypePacking(dtypes)
    vectors = jax.jit(packing.pack)(leaves)
    assert [v.dtype.name for v in vectors] == list(dtypes)
    assert all(v.ndim == 1 for v in vectors)
    assert sum(v.size for v in vectors) == sum(np.size(x) for x in leaves)
    for got, want in zip(packing.unpack(vectors, like), leaves):
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)


def test_a_residual_of_an_unexpected_dtype_is_an_error():
    with pytest.raises(TypeError, match=r"dtype int32 cannot be packed.*float64"):
        DtypePacking(("float64",)).pack([jnp.arange(3, dtype=jnp.int32)])


def test_residuals_of_several_dtypes_with_unknown_shapes(host_mode):
    """interp keeps integer indices and boolean masks as residuals."""

    def f(v):
        return jnp.interp(0.5, v, jnp.sin(v))

    x = pt.vector("x")
    y = as_jax_op(f, gradient="reverse")(x)  # reverse mode's residuals
    vjp = pt.grad(y, x).owner.op.fn
    found = residual_dtypes(vjp, [(None,)], ["float64"])
    concrete = jax.tree_util.tree_leaves(jax.vjp(f, jnp.linspace(0, 1, 5))[1])
    assert found == tuple(sorted({leaf.dtype.name for leaf in concrete}))
    assert len(found) > 1

    cost = y**2  # the cotangent needs the value: residuals
    g = compile_function([x], [cost, pt.grad(cost, x)], without_islands(host_mode))
    assert len(jax_ops(g)) == 2 and "+residuals" in str(jax_ops(g))
    for n in (5, 9):
        xv = np.linspace(0.0, 1.0, n)
        value, gradient = g(xv)
        np.testing.assert_allclose(value, f(xv) ** 2)
        np.testing.assert_allclose(gradient, jax.grad(lambda v: f(v) ** 2)(xv))


def test_split_functions_are_equal_for_equal_vjps():
    """Equal halves make equal ops, so PyTensor merges them."""
    x = pt.vector("x")
    op = as_jax_op(lambda v: jnp.sum(v**2))(x).owner.op
    g1 = pt.grad(op(x), x).owner.op.fn
    g2 = pt.grad(op(x), x).owner.op.fn
    assert g1.split(("float64",)) == g2.split(("float64",))
    forward, backward = g1.split(("float64",))
    assert isinstance(forward, VJPForward) and isinstance(backward, VJPFromResiduals)
    assert forward.split_of(g2)
