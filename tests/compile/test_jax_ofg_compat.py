"""The PyTensor and JAX internals this project relies on, pinned.

Each is also exercised by a behavioural test; these fail first, with a
message naming the internal, when a new release moves or changes one.
"""

import inspect
from importlib.metadata import requires, version

import jax
from packaging.requirements import Requirement

from pytensor.compile.jax_ofg import OpFromJax


def test_installed_versions_are_in_the_claimed_ranges():
    claimed = {
        (req := Requirement(line)).name: req.specifier
        for line in requires("pytensor-jax-ofg")
        if "extra ==" not in line
    }
    for name in ("pytensor", "jax", "jaxlib", "numpy"):
        assert version(name) in claimed[name], (name, version(name), claimed[name])


def test_private_pytensor_dispatchers_exist():
    from pytensor.graph.replace import _vectorize_node
    from pytensor.tensor.basic import _as_tensor_variable

    # singledispatch functions we register OpFromJax / SymbolicCallable with
    assert OpFromJax in _vectorize_node.registry
    from pytensor.compile.jax_ofg import SymbolicCallable

    assert SymbolicCallable in _as_tensor_variable.registry


def test_blockwise_fallback_and_numba_registration_signatures():
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
    from pytensor.tensor.blockwise import vectorize_node_fallback

    assert list(inspect.signature(vectorize_node_fallback).parameters)[:2] == [
        "op",
        "node",
    ]
    assert callable(register_funcify_and_cache_key)


def test_py_thunk_protocol():
    """OpFromJax.make_py_thunk mirrors Op.make_py_thunk's signature."""
    from pytensor.graph.op import Op, is_thunk_type

    ours = inspect.signature(OpFromJax.make_py_thunk)
    theirs = inspect.signature(Op.make_py_thunk)
    assert list(ours.parameters) == list(theirs.parameters)
    assert callable(is_thunk_type)


def test_rewrite_positions_in_optdb():
    """Our rewrites run between merge/canonicalize and the in-place pass."""
    from pytensor.compile.mode import optdb

    positions = optdb.__position__
    assert positions["merge1.1"] < positions["jax_ofg_vmap_blockwise"]
    assert positions["jax_ofg_vmap_blockwise"] < positions["canonicalize"]
    assert positions["specialize"] < positions["jax_ofg_fuse_value_and_vjp"]
    assert positions["jax_ofg_fuse_value_and_vjp"] < positions["add_destroy_handler"]


def test_jax_symbolic_shapes_and_vjp_pytrees():
    import jax.numpy as jnp
    from jax import export

    (n,) = export.symbolic_shape("n")
    out = jax.eval_shape(
        lambda x: jnp.concatenate([x, x]), jax.ShapeDtypeStruct((n,), "float32")
    )
    assert export.is_symbolic_dim(out.shape[0])
    assert str(out.shape[0]) == "2*n"
    # the pullback of jax.vjp is a pytree of residual arrays
    _, pullback = jax.vjp(jnp.sin, jnp.ones(3))
    leaves = jax.tree_util.tree_leaves(pullback)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)
