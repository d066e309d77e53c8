"""Equinox's raising checks as a flag: programs that :mod:`jax.export` can keep.

:func:`flag_checks` rewrites a traced jaxpr so that each ``eqx.error_if``
callback sets a boolean instead of raising; any other host callback raises
:class:`NotFlaggable`. :func:`raise_if_failed` checks such a flag inside the
program that calls the export, as equinox checks: :func:`is_failed_check`
tells its error. Registers nothing.

Notes
-----
Only equinox's raising checks become flags; a program holding any other host
callback is not exported (:class:`NotFlaggable`), so it is traced in every
process, and so is one whose check sits in a ``while`` loop's condition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jax_core

from pytensor.compile._jax_ofg import compat


__all__ = [
    "NotFlaggable",
    "flag_checks",
    "holds_host_callbacks",
    "is_failed_check",
    "raise_if_failed",
]


class NotFlaggable(Exception):
    """A traced program holds a host callback other than equinox's checks."""


#: The message :func:`raise_if_failed` raises with, which :func:`is_failed_check` finds.
FAILED_CHECK = "[pytensor-jax-ofg] an equinox check failed (in a flagged program)"


def _is_callback(equation: Any) -> bool:
    return "callback" in equation.primitive.name or equation.primitive.name in (
        "debug_print",
    )


def _jaxprs_in(params: dict) -> Iterator[Any]:
    # Tuple subclasses too: custom_linear_solve keeps its jaxprs in a namedtuple.
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jax_core.Jaxpr):
                yield item


class _Rewriter:
    """One rewrite of a jaxpr: which parts hold callbacks, and how to run them."""

    def __init__(self):
        self._holds: dict[int, tuple[Any, bool]] = {}
        self._finalised: dict[int, tuple[Any, Any]] = {}

    # ------------------------------------------------------------ inspection
    def holds(self, jaxpr: Any) -> bool:
        found = self._holds.get(id(jaxpr))
        if found is None:
            answer = any(self.equation_holds(e) for e in jaxpr.eqns)
            found = self._holds[id(jaxpr)] = (jaxpr, answer)
        return found[1]

    def equation_holds(self, equation: Any) -> bool:
        if _is_callback(equation):
            return True
        if any(self.holds(j) for j in _jaxprs_in(equation.params)):
            return True
        finalised = self.finalised(equation)
        return finalised is not None and self.holds(finalised)

    def finalised(self, equation: Any) -> Any:
        """Return the jaxpr of an equinox custom primitive's implementation, else None."""
        rule = compat.equinox_implementation(equation.primitive)
        if rule is None:
            return None
        found = self._finalised.get(id(equation))
        if found is None:
            avals = [v.aval for v in equation.invars]
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
            params = equation.params
            jaxpr = jax.make_jaxpr(lambda *args: rule(*args, **params))(*specs)
            found = self._finalised[id(equation)] = (equation, jaxpr)
        return found[1]

    # --------------------------------------------------------------- running
    def run(self, jaxpr: Any, *args: Any) -> tuple[list, Any]:
        """Evaluate ``jaxpr`` (under a trace); returns its outputs and flag (or None)."""
        env: dict = {}

        def read(var: Any) -> Any:
            return var.val if isinstance(var, jax_core.Literal) else env[var]

        env.update(zip(jaxpr.constvars, jaxpr.consts))
        env.update(zip(jaxpr.invars, args))
        flag = None
        for equation in jaxpr.eqns:
            inputs = [read(v) for v in equation.invars]
            if self.equation_holds(equation):
                outputs, failed = self.rewritten(equation, inputs)
                flag = _either(flag, failed)
            else:
                params = equation.primitive.get_bind_params(equation.params)
                with compat.equation_context(equation):
                    outputs = equation.primitive.bind(*inputs, **params)
                if not equation.primitive.multiple_results:
                    outputs = [outputs]
            for var, value in zip(equation.outvars, outputs):
                if not isinstance(var, jax_core.DropVar):
                    env[var] = value
        return [read(v) for v in jaxpr.outvars], flag

    def flagged(self, jaxpr: Any) -> Callable[..., tuple[list, Any]]:
        def run(*args):
            outputs, flag = self.run(jaxpr, *args)
            return outputs, _false() if flag is None else flag

        return run

    def rewritten(self, equation: Any, inputs: list) -> tuple[list, Any]:
        name, params = equation.primitive.name, equation.params
        if (
            name == "pure_callback"
            and compat.equinox_check(params.get("callback")) is not None
        ):
            avals = params["result_avals"]
            if (
                compat.equinox_check(params.get("callback")) == "tpu_msg"
            ):  # passes its operands on
                return list(inputs[: len(avals)]), None
            return [jnp.zeros(a.shape, a.dtype) for a in avals], jnp.ones((), bool)
        if _is_callback(equation):
            function = getattr(params.get("callback"), "callback_func", None)
            what = getattr(function, "__qualname__", None) or name
            raise NotFlaggable(f"a host callback ({name} of {what})")
        if name == "cond":
            branches, index, operands = compat.cond_parts(params, inputs)
            return lax.switch(index, [self.flagged(b) for b in branches], *operands)
        if name == "while":
            return self._while(params, inputs)
        if name == "scan":
            return self._scan(params, inputs)
        if name == "custom_linear_solve":
            solve, arguments = compat.linear_solve_parts(params, inputs)
            return self.run(solve, *arguments)
        # Calls, and custom derivatives (a traced program is not differentiated
        # again): what they call.
        for key in ("jaxpr", "call_jaxpr"):
            if isinstance(params.get(key), jax_core.Jaxpr):
                return self.run(params[key], *inputs)
        finalised = self.finalised(equation)
        if finalised is not None:
            return self.run(finalised, *inputs)
        raise NotFlaggable(f"a host callback inside {name}")

    def _while(self, params: dict, inputs: list) -> tuple[list, Any]:
        loop = compat.while_parts(params, inputs)
        if self.holds(loop.cond_jaxpr):
            raise NotFlaggable("a host callback in a while loop's condition")

        def cond(state):
            condition = jax_core.jaxpr_as_fun(loop.cond_jaxpr)
            return condition(*loop.cond_consts, *state[0])[0]

        def body(state):
            outputs, flag = self.run(loop.body_jaxpr, *loop.body_consts, *state[0])
            return outputs, _either(state[1], flag)

        return lax.while_loop(cond, body, (list(loop.carry), _false()))

    def _scan(self, params: dict, inputs: list) -> tuple[list, Any]:
        scan = compat.scan_parts(params, inputs)
        n_carry = len(scan.carry)

        def body(state, x):
            outputs, flag = self.run(scan.jaxpr, *scan.consts, *state[0], *x)
            return (outputs[:n_carry], _either(state[1], flag)), outputs[n_carry:]

        (carry, flag), ys = lax.scan(
            body,
            (list(scan.carry), _false()),
            list(scan.xs),
            length=scan.length,
            reverse=scan.reverse,
            unroll=scan.unroll,
        )
        return [*carry, *ys], flag


def _false() -> Any:
    return jnp.zeros((), bool)


def _either(flag: Any, other: Any) -> Any:
    if flag is None:
        return other
    return flag if other is None else flag | other


def holds_host_callbacks(jaxpr: Any) -> bool:
    """Return whether a (closed) jaxpr calls back into Python, which :mod:`jax.export`
    refuses.

    ``jax.pure_callback``, ``io_callback``, ``jax.debug.callback`` and
    ``jax.debug.print``; equinox's runtime checks are pure callbacks.

    >>> def checked(x):
    ...     jax.debug.print("x = {}", x)
    ...     return 2 * x
    >>> holds_host_callbacks(jax.make_jaxpr(checked)(1.0))
    True
    >>> holds_host_callbacks(jax.make_jaxpr(jnp.sin)(1.0))
    False
    """
    return _Rewriter().holds(jaxpr)


def flag_checks(jaxpr: Any) -> Callable[..., tuple[Sequence, Any]]:
    """Return the program of ``jaxpr`` with equinox's raising checks reporting a flag.

    Returns a function of the jaxpr's inputs returning ``(outputs, failed)``,
    ``failed`` a boolean scalar: whether a check's error branch was taken
    (the original program would have raised). Tracing it raises
    :class:`NotFlaggable` when the program holds another host callback.

    >>> import equinox as eqx
    >>> def positive(x):
    ...     return eqx.error_if(x, x <= 0, "x must be positive")
    >>> flagged = flag_checks(jax.make_jaxpr(positive)(1.0))
    >>> [bool(jax.jit(flagged)(x)[1]) for x in (1.0, -1.0)]
    [False, True]
    """
    return _Rewriter().flagged(jaxpr)


def _raises(*_: Any) -> None:
    raise RuntimeError(FAILED_CHECK)


def raise_if_failed(outputs: Sequence[Any], failed: Any) -> tuple:
    """Return ``outputs``, passed through a check of a flagged program's ``failed``.

    As equinox checks (``lax.cond`` whose error branch is a
    ``jax.pure_callback`` that raises, the outputs threaded through it so it
    is kept): the program that calls a flagged export keeps a host callback
    like the original, so JAX's CPU runtime runs it as the original, on the
    calling thread; a program without host callbacks is run on another thread,
    which costs a call of a small solve up to a third more. Nothing leaves the
    program per call to be checked in Python. The error JAX raises when a
    check failed says :data:`FAILED_CHECK` (:func:`is_failed_check`).

    >>> import equinox as eqx
    >>> def positive(x):
    ...     return eqx.error_if(x, x <= 0, "x must be positive")
    >>> flagged = flag_checks(jax.make_jaxpr(positive)(1.0))
    >>> checked = jax.jit(lambda x: raise_if_failed(*flagged(x)))
    >>> [float(x) for x in checked(2.0)]
    [2.0]
    >>> try:
    ...     jax.block_until_ready(checked(-1.0))
    ... except Exception as error:
    ...     is_failed_check(error)
    True
    """
    outputs = tuple(outputs)

    def check(values: tuple) -> tuple:
        return jax.pure_callback(_raises, values, *values)

    return lax.cond(failed, check, lambda values: values, outputs)


def is_failed_check(error: BaseException) -> bool:
    """Return whether ``error`` was raised by the check of :func:`raise_if_failed`."""
    return FAILED_CHECK in str(error)
