"""The PyTensor, PyMC, JAX and equinox internals this project relies on, pinned.

Each is also exercised by a behavioural test; these fail first, with a
message naming the internal, when a new release moves or changes one.
"""

import re
from importlib.metadata import requires, version
from typing import Any

import jax
import pytest
from _checkout import module_files
from packaging.requirements import Requirement

from pytensor.compile import jax_ofg  # noqa: F401  (installs what the entries check)
from pytensor.compile._jax_ofg import compat


def _check_method(path: str, cls: type, name: str, parameters: list[str]) -> None:
    import inspect

    method = getattr(cls, name, None)
    method = getattr(method, "__wrapped__", method)
    _require(callable(method), path, "is gone")
    found = list(inspect.signature(method).parameters)
    _require(found == parameters, path, f"takes {found}, not {parameters}")


def _require(condition: bool, name: str, what: str) -> None:
    if not condition:
        raise MovedInternal(f"{name}: {what} ({compat.CHECKED} were checked)")


class MovedInternal(RuntimeError):
    """A private API this package relies on is not where it was."""


def _check_pytree_registry() -> None:
    import jax

    class Pair:
        pass

    jax.tree_util.register_pytree_node(Pair, lambda p: ((), None), lambda a, c: Pair())
    _require(
        compat.pytree_registration(Pair) is not None
        and compat.pytree_registration(int) is None,
        "jax._src.tree_util._registry",
        "no longer maps registered classes to their registration",
    )


def _check_jit_info() -> None:
    import jax

    def f(x):
        return x

    found = compat.jitted_function(jax.jit(f, static_argnums=0))
    _require(
        found is not None and found[0] is f and hasattr(found[1], "static_argnums"),
        "jax.jit(f)._jit_info",
        "jitted functions no longer carry their options there",
    )


def _check_jax_started() -> None:
    from jax._src import xla_bridge

    _require(
        callable(getattr(xla_bridge, "backends_are_initialized", None)),
        "jax._src.xla_bridge.backends_are_initialized",
        "is gone",
    )


def _check_runtime_error_message() -> None:
    import jax

    error = jax.errors.JaxRuntimeError("boom")
    compat.prepend_to_runtime_error(error, "first")
    _require(
        str(error).startswith("first"),
        "JaxRuntimeError._error_message",
        "no longer makes the error's message",
    )


def _check_callback_logger() -> None:
    import jax._src.callback as callback

    _require(
        getattr(getattr(callback, "logger", None), "name", None)
        == compat.CALLBACK_LOGGER,
        compat.CALLBACK_LOGGER,
        "JAX logs failed callbacks elsewhere",
    )


def _check_scan_parts() -> None:
    import jax
    from jax import lax

    def scanned(x, w, xs):
        def step(carry, xi):
            a, b = carry
            return (a * w + xi, b + a), a

        return lax.scan(step, (x, x), xs)

    jaxpr = jax.make_jaxpr(scanned)(1.0, 2.0, jax.numpy.ones(3))
    (equation,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    try:
        scan = compat.scan_parts(equation.params, list(equation.invars))
        parts = (len(scan.consts), len(scan.carry), len(scan.xs), scan.length)
        body_arity = len(scan.jaxpr.jaxpr.invars)
        options = (scan.reverse, scan.unroll)
    except Exception as error:
        parts, body_arity, options = error, None, None
    _require(
        parts == (1, 2, 1, 3) and body_arity == 4 and options == (False, 1),
        "scan's params",
        "a scan's body, options and input layout are no longer read so "
        f"(got {parts!r}, body of {body_arity} inputs, options {options!r})",
    )


def _check_equinox_check() -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    jaxpr = jax.make_jaxpr(lambda x: eqx.error_if(x, x < 0, "negative"))(jnp.ones(1))
    kinds = set()

    def walk(inner: Any) -> None:
        for equation in inner.eqns:
            if "callback" in equation.primitive.name:
                kinds.add(compat.equinox_check(equation.params.get("callback")))
            for value in equation.params.values():
                for item in value if isinstance(value, tuple | list) else (value,):
                    sub = getattr(item, "jaxpr", item)
                    if hasattr(sub, "eqns"):
                        walk(sub)

    walk(jaxpr.jaxpr)
    _require(
        "raises" in kinds,
        "equinox._errors._error",
        f"eqx.error_if's callbacks are not recognised (found {kinds})",
    )


def _check_equinox_implementation() -> None:
    import equinox.internal as eqxi

    rules = getattr(eqxi, "primitive_finalisations", None)
    _require(
        isinstance(rules, dict)
        and any(compat.equinox_implementation(p) is not None for p in rules),
        "equinox.internal.primitive_finalisations",
        "no primitive has an _impl_finalisation rule",
    )


def _check_op_from_graph() -> None:
    import pytensor.tensor as pt
    from pytensor.graph.fg import FunctionGraph

    x = pt.vector("x")
    inner = compat.nominal_fgraph([x], [x * 2])
    _require(
        isinstance(inner, FunctionGraph)
        and isinstance(compat.op_from_graph_base(), type),
        "pytensor.compile.builders",
        "construct_nominal_fgraph no longer returns a FunctionGraph",
    )


def _check_ancestor_bitsets() -> None:
    import pytensor.tensor as pt
    from pytensor.graph.fg import FunctionGraph

    x = pt.vector("x")
    fgraph = FunctionGraph([x], [pt.exp(pt.sin(x))], clone=False)
    nodes = fgraph.toposort()
    ancestors, _ = compat.ancestor_bitsets(fgraph, nodes)
    _require(
        all(isinstance(ancestors.get(n), int) for n in nodes),
        "compat.ancestor_bitsets",
        "no longer returns one bitset per node first",
    )


def _check_dispatchers() -> None:
    from pytensor.graph.replace import _vectorize_node
    from pytensor.tensor.basic import _as_tensor_variable

    _require(
        hasattr(_vectorize_node, "register")
        and hasattr(_as_tensor_variable, "register"),
        "pytensor._vectorize_node/_as_tensor_variable",
        "are no longer singledispatch functions",
    )


def _check_numba_thunks() -> None:
    from pytensor.link.numba.linker import NumbaLinker

    parameters = ["self", "compute_map", "order", "input_storage"]
    parameters += ["output_storage", "storage_map"]
    _check_method(
        "NumbaLinker.create_jitable_thunk",
        NumbaLinker,
        "create_jitable_thunk",
        parameters,
    )


def _check_jax_jit_compile() -> None:
    from pytensor.link.jax.linker import JAXLinker

    _check_method("JAXLinker.jit_compile", JAXLinker, "jit_compile", ["self", "fn"])


def _check_op_props() -> None:
    from pytensor.graph.op import Op

    class Scaled(Op):
        __props__ = ("factor",)

        def __init__(self, factor):
            self.factor = factor

        def make_node(self, x):
            raise NotImplementedError

        def perform(self, node, inputs, outputs):
            raise NotImplementedError

    props = compat.op_props(Scaled(2))
    _require(
        props == (2,) and hash(Scaled(2)) == hash((Scaled, props)),
        "Op._props() (made by PyTensor's MetaType)",
        f"an op's props are no longer its __props__ values (got {props!r})",
    )


def _check_pytensor_jax_rewrites() -> None:
    import pytensor.tensor as pt
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.jax.dispatch.shape import JAXShapeTuple
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor

    x, n = pt.vector("x"), pt.lscalar("n")
    outputs = [x[x > 0].sum(), pt.set_subtensor(x[x > 0], 0.0), x.reshape((n, 2))]
    fgraph = FunctionGraph([x, n], outputs, clone=False)
    compat.prepare_for_jax_lowering(fgraph)
    ops = [node.op for node in fgraph.toposort()]
    _require(
        not any(isinstance(op, AdvancedSubtensor | AdvancedIncSubtensor) for op in ops)
        and any(isinstance(op, JAXShapeTuple) for op in ops),
        "optdb's jax_* rewrites (PYTENSOR_JAX_REWRITES)",
        f"no longer make boolean indexing and shape arguments JAX-ready ({ops})",
    )


def _check_control_flow_params() -> None:
    import jax
    from jax import lax
    from jax.extend.core import jaxpr_as_fun

    def program(p, a, b, x):
        chosen = lax.cond(p, lambda u, v: u + v, lambda u, v: u - v, x, b)
        loop = lax.while_loop(
            lambda c: c[0] < a, lambda c: (c[0] + b, c[1] * 2), (x, x)
        )
        solved = lax.custom_linear_solve(lambda y: a * y, x, lambda mv, y: y / b)
        return chosen, loop, solved

    jaxpr = jax.make_jaxpr(program)(True, 10.0, 3.0, 1.0)
    equations = {e.primitive.name: e for e in jaxpr.jaxpr.eqns}
    _, a, b, x = jaxpr.jaxpr.invars

    def value(function, *args):
        return float(jaxpr_as_fun(function)(*args)[0])

    try:
        cond, loop, solve = (
            equations[name] for name in ("cond", "while", "custom_linear_solve")
        )
        branches, index, operands = compat.cond_parts(cond.params, cond.invars)
        loop = compat.while_parts(loop.params, loop.invars)
        solve, arguments = compat.linear_solve_parts(solve.params, solve.invars)
        found = (
            [value(branch, 1.0, 3.0) for branch in branches] == [-2.0, 4.0]
            and index is cond.invars[0]
            and operands == [x, b]
            and [loop.cond_consts, loop.body_consts, loop.carry] == [[a], [b], [x, x]]
            and value(loop.cond_jaxpr, 10.0, 1.0, 1.0) == 1.0
            and value(loop.body_jaxpr, 3.0, 1.0, 1.0) == 4.0
            and arguments == [b, x]
            and value(solve, 4.0, 8.0) == 2.0
        )
    except Exception as error:
        found = error
    _require(
        found is True,
        "params of cond, while, custom_linear_solve",
        f"their jaxprs and inputs are no longer laid out so (got {found!r})",
    )


def _check_equation_context() -> None:
    import jax
    import jax.numpy as jnp

    traced_with = not jax.config.jax_threefry_partitionable
    with jax.threefry_partitionable(traced_with):
        (equation,) = jax.make_jaxpr(jnp.sin)(1.0).jaxpr.eqns
    with compat.equation_context(equation):
        inside = jax.config.jax_threefry_partitionable
    _require(
        inside == traced_with and jax.config.jax_threefry_partitionable != inside,
        "JaxprEqn.ctx.manager",
        "no longer sets what an equation was traced with",
    )


def _check_pymc_start_method() -> None:
    import importlib
    import inspect

    for module_name in compat.PYMC_SAMPLING_MODULES:
        module = importlib.import_module(module_name)
        chooser = getattr(module, compat.PYMC_START_METHOD_CHOOSER, None)
        _require(
            callable(chooser),
            f"{module_name}.{compat.PYMC_START_METHOD_CHOOSER}",
            "gone",
        )
        caller = module.sample if module_name.endswith("mcmc") else module.sample_smc
        source = inspect.getsource(caller)
        _require(
            compat.PYMC_START_METHOD_CHOOSER in source
            and "model = modelcontext(" in source,
            f"{module_name}: {caller.__name__}",
            "no longer resolves `model` before choosing the start method",
        )


def _check_import_entry() -> None:
    import importlib._bootstrap as bootstrap
    import inspect

    code = compat.import_entry_code()
    _require(
        code is not None
        and next(iter(inspect.signature(bootstrap._find_and_load).parameters))
        == "name",
        "importlib._bootstrap._find_and_load",
        "is gone, or takes the module's name no longer first",
    )


def _check_flag_getter() -> None:
    import pytensor

    flags = dict(compat.pytensor_flags())
    code = compat.flag_getter_code()
    _require(
        flags.get("floatX") == pytensor.config.floatX
        and "self" in code.co_varnames[: code.co_argcount],
        "pytensor.configparser (ConfigParam.__get__, _config_var_dict)",
        "flags are no longer read through ConfigParam.__get__(self, ...)",
    )
    _require(
        "blas__ldflags" in compat.probed_flags() and "blas__ldflags" not in flags,
        "pytensor.configparser (ConfigParam._default)",
        "a computed default is no longer a callable in ConfigParam._default",
    )


def _check_equinox_generated_files() -> None:
    import equinox as eqx
    import jax

    class Pair(eqx.Module):
        a: float
        b: float

    flatten = compat.pytree_registration(Pair).to_iter
    _require(
        flatten.__code__.co_filename.startswith(compat.EQUINOX_GENERATED_FILES)
        and "__name__" not in flatten.__globals__
        and jax.tree_util.tree_leaves(Pair(1.0, 2.0)) == [1.0, 2.0],
        "equinox's generated pytree functions (<generated_...>)",
        "equinox names its generated pytree functions' files otherwise",
    )


def _check_nutpie_numba_api() -> None:
    import nutpie.compile_pymc

    compiler = getattr(nutpie.compile_pymc, compat.NUTPIE_NUMBA_COMPILER, None)
    _require(
        compat.nutpie_numba_api(nutpie.compile_pymc) is not None
        and callable(compiler)
        and getattr(compiler, "compiles_host_callbacks", False),
        "nutpie.compile_pymc (_compile_pymc_model_numba, _make_functions, "
        "make_user_data, _prepare_dims_and_coords, CompiledPyMCModel)",
        "nutpie's Numba backend moved a function or a field of CompiledPyMCModel",
    )


def _check_jit_options() -> None:
    def f(x):
        return x

    def g(x):
        return x

    infos = [compat.jitted_function(jax.jit(h, static_argnums=0))[1] for h in (f, g)]
    options = [compat.jit_options(info) for info in infos]
    _require(
        tuple(infos[0]) != tuple(infos[1])
        and None not in options
        and tuple(options[0]) == tuple(options[1])
        and options[0].static_argnums == (0,),
        "JitInfo fields fun_sourceinfo, fun_signature",
        "no longer hold all that differs between functions jitted alike",
    )


def _check_linalg_lowerings() -> None:
    import re

    import numpy as np

    from pytensor.compile._jax_ofg import small_linalg

    # install() wrapped each CPU rule: a 2 x 2 LU solve lowers without LAPACK,
    # and the wrapped (original) rules still give LAPACK's programs.
    a = np.array([[1e-3, 2.0], [3.0, 4.0]])
    text = jax.jit(jax.numpy.linalg.solve).lower(a, a[0]).as_text()
    with small_linalg.max_size_set_to(0):
        original = jax.jit(jax.numpy.linalg.solve).lower(a, a[0]).as_text()
    _require(
        all(compat.wrap_cpu_lowering(n, None) for n in compat.LINALG_PRIMITIVES)
        and not re.search("lapack_", text)
        and {"lapack_dgetrf_ffi", "lapack_dtrsm_ffi"}
        <= set(re.findall(r"lapack_\w+", original)),
        "jax._src.interpreters.mlir (_platform_specific_lowerings, _lowerings, "
        "register_lowering, lower_fun); jax._src.lax.linalg (lu_p, "
        "lu_pivots_to_permutation_p, triangular_solve_p, cholesky_p)",
        "JAX's linear-algebra primitives or their CPU lowerings moved",
    )


def _check_persistent_cache_class() -> None:
    import inspect
    import tempfile
    from pathlib import Path

    found = compat.persistent_cache_class()
    _require(found is not None, "jax._src.lru_cache.LRUCache", "is gone")
    cls, suffix = found
    _check_method("LRUCache.put", cls, "put", ["self", "key", "value"])
    with tempfile.TemporaryDirectory() as folder:
        cache = cls(folder, max_size=-1)
        cache.put("k", b"entry")
        _require(
            isinstance(cache.path, Path)
            and (Path(folder) / f"k{suffix}").read_bytes() == b"entry"
            and cache.get("k") == b"entry"
            and "self.lock" in inspect.getsource(cls.put.__wrapped__),
            "jax._src.lru_cache.LRUCache.put (path, _CACHE_SUFFIX)",
            "no longer writes self.path / (key + _CACHE_SUFFIX) under self.lock",
        )


def _check_make_cpu_client() -> None:
    import jax
    import numpy as np

    client = compat.make_cpu_client(asynchronous=False)
    (device,) = client.local_devices()
    with jax.default_device(device):
        result = jax.jit(lambda x: x * 2)(np.arange(3.0))
    _require(
        result.devices() == {device}
        and device not in jax.devices()
        and np.array_equal(np.asarray(result), [0.0, 2.0, 4.0]),
        "jaxlib.xla_client.make_cpu_client(asynchronous=)",
        "no longer gives a client whose device jax.jit runs programs on",
    )


def _check_foreign_thread() -> None:
    import ctypes
    import threading

    seen = []
    callback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
        lambda _: seen.append(compat.is_foreign_thread())
    )
    libc = ctypes.CDLL(None)
    thread = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(thread), None, callback, None)
    libc.pthread_join(thread, None)
    inside = []
    python_thread = threading.Thread(
        target=lambda: inside.append(compat.is_foreign_thread())
    )
    python_thread.start()
    python_thread.join()
    _require(
        seen == [True] and inside == [False] and not compat.is_foreign_thread(),
        "threading._DummyThread",
        "no longer tells threads Python did not start",
    )


def _check_keep_python_thread_state() -> None:
    import ctypes
    import threading

    seen = []

    def called(_):
        local.calls = getattr(local, "calls", 0) + 1
        if local.calls == 1:
            compat.keep_python_thread_state()
        seen.append(local.calls)

    local = threading.local()
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(called)
    twice = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
        lambda _: [callback(None) for _ in range(2)] and None
    )
    libc = ctypes.CDLL(None)
    thread = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(thread), None, twice, None)
    libc.pthread_join(thread, None)
    _require(
        seen == [1, 2],
        "PyGILState_Ensure (C API), never released",
        f"no longer keeps a foreign thread's state between callbacks ({seen})",
    )


def _check_close_at_thread_exit() -> None:
    import fcntl
    import os
    import tempfile
    import threading

    path = os.path.join(tempfile.mkdtemp(), "lease")

    def hold():
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        compat.close_at_thread_exit(fd if fd > 2 else os.dup(fd))

    holder = threading.Thread(target=hold)
    holder.start()
    holder.join()
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(1000):  # the C library's exit work follows Python's join
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                threading.Event().wait(0.001)
        else:
            _require(False, "pthread_key_create with close", "left the lock held")
    finally:
        os.close(fd)


def _check_nutpie_make_sampler() -> None:
    import dataclasses

    import nutpie.compile_pymc as module

    _check_method(
        "nutpie CompiledPyMCModel._make_sampler",
        module.CompiledPyMCModel,
        "_make_sampler",
        [
            "self",
            "settings",
            "init_mean",
            "cores",
            "progress_type",
            "extra_callback",
            "extra_callback_rate",
            "store",
        ],
    )
    fields = {f.name for f in dataclasses.fields(module.CompiledPyMCModel)}
    _require("user_data" in fields, "CompiledPyMCModel.user_data", "is gone")


def _check_pymc_cpu_count() -> None:
    import importlib
    import inspect

    module = importlib.import_module(compat.PYMC_SAMPLE_MODULE)
    counter = getattr(module, compat.PYMC_CPU_COUNT, None)
    _require(callable(counter), "pymc.sampling.mcmc._cpu_count", "gone")
    source = inspect.getsource(module.sample)
    _require(
        source.index("model = modelcontext(") < source.index("_cpu_count()"),
        "pymc.sampling.mcmc.sample",
        "no longer resolves `model` before asking for its default cores",
    )


def _check_export_for_this_jaxlib() -> None:
    import jax
    import numpy as np

    name = "jax._src.export._export._module_to_bytecode"
    found = compat.export_serializer()
    _require(found is not None, name, "moved, or what it serializes with did")
    ignored = compat.forward_compatibility_ignored()
    _require(
        ignored is not None,
        "jax._src.config.export_ignore_forward_compatibility",
        "is gone",
    )
    spec = jax.ShapeDtypeStruct((3,), np.float64)
    with ignored:  # lowered as jax.jit lowers: a kernel of this jaxlib
        lowered = jax.jit(jax.lax.lgamma).trace(spec).lower()
    module = lowered.compiler_ir("stablehlo")
    serialized = compat.serialize_at_current_version(module)
    module_object, attribute = found
    _require(
        isinstance(serialized, bytes)
        and callable(getattr(module_object, attribute))
        and "cpu_lgamma_ffi" in str(module),
        name,
        "no longer serializes a module at this jaxlib's StableHLO version",
    )


#: The check of each entry of ``compat.ENTRIES``.
CHECKS = {
    "jax._src.tree_util._registry": _check_pytree_registry,
    "jax.jit(f)._jit_info": _check_jit_info,
    "jax._src.xla_bridge.backends_are_initialized": _check_jax_started,
    "JaxRuntimeError._error_message": _check_runtime_error_message,
    "scan's params (ft_in: jax._src.flattree)": _check_scan_parts,
    "jax._src.callback (logger)": _check_callback_logger,
    "equinox._errors._error.<locals>.raises/tpu_msg": _check_equinox_check,
    "equinox.internal.primitive_finalisations": _check_equinox_implementation,
    "pytensor.compile.builders.(FinalizedOpFromGraph, construct_nominal_fgraph)": _check_op_from_graph,
    "pytensor.graph.rewriting.reachability.ancestor_bitsets": _check_ancestor_bitsets,
    "pytensor (_vectorize_node, _as_tensor_variable)": _check_dispatchers,
    "NumbaLinker.create_jitable_thunk": _check_numba_thunks,
    "JAXLinker.jit_compile": _check_jax_jit_compile,
    "Op._props() (made by PyTensor's MetaType)": _check_op_props,
    "optdb's jax_* rewrites (PYTENSOR_JAX_REWRITES)": _check_pytensor_jax_rewrites,
    "params of cond, while, custom_linear_solve": _check_control_flow_params,
    "JaxprEqn.ctx.manager": _check_equation_context,
    "pymc: _initialize_multiprocessing_context and its callers' `model`": _check_pymc_start_method,
    "importlib._bootstrap._find_and_load": _check_import_entry,
    "pytensor.configparser (ConfigParam.__get__, _config_var_dict)": _check_flag_getter,
    "equinox's generated pytree functions (<generated_...>)": _check_equinox_generated_files,
    "nutpie.compile_pymc (_compile_pymc_model_numba, _make_functions, "
    "make_user_data, _prepare_dims_and_coords, CompiledPyMCModel)": _check_nutpie_numba_api,
    "jax._src.interpreters.mlir (_platform_specific_lowerings, _lowerings, "
    "register_lowering, lower_fun); jax._src.lax.linalg (lu_p, "
    "lu_pivots_to_permutation_p, triangular_solve_p, cholesky_p)": _check_linalg_lowerings,
    # The fingerprints' use of jax.jit's options.
    "JitInfo fields fun_sourceinfo, fun_signature": _check_jit_options,
    "jax._src.lru_cache.LRUCache.put (path, _CACHE_SUFFIX)": _check_persistent_cache_class,
    "jaxlib.xla_client.make_cpu_client(asynchronous=)": _check_make_cpu_client,
    "threading._DummyThread": _check_foreign_thread,
    "PyGILState_Ensure (C API), never released": _check_keep_python_thread_state,
    "pthread_key_create with the C library's close as destructor": (
        _check_close_at_thread_exit
    ),
    "nutpie CompiledPyMCModel._make_sampler(settings, init_mean, cores, ...), "
    "user_data": _check_nutpie_make_sampler,
    "pymc.sampling.mcmc._cpu_count": _check_pymc_cpu_count,
    "jax._src.export._export (_module_to_bytecode, _jax.mlir, hlo, xb); "
    "jax._src.config.export_ignore_forward_compatibility": (
        _check_export_for_this_jaxlib
    ),
}


def test_every_private_api_has_a_check():
    assert set(CHECKS) == set(compat.ENTRIES)


@pytest.mark.parametrize("name", sorted(compat.ENTRIES))
def test_private_api_is_where_it_was(name):
    CHECKS[name]()


#: How private APIs look in source: a private module of a library, a private
#: name imported from one, or the specific attributes and helpers in ENTRIES.
PRIVATE_USE = re.compile(
    r"jax\._src|sys\._getframe|_jit_info|_error_message|FinalizedOpFromGraph"
    r"|construct_nominal_fgraph|reachability import|_vectorize_node\.register"
    r"|_as_tensor_variable\.register|equinox\.internal|type\(os\.environ\)"
    r"|\.create_jitable_thunk =|\.jit_compile ="
    r"|fun_sourceinfo|fun_signature"
    r"|\._props\(\)|ctx\.manager|_nconsts\b|const_lengths|\[.branches.\]"
    r"|jax_shape_parameter_as_tuple|jax_boolean_indexing"
    r"|_DummyThread|PyGILState_|pthread_key_create"
)


def test_private_apis_are_used_only_through_the_compat_module():
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for name, path in module_files().items()
        if name != compat.__name__
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_USE.search(line.split("#")[0]) and "``" not in line
    ]
    assert not found, "private APIs used outside the compat module:\n" + "\n".join(
        found
    )


def test_installed_versions_are_in_the_claimed_ranges():
    claimed = {
        (req := Requirement(line)).name: req.specifier
        for line in requires("pytensor-jax-ofg")
        if "extra ==" not in line
    }
    for name in ("pytensor", "jax", "jaxlib", "numpy"):
        assert version(name) in claimed[name], (name, version(name), claimed[name])


def test_rewrite_positions_in_optdb():
    """Our rewrites run between merge/canonicalize and the in-place pass."""
    from pytensor.compile.mode import optdb

    positions = optdb.__position__
    assert positions["merge1.1"] < positions["jax_ofg_vmap_blockwise"]
    assert positions["jax_ofg_vmap_blockwise"] < positions["canonicalize"]
    assert positions["specialize"] < positions["jax_ofg_prune_pullback_inputs"]
    assert (
        positions["jax_ofg_prune_pullback_inputs"]
        < positions["jax_ofg_fuse_value_and_vjp"]
    )
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
