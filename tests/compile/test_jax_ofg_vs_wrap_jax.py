"""The comparison with ``pytensor.wrap_jax``, claim by claim
(``doc/guide/compared_with_wrap_jax.rst``).

Each test states what ``as_jax_op`` does and what PyTensor's built-in wrapper
(3.3.x) does on the same input, so the table cannot drift from the truth.
"""

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import SERVE_HITS, run_script
from _linkers import compile_function

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import SymbolicCallable, as_jax_op
from pytensor.gradient import DisconnectedInputError, pushforward


def scaled(x, factor):
    return x * factor


def test_equal_calls_merge_only_with_as_jax_op():
    x = pt.vector("x", shape=(3,))
    ours = as_jax_op(scaled)
    theirs = pytensor.wrap_jax(scaled)
    assert ours(x, 2.0).owner.op == ours(x, 2.0).owner.op
    assert theirs(x, 2.0).owner.op != theirs(x, 2.0).owner.op


def test_unknown_dims_keep_static_dims_only_with_as_jax_op():
    def outer(x, y):
        return jnp.outer(x, y)

    x, y = pt.vector("x"), pt.vector("y", shape=(3,))
    assert as_jax_op(outer)(x, y).type.shape == (None, 3)
    # wrap_jax compiles and evaluates the input graph for shapes, which fails
    # for a free input, and otherwise forgets every static output dim.
    with pytest.raises(ValueError, match="Could not compile a function"):
        pytensor.wrap_jax(outer)(x, y)
    data = pytensor.shared(np.ones(4))
    assert pytensor.wrap_jax(outer)(data, y).type.shape == (None, None)
    assert as_jax_op(outer)(data, y).type.shape == (None, 3)


def test_forward_mode_only_with_as_jax_op():
    x, t = pt.vector("x", shape=(3,)), pt.vector("t", shape=(3,))
    ours = pushforward(as_jax_op(jnp.sin)(x), x, t, use_op_pushforward=True)
    np.testing.assert_allclose(
        ours.eval({x: np.ones(3), t: np.ones(3)}), np.cos(np.ones(3))
    )
    with pytest.raises(NotImplementedError):
        pushforward(pytensor.wrap_jax(jnp.sin)(x), x, t, use_op_pushforward=True)


def gated_power(x, n, gate):
    """A float input, an integer and a boolean one; a float and an int output."""
    return jnp.where(gate, jnp.sin(x) ** n, x), n + 1


def _grad_error(cost, variable) -> str:
    with pytest.raises(DisconnectedInputError) as info:
        pt.grad(cost, variable)
    return str(info.value)


def test_integer_and_boolean_inputs_are_disconnected_in_both(mode):
    x = pt.vector("x", shape=(3,))
    n, gate = pt.lscalar("n"), pt.scalar("gate", dtype="bool")
    xv = np.array([0.3, -0.7, 1.1])
    expected = jax.grad(lambda v: jnp.sum(gated_power(v, 3, True)[0]))(xv)
    errors = {}
    for label, wrap in (("ours", as_jax_op), ("wrap_jax", pytensor.wrap_jax)):
        y, m = wrap(gated_power)(x, n, gate)
        cost = y.sum()
        errors[label] = [_grad_error(cost, n), _grad_error(cost, gate)]
        # The value and the float input's gradient in one function: the
        # value-and-gradient rewrites and islands run with the integers there.
        outputs = [cost, m, pt.grad(cost, x)]
        if wrap is as_jax_op:
            f = compile_function([x, n, gate], outputs, mode)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # wrap_jax: Numba's object mode
                f = pytensor.function([x, n, gate], outputs, mode=mode)
        value, incremented, gradient = f(xv, 3, True)
        np.testing.assert_allclose(value, np.sum(np.sin(xv) ** 3), rtol=1e-12)
        assert incremented == 4
        np.testing.assert_allclose(gradient, expected, rtol=1e-12)
    assert errors["ours"] == errors["wrap_jax"]


def test_returned_closures_compose_only_with_as_jax_op():
    def line(slope):
        return lambda t: slope * t

    def at_two(f):
        return f(2.0)

    slope = pt.scalar("slope")
    f = as_jax_op(line)(slope)
    assert isinstance(f, SymbolicCallable)
    np.testing.assert_allclose(as_jax_op(at_two)(f).eval({slope: 3.0}), 6.0)
    with pytest.raises(Exception):  # noqa: B017 - any failure proves the point
        leaked = pytensor.wrap_jax(line)(slope)
        pytensor.wrap_jax(at_two)(leaked).eval({slope: 3.0})


def test_jax_arrays_in_outputs_are_copied_by_both():
    x = pt.vector("x", shape=(2,))
    for wrap in (as_jax_op, pytensor.wrap_jax):
        value = pytensor.function([x], wrap(jnp.negative)(x), mode="CVM")(np.ones(2))
        assert value.flags.writeable


FRESH_PROCESS = """
import pytensor, pytensor.tensor as pt
x = pt.dvector("x", shape=(3,))
if {which!r} == "ours":
    from pytensor.compile.jax_ofg import as_jax_op as wrap
else:
    wrap = pytensor.wrap_jax
print(wrap(lambda x: x * 2)(x).type.dtype)
"""


@pytest.mark.parametrize("which, dtype", [("ours", "float64"), ("wrap_jax", "float32")])
def test_float64_in_a_fresh_process(which, dtype, tmp_path):
    """Before PyTensor's JAX backend is imported, wrap_jax narrows float64."""
    result = run_script(FRESH_PROCESS.format(which=which), tmp_path, timeout=300)
    assert result.stdout.split()[-1] == dtype


def test_numba_object_mode_warning_only_for_wrap_jax():
    x = pt.vector("x", shape=(3,))
    for wrap, warns in [(as_jax_op, False), (pytensor.wrap_jax, True)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f = pytensor.function([x], wrap(jnp.cos)(x))  # default mode: Numba
        np.testing.assert_allclose(f(np.zeros(3)), np.ones(3))
        assert any("object mode" in str(w.message) for w in caught) is warns


def _count_body_runs(wrapper) -> int:
    """How often the wrapped body runs in one call of a compiled value+grad."""
    import jax

    runs = []

    def energy(x):
        jax.debug.callback(lambda: runs.append(1))
        return jnp.sum(jnp.sin(x) ** 2)

    x = pt.vector("x", shape=(4,))
    cost = wrapper(energy)(x)
    f = pytensor.function([x], [cost, pt.grad(cost, x)], mode="CVM")
    f(np.ones(4))
    jax.effects_barrier()
    runs.clear()
    f(np.ones(4))
    jax.effects_barrier()
    return len(runs)


def test_value_and_gradient_run_the_function_once_only_with_as_jax_op():
    assert _count_body_runs(as_jax_op) == 1
    assert _count_body_runs(pytensor.wrap_jax) == 2


def test_standard_pickle_of_a_compiled_function_only_with_as_jax_op():
    import pickle

    import _jax_ofg_models as models

    x = pt.vector("x", shape=(3,))
    ours = pytensor.function([x], models.powers(x)["total"], mode="CVM")
    assert pickle.loads(pickle.dumps(ours))(np.ones(3)) == 3.0
    theirs = pytensor.function(
        [x], pytensor.wrap_jax(models.powers.__wrapped__)(x)["total"], mode="CVM"
    )
    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
        pickle.dumps(theirs)


def test_vectorize_graph_is_one_vmapped_op_only_with_as_jax_op():
    from pytensor.graph.replace import vectorize_graph
    from pytensor.tensor.blockwise import Blockwise

    def compiled_ops(wrapper):
        x = pt.vector("x", shape=(3,))
        y = wrapper(lambda v: jnp.sum(v**2))(x)
        xs = pt.matrix("xs", shape=(5, 3))
        f = pytensor.function([xs], vectorize_graph(y, {x: xs}), mode="CVM")
        np.testing.assert_allclose(f(np.ones((5, 3))), np.full(5, 3.0))
        return [node.op for node in f.maker.fgraph.apply_nodes]

    (ours,) = compiled_ops(as_jax_op)
    assert ours.name == "vmap(<lambda>)"
    theirs = compiled_ops(pytensor.wrap_jax)
    assert any(isinstance(op, Blockwise) for op in theirs)


def test_a_likelihood_around_the_op_joins_its_xla_program_only_with_as_jax_op():
    """PyTensor code between the value and the gradient (a PyMC likelihood)."""

    def path(theta):
        return jnp.cumsum(jnp.sin(theta))

    def compiled_graph(wrapper):
        theta = pt.vector("theta", shape=(4,))
        mu = wrapper(path)(theta)
        logp = -0.5 * pt.sum((mu - 1.0) ** 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # wrap_jax: Numba's object mode
            f = pytensor.function([theta], [logp, pt.grad(logp, theta)])
        f(np.linspace(0.1, 0.4, 4))
        return [type(node.op).__name__ for node in f.maker.fgraph.toposort()]

    assert compiled_graph(as_jax_op) == ["JaxIsland"]  # one XLA program per call
    theirs = compiled_graph(pytensor.wrap_jax)
    assert theirs.count("JAXOp") == 2  # the forward, and the pullback's own
    assert len(theirs) > 2  # the likelihood and its gradient outside XLA


def test_compiled_numba_code_is_cacheable_only_with_as_jax_op():
    """PyTensor caches Numba code on disk only for nodes with a cache key."""
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    x = pt.vector("x", shape=(3,))
    for wrapper, cacheable in ((as_jax_op, True), (pytensor.wrap_jax, False)):
        node = wrapper(jnp.sin)(x).owner
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # wrap_jax: Numba's object mode
            _, key = numba_funcify_and_cache_key(node.op, node=node)
        assert (key is not None) == cacheable


def test_runtime_errors_name_the_function_only_with_as_jax_op():
    import equinox as eqx

    def checked_scale(x):
        return eqx.error_if(x * 2.0, x.sum() > 3.0, "too large")

    x = pt.vector("x", shape=(2,))
    for wrap, names in ((as_jax_op, True), (pytensor.wrap_jax, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # wrap_jax's object-mode warning
            f = pytensor.function([x], wrap(checked_scale)(x))
        f(np.zeros(2))
        with (
            warnings.catch_warnings(),
            pytest.raises(Exception, match="too large") as info,
        ):
            warnings.simplefilter("ignore")
            f(np.ones(2) * 2)
        assert ("checked_scale" in str(info.value)) is names


def test_a_second_process_traces_again_only_with_wrap_jax(tmp_path):
    """The trace cache on disk serves ours; wrap_jax traces in every process."""
    (tmp_path / "wrapped.py").write_text(
        "import jax.numpy as jnp\n"
        "def traced(x):\n"
        "    print('TRACED')\n"
        "    return jnp.sum(jnp.sin(x))\n"
    )
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "import numpy as np, pytensor, pytensor.tensor as pt\n"
        "from pytensor.compile.jax_ofg import as_jax_op\n"
        "import wrapped\n"
        "wrap = as_jax_op if sys.argv[1] == 'ours' else pytensor.wrap_jax\n"
        "x = pt.vector('x', shape=(3,))\n"
        "y = wrap(wrapped.traced)(x)\n"
        "print(pytensor.function([x], [y, pt.grad(y, x)])(np.ones(3))[0])\n"
    )
    from _fresh_process import run_python

    traces = {}
    for which in ("ours", "wrap_jax"):
        env = {"PYTENSOR_FLAGS": f"{SERVE_HITS},base_compiledir={tmp_path / which}"}
        counts = []
        for _ in range(2):
            out = run_python([str(script), which], tmp_path, timeout=300, env=env)
            counts.append(out.stdout.splitlines().count("TRACED"))
        traces[which] = counts
    assert traces["ours"][0] >= 1 and traces["ours"][1] == 0
    assert traces["wrap_jax"][1] >= 1 and traces["wrap_jax"][1] == traces["wrap_jax"][0]


def test_pymc_dims_models_are_one_xla_program_only_with_as_jax_op():
    import pymc as pm

    def scaled_walk(steps, weights):
        return jnp.cumsum(steps) * weights

    weights = np.linspace(1.0, 2.0, 6)
    counts = {}
    for label, wrap in (("ours", as_jax_op), ("wrap_jax", pytensor.wrap_jax)):
        with pm.Model(coords={"t": np.arange(6)}) as model:
            steps = pm.Normal("steps", 0, 1, dims="t")
            sigma = pm.HalfNormal("sigma")
            mean = wrap(scaled_walk)(steps, weights)
            pm.Normal("y", mean, sigma, observed=np.ones(6), dims="t")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # wrap_jax's object-mode warning
            f = model.logp_dlogp_function(ravel_inputs=True)._pytensor_function
        counts[label] = len(f.maker.fgraph.apply_nodes)
    assert counts["ours"] == 1
    assert counts["wrap_jax"] > 3


def test_a_global_edited_between_compiles_gives_the_new_value_only_with_as_jax_op(
    tmp_path, monkeypatch
):
    """A notebook: a cell edits a global, the next compiles the same graph again."""
    import importlib

    (tmp_path / "edited_cell.py").write_text(
        "import jax.numpy as jnp\nFACTOR = 2.0\n"
        "def scaled(x):\n    return FACTOR * jnp.sin(x)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cell = importlib.import_module("edited_cell")
    try:
        x = pt.vector("x", shape=(3,))
        xv = np.array([0.1, 0.2, 0.3])
        for wrap, new in ((as_jax_op, 5.0), (pytensor.wrap_jax, 2.0)):
            cell.FACTOR = 2.0
            y = wrap(cell.scaled)(x).sum()
            before = pytensor.function([x], y, mode="CVM")(xv)
            cell.FACTOR = 5.0
            after = pytensor.function([x], y, mode="CVM")(xv)
            np.testing.assert_allclose(before, 2.0 * np.sin(xv).sum(), rtol=1e-12)
            # wrap_jax's op keeps the program jitted when it first ran.
            np.testing.assert_allclose(after, new * np.sin(xv).sum(), rtol=1e-12)
            rebuilt = pytensor.function([x], wrap(cell.scaled)(x).sum(), mode="CVM")
            np.testing.assert_allclose(rebuilt(xv), 5.0 * np.sin(xv).sum())
    finally:
        sys.modules.pop("edited_cell", None)
