"""Bad inputs, no mutation, threads: what the op does when used wrongly, or hard.

Every misuse below pins the error's type and words. Behaviour that is a bug
today (a crash, an unclear message) is marked ``xfail(strict=True)`` with the
expected behaviour written out, so the fix removes the marker.

Cases already pinned elsewhere are not repeated here: ``pt.exp``/``+``/
``pytensor.function`` on a symbolic callable (``test_jax_ofg_nesting.py``), a
missing argument and an unexpected keyword, an ``error_if`` in a plain vector
function (``test_jax_ofg.py``); the cases here go further (pytree arguments,
the gradient ops, callbacks, checkify).
"""

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fresh_process import run_script
from _linkers import compile_function, jax_op_nodes, without_islands
from jax.experimental import checkify

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.tracing.functions import OutputStructureError
from pytensor.compile.jax_ofg import ShapeInferenceError, as_jax_op


RNG = np.random.default_rng(20260701)
INVALID_ARGUMENT = "Invalid argument to PyTensor function at index 0."
NOT_A_TENSOR = (
    r"SymbolicCallable\(line\) is a function, not a tensor: it cannot be used in "
    r"a PyTensor expression\. Call it with tensors"
)


def notes_of(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def told(error: BaseException) -> str:
    """What the user reads: the message and the notes."""
    return str(error) + "\n" + notes_of(error)


def jax_op_names(f) -> list[str]:
    return [str(n.op) for n in jax_op_nodes(f)]


# ======================================================= wrong runtime values
@as_jax_op
def doubled(x):
    return x * 2


def test_wrong_runtime_shape_is_rejected_before_the_op_runs(mode):
    x = pt.vector("x", shape=(3,))
    f = compile_function([x], doubled(x), mode)
    with pytest.raises(
        TypeError,
        match=r"The type's shape \(\(3,\)\) is not compatible with the data's \(\(4,\)\)",
    ) as info:
        f(np.ones(4))
    assert INVALID_ARGUMENT in notes_of(info.value)
    with pytest.raises(
        TypeError,
        match=r"Wrong number of dimensions: expected 1, got 2 with shape \(3, 1\)",
    ):
        f(np.ones((3, 1)))
    np.testing.assert_array_equal(f(np.arange(3.0)), [0.0, 2.0, 4.0])


#: (label, value, error type, message): values of the wrong dtype for a
#: float64 vector of length 3. PyTensor's input filter rejects them, exactly
#: as for a native graph, before any op runs.
WRONG_DTYPES = [
    (
        "strings",
        np.array(["a", "b", "c"]),
        TypeError,  # NumPy's UFuncTypeError
        r"ufunc 'add' did not contain a loop with signature matching types",
    ),
    (
        "complex",
        np.array([1 + 1j, 2, 3]),
        TypeError,
        r"Vector\(float64, shape=\(3,\)\) cannot store a value of dtype complex128 "
        r"without risking loss of precision",
    ),
    (
        "object",
        np.array([1.0, None, 2.0], dtype=object),
        # PyTensor's own (unclear) message: TensorType.filter reads `.dtype`
        # of the object array's first element.
        AttributeError,
        r"'float' object has no attribute 'dtype'",
    ),
    (
        "string scalar",
        "abc",
        ValueError,
        r"could not convert string to float: 'abc'",
    ),
]


def test_wrong_runtime_dtype_is_rejected_like_a_native_graph(mode):
    x = pt.vector("x", shape=(3,))
    f = compile_function([x], doubled(x), mode)
    native = compile_function([x], x * 2, mode)
    for label, value, error_type, message in WRONG_DTYPES:
        for function in (f, native):
            with pytest.raises(error_type, match=message) as info:
                function(value)
            assert INVALID_ARGUMENT in notes_of(info.value), label
    x32 = pt.vector("x32", dtype="float32", shape=(3,))
    g = compile_function([x32], doubled(x32), mode)
    with pytest.raises(
        TypeError,
        match=r"Vector\(float32, shape=\(3,\)\) cannot store a value of dtype float64",
    ):
        g(np.ones(3))
    np.testing.assert_array_equal(f(np.array([1, 2, 3])), [2.0, 4.0, 6.0])


@as_jax_op
def added(x, y):
    return x + y


def test_unknown_lengths_that_disagree_at_run_time(mode):
    """Both lengths unknown when built: JAX finds the mismatch at the first call."""
    x, y = pt.vector("x"), pt.vector("y")
    f = compile_function([x, y], added(x, y), mode)
    with pytest.raises(
        TypeError, match=r"add got incompatible shapes for broadcasting: \(3,\), \(4,\)"
    ) as info:
        f(np.ones(3), np.ones(4))
    if mode != "JAX":
        assert "OpFromJax{added}" in told(info.value)
    np.testing.assert_array_equal(f(np.ones(2), np.arange(2.0)), [1.0, 2.0])


def test_trace_time_error_under_the_jax_linker_names_the_function():
    x, y = pt.vector("x"), pt.vector("y")
    f = pytensor.function([x, y], added(x, y), mode="JAX")
    with pytest.raises(TypeError, match="incompatible shapes") as info:
        f(np.ones(3), np.ones(4))
    assert "OpFromJax{added}" in str(info.value) + notes_of(info.value)


# ================================================================ NaN and inf
def non_finite(x, y):
    return {
        "exp": jnp.exp(x) * y,
        "log": jnp.log(x),
        "dot": jnp.sum(x * y),
        "max": jnp.max(x),
        "where": jnp.where(jnp.isfinite(x), x, 0.0),
        "clip": jnp.clip(x, -1.0, 1.0),
    }


def test_nan_and_inf_propagate_like_jax(mode):
    x, y = pt.vector("x", shape=(6,)), pt.vector("y", shape=(6,))
    out = as_jax_op(non_finite)(x, y)
    names = sorted(out)
    # Not `max`: the gradient of a max over NaNs is all NaN in eager JAX but
    # zero under jax.jit (XLA simplifies it), so "what JAX does" is ambiguous.
    in_cost = [k for k in names if k != "max"]
    cost = pt.add(*[out[k].sum() for k in in_cost])
    f = compile_function(
        [x, y], [*[out[k] for k in names], *pt.grad(cost, [x, y])], mode
    )
    xv = np.array([np.nan, np.inf, -np.inf, 1.0, -2.0, 0.0])
    yv = np.array([1.0, np.nan, 2.0, np.inf, 0.0, -1.0])
    *values, gx, gy = f(xv, yv)
    expected = non_finite(jnp.asarray(xv), jnp.asarray(yv))
    for name, value in zip(names, values):
        np.testing.assert_allclose(value, expected[name], err_msg=name)

    def jax_cost(a, b):
        out = non_finite(a, b)
        return sum(out[k].sum() for k in in_cost)

    ex, ey = jax.grad(jax_cost, argnums=(0, 1))(jnp.asarray(xv), jnp.asarray(yv))
    np.testing.assert_allclose(gx, ex)
    np.testing.assert_allclose(gy, ey)
    assert np.isnan(gx).any() and np.isinf(values[names.index("exp")]).any()
    # finite inputs after non-finite ones: nothing sticks
    finite = f(np.linspace(0.5, 1.0, 6), np.ones(6))
    assert all(np.isfinite(v).all() for v in finite)


# ===================================== errors raised at run time for some values
def checked_model(params, x):
    x = eqx.error_if(x, x < 0, "negative input")
    return jnp.sum(params["w"] * jnp.sqrt(x)) + params["b"]


def test_error_if_in_value_and_gradient_then_good_values_work(mode):
    checked = as_jax_op(checked_model)
    w, b, x = pt.vector("w", shape=(3,)), pt.scalar("b"), pt.vector("x", shape=(3,))
    value = checked({"w": w, "b": b}, x)
    grads = pt.grad(value, [w, x])
    both = compile_function([w, b, x], [value, *grads], mode)
    only_grads = compile_function([w, b, x], grads, mode, on_unused_input="ignore")
    # however value and gradient are fused, every op is named after the function
    assert all("checked_model" in name for name in jax_op_names(both))
    good_w, good_x = np.array([1.0, 2.0, 3.0]), np.array([1.0, 4.0, 9.0])

    def reference(wv, xv):
        def cost(w, x):
            return checked_model({"w": w, "b": 0.5}, x)

        return [cost(wv, xv), *jax.grad(cost, argnums=(0, 1))(wv, xv)]

    for f, n_outputs in ((both, 3), (only_grads, 2)):
        for _ in range(2):  # fails again: no failure is cached
            with pytest.raises(
                jax.errors.JaxRuntimeError, match="negative input"
            ) as info:
                f(good_w, 0.5, np.array([1.0, -1.0, 4.0]))
            assert "checked_model" in told(info.value)
            results = f(good_w, 0.5, good_x)
            for got, want in zip(results, reference(good_w, good_x)[-n_outputs:]):
                np.testing.assert_allclose(got, want, rtol=1e-12)


def test_runtime_error_under_the_jax_linker_names_the_function():
    """The function compiled with mode='JAX' names the wrapped functions it holds."""
    checked = as_jax_op(checked_model)
    w, b, x = pt.vector("w", shape=(3,)), pt.scalar("b"), pt.vector("x", shape=(3,))
    f = pytensor.function([w, b, x], checked({"w": w, "b": b}, x), mode="JAX")
    with pytest.raises(jax.errors.JaxRuntimeError, match="negative input") as info:
        f(np.ones(3), 0.5, np.array([1.0, -1.0, 4.0]))
    assert "checked_model" in str(info.value) + notes_of(info.value)


def _raise_if_negative(x):
    if np.any(x < 0):
        raise ValueError("negative input (host check)")


@as_jax_op
def host_checked(x):
    jax.debug.callback(_raise_if_negative, x)
    return jnp.cumsum(x)


def test_failing_debug_callback_then_good_values_work(mode):
    x = pt.vector("x", shape=(3,))
    f = compile_function([x], host_checked(x), mode)
    with pytest.raises(
        jax.errors.JaxRuntimeError,
        match=r"CpuCallback error(.|\n)*ValueError: negative input \(host check\)",
    ) as info:
        f(np.array([1.0, -2.0, 3.0]))
    assert "host_checked" in told(info.value)
    np.testing.assert_allclose(f(np.array([1.0, 2.0, 3.0])), [1.0, 3.0, 6.0])


def unfunctionalized(x):
    checkify.check(jnp.all(x >= 0), "negative input (checkify)")
    return x * 2


def test_unfunctionalized_checkify_check_is_a_clear_error(mode):
    """JAX cannot stage a bare ``checkify.check``; the error says so at every call."""
    wrapped = as_jax_op(unfunctionalized)
    x = pt.vector("x", shape=(2,))
    f = compile_function([x], wrapped(x), mode)
    for value in (np.array([1.0, -1.0]), np.array([1.0, 2.0])):
        with pytest.raises(
            ValueError,
            match=r"Cannot abstractly evaluate a checkify\.check which was not "
            r"functionalized",
        ) as info:
            f(value)
        if mode != "JAX":
            assert "OpFromJax{unfunctionalized}" in told(info.value)


def test_repeated_failures_do_not_pile_up_notes():
    wrapped = as_jax_op(unfunctionalized)
    x = pt.vector("x", shape=(2,))
    f = pytensor.function([x], wrapped(x), mode="FAST_COMPILE")
    for _ in range(3):
        with pytest.raises(ValueError, match="not functionalized") as info:
            f(np.ones(2))
    assert told(info.value).count("OpFromJax{unfunctionalized}") == 1


# =============================================== static arguments not hashable
@as_jax_op
def configured(x, config):
    return x * config["scale"][0] + sum(config["shift"])


def test_unhashable_static_containers_are_pytrees_of_hashable_leaves(mode):
    """Dicts and lists are pytree nodes: their leaves, compared by value, are baked in."""
    x = pt.vector("x", shape=(3,))
    config = {"scale": [2.0, 0.0], "shift": [1.0, 0.5]}
    y = configured(x, config)
    assert (
        y.owner.op is configured(x, {"scale": [2.0, 0.0], "shift": [1.0, 0.5]}).owner.op
    )
    other = configured(x, {"scale": [3.0, 0.0], "shift": [1.0, 0.5]})
    assert other.owner.op != y.owner.op
    assert "config['scale'][0]=2.0" in str(y.owner.op)
    f = compile_function([x], [y, other], mode)
    first, second = f(np.arange(3.0))
    np.testing.assert_allclose(first, np.arange(3.0) * 2 + 1.5)
    np.testing.assert_allclose(second, np.arange(3.0) * 3 + 1.5)


class Settings:
    """Unhashable on purpose, equal by value."""

    __hash__ = None

    def __init__(self, factor):
        self.factor = factor

    def __eq__(self, other):
        return isinstance(other, Settings) and other.factor == self.factor


@as_jax_op
def sized(x, static):
    factor = getattr(static, "factor", None)
    factor = len(static) if factor is None else factor
    return x * factor


@pytest.mark.parametrize(
    "make",
    [lambda: {1.0, 2.0}, lambda: bytearray(b"abc"), lambda: Settings(4.0)],
    ids=["set", "bytearray", "no-hash-object"],
)
def test_unhashable_static_objects_are_compared_by_identity(make, mode):
    x = pt.vector("x", shape=(2,))
    static = make()
    y = sized(x, static)
    assert sized(x, static).owner.op is y.owner.op
    twin = make()
    assert twin == static and sized(x, twin).owner.op != y.owner.op
    expected = static.factor if isinstance(static, Settings) else len(static)
    np.testing.assert_allclose(
        compile_function([x], y, mode)(np.array([1.0, 2.0])), [expected, 2 * expected]
    )


class HashRefused:
    """Hashing raises something else than TypeError."""

    factor = 2.0

    def __hash__(self):
        raise NotImplementedError("this object cannot be hashed")


def test_static_whose_hash_raises_another_error_is_compared_by_identity():
    x = pt.vector("x", shape=(2,))
    static = HashRefused()
    y = sized(x, static)
    assert sized(x, static).owner.op is y.owner.op
    np.testing.assert_allclose(y.eval({x: np.array([1.0, 2.0])}), [2.0, 4.0])


def test_dict_with_unsortable_keys_is_a_clear_error():
    x = pt.vector("x", shape=(2,))
    with pytest.raises(TypeError, match=r"'sized'.*pytree"):
        sized(x, {1: 2.0, "a": 3.0})


# ======================================================= symbolic callables
@as_jax_op
def line(slope):
    return lambda t: slope * t


#: Tensor expressions given a symbolic callable ``f`` next to a vector ``x``.
MISUSES = {
    "switch": lambda f, x: pt.switch(x > 0, f, x),
    "stack": lambda f, x: pt.stack([f, x]),
    "set_subtensor": lambda f, x: pt.set_subtensor(x[0], f),
    "index": lambda f, x: x[f],
    "compare": lambda f, x: x < f,
    "sum": lambda f, x: pt.sum(f),
    "reflected": lambda f, x: 2.0 * f,
    "power": lambda f, x: 2.0**f,
    "matmul": lambda f, x: x @ f,
    "negate": lambda f, x: -f,
    "numpy": lambda f, x: np.ones(3) * f,
}


@pytest.mark.parametrize("misuse", MISUSES.values(), ids=MISUSES.keys())
def test_symbolic_callable_in_more_tensor_expressions_is_a_clear_error(misuse):
    f = line(pt.scalar("slope"))
    with pytest.raises(TypeError, match=NOT_A_TENSOR):
        misuse(f, pt.vector("x", shape=(3,)))


def test_symbolic_callable_as_a_function_input_is_rejected():
    f = line(pt.scalar("slope"))
    with pytest.raises(TypeError, match=r"Unknown parameter type: .*SymbolicCallable"):
        pytensor.function([f], pt.vector("x"))


def test_gradient_with_a_symbolic_callable_is_a_clear_error():
    f = line(pt.scalar("slope"))
    x = pt.vector("x", shape=(3,))
    with pytest.raises(TypeError, match=r"SymbolicCallable\(line\) is a function"):
        pt.grad(x.sum(), f)
    with pytest.raises(TypeError, match=r"SymbolicCallable\(line\) is a function"):
        pt.grad(f, x)


def test_calling_a_symbolic_callable_with_wrong_arguments_names_it():
    f = line(pt.scalar("slope"))
    with pytest.raises(
        ShapeInferenceError,
        match=r"'call\(line\)\(function=line\)'.*raised TypeError.*missing 1 "
        r"required positional argument: 't'",
    ):
        f()


# ================================================== wrong wrapper arguments
def test_more_wrong_arguments_name_the_function_and_signature():
    @as_jax_op
    def scaled(x, factor, *, kind):
        return x * factor

    x = pt.vector("x", shape=(3,))
    prefix = r"The JAX function 'scaled'\(x, factor, \*, kind\) was called with wrong arguments: "
    cases = [
        (lambda: scaled(x, 2.0, 3.0, kind="a"), "too many positional arguments"),
        (lambda: scaled(x, 2.0), "missing a required keyword-only argument: 'kind'"),
        (lambda: scaled(x, 2.0, x=x, kind="a"), "multiple values for argument 'x'"),
    ]
    for call, reason in cases:
        with pytest.raises(TypeError, match=prefix + reason):
            call()


# ==================================== output structure changing after tracing
def test_output_structure_changed_after_tracing_names_the_function(mode):
    flag = {"dict": False}

    @as_jax_op
    def flips(x):
        return {"a": x * 2} if flag["dict"] else (x * 2,)

    traces = iter(range(100))

    @as_jax_op
    def grows(x):
        return [x * 2] * (1 if next(traces) == 0 else 2)  # traced once when built

    x = pt.vector("x", shape=(3,))
    (flipped,) = flips(x)
    flag["dict"] = True
    (grown,) = grows(x)
    for out, message in (
        (
            flipped,
            r"The JAX function 'flips' returned an output of structure "
            r"PyTreeDef\(\{'a': \*\}\) .* but it returned PyTreeDef\(\(\*,\)\) .*when "
            r"its output types were inferred\. A wrapped function must return the same "
            r"pytree structure for every input value\.",
        ),
        (
            grown,
            r"The JAX function 'grows' returned an output of structure "
            r"PyTreeDef\(\[\*, \*\]\)",
        ),
    ):
        f = compile_function([x], out, mode)
        with pytest.raises(OutputStructureError, match=message):
            f(np.ones(3))
    assert issubclass(OutputStructureError, TypeError)


def test_static_outputs_are_fixed_when_the_op_is_built(mode):
    """Documented: a non-array output is the value returned when tracing."""
    flag = {"late": False}

    @as_jax_op
    def labelled(x):
        return x * 2, ("late" if flag["late"] else "early")

    x = pt.vector("x", shape=(3,))
    y, label = labelled(x)
    flag["late"] = True
    assert label == "early"
    np.testing.assert_allclose(compile_function([x], y, mode)(np.ones(3)), 2.0)


# ============================================================= deep pytrees
def nested(leaf, depth: int, kind: str):
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"down": leaf}
    return leaf


def innermost(tree):
    while isinstance(tree, list | dict) and not (
        isinstance(tree, dict) and "x" in tree
    ):
        tree = tree[0] if isinstance(tree, list) else tree["down"]
    return tree


def deep_model(tree, bias):
    bottom = innermost(tree)
    return jnp.sum(jnp.sin(bottom["x"]) * bottom["w"]) + innermost(bias)


def test_pytrees_200_levels_deep(mode):
    wrapped = as_jax_op(deep_model)
    x = pt.vector("x", shape=(3,))
    w = np.array([1.0, -2.0, 0.5])
    costs = [
        wrapped(nested({"x": x, "w": w}, 200, kind), nested(1.5, 200, kind))
        for kind in ("list", "dict")
    ]
    assert "deep_model(tree[0][0][0]" in str(costs[0].owner.op)
    f = compile_function([x], [*costs, *pt.grad(pt.add(*costs), [x])], mode)
    xv = RNG.normal(size=3)
    list_cost, dict_cost, gradient = f(xv)
    expected = deep_model({"x": xv, "w": w}, 1.5)
    np.testing.assert_allclose([list_cost, dict_cost], [expected, expected])
    np.testing.assert_allclose(gradient, 2 * np.cos(xv) * w)


DEEP_SCRIPT = """
import numpy as np
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


@as_jax_op
def bottom(tree, x):
    while isinstance(tree, list | dict):
        tree = tree[0] if isinstance(tree, list) else tree["down"]
    return x * tree


def healthy():
    # C-level recursion too (a Python-only probe misses a leaked C counter)
    try:
        y = pt.vector("y", shape=(2,))
        assert bottom([np.float64(3.0)], y).eval({y: np.ones(2)}).tolist() == [3, 3]
    except BaseException as error:
        return f"broken ({type(error).__name__})"
    return "healthy"


x = pt.vector("x", shape=(3,))
for kind in ("list", "dict"):
    tree = np.float64(2.0)
    for _ in range(DEPTH):
        tree = [tree] if kind == "list" else {"down": tree}
    try:
        out = bottom(tree, x)
    except Exception as error:
        result = f"{type(error).__name__}: {error}"
    else:
        result = f"built: {out.eval({x: np.ones(3)})}"
    print(kind, "|", result.splitlines()[0], "|", healthy(), flush=True)
"""


def test_pytree_deeper_than_the_recursion_limit_is_a_clear_error(tmp_path):
    script = DEEP_SCRIPT.replace("DEPTH", "5000")
    result = run_script(script, tmp_path, timeout=600, check=False)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Exception ignored" not in result.stderr, result.stderr[-2000:]
    assert len(lines) == 2, result.stdout
    for kind, line in zip(("list", "dict"), lines):
        assert line.startswith(kind) and line.endswith("| healthy")
        # Python 3.13's C stack allows deeper pytrees: then it simply works.
        if "built:" in line:
            assert "built: [2. 2. 2.]" in line
        else:
            assert "TypeError: The arguments of the JAX function 'bottom'" in line
            assert "nested too deeply" in line


# ===================================== non-array outputs and output dtypes
def test_python_scalars_none_and_strings_in_the_output(mode):
    @as_jax_op
    def mixed(x):
        return {
            "y": x * 2,
            "float": 1.5,
            "int": 2,
            "none": None,
            "text": "label",
            "flag": True,
            "complex": 1 + 2j,
            "nested": (None, "a", [3, {"deep": "b"}]),
            "numpy_scalar": np.float32(0.5),
        }

    x = pt.vector("x", shape=(3,))
    out = mixed(x)
    expected = mixed.__wrapped__(jnp.ones(3))
    for key in ("float", "int", "none", "text", "flag", "complex", "nested"):
        assert type(out[key]) is type(expected[key]) and out[key] == expected[key]
    # NumPy scalars are arrays: they become (constant) outputs of the op
    assert out["numpy_scalar"].type == pt.tensor(dtype="float32", shape=()).type
    f = compile_function([x], [out["y"], out["numpy_scalar"]], mode)
    y, scalar = f(np.arange(3.0))
    np.testing.assert_array_equal(y, [0.0, 2.0, 4.0])
    assert np.asarray(scalar).dtype == np.float32 and scalar == 0.5


def test_outputs_without_any_array_make_no_op():
    @as_jax_op
    def only_statics(x):
        return {"n": 3, "name": "x", "nothing": None}

    @as_jax_op
    def nothing(x):
        return None

    x = pt.vector("x", shape=(3,))
    assert only_statics(x) == {"n": 3, "name": "x", "nothing": None}
    assert nothing(x) is None


def changed_dtypes(i, b, h, x):
    return (
        jnp.mean(i),
        jnp.sum(b),
        i / 2,
        i // 2,
        jnp.sqrt(i),
        b + b,
        b * 1.5,
        x.astype(jnp.float32) * i,
        jnp.argmax(x),
        jnp.mean(b),
        i.astype(jnp.int8) * 2,
        h * 1.0,
        jnp.sum(h),
        x > 0,
    )


def test_output_dtypes_follow_jax(mode):
    i = pt.vector("i", dtype="int32", shape=(3,))
    b = pt.vector("b", dtype="bool", shape=(3,))
    h = pt.vector("h", dtype="int16")
    x = pt.vector("x", shape=(3,))
    outputs = as_jax_op(changed_dtypes)(i, b, h, x)
    values = (
        np.array([1, 2, 4], dtype="int32"),
        np.array([True, False, True]),
        np.array([7, -3], dtype="int16"),
        np.array([1.0, 3.0, -2.0]),
    )
    expected = changed_dtypes(*[jnp.asarray(v) for v in values])
    assert [o.type.dtype for o in outputs] == [np.dtype(e.dtype).name for e in expected]
    results = compile_function([i, b, h, x], list(outputs), mode)(*values)
    for k, (got, want) in enumerate(zip(results, expected)):
        assert np.asarray(got).dtype == want.dtype, k
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(k))


# ================================================================ no mutation
@as_jax_op
def identity(x):
    return x


@as_jax_op
def same_array_twice(x):
    y = jnp.sin(x)
    return y, y


@as_jax_op
def input_twice(x):
    return x, x


def test_inputs_are_never_written(mode):
    """Not by the op, nor by in-place ops the rewrites put after it.

    Islands are excluded: they would take the in-place candidates in (see
    test_jax_ofg_islands.py for an island followed by a destroyer).
    """
    x = pt.vector("x", shape=(4,))
    m = pt.matrix("m", shape=(2, 4))
    same = identity(x)
    y1, y2 = same_array_twice(x)
    a, b = input_twice(m)
    cost = doubled(x).sum()
    outputs = [
        pt.inc_subtensor(same[0], 10.0),  # made in place by the default rewrites
        pt.set_subtensor(y1[1:], 0.0),
        y2 + 1.0,  # elementwise, in place on the op's output
        pt.inc_subtensor(a[0], 1.0) * pt.set_subtensor(b[:, 0], 5.0),
        cost,
        pt.grad(cost, x) * 3.0,
    ]
    f = compile_function([x, m], outputs, without_islands(mode))
    if mode not in ("FAST_COMPILE", "JAX"):  # the linkers with in-place rewrites
        destroyers = [n for n in f.maker.fgraph.apply_nodes if n.op.destroy_map]
        assert len(destroyers) >= 3, destroyers
    xv, mv = RNG.normal(size=4), RNG.normal(size=(2, 4))
    originals = xv.copy(), mv.copy()
    for _ in range(3):
        results = f(xv, mv)
        np.testing.assert_array_equal(xv, originals[0])
        np.testing.assert_array_equal(mv, originals[1])
    expected_first = originals[0].copy()
    expected_first[0] += 10.0
    np.testing.assert_allclose(results[0], expected_first)
    np.testing.assert_allclose(results[2], np.sin(originals[0]) + 1.0)
    expected_product = originals[1].copy()
    expected_product[0] += 1.0
    replaced = originals[1].copy()
    replaced[:, 0] = 5.0
    np.testing.assert_allclose(results[3], expected_product * replaced)
    np.testing.assert_allclose(results[5], np.full(4, 6.0))


def test_outputs_never_alias_inputs_or_each_other(mode):
    x = pt.vector("x", shape=(1000,))
    outputs = [identity(x), *same_array_twice(x), *input_twice(x)]
    f = compile_function([x], outputs, mode)
    xv = np.arange(1000.0)
    results = [np.asarray(r) for r in f(xv)]
    arrays = [xv, *results]
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            assert not np.shares_memory(arrays[i], arrays[j]), (i, j)
    if mode == "JAX":
        return  # JAX arrays are read-only: nothing can write into them
    for r in results:
        r[:] = -1.0  # writing into one output touches no other, nor the input
    np.testing.assert_array_equal(xv, np.arange(1000.0))
    again = f(xv)
    np.testing.assert_array_equal(again[0], xv)
    np.testing.assert_allclose(again[1], np.sin(xv))
    np.testing.assert_allclose(again[2], np.sin(xv))


def test_mutable_input_is_read_before_an_inplace_op_overwrites_it(mode):
    """With ``In(x, mutable=True)`` PyTensor may destroy x; the op still sees it whole."""

    @as_jax_op
    def total(v):
        return jnp.sum(v)

    x = pt.vector("x", shape=(3,))
    outputs = [total(x), pt.inc_subtensor(x[0], 10.0), identity(x)]
    f = compile_function([pytensor.In(x, mutable=True)], outputs, mode)
    s, bumped, same = f(np.array([1.0, 2.0, 3.0]))
    assert s == 6.0
    np.testing.assert_array_equal(bumped, [11.0, 2.0, 3.0])
    np.testing.assert_array_equal(same, [1.0, 2.0, 3.0])


# ==================================================================== threads
def threaded_model(x, k):
    return jnp.cumsum(jnp.sin(x) * k), jnp.sum(x**2)


def threaded_graph():
    x, k = pt.vector("x", shape=(50,)), pt.scalar("k")
    a, b = as_jax_op(threaded_model)(x, k)
    return [x, k], [a * 2.0, b + 1.0, pt.grad(b + a.sum(), x)]


THREAD_INPUTS = [(RNG.normal(size=50), float(i % 17) - 8.0) for i in range(200)]


def expected_threaded(xv, kv):
    def cost(x):
        a, b = threaded_model(x, kv)
        return b + a.sum()

    a, b = threaded_model(jnp.asarray(xv), kv)
    return [np.asarray(a) * 2.0, np.asarray(b) + 1.0, jax.grad(cost)(jnp.asarray(xv))]


def check_threaded(call) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(len(THREAD_INPUTS))))
    for i, got in enumerate(results):
        for g, e in zip(got, expected_threaded(*THREAD_INPUTS[i])):
            np.testing.assert_allclose(g, e, rtol=1e-12, err_msg=f"call {i}")


@pytest.mark.parametrize(
    "linker_mode", ["NUMBA", None, "JAX"], ids=["numba", "default", "jax"]
)
def test_one_compiled_function_from_eight_threads(linker_mode):
    inputs, outputs = threaded_graph()
    f = compile_function(inputs, outputs, linker_mode)

    def call(i):
        return [np.array(r) for r in f(*THREAD_INPUTS[i])]

    check_threaded(call)


@pytest.mark.parametrize("linker_mode", ["CVM", "FAST_COMPILE"], ids=["cvm", "py"])
def test_function_copies_from_eight_threads(linker_mode):
    """PyTensor's VM keeps intermediate results in per-function storage, so one
    VM function is not thread-safe even for native ops; a copy per thread is.
    The copies share the op and its jitted function."""
    inputs, outputs = threaded_graph()
    f = compile_function(inputs, outputs, linker_mode)
    local = threading.local()

    def call(i):
        if not hasattr(local, "f"):
            local.f = f.copy()
        return [np.array(r) for r in local.f(*THREAD_INPUTS[i])]

    check_threaded(call)


STATIC_ARGUMENTS = [
    ("tanh", 1.0, None),
    ("linear", 2.0, (1, 2)),
    ("tanh", 0.5, np.arange(3.0)),
    ("linear", -1.0, "text"),
    ("tanh", 3.0, (None, 4)),
]


@as_jax_op
def styled(x, *, kind, scale, extra):
    offset = float(np.sum(extra)) if isinstance(extra, np.ndarray) else 0.0
    y = jnp.tanh(x * scale) if kind == "tanh" else x * scale
    return {"y": y + offset, "n": jnp.sum(y)}


def test_building_ops_from_eight_threads_with_different_static_args():
    styled.cache_size = 3  # evictions while other threads build
    x = pt.vector("x")  # unknown length: static shape inference and symbolic dims

    def build(i):
        kind, scale, extra = STATIC_ARGUMENTS[i % len(STATIC_ARGUMENTS)]
        extra = copy.copy(extra)  # equal static values (arrays: not identical)
        return i, styled(x, kind=kind, scale=scale, extra=extra)

    try:
        with ThreadPoolExecutor(8) as pool:
            built = list(pool.map(build, range(200)))
    finally:
        styled.cache_size = 256
    groups = {}
    for i, out in built:
        groups.setdefault(i % len(STATIC_ARGUMENTS), []).append(out["y"])
    for outputs in groups.values():
        assert all(y.owner.op == outputs[0].owner.op for y in outputs)
    outputs = [groups[k][0] for k in range(len(STATIC_ARGUMENTS))]
    assert len({y.owner.op for y in outputs}) == len(STATIC_ARGUMENTS)
    f = compile_function([x], outputs, "FAST_COMPILE")
    xv = RNG.normal(size=4)
    for got, (kind, scale, extra) in zip(f(xv), STATIC_ARGUMENTS):
        want = styled.__wrapped__(jnp.asarray(xv), kind=kind, scale=scale, extra=extra)
        np.testing.assert_allclose(got, want["y"], rtol=1e-12)
