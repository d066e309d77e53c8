"""Where an error raised by JAX code of this package came from.

An error passing through one of this package's ops gets a note naming the op
(what the user reads) and a marker saying at which stage it was raised (what
code decides on). A JAX island falls back to PyTensor only for an error raised
while JAX traced *its own lowering*: never for a wrapped function's error, an
XLA runtime error or a bad input (see
:meth:`~pytensor.compile.jax_ofg_island_op.JaxIsland.host_function`).

Registers nothing.
"""

from __future__ import annotations

import contextlib
import enum


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
    """The stage :func:`mark` recorded on ``error``, if any."""
    return getattr(error, _MARK, None)
