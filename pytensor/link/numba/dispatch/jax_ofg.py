"""Numba linker: ops holding a JAX computation call their jitted function in object mode.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`numba_funcify_JaxHostOp` with ``numba_funcify`` (a body without
closures, which PyTensor caches on disk: :func:`call_host_function`,
:func:`register`) and :func:`bodies_module`. A graph that is one such op runs
without Numba: ``patches/numba_direct_thunk``.
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from pytensor.compile._jax_ofg.cache.api import body_key, registry_key
from pytensor.compile._jax_ofg.host.op import JaxHostOp, writable_outputs
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch.basic import get_numba_type, numba_njit
from pytensor.tensor.type import TensorType


__all__ = [
    "bodies_module",
    "call_host_function",
    "numba_funcify_JaxHostOp",
    "registry_keys",
]


@dataclass
class _Entry:
    """The op a registry key stands for, and the live host functions running it."""

    op: JaxHostOp
    writable: tuple[bool, ...]
    hosts: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    latest: Callable[[], Callable | None] = lambda: None


_REGISTRY: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def register(op: JaxHostOp, writable: tuple[bool, ...], host: Callable) -> str:
    """Return the registry key for ``op`` (with its ``writable`` outputs), now serving
    ``host``.

    The entry lives while one of its hosts does: the registry keeps no op of a
    garbage-collected function alive.

    Equal ops get the same key in every process: the compiled body's source
    holds it, so that is what lets Numba's on-disk cache serve the body in the
    next process. The key starts from the op's description
    (:func:`~pytensor.compile._jax_ofg.cache.keys.registry_key`) or, for an op
    that cannot be described, from its type and output types; ops that start
    alike but differ get the next free suffix, in the order they are compiled
    (an op registered already keeps its suffix).
    A cached body is right for whichever op its key names in this process:
    it only calls that op's host function, and besides its source and input
    types (in Numba's cache key) it depends only on the output dtypes, which
    both starts hold. ``host`` is held weakly: the compiled function holds it
    (see :func:`numba_funcify_JaxHostOp`).
    """
    base = registry_key(op, writable)
    with _LOCK:
        # The op's own key first: a free suffix below it (its holder was
        # released) would give an op already registered a second key.
        key = next(
            (
                key
                for key, entry in _REGISTRY.items()
                if key.rpartition("_")[0] == base
                and entry.op == op
                and entry.writable == writable
            ),
            None,
        )
        if key is None:
            key = next(
                f"{base}_{suffix}"
                for suffix in itertools.count()
                if f"{base}_{suffix}" not in _REGISTRY
            )
            _REGISTRY[key] = _Entry(op, writable)
        entry = _REGISTRY[key]
        entry.hosts.add(host)
        entry.latest = weakref.ref(host)
        weakref.finalize(host, _release, key)
        return key


def _release(key: str) -> None:
    """Forget ``key`` (its op and its bodies' globals) once no live host serves it."""
    with _LOCK:
        entry = _REGISTRY.get(key)
        if entry is None or any(True for _ in entry.hosts):
            return
        del _REGISTRY[key]
        prefix = f"{_BODY_PREFIX}{key}_"
        bodies = bodies_module().__dict__
        for name in [name for name in bodies if name.startswith(prefix)]:
            del bodies[name]


def registry_keys(op: JaxHostOp) -> list[str]:
    """Return the keys under which compiled functions of this process call ``op``."""
    with _LOCK:
        return [key for key, entry in _REGISTRY.items() if entry.op == op]


def call_host_function(key: str, inputs: tuple) -> object:
    """Run the host function registered under ``key`` (from object mode)."""
    entry = _REGISTRY[key]
    host = entry.latest()
    if host is None:  # the newest compiled function holding it is gone
        host = next(iter(entry.hosts), None)
        if host is None:
            raise RuntimeError(
                f"No live function of {entry.op} is registered under {key}: the "
                "compiled function that called it was garbage-collected."
            )
        entry.latest = weakref.ref(host)
    return host(*inputs)


_BODY_PREFIX = "jax_host_op_"
_BODY = """
def {name}(*inputs):
    with numba.objmode({declared}):
        {received} = call_host_function({key!r}, inputs)
{unpack}
    return {returned}
"""


def unpacking_source(
    output_types: Sequence[TensorType], writable: Sequence[bool], buffers: Sequence[str]
) -> tuple[list[str], list[str], bool]:
    """Numba source slicing each output out of the packed buffers.

    ``buffers`` names the buffer of each dtype of
    :attr:`~pytensor.compile._jax_ofg.host.op.JaxHostOp.packing`. Static shapes
    are constants; unknown ones are read from ``dims`` (see
    :meth:`~pytensor.compile._jax_ofg.host.op.JaxHostOp.buffers_function`).
    Returns the lines, the outputs' names, and whether ``dims`` is read.

    >>> from pytensor.tensor.type import TensorType
    >>> lines, names, dims = unpacking_source(
    ...     [TensorType("float64", shape=()), TensorType("float64", shape=(None,))],
    ...     [False, True],
    ...     ["b0"],
    ... )
    >>> print("\\n".join(lines))
    n0 = 1
    o0 = b0[0:0 + n0].reshape(())
    n1 = dims[0]
    o1 = b0[0 + n0:0 + n0 + n1].reshape((dims[0],)).copy()
    """
    dynamic = any(None in t.shape for t in output_types)
    dtypes = list(dict.fromkeys(t.dtype for t in output_types))
    offsets: dict[str, str | int] = dict.fromkeys(dtypes, 0)
    lines, names, position = [], [], 0
    for k, (t, copy) in enumerate(zip(output_types, writable)):
        start = offsets[t.dtype]
        if dynamic:
            shape = [f"dims[{position + j}]" for j in range(t.ndim)]
            position += t.ndim
            lines.append(f"n{k} = {' * '.join(shape) or '1'}")
            stop = f"{start} + n{k}"
        else:
            shape = [str(d) for d in t.shape]
            stop = f"{int(start) + int(np.prod(t.shape, dtype=np.int64))}"
        shape_text = f"({', '.join(shape)}{',' if len(shape) == 1 else ''})"
        view = f"{buffers[dtypes.index(t.dtype)]}[{start}:{stop}].reshape({shape_text})"
        lines.append(f"o{k} = {view}{'.copy()' if copy else ''}")
        offsets[t.dtype] = stop
        names.append(f"o{k}")
    return lines, names, dynamic


_BODIES_MODULE = f"{__name__}._bodies"


def bodies_module() -> types.ModuleType:
    """Return the module the compiled bodies are defined in, put in ``sys.modules``
    once.

    Numba rebuilds the globals of an object-mode block served from its cache
    by importing the module the function was defined in, so the bodies must
    live in one that is importable by name in every process.
    """
    module = sys.modules.get(_BODIES_MODULE)
    if module is None:
        module = types.ModuleType(_BODIES_MODULE)
        module.__dict__.update(numba=numba, call_host_function=call_host_function)
        module = sys.modules.setdefault(_BODIES_MODULE, module)
    return module


def numba_funcify_JaxHostOp(op: JaxHostOp, node=None, **kwargs):
    """Return an object-mode call of the op's host function, and its cache key.

    Registered for the mixin :class:`JaxHostOp`: it covers ``OpFromJax`` and
    ``JaxIsland``, and wins over ``OpFromGraph``'s dispatch, which comes
    later in ``JaxIsland``'s MRO.
    """
    writable = writable_outputs(node)
    output_types = [out.type for out in node.outputs]
    # The object-mode block only hands over the packed buffers (one per
    # dtype); slicing, reshaping and copying them is compiled code: cheaper
    # than doing it in Python, and than boxing several arrays.
    dtypes = op.packing.dtypes
    buffers = [f"b{j}" for j in range(len(dtypes))]
    lines, names, dynamic = unpacking_source(output_types, writable, buffers)
    # Read-only: the buffers are JAX's memory.
    name_of = {
        buffer: numba.types.Array(
            numba.from_dtype(np.dtype(dtype)), 1, "C", readonly=True
        )
        for buffer, dtype in zip(buffers, dtypes)
    }
    if dynamic:
        name_of["dims"] = numba.types.Array(numba.types.int64, 1, "C")
    host = op.buffers_function()
    key = register(op, writable, host)
    name = f"{_BODY_PREFIX}{key}"
    bodies = bodies_module()
    for variable, numba_type in name_of.items():
        bodies.__dict__[f"{name}_{variable}"] = numba_type
    source = _BODY.format(
        name=name,
        key=key,
        declared=", ".join(f"{v}={name}_{v}" for v in name_of),
        received=", ".join(name_of) + ("," if len(name_of) == 1 else ""),
        unpack="\n".join(f"    {line}" for line in lines),
        returned=names[0] if len(names) == 1 else f"({', '.join(names)})",
    )
    body = compile_numba_function_src(source, name, global_env=bodies.__dict__)
    compiled = numba_njit(body)
    compiled._jax_ofg_host_op = host  # the registry holds it weakly
    input_types = [str(get_numba_type(x.type)) for x in node.inputs]
    return compiled, body_key(key, input_types, source)
