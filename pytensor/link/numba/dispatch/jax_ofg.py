"""Numba linker: ops holding a JAX computation call their jitted function in object mode.

:class:`~pytensor.compile.jax_ofg_op.OpFromJax` and
:class:`~pytensor.compile.jax_ofg_island_op.JaxIsland` enter object mode once per
call and go to the op's host function
(:meth:`~pytensor.compile.jax_ofg_host.JaxHostOp.host_function`).

The compiled body holds no Python closure, so PyTensor can cache it on disk:
the object-mode block calls the module-level :func:`call_host_function` with
a constant key, which finds the host function in a registry filled when the
graph is compiled in this process (:func:`register`). A body served from the
cache therefore always runs the function of the op being compiled now, never
one from the process that wrote the cache; and the registry never lets two
different ops of one process share a key.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`numba_funcify_JaxHostOp` (with its cache key) for
:class:`~pytensor.compile.jax_ofg_host.JaxHostOp` with PyTensor's
``numba_funcify``, and the module of the compiled bodies in ``sys.modules``
(:func:`bodies_module`).
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numba

from pytensor.compile.jax_ofg_host import JaxHostOp, writable_outputs
from pytensor.compile.jax_ofg_keys import digest, stable_key
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch.basic import get_numba_type, numba_njit


__all__ = ["bodies_module", "call_host_function", "numba_funcify_JaxHostOp"]


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
    """The registry key for ``op`` (with its ``writable`` outputs), now serving ``host``.

    The key is derived from :func:`~pytensor.compile.jax_ofg_keys.stable_key`,
    so the same op gets it in every process; a different op that happens to
    describe the same gets the next free suffix. ``host`` is held weakly: the
    compiled function holds it (see :func:`numba_funcify_JaxHostOp`).
    """
    base = digest(f"{stable_key(op)}|{writable}")
    with _LOCK:
        for suffix in range(len(_REGISTRY) + 1):
            key = f"{base}_{suffix}"
            entry = _REGISTRY.get(key)
            if entry is None:
                entry = _REGISTRY[key] = _Entry(op, writable)
            if entry.op == op and entry.writable == writable:
                entry.hosts.add(host)
                entry.latest = weakref.ref(host)
                return key
    raise AssertionError("unreachable: a free suffix always exists")


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


_BODY = """
def {name}(*inputs):
    with numba.objmode(outputs={return_type}):
        outputs = call_host_function({key!r}, inputs)
    return outputs
"""

_BODIES_MODULE = f"{__name__}._bodies"


def bodies_module() -> types.ModuleType:
    """The module the compiled bodies are defined in, put in ``sys.modules`` once.

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
    """An object-mode call of the op's host function, and its cache key.

    Registered for the mixin :class:`JaxHostOp`: it covers ``OpFromJax`` and
    ``JaxIsland``, and wins over ``OpFromGraph``'s dispatch, which comes
    later in ``JaxIsland``'s MRO.
    """
    writable = writable_outputs(node)
    output_types = [
        get_numba_type(out.type) if w else get_numba_type(out.type).copy(readonly=True)
        for out, w in zip(node.outputs, writable)
    ]
    host_call = op.host_function(writable)
    if len(output_types) == 1:
        return_type = output_types[0]

        def host(*inputs):
            return host_call(*inputs)[0]

    else:
        return_type = numba.types.Tuple(output_types)

        def host(*inputs):
            return tuple(host_call(*inputs))

    key = register(op, writable, host)
    node.tag.jax_ofg_registry_key = key
    name = f"jax_host_op_{key}"
    bodies = bodies_module()
    bodies.__dict__[f"{name}_type"] = return_type
    body = compile_numba_function_src(
        _BODY.format(name=name, key=key, return_type=f"{name}_type"),
        name,
        global_env=bodies.__dict__,
    )
    compiled = numba_njit(body)
    compiled._jax_ofg_host = host  # the registry holds it weakly
    input_types = [str(get_numba_type(x.type)) for x in node.inputs]
    return compiled, digest(f"jax_host_op|{key}|{input_types}|{return_type}")
