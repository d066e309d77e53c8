"""JAX linker: an :class:`~pytensor.compile._jax_ofg.op.from_jax.OpFromJax` is its own inner function.

Registered by :func:`pytensor.compile.jax_ofg.install`:
:func:`jax_funcify_OpFromJax` with PyTensor's ``jax_funcify``, and
:func:`install_jax_linker_check` (:class:`ForkCheckedFunction`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.watch import fresh_trace_context
from pytensor.compile._jax_ofg.errors import RaisedWhile, mark, report
from pytensor.compile._jax_ofg.host import fork_guard
from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops, wrapped_functions_in
from pytensor.compile._jax_ofg.op.from_jax import OpFromJax
from pytensor.compile._jax_ofg.op.transforms import (
    SharedPullbacks,
    VJPFunction,
    cast_cotangents,
    value_and_pullback,
)
from pytensor.graph.basic import Apply


__all__ = ["ForkCheckedFunction", "install_jax_linker_check", "jax_funcify_OpFromJax"]


def _lowering(op: OpFromJax, node: Apply | None, pairs: SharedPullbacks | None):
    """Return the traced function of ``node``: alone, or a part of a shared VJP."""
    if pairs is None or node is None:
        return op.traced_fn
    if node in pairs.coverage:  # a forward: keep the pullback
        wrt, covered = pairs.coverage[node]

        def forward_and_pullback(*primals):
            outputs, pullback = value_and_pullback(op.traced_fn, wrt, covered, primals)
            pairs.put(node, outputs, pullback)
            return outputs

        return forward_and_pullback
    forward = pairs.forward_of.get(node)
    if forward is None:
        return op.traced_fn
    vjp_fn: VJPFunction = op.fn
    wrt, covered = pairs.coverage[forward]

    def pullback_of_forward(*args):
        shared = pairs.get(forward)
        if shared is None:  # not traced with its forward: on its own
            return op.traced_fn(*args)
        outputs, pullback = shared
        given = dict(
            zip(
                vjp_fn.cotangent_outputs,
                cast_cotangents(args[len(wrt) :], vjp_fn.cotangent_dtypes),
            )
        )
        cotangents = tuple(
            given[k] if k in given else jnp.zeros_like(outputs[k]) for k in covered
        )
        gradients = iter(pullback(cotangents))
        by_input = [next(gradients) if w else None for w in wrt]
        return tuple(g for g, w in zip(by_input, vjp_fn.wrt) if w)

    return pullback_of_forward


def jax_funcify_OpFromJax(
    op: OpFromJax, node=None, jax_ofg_pullbacks: SharedPullbacks | None = None, **kwargs
):
    """Return the traced function of an ``OpFromJax`` node (see the module docstring)."""
    traced_fn = _lowering(op, node, jax_ofg_pullbacks)
    single_output = len(op.output_types) == 1

    def opfromjax(*inputs):
        try:
            # The user's function runs anew at every trace, nested jitted
            # helpers included: what they read when traced is read now.
            with fresh_trace_context():
                outputs = traced_fn(*inputs)
        except Exception as error:
            mark(
                error,
                RaisedWhile.TRACING_WRAPPED_FUNCTION,
                f"Raised while JAX traced the function in {op}.{op.error_hint()}",
            )
            raise
        return outputs[0] if single_output else outputs

    return opfromjax


# --------------------------------------------------------------------------
# The JAX linker: no host call, so its compiled function checks
# --------------------------------------------------------------------------


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


def install_jax_linker_check() -> bool:
    """Make ``JAXLinker.jit_compile`` check graphs holding JAX ops after a fork.

    Graphs without them get PyTensor's function unchanged. Returns whether the
    check is installed (``False`` when PyTensor's linker has moved).
    """
    from pytensor.link.jax.linker import JAXLinker

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
