"""Vectorization: one jax.vmap-ed op, never a Blockwise looping in Python."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import compile_function, compiled_nodes

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.blockwise import Blockwise


RNG = np.random.default_rng(7)


def weighted(x, w):
    return jnp.sum(jnp.sin(x) * w), jnp.cumsum(x) * w[0]


def ops_in(f) -> list:
    return [node.op for node in compiled_nodes(f)]


def assert_one_vmapped_op(f):
    ops = ops_in(f)
    assert not any(isinstance(op, Blockwise) for op in ops), ops
    jax_ops = [op for op in ops if isinstance(op, OpFromJax)]
    # the op, and its forward-with-residuals and vjp versions
    assert jax_ops and all("vmap(" in op.name for op in jax_ops), jax_ops


@pytest.mark.parametrize(
    "x_batch, w_batch",
    [
        ((4,), ()),  # one batch dim on one input
        ((2, 4), (4,)),  # two batch dims, the other input with one
        ((), (5,)),  # only the second input batched
        ((2, 1), (1, 3)),  # broadcastable batch dims on both
    ],
    ids=["x", "x2-w1", "w", "broadcast"],
)
def test_vectorize_graph_gives_one_vmapped_op(mode, x_batch, w_batch):
    x, w = pt.vector("x", shape=(3,)), pt.vector("w", shape=(3,))
    total, running = as_jax_op(weighted)(x, w)
    xb = pt.tensor("xb", shape=(*x_batch, 3))
    wb = pt.tensor("wb", shape=(*w_batch, 3))
    total_b, running_b = vectorize_graph([total, running], {x: xb, w: wb})

    batch = np.broadcast_shapes(x_batch, w_batch)
    assert total_b.type.shape == batch
    assert running_b.type.shape == (*batch, 3)
    assert isinstance(total_b.owner.op, OpFromJax)

    cost = total_b.sum() + (running_b**2).sum()
    f = compile_function([xb, wb], [total_b, running_b, *pt.grad(cost, [xb, wb])], mode)
    assert_one_vmapped_op(f)

    xv = RNG.normal(size=(*x_batch, 3))
    wv = RNG.normal(size=(*w_batch, 3))

    def reference(xv, wv):
        xs = jnp.broadcast_to(xv, (*batch, 3)).reshape(-1, 3)
        ws = jnp.broadcast_to(wv, (*batch, 3)).reshape(-1, 3)
        t, r = jax.vmap(weighted)(xs, ws)
        return t.reshape(batch), r.reshape((*batch, 3))

    def reference_cost(xv, wv):
        t, r = reference(xv, wv)
        return t.sum() + (r**2).sum()

    got_total, got_running, grad_x, grad_w = f(xv, wv)
    want_total, want_running = reference(xv, wv)
    want_grad_x, want_grad_w = jax.grad(reference_cost, argnums=(0, 1))(xv, wv)
    np.testing.assert_allclose(got_total, want_total, rtol=1e-12)
    np.testing.assert_allclose(got_running, want_running, rtol=1e-12)
    np.testing.assert_allclose(grad_x, want_grad_x, rtol=1e-10)
    np.testing.assert_allclose(grad_w, want_grad_w, rtol=1e-10)


def test_blockwise_built_directly_is_rewritten_to_vmap(mode):
    x = pt.vector("x", shape=(3,))
    (y,) = as_jax_op(lambda v: (jnp.cumsum(v),))(x)
    op = y.owner.op
    xb = pt.matrix("xb", shape=(None, 3))
    yb = Blockwise(op, signature="(i)->(i)")(xb)
    f = compile_function([xb], [yb, pt.grad(yb.sum(), xb)], mode)
    assert_one_vmapped_op(f)
    xv = RNG.normal(size=(4, 3))
    got, grad = f(xv)
    np.testing.assert_allclose(got, np.cumsum(xv, axis=1))
    np.testing.assert_allclose(grad, jax.grad(lambda v: jnp.cumsum(v, 1).sum())(xv))


def test_unknown_batch_and_core_dims_keep_symbolic_shapes(mode, monkeypatch):
    x = pt.vector("x")
    (y,) = as_jax_op(lambda v: (jnp.concatenate([v, v]),))(x)
    xb = pt.matrix("xb")
    yb = vectorize_graph(y, {x: xb})
    assert yb.type.shape == (None, None)

    def fail(*args, **kwargs):
        raise AssertionError("JAX ran to compute a shape")

    monkeypatch.setattr(OpFromJax, "perform", fail)
    monkeypatch.setattr(OpFromJax, "host_function", fail)
    monkeypatch.setattr(OpFromJax, "buffers_function", fail)
    f = compile_function([xb], yb.shape, mode)
    np.testing.assert_array_equal(f(np.zeros((5, 4))), [5, 8])
    assert not any(isinstance(op, OpFromJax) for op in ops_in(f))


def test_runtime_broadcasting_of_batch_dims_is_an_error(host_mode):
    x, w = pt.vector("x", shape=(3,)), pt.vector("w", shape=(3,))
    total, _ = as_jax_op(weighted)(x, w)
    xb, wb = pt.matrix("xb", shape=(None, 3)), pt.matrix("wb", shape=(None, 3))
    f = compile_function([xb, wb], vectorize_graph(total, {x: xb, w: wb}), host_mode)
    assert f(np.ones((2, 3)), np.ones((2, 3))).shape == (2,)
    with pytest.raises(ValueError, match="Runtime broadcasting is not allowed"):
        f(np.ones((2, 3)), np.ones((1, 3)))


def test_vectorized_nested_callable(mode):
    """The producer's inputs of a symbolic callable can be batched too."""
    knots = pt.vector("knots", shape=(4,))

    @as_jax_op
    def line(ys):
        return lambda t: jnp.interp(t, jnp.arange(4.0), ys)

    @as_jax_op
    def mean_on_grid(f):
        return jnp.mean(jax.vmap(f)(jnp.linspace(0.0, 3.0, 7)))

    mean = mean_on_grid(line(knots))
    batch = pt.matrix("batch", shape=(None, 4))
    means = vectorize_graph(mean, {knots: batch})
    f = compile_function([batch], [means, pt.grad(means.sum(), batch)], mode)
    assert_one_vmapped_op(f)
    values = RNG.normal(size=(5, 4))

    def reference(ys):
        return jnp.mean(jnp.interp(jnp.linspace(0.0, 3.0, 7), jnp.arange(4.0), ys))

    got, grad = f(values)
    np.testing.assert_allclose(got, jax.vmap(reference)(values))
    np.testing.assert_allclose(grad, jax.vmap(jax.grad(reference))(values))
