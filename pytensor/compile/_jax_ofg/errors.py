"""Errors raised by JAX code of this package: where they came from, and saying so.

:func:`mark` notes an error's stage (which an island's fallback decides on);
:func:`report` names the op in run-time errors, warns once and counts.
Registers nothing (JAX's own log of a failed callback: ``hooks/callback_logs``).
"""

from __future__ import annotations

import contextlib
import enum
import re
import threading
import warnings
from collections.abc import Sequence

from pytensor.compile._jax_ofg import compat


class RaisedWhile(enum.Enum):
    """The stage an error was raised at, as marked by :func:`mark`."""

    #: JAX traced a wrapped function, which raised.
    TRACING_WRAPPED_FUNCTION = "tracing a wrapped function"
    #: JAX traced an island's lowering: a PyTensor node JAX cannot trace.
    TRACING_ISLAND = "tracing an island"


_MARK = "_jax_ofg_raised_while"


def add_note_once(error: BaseException, note: str) -> None:
    """Add ``note`` to ``error`` unless it has it (JAX re-raises cached errors)."""
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)


def mark(error: BaseException, stage: RaisedWhile, note: str) -> None:
    """Note ``note`` on ``error`` and mark its stage, unless an inner stage did.

    The innermost mark wins: an error of a wrapped function traced inside an
    island stays the function's error.

    >>> error = ValueError("bad")
    >>> mark(error, RaisedWhile.TRACING_WRAPPED_FUNCTION, "Raised in f.")
    >>> mark(error, RaisedWhile.TRACING_ISLAND, "Raised in an island.")
    >>> raised_while(error), error.__notes__
    (<RaisedWhile.TRACING_WRAPPED_FUNCTION: 'tracing a wrapped function'>, ['Raised in f.', 'Raised in an island.'])
    """
    add_note_once(error, note)
    if raised_while(error) is None:
        # An exception type without a __dict__ cannot carry the mark.
        with contextlib.suppress(AttributeError):
            setattr(error, _MARK, stage)


def raised_while(error: BaseException) -> RaisedWhile | None:
    """Return the stage :func:`mark` recorded on ``error``, if any."""
    return getattr(error, _MARK, None)


# ------------------------------------------------------------ run-time errors
class WrappedFunctionRuntimeWarning(UserWarning):
    """A wrapped JAX function raised while its program ran (shown once per op).

    A caller may turn the error into a rejection (nutpie does: a divergence),
    so the sampler would never say so; this warning does, for the first error
    of each op in a process. :func:`runtime_error_counts` counts them all.
    """


#: Appended to the message of every error raised while an op's program runs.
ADVICE = (
    "If such inputs should simply be rejected by the sampler (a solve that "
    "fails for extreme parameters), make the function return NaN instead of "
    "raising: diffrax.diffeqsolve(..., throw=False) (or a larger `max_steps`), "
    "EQX_ON_ERROR=nan for equinox checks. An exception stops PyMC's sampler; "
    "nutpie turns it into a rejected proposal (a divergence), so the posterior "
    "silently excludes the region where the function raises."
)

_PREFIX = "[pytensor-jax-ofg] "
_COUNTS: dict[str, int] = {}
_COUNTS_LOCK = threading.Lock()


def runtime_error_counts() -> dict[str, int]:
    """Return how many calls of each op (or ``mode="JAX"`` program) raised in this
    process.

    Keys are the ops as printed (``JaxIsland{shift, vjp(shift), +15 PyTensor
    nodes}``). A sampler that turns errors into rejections (nutpie) shows
    them nowhere else.
    """
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def report(
    error: BaseException, what: str, functions: Sequence[str], hint: str = ""
) -> None:
    """Name ``what`` ran (the wrapped ``functions``) in ``error``'s message; count it.

    Called where an error leaves an op's program (never on the fast path).
    The message itself says it, not only a note: PyMC's worker errors and
    PyTensor's ``exception_verbosity`` keep only ``str(error)``. The type is
    kept (JAX raises ``ValueError`` or ``JaxRuntimeError`` depending on its
    dispatch path). The first error of each op in a process also gives a
    :class:`WrappedFunctionRuntimeWarning`. An error of the island's own
    tracing (which makes it fall back to PyTensor) is left alone.

    ``hint`` (a sentence with a leading space) says more about the op, e.g.
    the lengths its types were traced at. Never raises: under nutpie an
    error here would be swallowed with the original one.
    """
    if raised_while(error) is RaisedWhile.TRACING_ISLAND:
        return
    try:
        if getattr(error, _REPORTED, False):
            return  # an inner op named itself already
        setattr(error, _REPORTED, True)
        with _COUNTS_LOCK:
            count = _COUNTS[what] = _COUNTS.get(what, 0) + 1
        core = core_message(str(error)).rstrip(".")
        names = ", ".join(functions)
        line = f"{_PREFIX}{what} raised (wrapped: {names}): {core}.{hint} {ADVICE}"
        _put_in_message(error, line)
        if count == 1:
            warnings.warn(
                f"{what} raised {type(error).__name__}: {core}. If the caller "
                "catches it (nutpie rejects the proposal), nothing else shows "
                "it; later errors of it in this process are only counted: "
                "pytensor.compile.jax_ofg.runtime_error_counts(). " + ADVICE,
                WrappedFunctionRuntimeWarning,
                stacklevel=2,
            )
    except Exception:  # e.g. a warnings filter "error"; the count remains
        pass


_REPORTED = "_jax_ofg_reported"


def _put_in_message(error: BaseException, line: str) -> None:
    """Put ``line`` at the start of ``error``'s message, in place."""
    if error.args and isinstance(error.args[0], str):
        error.args = (f"{line}\n\n{error.args[0]}", *error.args[1:])
    if line not in str(error):
        compat.prepend_to_runtime_error(error, line)
    if line not in str(error):
        add_note_once(error, line)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning)\b.*?: (.+)$")


def core_message(text: str) -> str:
    """What an error says, without JAX's callback wrapping.

    A callback's error (equinox's checks, diffrax's ``throw=True``) comes as
    ``INTERNAL: CpuCallback error calling callback: Traceback ...`` followed
    by the traceback and equinox's advice; the line that matters is the
    exception's own.

    >>> core_message("INTERNAL: CpuCallback error calling callback: Traceback "
    ...     "(most recent call last):\\n  File ...\\n_EquinoxRuntimeError: "
    ...     "solver blew up\\n\\n----\\nAn error occurred")
    'solver blew up'
    >>> core_message("x must be positive\\nmore")
    'x must be positive'
    """
    lines = text.strip().splitlines() or [""]
    if "Traceback (most recent call last)" in text:
        for line in reversed(lines):
            match = _EXCEPTION_LINE.match(line)
            if match:
                return match[1].strip()
    return lines[0].strip()
