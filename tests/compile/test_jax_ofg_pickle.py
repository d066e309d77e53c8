"""Pickling: graphs and compiled functions unpickle and run in a fresh process."""

import pickle

import _jax_ofg_models as models
import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import run_script
from _linkers import LINKER_MODES, compile_function

import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


def reference_cost(x, t):
    """The cost of `_cost_graph`, in plain JAX."""
    out = models.powers.__wrapped__(x, power=3)
    interpolator = models.make_interpolator.__wrapped__(x)
    nested = models.integrate.__wrapped__(interpolator, t)
    module_out = models.apply.__wrapped__(models.Scale(x, "tanh"), x)
    return out["total"] + out["power"].sum() + nested + module_out.sum()


def _cost_graph():
    x = pt.vector("x", shape=(3,))
    t = pt.scalar("t")
    out = models.powers(x, power=3)
    nested = models.integrate(models.make_interpolator(x), t)
    module_out = models.apply(models.Scale(x, "tanh"), x)
    cost = out["total"] + out["power"].sum() + nested + module_out.sum()
    return [x, t], [cost, *pt.grad(cost, [x, t])]


def test_graphs_and_compiled_functions_unpickle_in_a_fresh_process(tmp_path):
    inputs, outputs = _cost_graph()
    functions = {
        name: compile_function(inputs, outputs, mode) for name, mode in LINKER_MODES
    }
    x, t = np.array([0.3, -1.2, 2.0]), 0.7
    for f in functions.values():
        f(x, t)  # the ops' jitted functions now exist, and must not be pickled
    (tmp_path / "functions.pkl").write_bytes(pickle.dumps(functions))
    (tmp_path / "graph.pkl").write_bytes(pickle.dumps((inputs, outputs)))

    run_script(f"""
        import pickle
        import numpy as np
        import pytensor
        folder = {str(tmp_path)!r}
        with open(folder + "/functions.pkl", "rb") as file:
            functions = pickle.load(file)
        with open(folder + "/graph.pkl", "rb") as file:
            inputs, outputs = pickle.load(file)
        functions["graph"] = pytensor.function(inputs, outputs)
        x, t = np.array([0.3, -1.2, 2.0]), 0.7
        results = {{
            f"{{name}}_{{i}}": np.asarray(value)
            for name, f in functions.items()
            for i, value in enumerate(f(x, t))
        }}
        np.savez(folder + "/results.npz", **results)
    """)

    results = np.load(tmp_path / "results.npz")
    value, gradients = jax.value_and_grad(reference_cost, argnums=(0, 1))(x, t)
    for name in [*functions, "graph"]:
        np.testing.assert_allclose(results[f"{name}_0"], value, rtol=1e-12)
        np.testing.assert_allclose(results[f"{name}_1"], gradients[0], rtol=1e-12)
        np.testing.assert_allclose(results[f"{name}_2"], gradients[1], rtol=1e-12)


def _closure_model(scale):
    @as_jax_op
    def scaled(x):
        return scale * jnp.sin(x)

    return scaled


def test_closures_and_lambdas_unpickle_with_cloudpickle(tmp_path):
    x = pt.vector("x")
    y = _closure_model(2.5)(x)
    cost = as_jax_op(lambda v: jnp.sum(v**2))(y)
    f = compile_function([x], [cost, pt.grad(cost, x)], None)
    (tmp_path / "f.pkl").write_bytes(cloudpickle.dumps(f))

    run_script(f"""
        import cloudpickle
        import numpy as np
        with open({str(tmp_path / "f.pkl")!r}, "rb") as file:
            f = cloudpickle.load(file)
        value, gradient = f(np.linspace(-1, 1, 4))
        np.savez({str(tmp_path / "out.npz")!r}, value=value, gradient=gradient)
    """)

    x_value = np.linspace(-1, 1, 4)

    def reference(v):
        return jnp.sum((2.5 * jnp.sin(v)) ** 2)

    results = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(results["value"], reference(x_value))
    np.testing.assert_allclose(results["gradient"], jax.grad(reference)(x_value))


def test_jitted_functions_are_never_pickled():
    x = pt.vector("x", shape=(3,))
    out = models.powers(x)["total"]
    op = out.owner.op
    compile_function([x], out, "CVM")(np.ones(3))
    with pytest.raises(Exception, match=r"pickle|local object"):  # why left out
        pickle.dumps(op.program)
    clone = pickle.loads(pickle.dumps(op))
    assert not any("program" in name for name in vars(clone))
    assert clone == op and hash(clone) == hash(op)


def test_module_level_wrappers_pickle_by_name():
    assert pickle.loads(pickle.dumps(models.powers)) is models.powers


def test_equinox_static_fields_survive_pickling():
    """Equinox keeps a sentinel in its tree structures; it must stay itself."""
    x = pt.vector("x", shape=(3,))
    out = models.apply(models.Scale(x, "linear"), x)
    clone = pickle.loads(pickle.dumps(out))
    f = compile_function([clone.owner.inputs[0]], clone, "FAST_COMPILE")
    np.testing.assert_allclose(f(np.array([1.0, 2.0, 3.0])), [1.0, 4.0, 9.0])


def _run_pickled(payload: bytes, x: np.ndarray) -> list:
    """Worker: unpickle a compiled function and call it."""
    function = pickle.loads(payload)
    return [np.asarray(value) for value in function(x)]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver", "fork"])
def test_compiled_function_in_worker_processes(start_method, tmp_path):
    """Workers unpickle a compiled function and give the JAX answer.

    ``fork`` is safe only before the parent has started JAX (its threads do
    not survive a fork): the parent here only unpickles bytes and forks. PyMC
    multi-process sampling is tested in ``test_jax_ofg_processes.py``.
    """
    x = pt.vector("x", shape=(3,))
    out = models.powers(x, power=3)
    cost = out["total"] + out["power"].sum()
    f = compile_function([x], [cost, pt.grad(cost, x)], None)
    (tmp_path / "f.pkl").write_bytes(pickle.dumps(f))
    run_script(f"""
        import multiprocessing, pickle
        import numpy as np
        import test_jax_ofg_pickle as here
        if __name__ == "__main__":
            payload = open({str(tmp_path / "f.pkl")!r}, "rb").read()
            inputs = [np.array([0.5, -1.0, 2.0]) + i for i in range(4)]
            context = multiprocessing.get_context({start_method!r})
            with context.Pool(2) as pool:
                results = pool.starmap(here._run_pickled, [(payload, x) for x in inputs])
            np.savez({str(tmp_path / "out.npz")!r}, *[v for pair in results for v in pair])
    """)
    results = np.load(tmp_path / "out.npz")

    def reference(v):
        return jnp.sum(v) + jnp.sum(v**3)

    for i in range(4):
        xv = np.array([0.5, -1.0, 2.0]) + i
        np.testing.assert_allclose(results[f"arr_{2 * i}"], reference(xv))
        np.testing.assert_allclose(results[f"arr_{2 * i + 1}"], jax.grad(reference)(xv))
