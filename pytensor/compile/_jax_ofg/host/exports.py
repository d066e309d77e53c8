"""A host program as the trace cache keeps it: exported StableHLO, or why not.

:func:`export_jaxpr` turns a traced program into an :class:`Exported` entry
(``jax.export``'s serialized form, lowered as ``jax.jit`` lowers for this
jaxlib: :mod:`~pytensor.compile._jax_ofg.hooks.export_serializer`; equinox's
checks as a flag output: :mod:`~pytensor.compile._jax_ofg.host.checks`), or a
:class:`NotExportable` saying why it cannot be kept; :func:`entries_differ`
compares a cached entry with a fresh trace for the cache's ``verify`` mode.
Registers nothing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import jax

from pytensor.compile._jax_ofg.hooks.export_serializer import for_this_jaxlib
from pytensor.compile._jax_ofg.host.checks import (
    NotFlaggable,
    flag_checks,
    holds_host_callbacks,
)


__all__ = ["Exported", "NotExportable", "entries_differ", "export_jaxpr"]


@dataclasses.dataclass(frozen=True)
class Exported:
    """A program on disk: serialized StableHLO, and what its trace found."""

    serialized: bytes
    output_shapes: tuple[tuple[int, ...], ...]
    #: whether its last output is the flag of equinox's checks
    flagged: bool

    def program(self) -> jax.export.Exported:
        """Return the program, ready to call (``Exported.call``)."""
        return jax.export.deserialize(bytearray(self.serialized))


@dataclasses.dataclass(frozen=True)
class NotExportable:
    """In place of a program that cannot be exported, and why."""

    reason: str


def export_jaxpr(
    jaxpr: Any,
    dynamic_specs: Sequence[Any],
    output_shapes: tuple[tuple[int, ...], ...],
    platform: str,
) -> Exported | NotExportable:
    """Export the program ``jaxpr`` (a closed jaxpr of the dynamic inputs) for
    ``platform``; equinox's checks become its last output, a flag.
    """
    flagged = False
    program = jax.extend.core.jaxpr_as_fun(jaxpr)
    try:
        if holds_host_callbacks(jaxpr):
            flagged, checked = True, flag_checks(jaxpr)

            def program(*dynamic):
                outputs, failed = checked(*dynamic)
                return (*outputs, failed)

        with for_this_jaxlib():  # read back by this jaxlib only: see the key
            exported = jax.export.export(jax.jit(program), platforms=[platform])(
                *dynamic_specs
            )
        serialized = bytes(exported.serialize())
    except NotFlaggable as error:
        return NotExportable(f"it holds {error}, which jax.export cannot keep")
    except Exception as error:  # another refusal, or no flatbuffers
        return NotExportable(f"jax.export refused it: {type(error).__name__}")
    return Exported(serialized, output_shapes, flagged)


_LOCATION = re.compile(r"\s*loc\([^()]*(\([^()]*\)[^()]*)*\)")


def _module_text(entry: Exported | NotExportable) -> str:
    """Return the program without source locations (they follow line numbers)."""
    if isinstance(entry, NotExportable):
        return entry.reason
    text = entry.program().mlir_module()
    lines = (_LOCATION.sub("", line).rstrip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#loc"))


def entries_differ(cached: Any, fresh: Any) -> str | None:
    """Return how a cached entry differs from a fresh trace's, or None (``verify``)."""
    if type(cached) is not type(fresh):
        return f"cached {type(cached).__name__}, fresh {type(fresh).__name__}"
    if isinstance(cached, Exported) and cached.output_shapes != fresh.output_shapes:
        return f"output shapes {cached.output_shapes} and {fresh.output_shapes}"
    if _module_text(cached) != _module_text(fresh):
        return "the programs differ"
    return None
