"""Every private API of PyTensor, PyMC, JAX and equinox this package uses, in one place.

Each is an accessor listed in :data:`ENTRIES`, checked against the releases in
:data:`CHECKED` by ``tests/compile/test_jax_ofg_compat.py``; one that cannot
do its job returns None or False (the accessors of JAX's equations raise
instead), and its caller fails closed: no cache entry, no patch, no
exported program. Registers nothing.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import sys
import threading
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any


__all__ = ["CHECKED", "ENTRIES"]

#: Every private API in use, by name: what relies on it. Each one has a check in
#: ``tests/compile/test_jax_ofg_compat.py``, last passed with :data:`CHECKED`.
ENTRIES: dict[str, str] = {
    "jax._src.tree_util._registry": "describing a user's pytree class",
    "jax.jit(f)._jit_info": "describing a jax.jit-ed function by f and options",
    "jax._src.xla_bridge.backends_are_initialized": "the fork guard",
    "JaxRuntimeError._error_message": "naming the wrapped function in XLA errors",
    "scan's params (ft_in: jax._src.flattree)": "equinox checks inside lax.scan",
    "jax._src.callback (logger)": "muting JAX's log of a callback that raised",
    "equinox._errors._error.<locals>.raises/tpu_msg": "exporting equinox checks",
    "equinox.internal.primitive_finalisations": "checks inside lineax solves",
    "pytensor.compile.builders.(FinalizedOpFromGraph, construct_nominal_fgraph)": "JaxIsland",
    "pytensor.graph.rewriting.reachability.ancestor_bitsets": "forming islands",
    "pytensor (_vectorize_node, _as_tensor_variable)": "vmap; SymbolicCallable",
    "NumbaLinker.create_jitable_thunk": "running a one-island graph directly",
    "JAXLinker.jit_compile": "the JAX linker's fork guard and error names",
    "Op._props() (made by PyTensor's MetaType)": "op identity (hash, op memo)",
    "optdb's jax_* rewrites (PYTENSOR_JAX_REWRITES)": "JaxIsland's JAX lowering",
    "params of cond, while, custom_linear_solve": "equinox checks in control flow",
    "JaxprEqn.ctx.manager": "binding the equations of a flagged program again",
    "pymc: _initialize_multiprocessing_context and its callers' `model`": "mp_ctx",
    "importlib._bootstrap._find_and_load": "imports while a trace is watched",
    "pytensor.configparser (ConfigParam.__get__, _config_var_dict)": "flags in keys",
    "equinox's generated pytree functions (<generated_...>)": "watching traces",
    "nutpie.compile_pymc (_compile_pymc_model_numba, _make_functions, "
    "make_user_data, _prepare_dims_and_coords, CompiledPyMCModel)": "host callbacks",
    "jax._src.interpreters.mlir (_platform_specific_lowerings, _lowerings, "
    "register_lowering, lower_fun); jax._src.lax.linalg (lu_p, "
    "lu_pivots_to_permutation_p, triangular_solve_p, cholesky_p)": (
        "small dense linear algebra without LAPACK"
    ),
    # The fingerprints' use of jax.jit's options.
    "JitInfo fields fun_sourceinfo, fun_signature": "jit options without locations",
    "jax._src.lru_cache.LRUCache.put (path, _CACHE_SUFFIX)": "atomic XLA cache writes",
    "jaxlib.xla_client.make_cpu_client(asynchronous=)": "a CPU runtime per core",
    "threading._DummyThread": "telling nutpie's threads from Python's",
    "PyGILState_Ensure (C API), never released": "a nutpie thread's Python state kept",
    "pthread_key_create with the C library's close as destructor": (
        "a CPU lease closed when its thread exits"
    ),
    "nutpie CompiledPyMCModel._make_sampler(settings, init_mean, cores, ...), "
    "user_data": "how many threads nutpie starts; which sampler a thread serves",
    "pymc.sampling.mcmc._cpu_count": "pm.sample's default cores",
    "jax._src.export._export (_module_to_bytecode, _jax.mlir, hlo, xb); "
    "jax._src.config.export_ignore_forward_compatibility": (
        "the trace cache's programs exported for this jaxlib"
    ),
}

#: The releases the entries were last checked against.
CHECKED = (
    "pytensor 3.3.8, pymc 6.4, jax 0.12.0, equinox 0.13.8, nutpie 0.16.11, "
    "Python 3.12-3.13"
)


# ------------------------------------------------------------------------ JAX
def pytree_registration(cls: type) -> Any:
    """Return the flatten/unflatten functions JAX holds for ``cls`` (None if not a
    pytree).
    """
    from jax._src import tree_util

    return tree_util._registry.get(cls)


def jitted_function(value: Any) -> tuple[Callable, Any] | None:
    """Return ``(the wrapped function, its jit options)`` of a ``jax.jit`` result, else
    None.
    """
    wrapped = getattr(value, "__wrapped__", None)
    info = getattr(value, "_jit_info", None)
    return None if wrapped is None or info is None else (wrapped, info)


def jit_options(info: Any) -> Any:
    """Return a ``jax.jit`` function's options (:func:`jitted_function`) without where
    the function was defined, or None.

    JAX's ``JitInfo`` (a named tuple) also holds the function's source
    location and signature, which are no options.
    """
    try:
        return info._replace(fun_sourceinfo=None, fun_signature=None)
    except (AttributeError, TypeError, ValueError):  # the fields moved
        return None


def jax_started() -> bool:
    """Return whether this process has initialised a JAX backend (and its threads).

    When JAX's private check has moved, assume it has: a clear error in a
    forked child is better than a deadlock.
    """
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", None)
    return True if started is None else bool(started())


def persistent_cache_class() -> tuple[type, str] | None:
    """Return JAX's on-disk compilation cache class and its entries' file suffix,
    or None when they moved.

    Its ``put(key, value)`` writes ``self.path / (key + suffix)`` in place;
    :mod:`pytensor.compile._jax_ofg.patches.xla_cache_writes` makes that write atomic.
    """
    try:
        from jax._src import lru_cache
    except ImportError:
        return None
    cls = getattr(lru_cache, "LRUCache", None)
    suffix = getattr(lru_cache, "_CACHE_SUFFIX", None)
    if cls is None or not isinstance(suffix, str) or not callable(cls.put):
        return None
    return cls, suffix


def make_cpu_client(*, asynchronous: bool) -> Any:
    """Return a new XLA CPU client of one device, JAX's kind, that JAX does not hold.

    Its one device runs programs that ``jax.jit`` lowers for it (under
    ``jax.default_device``); ``asynchronous=False`` runs each call on the
    calling thread.
    """
    from jaxlib import xla_client

    return xla_client.make_cpu_client(asynchronous=asynchronous, num_devices=1)


def export_serializer() -> tuple[ModuleType, str] | None:
    """Return ``jax.export``'s module and the name of its function that serializes
    a lowered module (``_module_to_bytecode(module) -> bytes``, at a StableHLO
    version about a month old), or None when it moved.
    """
    from jax._src.export import _export

    found = getattr(_export, "_module_to_bytecode", None)
    mlir = getattr(getattr(_export, "_jax", None), "mlir", None)
    if not callable(found) or not all(
        callable(getattr(owner, name, None))
        for owner, name in (
            (mlir, "serialize_portable_artifact"),
            (getattr(_export, "hlo", None), "get_current_version"),
            (getattr(_export, "xb", None), "get_backend"),
        )
    ):
        return None
    return _export, "_module_to_bytecode"


def serialize_at_current_version(module: Any) -> bytes:
    """Serialize a lowered module as ``jax.export`` does, at this jaxlib's own
    StableHLO version (this jaxlib and newer ones read it; older ones cannot).
    """
    from jax._src.export import _export

    return _export._jax.mlir.serialize_portable_artifact(
        module,
        _export.hlo.get_current_version(),
        _export.xb.get_backend().serialize_with_sdy,
    )


def forward_compatibility_ignored() -> Any:
    """Return a context in which ``jax.export`` lowers as ``jax.jit`` does, in this
    thread (JAX's ``jax_export_ignore_forward_compatibility``, a thread-local
    setting), or None when the setting moved.
    """
    from jax._src import config as jax_config

    state = getattr(jax_config, "export_ignore_forward_compatibility", None)
    return state(True) if callable(state) else None


def prepend_to_runtime_error(error: BaseException, line: str) -> None:
    """Put ``line`` first in a ``JaxRuntimeError``'s message (its ``str``)."""
    message = getattr(error, "_error_message", None)
    if isinstance(message, str):
        error._error_message = f"{line}\n\n{message}"


#: The logger JAX reports failed host callbacks to.
CALLBACK_LOGGER = "jax._src.callback"


# -------------------------------------------------------------------- equinox
def equinox_check(callback: Any) -> str | None:
    """Return ``"raises"`` or ``"tpu_msg"`` for the host callbacks of ``eqx.error_if``.

    Equinox's error branch (``equinox._errors._error``) calls ``raises``, then
    ``tpu_msg`` on its result (for TPUs, which cannot raise).
    """
    function = getattr(callback, "callback_func", None)
    if getattr(function, "__module__", None) != "equinox._errors":
        return None
    return {
        "_error.<locals>.raises": "raises",
        "_error.<locals>.tpu_msg": "tpu_msg",
    }.get(getattr(function, "__qualname__", ""))


def equinox_implementation(primitive: Any) -> Callable | None:
    """Return the Python implementation of an equinox custom primitive, else None.

    Equinox lists them in ``equinox.internal.primitive_finalisations``, with a
    rule calling ``primitive.impl`` (lineax's linear solve is one).
    """
    internal = sys.modules.get("equinox.internal")
    rule = getattr(internal, "primitive_finalisations", {}).get(primitive)
    if (
        isinstance(rule, functools.partial)
        and rule.func.__name__ == "_impl_finalisation"
    ):
        return primitive.impl
    return None


#: The linear-algebra primitives whose CPU lowering :func:`wrap_cpu_lowering`
#: may wrap, by name.
LINALG_PRIMITIVES = ("lu", "lu_pivots_to_permutation", "triangular_solve", "cholesky")


def lower_function(fn: Callable, *, multiple_results: bool) -> Callable:
    """JAX's lowering rule that lowers ``fn`` (JAX code) in place of a primitive."""
    from jax._src.interpreters import mlir

    return mlir.lower_fun(fn, multiple_results=multiple_results)


def wrap_cpu_lowering(name: str, rule: Callable) -> bool:
    """Make ``rule(original, ctx, *args, **params)`` the CPU lowering of ``name``.

    ``name`` is one of :data:`LINALG_PRIMITIVES`; ``original`` is the rule JAX
    registered for the CPU, or for every platform where it has none. Done once per primitive (calling again does nothing). Returns
    False, changing nothing, when the primitive or its CPU rule has moved.
    """
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    primitive = getattr(linalg, f"{name}_p", None)
    lowerings = getattr(mlir, "_platform_specific_lowerings", None)
    if primitive is None or lowerings is None or name not in LINALG_PRIMITIVES:
        return False
    entry = lowerings["cpu"].get(primitive) or mlir._lowerings.get(primitive)
    if entry is None:
        return False
    if getattr(entry.rule, "_jax_ofg_wraps", None) is not None:
        return True
    original = entry.rule

    def wrapped(ctx: Any, *args: Any, **params: Any) -> Any:
        return rule(original, ctx, *args, **params)

    wrapped._jax_ofg_wraps = original
    mlir.register_lowering(primitive, wrapped, platform="cpu", inline=entry.inline)
    return True


# ------------------------------------------------------------------- PyTensor
def op_from_graph_base() -> type:
    """PyTensor's immutable ``OpFromGraph`` (the base of ``JaxIsland``)."""
    from pytensor.compile.builders import FinalizedOpFromGraph

    return FinalizedOpFromGraph


def nominal_fgraph(inputs: list, outputs: list) -> Any:
    """PyTensor's inner graph of an ``OpFromGraph`` over ``inputs`` and ``outputs``."""
    from pytensor.compile.builders import construct_nominal_fgraph

    return construct_nominal_fgraph(inputs, outputs)


def ancestor_bitsets(fgraph: Any, nodes: list) -> Any:
    """PyTensor's ancestor bitsets of ``nodes`` (for the islands' convexity)."""
    from pytensor.graph.rewriting.reachability import ancestor_bitsets as bitsets

    return bitsets(fgraph, nodes)


def register_vectorization(cls: type, rule: Callable) -> None:
    """Register ``rule`` with PyTensor's ``_vectorize_node`` for ``cls``."""
    from pytensor.graph.replace import _vectorize_node

    _vectorize_node.register(cls)(rule)


def register_as_tensor(cls: type, rule: Callable) -> None:
    """Register ``rule`` with PyTensor's ``_as_tensor_variable`` for ``cls``."""
    from pytensor.tensor.basic import _as_tensor_variable

    _as_tensor_variable.register(cls)(rule)


def patch_method(
    cls: type | ModuleType, name: str, marker: str, wrap: Callable
) -> bool:
    """Replace ``cls.name`` (a class's method, or a module's function) by
    ``wrap(cls.name)``, once (``marker`` set on it).

    Returns whether it is in place: ``False`` when the method has moved,
    and nothing is changed then.
    """
    method = getattr(cls, name, None)
    if not callable(method):
        return False
    if not getattr(method, marker, False):
        patched = wrap(method)
        setattr(patched, marker, True)
        setattr(cls, name, patched)
    return True


def op_props(op: Any) -> tuple:
    """Return an op's identity: the values of its ``__props__`` (``Op._props()``).

    PyTensor's ``MetaType`` makes ``_props`` from ``__props__``, as it makes
    the op's ``__eq__`` and ``__hash__`` from the same values.
    """
    return op._props()


#: PyTensor's own rewrites preparing a graph for its JAX lowering, by name in
#: ``optdb`` (under the "jax" tag, which only ``mode="JAX"`` includes): shape
#: arguments as static tuples, boolean indexing JAX can trace.
PYTENSOR_JAX_REWRITES = (
    "jax_shape_parameter_as_tuple",
    "jax_boolean_indexing_set_or_inc",
    "jax_boolean_indexing_sum",
)


def prepare_for_jax_lowering(fgraph: Any) -> None:
    """Apply :data:`PYTENSOR_JAX_REWRITES` to ``fgraph``, in place."""
    from pytensor.compile.mode import optdb

    for name in PYTENSOR_JAX_REWRITES:
        optdb[name].rewrite(fgraph)


# -------------------------------------------------------------- JAX equations
# The parameters of JAX's control-flow primitives, and how their equations
# lay out their inputs. When JAX changed them they raise (``KeyError``,
# ``AttributeError``): the program is then not
# exported.
def cond_parts(params: dict, inputs: list) -> tuple[list, Any, list]:
    """Return ``(branches, index, operands)`` of a ``cond`` equation's ``params`` and
    ``inputs``.

    The branches are closed jaxprs, in the order of the (integer) index that
    comes first in the inputs.
    """
    index, *operands = inputs
    return list(params["branches"]), index, operands


@dataclasses.dataclass(frozen=True)
class WhileParts:
    """A ``while`` equation's jaxprs, and its inputs split as the loop takes them."""

    cond_jaxpr: Any
    body_jaxpr: Any
    cond_consts: list
    body_consts: list
    carry: list


def while_parts(params: dict, inputs: list) -> WhileParts:
    """Return the parts of a ``while`` equation, from its ``params`` and ``inputs``.

    Its inputs are the condition's constants, the body's, then the carry.
    """
    n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
    return WhileParts(
        params["cond_jaxpr"],
        params["body_jaxpr"],
        inputs[:n_cond],
        inputs[n_cond : n_cond + n_body],
        inputs[n_cond + n_body :],
    )


@dataclasses.dataclass(frozen=True)
class ScanParts:
    """A ``scan`` equation's body and options, and its inputs split as the scan takes them."""

    jaxpr: Any
    consts: list
    carry: list
    xs: list
    length: int
    reverse: bool
    unroll: Any


def scan_parts(params: dict, inputs: list) -> ScanParts:
    """Return the parts of a ``scan`` equation, from its ``params`` and ``inputs``.

    Its inputs are the body's constants, the carry, then the scanned inputs.
    JAX 0.12 counts them in ``ft_in``, a flat tree (private); older JAX in
    ``num_consts`` and ``num_carry``.
    """
    if "num_consts" in params:
        n_consts, n_carry = params["num_consts"], params["num_carry"]
    else:
        consts, carry, _ = params["ft_in"].elts
        n_consts, n_carry = len(list(consts)), len(list(carry))
    return ScanParts(
        params["jaxpr"],
        inputs[:n_consts],
        inputs[n_consts : n_consts + n_carry],
        inputs[n_consts + n_carry :],
        params["length"],
        params["reverse"],
        params["unroll"],
    )


def linear_solve_parts(params: dict, inputs: list) -> tuple[Any, list]:
    """Return the ``solve`` jaxpr of a ``custom_linear_solve`` equation, and its
    arguments.

    The equation's inputs are the constants of ``matvec``, ``vecmat``,
    ``solve`` and ``transpose_solve`` (``const_lengths``), then the right-hand
    side; ``solve`` takes its constants and the right-hand side.
    """
    lengths = params["const_lengths"]
    start = lengths.matvec + lengths.vecmat
    rhs = inputs[sum(lengths) :]
    return params["jaxprs"].solve, [*inputs[start : start + lengths.solve], *rhs]


def equation_context(equation: Any) -> Any:
    """Return the context manager to bind ``equation`` again in
    (``equation.ctx.manager``).

    It restores what JAX recorded with the equation when it was traced: the
    compute type, XLA metadata, the mesh, threefry partitioning.
    """
    return equation.ctx.manager


# ----------------------------------------------------- PyTensor's backends
#: PyTensor's JAX backend: its ``jax_funcify`` lowers graphs to JAX (about a
#: second to import; registered with when imported: ``hooks/import_finder``).
JAX_BACKEND = "pytensor.link.jax.dispatch"
#: PyTensor's Numba dispatch: its ``numba_funcify`` (about a tenth of a second
#: to import; registered with when imported, as the JAX backend is).
NUMBA_DISPATCH = "pytensor.link.numba.dispatch"


# ----------------------------------------------------------------------- PyMC
#: The modules whose sampling functions choose PyMC's start method, and the
#: function they import from ``pymc.sampling.parallel`` to do it.
PYMC_SAMPLING_MODULES = ("pymc.sampling.mcmc", "pymc.smc.sampling")
PYMC_START_METHOD_CHOOSER = "_initialize_multiprocessing_context"
#: The module of ``pm.sample``, and the function it asks for its default cores.
PYMC_SAMPLE_MODULE = "pymc.sampling.mcmc"
PYMC_CPU_COUNT = "_cpu_count"


# --------------------------------------------------------------------- nutpie
#: The module of nutpie's PyMC compilation, and its Numba-backend compiler.
NUTPIE_COMPILE_MODULE = "nutpie.compile_pymc"
NUTPIE_NUMBA_COMPILER = "_compile_pymc_model_numba"


@dataclasses.dataclass(frozen=True)
class NutpieNumbaAPI:
    """What nutpie's Numba backend is made of, apart from its ``numba.cfunc`` calls."""

    make_functions: Callable
    make_user_data: Callable
    prepare_dims_and_coords: Callable
    compiled_model: type


def nutpie_numba_api(module: ModuleType) -> NutpieNumbaAPI | None:
    """Return the parts of ``nutpie.compile_pymc`` host callbacks use, or None if one
    moved.

    ``CompiledPyMCModel`` must still take the fields nutpie 0.16 gives it.
    """
    try:
        api = NutpieNumbaAPI(
            module._make_functions,
            module.make_user_data,
            module._prepare_dims_and_coords,
            module.CompiledPyMCModel,
        )
        fields = {f.name for f in dataclasses.fields(api.compiled_model)}
    except (AttributeError, TypeError):
        return None
    return api if fields >= _NUTPIE_FIELDS else None


_NUTPIE_FIELDS = frozenset(
    [
        "_n_dim",
        "dims",
        "_coords",
        "_shapes",
        "compiled_logp_func",
        "compiled_expand_func",
        "initial_point_func",
        "shared_data",
        "shared_var_keys",
        "user_data",
        "n_expanded",
        "shape_info",
        "logp_func",
        "expand_func",
        "reparameterized_names",
    ]
)


def sampled_model(caller: FrameType | None) -> Any:
    """Return the model ``pm.sample`` / ``pm.sample_smc`` (the frame ``caller``)
    samples.

    Both resolve their ``model`` argument into a local of that name before
    choosing the start method; elsewhere, the model on the context stack.
    """
    from pymc.model.core import Model

    model = caller.f_locals.get("model") if caller is not None else None
    if isinstance(model, Model):
        return model
    return Model.get_context(error_if_none=False)


def caller_frame(depth: int) -> FrameType:
    """Return the frame ``depth`` levels above the caller (CPython's ``sys._getframe``)."""
    return sys._getframe(depth + 1)


# --------------------------------------------------------------------- Python
def is_foreign_thread() -> bool:
    """Return whether the calling thread was started outside Python (Rust's, C's).

    Python knows such a thread only as a "dummy" thread, made when it first
    runs Python code.
    """
    return isinstance(threading.current_thread(), threading._DummyThread)


def keep_python_thread_state() -> None:
    """Keep the calling thread's Python thread state until the process ends.

    Called from a :mod:`ctypes` callback on a thread Python did not start:
    ctypes makes a thread state for each call and deletes it on return,
    so that every call would start afresh (its thread-local state, JAX's
    among it). One more ``PyGILState_Ensure``, never released, keeps it.
    """
    ensure = ctypes.pythonapi.PyGILState_Ensure
    ensure.restype = ctypes.c_int
    ensure()


_THREAD_EXIT_KEY: list[ctypes.c_uint] = []
_KEY_LOCK = threading.Lock()


def close_at_thread_exit(fd: int) -> None:
    """Make the C library close the descriptor ``fd`` when the calling thread exits.

    A POSIX thread-specific key whose destructor is the C library's ``close``:
    when a thread exits, the C library calls it with the value the thread
    set, the descriptor, without Python (whose state the thread may have
    lost by then). ``close`` takes an int where a destructor takes a
    pointer; the ABIs of Linux pass both in the first integer register. A
    thread sets it once: a second call raises.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    key = _thread_exit_key(libc)
    libc.pthread_getspecific.restype = ctypes.c_void_p
    if libc.pthread_getspecific(key):
        raise RuntimeError("this thread already has a descriptor closed at its exit")
    if fd <= 0 or libc.pthread_setspecific(key, ctypes.c_void_p(fd)) != 0:
        raise OSError(ctypes.get_errno(), f"pthread_setspecific failed for {fd}")


def _thread_exit_key(libc: Any) -> ctypes.c_uint:
    with _KEY_LOCK:
        if not _THREAD_EXIT_KEY:
            key = ctypes.c_uint()
            close = ctypes.cast(libc.close, ctypes.c_void_p)
            if libc.pthread_key_create(ctypes.byref(key), close) != 0:
                raise OSError(ctypes.get_errno(), "pthread_key_create failed")
            _THREAD_EXIT_KEY.append(key)
        return _THREAD_EXIT_KEY[0]


def import_entry_code() -> Any:
    """Return the code of CPython's import machinery entry (``_find_and_load``), or
    None.
    """
    bootstrap = sys.modules.get("importlib._bootstrap")
    return getattr(getattr(bootstrap, "_find_and_load", None), "__code__", None)


# ------------------------------------------------------------------ PyTensor
def flag_getter_code() -> Any:
    """Return the code every PyTensor flag is read through (``ConfigParam.__get__``)."""
    from pytensor.configparser import ConfigParam

    return ConfigParam.__get__.__code__


def pytensor_flags() -> list[tuple[str, Any]]:
    """Every PyTensor flag whose default is a value, and its value now, by name.

    Flags whose default is computed (:func:`probed_flags`) are left out:
    reading one runs its probe.
    """
    from pytensor import config

    probed = probed_flags()
    return [
        (name, getattr(config, name))
        for name in sorted(config._config_var_dict)
        if name not in probed
    ]


def probed_flags() -> frozenset[str]:
    """Return the PyTensor flags whose default a function computes when first read.

    They probe the machine (the C compiler, BLAS: ``blas__ldflags`` runs the
    compiler and warns where it finds none), which no JAX trace needs.
    """
    from pytensor import config

    return frozenset(
        name
        for name, param in config._config_var_dict.items()
        if callable(getattr(param, "_default", None))
    )


# ------------------------------------------------------------------- equinox
#: How equinox names the files of the pytree functions it generates for each
#: module class (``equinox._module._flatten``), which run in globals without
#: a ``__name__``.
EQUINOX_GENERATED_FILES = "<generated_"
