"""Stable descriptions of ops holding JAX computations, equal across processes.

PyTensor caches compiled Numba code on disk under a key per node; a node
without a key makes its whole graph uncacheable. :func:`stable_key` describes
an :class:`~pytensor.compile.jax_ofg.OpFromJax` or a
:class:`~pytensor.compile.jax_ofg_island_op.JaxIsland` by what it computes -- its
inner functions (by module, name, code and closure), static arguments (arrays
by content), types and inner graph -- so the same op in a new process gets
the same key.

The description is best effort: a value that cannot be described stably (an
object whose ``repr`` shows its address) only costs a cache miss, never a
wrong result. Correctness rests on the Numba dispatch's registry, which never
lets two different ops of one process share a key.

Registers nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.op import Op


def digest(text: str) -> str:
    """A short hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def stable_key(value: Any) -> str:
    """A description of ``value`` that equal values share in every process.

    >>> stable_key((1, 2.5, "a", None))
    "(1, 0x1.4000000000000p+1, 'a', None)"
    >>> stable_key(np.zeros(2)) == stable_key(np.zeros(2))
    True
    """
    # A value met again while it is being described (a recursive local
    # function holds itself in its closure) is named, not described again.
    describing = _describing()
    if id(value) in describing:
        named = value if hasattr(value, "__qualname__") else type(value)
        return f"<recursive {_qualified(named)}>"
    describing.add(id(value))
    try:
        return _describe(value)
    finally:
        describing.discard(id(value))


_THREAD = threading.local()


def _describing() -> set[int]:
    """The ids of the values being described now, in this thread."""
    if not hasattr(_THREAD, "ids"):
        _THREAD.ids = set()
    return _THREAD.ids


def _describe(value: Any) -> str:
    for kind, describe in _DESCRIBERS:
        if isinstance(value, kind):
            return describe(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(
            f"{f.name}={stable_key(getattr(value, f.name))}"
            for f in dataclasses.fields(value)
            if f.compare
        )
        return f"{_qualified(type(value))}({fields})"
    if callable(value) and hasattr(value, "__qualname__"):
        return _qualified(value)  # e.g. a jitted function: by name
    # Not equal across processes when it shows an address; dropping it can
    # only make distinct values collide, which the registry disambiguates.
    return f"{_qualified(type(value))}:{_ADDRESS.sub('', repr(value))}"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


def _sequence(values) -> str:
    return "(" + ", ".join(stable_key(v) for v in values) + ")"


def _array(value) -> str:
    array = np.ascontiguousarray(np.asarray(value))
    content = hashlib.sha256(array.tobytes()).hexdigest()[:32]
    return f"array({array.dtype.str}, {array.shape}, {content})"


def _function(fn: types.FunctionType) -> str:
    closure = [cell.cell_contents for cell in fn.__closure__ or ()]
    parts = [
        _qualified(fn),
        _code(fn.__code__),
        _sequence(closure),
        _sequence(fn.__defaults__ or ()),
        stable_key(fn.__kwdefaults__ or {}),
    ]
    return f"function({', '.join(parts)})"


def _code(code: types.CodeType) -> str:
    consts = [_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts]
    return digest(f"{code.co_code.hex()}{stable_key(consts)}{code.co_names}")


def _mapping(value: dict) -> str:
    items = sorted((stable_key(k), stable_key(v)) for k, v in value.items())
    return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"


def _op(op: Op) -> str:
    if hasattr(op, "stable_key"):
        return op.stable_key()
    props = getattr(op, "__props__", None)
    if props is None:
        return f"{_qualified(type(op))}:{op}"
    values = ", ".join(f"{p}={stable_key(getattr(op, p))}" for p in props)
    return f"{_qualified(type(op))}({values})"


def _variable(variable: Variable) -> str:
    if isinstance(variable, Constant):
        return f"constant({stable_key(variable.data)})"
    return f"variable({variable.type})"


def _bound_method(method: types.MethodType) -> str:
    return f"method({stable_key(method.__self__)}.{method.__func__.__name__})"


_DESCRIBERS: list[tuple[type | tuple[type, ...], Callable[[Any], str]]] = [
    ((type(None), bool, int, str, bytes), repr),
    (float, float.hex),
    ((np.ndarray, np.generic, jax.Array), _array),
    ((tuple, list), _sequence),
    (dict, _mapping),
    ((frozenset, set), lambda v: "{" + ", ".join(sorted(map(stable_key, v))) + "}"),
    (types.FunctionType, _function),
    (types.MethodType, _bound_method),
    ((types.BuiltinFunctionType, type), _qualified),
    (np.dtype, str),
    (Op, _op),
    (Variable, _variable),
    (jax.tree_util.PyTreeDef, str),
]
