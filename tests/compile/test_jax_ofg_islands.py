"""JAX islands: the connected JAX part of a graph runs as one XLA program.

Under the host linkers (Python, C VM, Numba and the default mode) the
``jax_islands`` rewrite groups wrapped JAX functions and the PyTensor nodes
around them that PyTensor's JAX backend lowers into one ``JaxIsland``.
"""

import pickle
import threading
import warnings

import _jax_ofg_models as models
import jax
import jax.numpy as jnp
import numba
import numpy as np
import nutpie
import pymc as pm
import pytest
from _fresh_process import run_script
from _linkers import compile_function, jax_op_nodes, without_islands
from _scripts import EXAMPLES, imported_scripts
from test_jax_ofg_fusion import BodyCounter

import pytensor
import pytensor.tensor as pt
from examples._sir_models import sir_nested_model
from pytensor.compile._jax_ofg.islands import selection
from pytensor.compile._jax_ofg.islands.op import JaxIsland, JaxIslandFallbackWarning
from pytensor.compile._jax_ofg.islands.selection import find_islands, joins_islands
from pytensor.compile.io import In
from pytensor.compile.jax_ofg import OpFromJax, as_jax_op
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch import numba_funcify
from pytensor.raise_op import Assert
from pytensor.scalar import add as scalar_add
from pytensor.tensor.elemwise import Elemwise


#: The host linkers, where islands form: (id, mode).
ISLAND_MODES = [
    ("py", Mode(linker="py", optimizer="fast_run")),
    ("cvm", "CVM"),
    ("numba", "NUMBA"),
    ("default", None),
]


@pytest.fixture(params=[m for _, m in ISLAND_MODES], ids=[i for i, _ in ISLAND_MODES])
def island_mode(request):
    return request.param


def islands(f) -> list[JaxIsland]:
    return [n.op for n in f.maker.fgraph.toposort() if isinstance(n.op, JaxIsland)]


def outer_ops(f) -> list[Op]:
    return [n.op for n in f.maker.fgraph.toposort()]


@as_jax_op
def trajectory(theta, t):
    return jnp.exp(-theta[0] * t) * jnp.cos(theta[1] * t)


TIMES = np.linspace(0.0, 3.0, 12)
OBSERVED = np.exp(-0.7 * TIMES) * np.cos(1.3 * TIMES) + 0.01 * np.sin(7 * TIMES)


def likelihood_graph():
    """A PyMC-style cost: the likelihood is computed in PyTensor from the op."""
    theta = pt.vector("theta", shape=(2,))
    mu = trajectory(theta, TIMES)
    logp = -0.5 * pt.sum(((OBSERVED - mu) / 0.05) ** 2) - pt.sum(theta**2)
    return theta, logp


def reference_logp(theta):
    mu = trajectory.__wrapped__(theta, TIMES)
    return -0.5 * jnp.sum(((OBSERVED - mu) / 0.05) ** 2) - jnp.sum(theta**2)


THETA = np.array([0.6, 1.2])


class HostCalls:
    """Counts calls from the host into JAX: every one goes through a host function
    (NumPy outputs for the Python and C linkers, packed buffers for Numba)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for cls in (OpFromJax, JaxIsland):
            for name in ("host_function", "buffers_function"):
                monkeypatch.setattr(cls, name, self._counting(getattr(cls, name)))

    def _counting(self, make_host_function):
        def counting_host_function(op, *args):
            call = make_host_function(op, *args)

            def host_call(*inputs):
                self.count += 1
                return call(*inputs)

            return host_call

        return counting_host_function


# ============================================================ same results
def test_likelihood_and_gradient_are_one_island(island_mode, monkeypatch):
    calls = HostCalls(monkeypatch)
    theta, logp = likelihood_graph()
    outputs = [logp, pt.grad(logp, theta)]
    f = compile_function([theta], outputs, island_mode)
    (island,) = islands(f)
    assert not any(isinstance(op, OpFromJax) for op in outer_ops(f))
    assert [n.op.name for n in island.fgraph.toposort() if isinstance(n.op, OpFromJax)]

    value, gradient = f(THETA)
    calls.count = 0
    f(THETA)
    assert calls.count == 1

    want_value, want_gradient = jax.value_and_grad(reference_logp)(THETA)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-10)
    for other_mode in (without_islands(island_mode), "JAX"):
        other = compile_function([theta], outputs, other_mode)
        assert not islands(other)
        for got, want in zip(f(THETA), other(THETA)):
            np.testing.assert_allclose(got, want, rtol=1e-10)


def test_pymc_logp_dlogp_is_one_xla_program(monkeypatch):
    """The issue's scenario: an SIR model with a NB likelihood, PyMC's default mode."""
    calls = HostCalls(monkeypatch)
    model = models.sir_model()
    point = model.initial_point()
    x = np.concatenate([np.ravel(v) for v in point.values()])

    def logp_dlogp(mode):
        f = model.logp_dlogp_function(ravel_inputs=True, mode=mode)
        return f._pytensor_function

    default = logp_dlogp(None)
    assert len(islands(default)) == 1
    assert not any(isinstance(op, OpFromJax) for op in outer_ops(default))
    value, gradient = default(x)
    calls.count = 0
    default(x)
    assert calls.count == 1  # one XLA program launch per logp_dlogp call

    for mode in (get_mode("NUMBA").excluding("jax_islands"), "JAX"):
        other_value, other_gradient = logp_dlogp(mode)(x)
        np.testing.assert_allclose(value, other_value, rtol=1e-10)
        np.testing.assert_allclose(gradient, other_gradient, rtol=1e-10)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


def test_value_only_and_gradient_only(island_mode):
    theta, logp = likelihood_graph()
    value_only = compile_function([theta], logp, island_mode)
    gradient_only = compile_function([theta], pt.grad(logp, theta), island_mode)
    assert len(islands(value_only)) == len(islands(gradient_only)) == 1
    want_value, want_gradient = jax.value_and_grad(reference_logp)(THETA)
    np.testing.assert_allclose(value_only(THETA), want_value, rtol=1e-12)
    np.testing.assert_allclose(gradient_only(THETA), want_gradient, rtol=1e-10)


def test_a_lone_op_is_no_island(island_mode):
    theta = pt.vector("theta", shape=(2,))
    f = compile_function([theta], trajectory(theta, TIMES), island_mode)
    assert not islands(f)
    assert len(jax_op_nodes(f)) == 1


# ==================================================== never wrong to include
class HostOnly(Op):
    """Doubles its input; has no JAX lowering (so it must stay outside)."""

    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = 2.0 * inputs[0]

    def pullback(self, inputs, outputs, cotangents):
        return [HostOnly()(cotangents[0])]


@numba_funcify.register(HostOnly)
def _numba_host_only(op, node=None, **kwargs):
    @numba.njit
    def host_only(x):
        return 2.0 * x

    return host_only


@as_jax_op
def sine(x):
    return jnp.sin(x)


@as_jax_op
def total(x):
    return jnp.sum(x**3)


def test_a_node_without_jax_lowering_splits_the_island(island_mode):
    """f -> exp -> host_only -> add <- exp: one island over all would be a cycle."""
    x = pt.vector("x", shape=(4,))
    a = pt.exp(sine(x))
    b = HostOnly()(a)
    cost = total(a + b)
    f = compile_function([x], [cost, pt.grad(cost, x)], island_mode)
    assert any(isinstance(op, HostOnly) for op in outer_ops(f))
    found = islands(f)
    assert len(found) >= 2
    for island in found:  # nothing inside that has no JAX lowering
        assert not any(isinstance(n.op, HostOnly) for n in island.fgraph.apply_nodes)

    def reference(xv):
        av = jnp.exp(jnp.sin(xv))
        return jnp.sum((3 * av) ** 3)

    xv = np.linspace(-1.0, 1.0, 4)
    value, gradient = f(xv)
    np.testing.assert_allclose(value, reference(xv), rtol=1e-12)
    np.testing.assert_allclose(gradient, jax.grad(reference)(xv), rtol=1e-10)


def test_the_residual_route_remains_between_islands(island_mode):
    """A host-only node between the value and the gradient: one forward pass still."""
    counter = BodyCounter()

    @as_jax_op
    def path(x):
        counter.tick()
        return jnp.cumsum(jnp.sin(x))

    x = pt.vector("x", shape=(5,))
    cost = pt.sum(HostOnly()(pt.exp(path(x))) ** 2)  # the gradient crosses it
    f = compile_function([x], [cost, pt.grad(cost, x)], island_mode)
    assert any(isinstance(op, HostOnly) for op in outer_ops(f))
    names = sorted(n.op.name for n in jax_op_nodes(f))
    assert names == ["path+residuals", "vjp(path)"]
    xv = np.linspace(0.1, 0.5, 5)
    runs, (value, gradient) = counter.runs(f, xv)
    assert runs == 1

    def reference(xv):
        return jnp.sum((2.0 * jnp.exp(jnp.cumsum(jnp.sin(xv)))) ** 2)

    np.testing.assert_allclose(value, reference(xv), rtol=1e-12)
    np.testing.assert_allclose(gradient, jax.grad(reference)(xv), rtol=1e-10)


def test_random_variables_stay_outside(island_mode):
    x = pt.vector("x", shape=(3,))
    rng = pytensor.shared(np.random.default_rng(3))
    next_rng, noise = pt.random.normal(size=(3,), rng=rng, return_next_rng=True)
    out = pt.exp(sine(x)) + noise
    f = compile_function([x], [out, noise], island_mode, updates={rng: next_rng})
    for island in islands(f):
        assert not any(
            isinstance(n.op, pt.random.basic.NormalRV)
            for n in island.fgraph.apply_nodes
        )
    xv = np.array([0.1, 0.2, 0.3])
    first, first_noise = f(xv)
    second, second_noise = f(xv)
    assert not np.allclose(first_noise, second_noise)  # the RNG moved on
    for value, drawn in ((first, first_noise), (second, second_noise)):
        np.testing.assert_allclose(value - drawn, np.exp(np.sin(xv)), rtol=1e-12)


def test_assertions_stay_outside_and_still_raise(island_mode):
    x = pt.vector("x", shape=(3,))
    checked = Assert("x must be positive")(sine(x), pt.all(x > 0))
    f = compile_function([x], pt.exp(checked).sum(), island_mode)
    assert any(isinstance(op, Assert) for op in outer_ops(f))
    np.testing.assert_allclose(f(np.ones(3)), 3 * np.exp(np.sin(1.0)))
    with pytest.raises(AssertionError, match="x must be positive"):
        f(-np.ones(3))


def test_in_place_nodes_never_join(island_mode):
    x = pt.vector("x", shape=(3,))
    y = pt.exp(sine(x))
    add_in_place = Elemwise(scalar_add, inplace_pattern={0: 0})
    node = add_in_place(y, pt.constant(np.ones(3))).owner
    assert node.op.destroy_map and not joins_islands(node)
    assert joins_islands(y.owner) and joins_islands(sine(x).owner)
    # a graph with an in-place node on what an island computes
    f = compile_function(
        [In(x)], node.outputs[0] * 2.0, island_mode, accept_inplace=True
    )
    for island in islands(f):
        assert not any(n.op.destroy_map for n in island.fgraph.apply_nodes)
    xv = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(f(xv), 2.0 * (np.exp(np.sin(xv)) + 1.0), rtol=1e-12)


def random_graph(rng) -> tuple[FunctionGraph, list[Apply]]:
    """A graph of 2-13 nodes, each adding up to three earlier nodes' outputs."""
    x = pt.dscalar("x")
    variables = []
    for i in range(int(rng.integers(2, 14))):
        k = int(rng.integers(0, min(i, 3) + 1))
        parents = list(rng.choice(variables, size=k, replace=False)) if k else []
        variables.append(pt.add(x, *parents) if parents else pt.exp(x))
    fgraph = FunctionGraph([x], variables, clone=False)
    nodes = fgraph.toposort()
    assert len(nodes) == len(variables)  # every node is one of ours
    return fgraph, nodes


def test_islands_are_convex_and_disjoint_on_random_graphs():
    rng = np.random.default_rng(0)
    for _ in range(300):
        fgraph, nodes = random_graph(rng)
        n = len(nodes)
        can_join = rng.random(n) < 0.7
        seeds = can_join & (rng.random(n) < 0.4)
        found = find_islands(fgraph, nodes, can_join, seeds)

        position = {node: i for i, node in enumerate(nodes)}
        ancestors = [set() for _ in nodes]
        for i, node in enumerate(nodes):
            for inp in node.inputs:
                j = position.get(inp.owner)
                if j is not None:
                    ancestors[i] |= ancestors[j] | {j}
        seen = set()
        for island in found:
            members = {position[node] for node in island}
            assert len(members) >= 2 and not members & seen
            seen |= members
            assert all(can_join[k] for k in members)
            assert any(seeds[k] for k in members)
            outside = set(range(n)) - members
            for k in outside:  # no path leaves the island and comes back
                below = any(m in ancestors[k] for m in members)
                above = any(k in ancestors[m] for m in members)
                assert not (below and above)


class JoinableCounter:
    """Counts how often a graph's nodes are probed (and described for the trace
    cache) to select its islands."""

    def __init__(self, monkeypatch):
        self.count = 0
        probe = selection.joinable_nodes

        def counted(fgraph, nodes):
            self.count += 1
            return probe(fgraph, nodes)

        monkeypatch.setattr(selection, "joinable_nodes", counted)


def test_a_graph_is_described_once_for_its_islands(monkeypatch):
    """The value-and-gradient rewrite and the islands rewrite both select the
    islands of the same graph: it is probed once, and still gives one island."""
    probes = JoinableCounter(monkeypatch)
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], None)
    assert len(islands(f)) == 1
    assert probes.count == 1
    np.testing.assert_allclose(f(THETA)[0], reference_logp(THETA), rtol=1e-12)


def test_islands_are_selected_again_once_the_graph_changed(monkeypatch):
    probes = JoinableCounter(monkeypatch)
    theta, logp = likelihood_graph()
    fgraph = FunctionGraph([theta], [logp, pt.grad(logp, theta)])
    first = selection.select_islands(fgraph)
    assert selection.select_islands(fgraph) == first
    assert probes.count == 1
    # A node without a JAX lowering after the forward op stays out of islands.
    forward = next(n for n in fgraph.toposort() if isinstance(n.op, OpFromJax))
    host_only = HostOnly()(forward.outputs[0])
    fgraph.replace(forward.outputs[0], host_only)
    again = selection.select_islands(fgraph)
    assert probes.count == 2
    assert host_only.owner in fgraph.apply_nodes
    assert host_only.owner not in {n for island in again for n in island}


# ================================================================= readable
def test_dprint_names_the_functions_and_counts_the_nodes():
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], None)
    text = pytensor.dprint(f, file="str")
    assert "JaxIsland{trajectory" in text and "PyTensor nodes}" in text
    assert "vjp(trajectory" in text
    assert "Inner graphs:" in text  # what the island holds, node by node
    assert "0x" not in text
    (island,) = islands(f)
    n_pytensor = len(island.fgraph.apply_nodes) - len(island.wrapped_functions())
    assert f"+{n_pytensor} PyTensor nodes" in str(island)


# ======================================================= jax.disable_jit()
@as_jax_op
def branching(x):
    return jax.lax.cond(x.sum() > 0, jnp.sin, lambda x: 2.0 * x, x)


@pytest.mark.parametrize(
    "mode",
    [m for _, m in ISLAND_MODES] + ["JAX", "FAST_COMPILE", "no islands"],
    ids=[i for i, _ in ISLAND_MODES] + ["jax", "fast_compile", "no-islands"],
)
def test_disable_jit(mode):
    """The issue's example: eager residuals differ from the traced layout."""
    if mode == "no islands":
        mode = without_islands(None)
    x = pt.vector("x", shape=(3,))
    cost = pt.sum(branching(x) ** 2)
    f = compile_function([x], [cost, pt.grad(cost, x)], mode)
    for xv in (np.ones(3), -np.ones(3)):
        jitted = f(xv)
        with jax.disable_jit():
            eager = f(xv)
        reference = jax.value_and_grad(
            lambda v: jnp.sum(branching.__wrapped__(v) ** 2)
        )(xv)
        for got, want, want_jitted in zip(eager, reference, jitted):
            np.testing.assert_allclose(got, want, rtol=1e-12)
            np.testing.assert_allclose(got, want_jitted, rtol=1e-12)


# =================================================================== switch
def test_the_rewrite_can_be_excluded(island_mode):
    theta, logp = likelihood_graph()
    mode = get_mode(island_mode).excluding("jax_islands")
    f = compile_function([theta], [logp, pt.grad(logp, theta)], mode)
    assert not islands(f)
    assert sum(isinstance(op, OpFromJax) for op in outer_ops(f)) == 2


def test_no_islands_under_the_jax_linker():
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], "JAX")
    assert not islands(f)


# ============================================================ fallback
def test_an_island_jax_cannot_trace_falls_back_to_pytensor(island_mode):
    """A shape computed outside the island: PyTensor's JAX lowering cannot trace it."""
    x, n = pt.vector("x", shape=(3,)), pt.lscalar("n")
    out = pt.alloc(sine(x).sum(), n) * 2.0
    f = compile_function([x, n], out, island_mode)
    assert islands(f)
    xv = np.array([0.1, 0.2, 0.3])
    with pytest.warns(JaxIslandFallbackWarning, match="could not be traced by JAX"):
        first = f(xv, 4)
    np.testing.assert_allclose(first, np.full(4, 2 * np.sin(xv).sum()), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        np.testing.assert_allclose(f(xv, 2), np.full(2, 2 * np.sin(xv).sum()))


def test_a_shared_length_is_a_constant_of_the_program(island_mode):
    """PyMC's dim lengths are shared scalars: XLA gets them as constants."""
    x, n = pt.vector("x", shape=(3,)), pytensor.shared(4, name="n")
    out = pt.alloc(sine(x).sum(), n) * 2.0
    f = compile_function([x], out, island_mode)
    (island,) = islands(f)
    assert island.static_inputs
    xv = np.array([0.1, 0.2, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxIslandFallbackWarning)
        np.testing.assert_allclose(f(xv), np.full(4, 2 * np.sin(xv).sum()))
        n.set_value(6)  # a new length: the program is traced again
        np.testing.assert_allclose(f(xv), np.full(6, 2 * np.sin(xv).sum()))


def test_assertions_on_lengths_join_and_raise_pytensors_error(island_mode):
    """An assertion on fixed lengths is decided when the island is specialized."""
    traces = []

    @as_jax_op
    def traced_sine(x):
        traces.append(x.shape)  # runs once per trace
        return jnp.sin(x)

    x, n = pt.vector("x", shape=(3,)), pytensor.shared(np.int64(3), name="n")
    length = Assert("n must be 3")(n, pt.eq(n, 3))
    out = traced_sine(x).sum() * pt.cast(length, "float64")
    traces.clear()  # the shape trace of the graph's build
    f = compile_function([x], out, island_mode)
    (island,) = islands(f)
    assert any(isinstance(node.op, Assert) for node in island.fgraph.apply_nodes)
    assert outer_ops(f) == [island]
    xv = np.array([0.1, 0.2, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxIslandFallbackWarning)
        np.testing.assert_allclose(f(xv), 3 * np.sin(xv).sum(), rtol=1e-12)
        n.set_value(np.int64(4))
        with pytest.raises(AssertionError, match="n must be 3"):
            f(xv)
        n.set_value(np.int64(3))  # the first specialization is still there
        np.testing.assert_allclose(f(xv), 3 * np.sin(xv).sum(), rtol=1e-12)
    assert len(traces) == 1


def test_a_new_length_specializes_again_and_keeps_the_old(island_mode):
    traces = []

    @as_jax_op
    def traced_sine(x):
        traces.append(x.shape)
        return jnp.sin(x)

    # A raveled point split by dim lengths, as in PyMC's logp_dlogp.
    x = pt.vector("x")
    n, m = (
        pytensor.shared(np.int64(2), name="n"),
        pytensor.shared(np.int64(3), name="m"),
    )
    head, tail = pt.split(x, pt.stack([n, m]), n_splits=2)
    out = traced_sine(head).sum() - tail.sum()
    traces.clear()  # the shape trace of the graph's build
    f = compile_function([x], [out, pt.grad(out, x)], island_mode)
    assert [type(op) for op in outer_ops(f)] == [JaxIsland]
    xv = np.linspace(0.1, 0.5, 5)

    def expected(k):
        return np.sin(xv[:k]).sum() - xv[k:].sum(), np.r_[
            np.cos(xv[:k]), -np.ones(5 - k)
        ]

    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxIslandFallbackWarning)
        for k in (2, 3, 2):
            n.set_value(np.int64(k))
            m.set_value(np.int64(5 - k))
            value, gradient = f(xv)
            want_value, want_gradient = expected(k)
            np.testing.assert_allclose(value, want_value, rtol=1e-12)
            np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12)
    assert traces == [(2,), (3,)]


# Unraveled only: PyMC's default, the order that needed the fix (the raveled
# function has one input; its island was always called directly). Slow: two
# diffrax compiles (about a minute on CI).
@pytest.mark.slow
@pytest.mark.one_python
@pytest.mark.parametrize("ravel_inputs", [False], ids=["unraveled"])
def test_nested_sir_logp_dlogp_is_one_island_called_directly(ravel_inputs):
    """Issue #50's nested model: a cumsum of knots, an interpolating closure passed
    to a diffrax solve with equinox's checks, a PyTensor likelihood. Its whole
    ``logp_dlogp`` is one island, raveled or not (PyMC's default lists its value
    variables in another order than the island's inputs), and the Numba
    function around it is never called: the island's host function is.
    """
    from pymc.model.transform.optimization import freeze_dims_and_data

    from pytensor.compile._jax_ofg.host.op import one_jax_op

    model = sir_nested_model()
    f = model.logp_dlogp_function(ravel_inputs=ravel_inputs)._pytensor_function
    (node,) = f.maker.fgraph.toposort()
    assert isinstance(node.op, JaxIsland)
    inner = [type(n.op).__name__ for n in node.op.fgraph.apply_nodes]
    assert "CumOp" in inner and inner.count("OpFromJax") == 2
    assert one_jax_op(f.maker.fgraph) is node

    frozen = freeze_dims_and_data(model)  # orders its value variables otherwise
    reference = frozen.logp_dlogp_function(ravel_inputs=ravel_inputs, mode="JAX")
    reference = reference._pytensor_function
    point = model.initial_point()
    ours = [v.name for v in model.value_vars]
    theirs = [v.name for v in frozen.value_vars]

    def arguments(values, names):
        if ravel_inputs:
            return [np.concatenate([np.ravel(values[n]) for n in names])]
        return [values[n] for n in names]

    def by_name(gradient, names):
        sizes = np.cumsum([np.size(point[n]) for n in names])[:-1]
        return dict(zip(names, np.split(np.asarray(gradient), sizes)))

    rng = np.random.default_rng(5)
    for shift in (0.0, 0.05):
        values = {
            n: point[n] + shift * rng.normal(size=np.shape(point[n])) for n in ours
        }
        value, gradient = f(*arguments(values, ours))
        want_value, want_gradient = reference(*arguments(values, theirs))
        np.testing.assert_allclose(value, want_value, rtol=1e-10)
        want_gradient = by_name(want_gradient, theirs)
        for name, got in by_name(gradient, ours).items():
            np.testing.assert_allclose(got, want_gradient[name], rtol=1e-6)
    assert f.vm.jit_fn.signatures == []  # the Numba function was never called


def test_pymc_dims_machinery_joins_the_island():
    """The main job's SEIR model, written with dims: one XLA program, as mode=JAX."""
    from pymc.model.transform.optimization import freeze_dims_and_data

    with imported_scripts(EXAMPLES / "seir_time_varying.py") as (seir,):
        model = seir.build_model(seir.simulate_data(seir.Truth(), seed=1).cases)
    f = model.logp_dlogp_function(ravel_inputs=True)._pytensor_function
    nodes = f.maker.fgraph.toposort()
    assert sum(isinstance(n.op, JaxIsland) for n in nodes) == 1
    assert len(nodes) <= 4, [str(n.op) for n in nodes]

    frozen = freeze_dims_and_data(model)
    reference = frozen.logp_dlogp_function(ravel_inputs=True, mode="JAX")
    reference = reference._pytensor_function
    sizes = {
        v.name: int(np.prod(model.initial_point()[v.name].shape))
        for v in model.value_vars
    }

    def split(x, names):
        return dict(zip(names, np.split(x, np.cumsum([sizes[n] for n in names])[:-1])))

    ours = [v.name for v in model.value_vars]
    theirs = [v.name for v in frozen.value_vars]
    start = np.concatenate([np.ravel(v) for v in model.initial_point().values()])
    rng = np.random.default_rng(2)
    for x in (start, start + 0.05 * rng.normal(size=start.size)):
        parts = split(x, ours)
        value, gradient = f(x)
        want_value, want_gradient = reference(
            np.concatenate([parts[n] for n in theirs])
        )
        want_gradient = split(np.asarray(want_gradient), theirs)
        np.testing.assert_allclose(value, want_value, rtol=1e-10)
        np.testing.assert_allclose(
            gradient, np.concatenate([want_gradient[n] for n in ours]), rtol=1e-10
        )


def test_errors_of_a_wrapped_function_are_not_hidden_by_the_fallback(island_mode):
    @as_jax_op(output_types=pt.dvector().type)  # so only calls trace it
    def picky(x):
        if x.shape[0] != 3:  # a Python check at trace time
            raise ValueError("picky needs exactly 3 values")
        return jnp.sin(x)

    x = pt.vector("x")
    f = compile_function([x], pt.exp(picky(x)).sum(), island_mode)
    assert islands(f)
    np.testing.assert_allclose(f(np.zeros(3)), 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxIslandFallbackWarning)
        with pytest.raises(ValueError, match="picky needs exactly 3 values"):
            f(np.zeros(4))


def test_a_bad_input_is_an_error_not_a_fallback(island_mode):
    """An input jax.jit refuses before tracing must not turn the island off."""
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], island_mode)
    (island,) = islands(f)
    assert len(island.fgraph.inputs) == 2  # theta, and the observed data
    host = island.host_function()
    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxIslandFallbackWarning)
        with pytest.raises(ValueError, match="None is not a valid value"):
            host(None, OBSERVED)
        outputs = host(THETA, OBSERVED)
    (value,) = [o for o in outputs if o.ndim == 0]
    (gradient,) = [o for o in outputs if o.ndim == 1]
    want_value, want_gradient = jax.value_and_grad(reference_logp)(THETA)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-10)


# ================================================== pickling and threads
def test_a_compiled_function_with_an_island_runs_in_a_fresh_process(tmp_path):
    model = models.sir_model()
    f = model.logp_dlogp_function(ravel_inputs=True)._pytensor_function
    assert len(islands(f)) == 1
    x = np.concatenate([np.ravel(v) for v in model.initial_point().values()])
    value, gradient = f(x)
    (tmp_path / "f.pkl").write_bytes(pickle.dumps(f))
    np.save(tmp_path / "expected.npy", np.concatenate([[value], gradient]))
    np.save(tmp_path / "x.npy", x)
    run_script(f"""
        import pickle
        import numpy as np
        folder = {str(tmp_path)!r}
        with open(folder + "/f.pkl", "rb") as file:
            f = pickle.load(file)
        value, gradient = f(np.load(folder + "/x.npy"))
        expected = np.load(folder + "/expected.npy")
        np.testing.assert_allclose(value, expected[0], rtol=1e-12)
        np.testing.assert_allclose(gradient, expected[1:], rtol=1e-12)
        assert "JaxIsland" in str(f.maker.fgraph.toposort()[0].op)
    """)


def test_threads_share_a_compiled_function_with_an_island():
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], None)
    assert islands(f)
    thetas = [THETA + 0.01 * k for k in range(8)]
    expected = [jax.value_and_grad(reference_logp)(t) for t in thetas]
    results: dict[int, list] = {}

    def work(k):
        results[k] = [f(thetas[k]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k, runs in results.items():
        for value, gradient in runs:
            np.testing.assert_allclose(value, expected[k][0], rtol=1e-12)
            np.testing.assert_allclose(gradient, expected[k][1], rtol=1e-10)


def test_pymc_model_samples_with_nutpie_through_the_island():
    """nutpie (PyMC's default sampler) compiles the Numba graph with the island."""
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        mu = trajectory(theta, TIMES)
        pm.Normal("y", mu, 0.05, observed=OBSERVED)
    compiled = nutpie.compile_pymc_model(model)
    assert islands(compiled.logp_func)
    trace = nutpie.sample(
        compiled, draws=150, tune=150, chains=2, cores=1, progress_bar=False, seed=1
    )
    # cos is even: the sign of theta[1] is not identified
    mean = np.abs(trace.posterior["theta"]).mean(("chain", "draw")).values
    np.testing.assert_allclose(mean, [0.7, 1.3], atol=0.1)


def test_a_graph_that_is_one_island_runs_without_numba():
    """The thunk calls the island's host function; Numba's function is not even compiled."""
    from pytensor.compile._jax_ofg.patches import numba_direct_thunk
    from pytensor.link.numba.linker import NumbaLinker

    assert numba_direct_thunk.install()  # fails when PyTensor's JITLinker moves
    assert NumbaLinker.create_jitable_thunk.runs_one_jax_op_directly
    theta, logp = likelihood_graph()
    f = compile_function([theta], [logp, pt.grad(logp, theta)], "NUMBA")
    assert [type(op) for op in outer_ops(f)] == [JaxIsland]
    want_value, want_gradient = jax.value_and_grad(reference_logp)(THETA)
    value, gradient = f(THETA)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-10)
    assert f.vm.jit_fn.signatures == []  # never called, so never compiled
    # The Numba function stays, for callers that take it (nutpie).
    numba_value, numba_gradient = f.vm.jit_fn(THETA)
    np.testing.assert_allclose(numba_value, want_value, rtol=1e-12)
    np.testing.assert_allclose(numba_gradient, want_gradient, rtol=1e-10)
