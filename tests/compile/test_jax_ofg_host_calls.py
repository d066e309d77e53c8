"""Host calls into JAX: outputs in one buffer per dtype, copied only when written."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _linkers import compile_function, jax_op_nodes, without_islands

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.host.op import writable_outputs
from pytensor.compile._jax_ofg.host.readonly_outputs import writable_flags
from pytensor.compile._jax_ofg.islands.fusion import (
    BAKED_CONSTANT_SIZE,
    bake_constant_inputs,
)
from pytensor.compile._jax_ofg.tracing.functions import BakedInputs
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.graph.fg import FunctionGraph


@as_jax_op
def mixed(x):
    return {
        "sin": jnp.sin(x),
        "cos": jnp.cos(x),
        "outer": jnp.outer(x, x),
        "count": jnp.sum(x > 0).astype("int64"),
    }


# ============================================================ one transfer
def test_outputs_cross_in_one_buffer_per_dtype():
    x = pt.vector("x")
    out = mixed(x)
    op: OpFromJax = out["sin"].owner.op
    program = op.program
    for n in (3, 5):  # unknown length: the unpacking plan follows the shapes
        xv = np.linspace(-1.0, 1.0, n)
        buffers = program(xv)
        assert len(buffers) == 2  # float64 and int64, not one per output
        cos, count, outer, sin = op.host_function()(xv)  # in pytree (key) order
        np.testing.assert_allclose(sin, np.sin(xv))
        np.testing.assert_allclose(cos, np.cos(xv))
        np.testing.assert_allclose(outer, np.outer(xv, xv))
        assert count.dtype == np.int64 and count.shape == () and count == n // 2


def test_read_only_views_and_writeable_copies():
    x = pt.vector("x", shape=(3,))
    op = mixed(x)["sin"].owner.op
    xv = np.array([0.5, -1.0, 2.0])
    views = op.with_copied_outputs((False,) * 4).host_function()(xv)
    copies = op.with_copied_outputs((True,) * 4).host_function()(xv)
    assert not any(v.flags.writeable for v in views)
    assert all(c.flags.writeable and c.flags.owndata for c in copies)
    for view, copy in zip(views, copies):
        np.testing.assert_array_equal(view, copy)


def test_equal_ops_share_one_program_whatever_their_copied_outputs():
    """How outputs are handed on is no part of the program; the function is.

    An op over another function object (even one describing alike: it may
    hold other objects, such as a callback's target) gets its own program.
    """
    vector = pt.vector("x", shape=(3,)).type

    def make(second):
        return OpFromJax(
            lambda x: (jnp.sin(x), second(x)), [vector], [vector, vector], name="f"
        )

    op, twin, other = make(jnp.cos), make(jnp.cos), make(jnp.tan)
    assert op.with_copied_outputs((False, True)).program is op.program
    assert twin.program is not op.program
    assert other.program is not op.program
    xv = np.array([0.5, -1.0, 2.0])
    for each, second in ((op, np.cos), (twin, np.cos), (other, np.tan)):
        first, last = each.host_call(xv)
        np.testing.assert_allclose(first, np.sin(xv), rtol=1e-15)
        np.testing.assert_allclose(last, second(xv), rtol=1e-15)


# ================================================= copy only when written
@as_jax_op
def trig(x):
    return jnp.sin(x), jnp.cos(x), jnp.tan(x)


def host_modes():
    return ["FAST_COMPILE", "CVM", "NUMBA", None]


@pytest.mark.parametrize("mode", host_modes(), ids=["py", "cvm", "numba", "default"])
def test_outputs_nothing_writes_into_are_views(mode):
    x = pt.vector("x", shape=(4,))
    s, c, t = trig(x)
    cost = total(s, c, t)  # another op reads all three; nothing writes
    f = compile_function([x], cost, without_islands(mode))
    (node,) = [n for n in jax_op_nodes(f) if n.op.name == "trig"]
    assert writable_outputs(node) == (False, False, False)
    xv = np.linspace(0.1, 0.9, 4)
    np.testing.assert_allclose(f(xv), np.sum(np.sin(xv) * np.cos(xv) + np.tan(xv)))


@as_jax_op
def total(a, b, c):
    return jnp.sum(a * b + c)


@pytest.mark.parametrize("mode", host_modes(), ids=["py", "cvm", "numba", "default"])
def test_a_destroyer_downstream_gets_a_private_copy(mode):
    """In-place rewrites write into op outputs; a read-only view would raise."""
    x = pt.vector("x", shape=(4,))
    s, c, t = trig(x)
    outputs = [pt.inc_subtensor(s[0], 10.0), c * 2.0, t, s.sum()]
    f = compile_function([x], outputs, without_islands(mode))
    (node,) = jax_op_nodes(f)
    flags = writable_outputs(node)
    destroyed = {
        node.outputs.index(v)
        for n in f.maker.fgraph.apply_nodes
        for inputs in n.op.destroy_map.values()
        for v in [n.inputs[i] for i in inputs]
        if v in node.outputs
    }
    assert all(flags[k] for k in destroyed)
    assert flags[2]  # returned by the function: the caller may write into it
    xv = np.linspace(0.1, 0.9, 4)
    for _ in range(2):
        bumped, doubled, tangent, summed = f(xv)
        expected = np.sin(xv)
        expected[0] += 10.0
        np.testing.assert_allclose(bumped, expected)
        np.testing.assert_allclose(doubled, 2 * np.cos(xv))
        np.testing.assert_allclose(tangent, np.tan(xv))
        np.testing.assert_allclose(summed, np.sin(xv).sum())
        tangent[:] = 0.0  # a returned array is the caller's


def test_outputs_are_copied_when_an_input_may_be_written():
    """A view could alias an input's memory, which an in-place node then changes."""
    x = pt.vector("x", shape=(3,))
    s, c, t = trig(x)
    outputs = [total(s, c, t), pt.inc_subtensor(x[0], 1.0)]
    f = compile_function(
        [pytensor.In(x, mutable=True)], outputs, without_islands("CVM")
    )
    node = next(n for n in jax_op_nodes(f) if n.op.name == "trig")
    assert any(n.op.destroy_map for n in f.maker.fgraph.apply_nodes)
    assert writable_flags(f.maker.fgraph, node) == (True, True, True)
    value, bumped = f(np.array([0.1, 0.2, 0.3]))
    xv = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(value, np.sum(np.sin(xv) * np.cos(xv) + np.tan(xv)))
    np.testing.assert_allclose(bumped, [1.1, 0.2, 0.3])


# ============================================================= constants
@as_jax_op
def energy(x):
    return jnp.sum(jnp.sin(x) ** 2)


def test_constant_cotangents_are_baked_in(mode):
    """pt.grad of a scalar cost: the cotangent 1.0 is folded into the program."""
    x = pt.vector("x", shape=(5,))
    cost = energy(x)
    f = compile_function([x], [cost, pt.grad(cost, x)], mode)
    (node,) = jax_op_nodes(f)
    assert node.op.name == "value_and_vjp(energy)"
    assert node.inputs == [f.maker.fgraph.inputs[0]]  # no cotangent input
    assert isinstance(node.op.fn, BakedInputs)
    xv = np.linspace(-1.0, 1.0, 5)
    value, gradient = f(xv)
    want_value, want_gradient = jax.value_and_grad(energy.__wrapped__)(xv)
    np.testing.assert_allclose(value, want_value, rtol=1e-14)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-14)


@as_jax_op
def joined(x, c):
    return jnp.concatenate([x, c])


def test_baking_keeps_symbolic_output_shapes():
    x = pt.vector("x")
    c = pt.constant(np.arange(3.0))
    y = joined(x, c)
    fgraph = FunctionGraph([x], [y], clone=False)
    (baked,) = bake_constant_inputs.transform(fgraph, y.owner)
    assert isinstance(baked.owner.op.fn, BakedInputs)
    assert baked.owner.inputs == [x]
    length = baked.owner.op.infer_shape(baked.owner, [(x.shape[0],)])[0][0]
    assert length.eval({x: np.zeros(4)}) == 7
    np.testing.assert_allclose(baked.eval({x: np.ones(2)}), [1, 1, 0, 1, 2])


def test_large_constants_stay_inputs():
    x = pt.vector("x", shape=(3,))
    big = pt.constant(np.ones(BAKED_CONSTANT_SIZE + 1))
    y = joined(x, big)
    fgraph = FunctionGraph([x], [y], clone=False)
    assert bake_constant_inputs.transform(fgraph, y.owner) is None
