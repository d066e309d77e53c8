"""Every key this package computes, in one place: what each is made of.

A key is a digest of descriptions (``cache/fingerprints``: a value by all it
computes with, or :class:`Undescribable`) and, for what outlives the process,
of the environment (``cache/environment``: versions, installed distributions,
JAX options, PyTensor flags, this project's source). The recipes:

=====================  =========================================================
:func:`trace_key`      a trace in the trace cache: :data:`FORMAT`, what is
                       cached, the description of what it depends on, the
                       environment; with the user code the key covers
:func:`program_key`    an op's jitted program in this process: the op's
                       description (the op itself and the device join it)
:func:`registry_key`   a Numba body's name, equal in every process: the op's
                       description and which outputs it writes
:func:`body_key`       the Numba cache key of that body: its name, input
                       types and source
:func:`array_key`      a static array argument: dtype, shape and content
=====================  =========================================================

Changing what a key holds is a change to this module only. Registers nothing.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from pytensor.compile._jax_ofg.cache.environment import environment_fingerprint
from pytensor.compile._jax_ofg.cache.fingerprints import (
    Undescribable,
    describe,
    describe_with_code,
    digest,
    fingerprint_or_raise,
)


__all__ = [
    "FORMAT",
    "Undescribable",
    "array_key",
    "body_key",
    "program_key",
    "registry_key",
    "trace_key",
]

#: Changes when what a trace-cache entry holds changes (4: programs exported for
#: this jaxlib, ``hooks/export_serializer``).
FORMAT = 4


def trace_key(kind: str, parts: Any) -> tuple[str, tuple[types.CodeType, ...]]:
    """Return the key of a ``kind`` entry for what ``parts`` describe, and the user
    code the key covers; raises :class:`Undescribable`.
    """
    text, codes = describe_with_code(parts)
    return digest(f"{FORMAT}|{kind}|{text}|{environment_fingerprint()}"), codes


def program_key(op: Any) -> str:
    """Return the key of ``op``'s jitted program in this process (what its wrapped
    functions compute now); raises :class:`Undescribable`."""
    return fingerprint_or_raise(op)


def registry_key(op: Any, writable: tuple[bool, ...]) -> str:
    """Return the name of ``op``'s Numba body (with its ``writable`` outputs), equal
    for equal ops in every process: from its description or, for an op that
    cannot be described, its type and output types (the caller tells apart ops
    that start alike).
    """
    text = describe(op)
    if text is None:  # a lock in a closure, say: no content key, a stable one
        text = f"{type(op).__qualname__}{[str(t) for t in op.output_types]}"
    return digest(f"{text}|{writable}")


def body_key(key: str, input_types: list[str], source: str) -> str:
    """Return Numba's cache key of the body named ``key``."""
    return digest(f"jax_host_op|{key}|{input_types}|{source}")


def array_key(array: np.ndarray) -> tuple:
    """Return the identity of a static array: dtype, shape and content."""
    return ("array", array.dtype.str, array.shape, digest(array.tobytes()))
