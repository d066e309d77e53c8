"""The JAX linker's functions holding wrapped functions: checked after a fork, errors named.

Changes
-------
Wraps ``JAXLinker.jit_compile`` (PyTensor's ``pytensor.link.jax.linker``)
once PyTensor's JAX backend is imported: a compiled graph holding wrapped JAX
functions becomes a :class:`ForkCheckedFunction`, which refuses to run in a
process forked after JAX started (``host/fork_guard``) and names the wrapped
functions in the errors its XLA program raises. Graphs without wrapped
functions get PyTensor's function unchanged.

Why
---
Under ``mode="JAX"`` no host call of this package runs, so its own checks do
not either: a forked child would deadlock in JAX, and an XLA runtime error
would not say which wrapped function it came from.

Upstream
--------
No upstream issue for the linker; JAX only warns at a fork
(https://github.com/jax-ml/jax/pull/18989). PyTensor would need a hook for
an op to wrap the JAX linker's compiled function (or JAX to refuse to run in
a forked child).

Checked with
------------
PyTensor 3.3.8 (``JAXLinker.jit_compile``, ``JAXLinker.fgraph``).

Off switch
----------
``jax_ofg__jax_linker_check=False``: PyTensor's function as it compiles it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.errors import report
from pytensor.compile._jax_ofg.flags import JAX_LINKER_CHECK
from pytensor.compile._jax_ofg.hooks.import_finder import after_import
from pytensor.compile._jax_ofg.host import fork_guard
from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops, wrapped_functions_in
from pytensor.link.jax.linker import JAXLinker


__all__ = ["ForkCheckedFunction", "install", "patch_jax_linker"]


class ForkCheckedFunction:
    """A JAX-linker function holding wrapped JAX functions, checked before each call.

    Its errors name the wrapped functions, as a host call's do (see
    :func:`~pytensor.compile._jax_ofg.errors.report`).
    """

    __slots__ = ("_compiled", "_functions")

    def __init__(self, compiled: Callable, functions: Sequence[str] = ()):
        self._compiled = compiled
        self._functions = tuple(functions)

    def __call__(self, *args):
        if fork_guard.forked_after_jax_started:
            fork_guard.refuse_call_after_fork(
                "A function compiled with mode='JAX' that holds wrapped JAX functions"
            )
        try:
            return self._compiled(*args)
        except Exception as error:
            what = f"The XLA program of mode='JAX' holding {', '.join(self._functions)}"
            report(error, what, self._functions)
            raise

    def __getattr__(self, name: str) -> Any:  # `lower`, `trace`, ... of jax.jit
        return getattr(self._compiled, name)


def install() -> None:
    """Install :func:`patch_jax_linker` when PyTensor's JAX backend is imported
    (now, if it is), unless switched off."""
    if JAX_LINKER_CHECK.value:
        after_import(compat.JAX_BACKEND, lambda backend: patch_jax_linker())


def patch_jax_linker() -> bool:
    """Make ``JAXLinker.jit_compile`` check graphs holding JAX ops after a fork;
    graphs without them get PyTensor's function unchanged. Returns whether the
    check is installed (``False`` when PyTensor's linker has moved)."""

    def wrap(jit_compile: Callable) -> Callable:
        @functools.wraps(jit_compile)
        def checked_jit_compile(self, fn):
            compiled = jit_compile(self, fn)
            fgraph = getattr(self, "fgraph", None)
            if fgraph is not None and graph_holds_jax_ops(fgraph.outputs):
                functions = wrapped_functions_in(fgraph.outputs)
                return ForkCheckedFunction(compiled, functions)
            return compiled

        return checked_jit_compile

    return compat.patch_method(
        JAXLinker, "jit_compile", "checks_forked_processes", wrap
    )
