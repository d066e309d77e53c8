"""The jitted program of a host-called op, traced once across processes.

:class:`Program` asks the trace cache before JAX traces: a hit calls the
exported program; a miss traces, exports, stores and calls the export. It
runs on the device the flag ``jax_ofg__host_device`` names (the CPU unless
the user says otherwise: :func:`host_device`); on the CPU, a thread pinned to
a core runs it on that core's runtime (:mod:`~pytensor.compile._jax_ofg.host.cores`).
Registers nothing itself (the flag is declared in ``flags``). The how-to,
"Run on an accelerator".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.flags import HOST_DEVICE
from pytensor.compile._jax_ofg.host import cores
from pytensor.compile._jax_ofg.host.checks import (
    NotFlaggable,
    flag_checks,
    holds_host_callbacks,
    is_failed_check,
    raise_if_failed,
)
from pytensor.compile._jax_ofg.host.packing import DtypePacking


__all__ = [
    "Program",
    "host_device",
    "host_device_name",
    "runs_on_default_cpu",
    "static_value",
]


def host_device() -> jax.Device | None:
    """Return the device host calls run their programs on; None: JAX's default.

    From the flag ``jax_ofg__host_device``, read when a program is made
    (when a function is compiled).
    """
    value = host_device_name()
    if value == "default":
        return None
    platform, _, index = value.partition(":")
    try:
        devices = jax.devices(platform)
    except RuntimeError as error:
        platforms = sorted({d.platform for d in jax.devices()} | {"cpu"})
        raise ValueError(
            f"jax_ofg__host_device={value!r}: JAX has no {platform!r} device here "
            f"({error}). Set it to 'cpu', 'default' or a platform JAX has "
            f"({', '.join(platforms)}), with an optional ':index'"
        ) from None
    if not index:
        return devices[0]
    if not index.isdigit() or int(index) >= len(devices):
        raise ValueError(
            f"jax_ofg__host_device={value!r}: JAX has {len(devices)} {platform} "
            f"device(s), numbered 0 to {len(devices) - 1}"
        )
    return devices[int(index)]


def runs_on_default_cpu(device: jax.Device | None = ...) -> bool:
    """Return whether host programs run on JAX's default device, a CPU.

    Of ``device`` (by default, the one the flag ``jax_ofg__host_device``
    names: :func:`host_device`). Only such programs run on a core's runtime
    from a thread pinned to it (:mod:`~pytensor.compile._jax_ofg.host.cores`).
    """
    if device is ...:
        device = host_device()
    default = _default_device()
    return (device is None or device == default) and default.platform == "cpu"


def host_device_name() -> str:
    """Return the flag's value, as a key: programs differ by device."""
    return HOST_DEVICE.value


def static_value(x: Any) -> int | tuple[int, ...]:
    """Return a static input as ``jax.jit`` takes it: a Python integer, or a tuple of
    them.

    >>> static_value(np.array(3)), static_value(np.array([2, 5]))
    (3, (2, 5))
    """
    if np.ndim(x) == 0:
        return int(x)
    return tuple(int(v) for v in np.ravel(x))


@dataclasses.dataclass(frozen=True)
class Exported:
    """A program on disk: serialized StableHLO, and what its trace found."""

    serialized: bytes
    output_shapes: tuple[tuple[int, ...], ...]
    #: whether its last output is the flag of equinox's checks
    flagged: bool


@dataclasses.dataclass(frozen=True)
class NotExportable:
    """In place of a program that cannot be exported, and why."""

    reason: str


_LOCATION = re.compile(r"\s*loc\([^()]*(\([^()]*\)[^()]*)*\)")


def _module_text(entry: Exported | NotExportable) -> str:
    """Return the program without source locations (they follow line numbers), for
    ``verify``.
    """
    if isinstance(entry, NotExportable):
        return entry.reason
    text = jax.export.deserialize(bytearray(entry.serialized)).mlir_module()
    lines = (_LOCATION.sub("", line).rstrip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#loc"))


def _differs(cached: Any, fresh: Any) -> str | None:
    if type(cached) is not type(fresh):
        return f"cached {type(cached).__name__}, fresh {type(fresh).__name__}"
    if isinstance(cached, Exported) and cached.output_shapes != fresh.output_shapes:
        return f"output shapes {cached.output_shapes} and {fresh.output_shapes}"
    if _module_text(cached) != _module_text(fresh):
        return "the programs differ"
    return None


class Program:
    """One op's jitted program on host arrays, traced through the trace cache.

    Parameters
    ----------
    function
        The op's JAX function of its inputs, returning a tuple of outputs.
    packing
        How the outputs leave XLA (one buffer per dtype).
    static
        Positions of inputs passed as static Python integers (or tuples of
        them): lengths the XLA program needs as constants.
    key
        What the program depends on besides its input signature (the op),
        for the trace cache; None for a program the cache must not keep.
    name
        The op, for logs.
    """

    def __init__(
        self,
        function: Callable,
        packing: DtypePacking,
        static: Sequence[int],
        key: Any,
        name: str,
    ):
        self.static = tuple(static)
        self.key = key
        self.name = name
        #: where it runs (None: JAX's default device, wherever the inputs are)
        self.device = host_device()
        #: whether it runs on JAX's default CPU device, and so, from a thread
        #: pinned to a core, on that core's runtime instead
        self.on_default_cpu = runs_on_default_cpu(self.device)
        #: by input signature, whether the program runs on all of a pinned
        #: thread's cores (see _device_in)
        self._wide: dict[tuple, bool] = {}
        #: output shapes by input signature, from the traces that served them
        self.output_shapes: dict[tuple, tuple] = {}
        #: why a trace of this program was not kept (None: every one was)
        self.unproven: str | None = None
        #: > 0 while the trace cache traces the program (to export it)
        self._exporting = 0

        def recorded(*inputs):
            if self._exporting:  # the trace cache watches it
                outputs = function(*inputs)
            elif key is None:
                self.unproven = self.unproven or "its key cannot be described"
                outputs = function(*inputs)
            else:  # jit traces it: watched here, for reuse in this process
                outputs, refusal = trace_cache.proven_trace(
                    lambda: function(*inputs), key
                )
                self.unproven = self.unproven or refusal
            self.output_shapes[self.signature(inputs)] = tuple(
                tuple(o.shape) for o in outputs
            )
            return packing.pack(outputs)

        self._function = recorded
        self.raising = self._placed(jax.jit(recorded, static_argnums=self.static))
        self._serving = (
            self._placed(jax.jit(self._traced_or_loaded, static_argnums=self.static))
            if key is not None and trace_cache.mode() != "off"
            else self.raising
        )
        self._first_call_passed: bool | None = None

    def _placed(self, jitted: Callable) -> Callable:
        """Return ``jitted`` run on :attr:`device`: as it is on JAX's default device.

        Elsewhere, under ``jax.default_device``: host inputs are uncommitted,
        so the program runs where that says. (Input and output shardings would
        do the same but annotate the program, and XLA then refuses equinox's
        checks, host callbacks inside ``cond``, for inconsistent shardings.)
        """
        device = self.device
        if device is None or device == _default_device():
            return jitted

        def on_device(*inputs: Any) -> Any:
            with jax.default_device(device):
                return jitted(*inputs)

        return on_device

    def signature(self, inputs: Sequence[Any]) -> tuple:
        """Return what the program's trace depends on: input shapes, static input
        values.
        """
        return (
            tuple(tuple(getattr(x, "shape", None) or jnp.shape(x)) for x in inputs),
            tuple(static_value(inputs[i]) for i in self.static),
        )

    def is_current(self) -> bool:
        """Return whether it may serve a later compile: every trace it made was kept by
        the trace cache (what the others depended on was not seen).
        """
        return self.unproven is None

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """Return the packed output buffers for host ``inputs``, as (read-only) NumPy
        arrays.
        """
        if self.static:
            inputs = tuple(
                static_value(x) if i in self.static else x for i, x in enumerate(inputs)
            )
        share = cores.thread_share() if self.on_default_cpu else None
        try:
            if share is None or share.wide is None:  # a pinned thread: its home
                buffers = [np.asarray(b) for b in self._serving(*inputs)]
            else:
                with jax.default_device(self._device_in(share, inputs)):
                    buffers = [np.asarray(b) for b in self._serving(*inputs)]
        except Exception as error:
            if not is_failed_check(error):
                raise
            if self._first_call_passed is None:
                self._first_call_passed = False
            # The original program raises the user's error.
            return self._raise(inputs)
        if self._first_call_passed is None:
            self._first_call_passed = True
        return buffers

    def _device_in(self, share: cores.Share, inputs: Sequence[Any]) -> jax.Device:
        """Return the device of ``share`` (with several cores) that runs the program
        on ``inputs``: the home core's, or all of the share's cores' for a program
        big enough to use them
        (:data:`~pytensor.compile._jax_ofg.host.cores.WIDE_FLOPS`).

        How big is XLA's cost analysis of the program, lowered once per
        signature.
        """
        signature = self.signature(inputs)
        wide = self._wide.get(signature)
        if wide is None:
            costs = self._serving.lower(*inputs).cost_analysis() or {}
            wide = self._wide[signature] = costs.get("flops", 0) >= cores.WIDE_FLOPS
        return share.wide.device if wide else share.home.device

    def _raise(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Run the original program on ``inputs``, which fail one of its checks.

        JAX raises a callback's error as ``JaxRuntimeError``, except from a
        jitted function whose first call passed: its C++ fast path raises a
        ``ValueError`` with the same message. Without the cache, the first
        call would have passed as this program's did.
        """
        try:
            return [np.asarray(b) for b in self.raising(*inputs)]
        except jax.errors.JaxRuntimeError as error:
            if not self._first_call_passed:
                raise
            raise ValueError(str(error)) from None

    def shapes_for(self, inputs: Sequence[Any]) -> tuple:
        """Return the output shapes for ``inputs`` (traced at their first call)."""
        key = self.signature(inputs)
        if key not in self.output_shapes:  # the trace is watched: see __init__
            jax.eval_shape(*self._of_dynamic(inputs))
        return self.output_shapes[key]

    def _of_dynamic(self, inputs: Sequence[Any]) -> tuple[Callable, list]:
        """Return the program as a function of ``inputs``' dynamic ones (the static ones
        fixed), and those dynamic inputs.
        """

        def function(*dynamic):
            values = iter(dynamic)
            return self._function(
                *(
                    static_value(x) if i in self.static else next(values)
                    for i, x in enumerate(inputs)
                )
            )

        return function, [x for i, x in enumerate(inputs) if i not in self.static]

    # ------------------------------------------------------------- the trace
    def _traced_or_loaded(self, *inputs: Any) -> Any:
        """Traced by JAX once per signature: the exported program, or the raising one.

        A flagged export's flag is checked here, in the program
        (:func:`raise_if_failed`), not by the caller.
        """
        if jax.config.jax_disable_jit:  # eager: other shapes than traced
            return self.raising(*inputs)
        dynamic = [x for i, x in enumerate(inputs) if i not in self.static]
        statics = [inputs[i] for i in self.static]
        try:
            avals = [(tuple(x.shape), np.dtype(x.dtype).name) for x in dynamic]
        except (AttributeError, TypeError):  # not arrays: JAX says what is wrong
            return self.raising(*inputs)
        specs = [
            x if i in self.static else jax.ShapeDtypeStruct(x.shape, x.dtype)
            for i, x in enumerate(inputs)
        ]
        with trace_cache.unproven_traces() as unproven:
            entry = trace_cache.cached(
                "program",
                (self.key, avals, statics, self._platform()),
                lambda: self._export(specs),
                name=self.name,
                differs=_differs,
            )
        self.unproven = self.unproven or (unproven[0] if unproven else None)
        if isinstance(entry, NotExportable):
            trace_cache.uncached(self.name, "program", entry.reason)
            return self.raising(*inputs)
        try:
            exported = jax.export.deserialize(bytearray(entry.serialized))
            outputs = exported.call(*dynamic)
        except Exception:  # damaged, or from a JAX that cannot read it
            return self.raising(*inputs)
        self.output_shapes[self.signature(inputs)] = entry.output_shapes
        if entry.flagged:
            *outputs, failed = outputs
            return raise_if_failed(outputs, failed)
        return outputs

    def _platform(self) -> str:
        """Return the platform the program is lowered for (exports are per platform)."""
        return (self.device or _default_device()).platform

    def _export(self, specs: Sequence[Any]) -> Exported | NotExportable:
        function, dynamic_specs = self._of_dynamic(specs)
        self._exporting += 1
        try:
            jaxpr = jax.make_jaxpr(function)(*dynamic_specs)
        finally:
            self._exporting -= 1
        output_shapes = self.output_shapes[self.signature(specs)]
        flagged = False
        program = jax.extend.core.jaxpr_as_fun(jaxpr)
        try:
            if holds_host_callbacks(jaxpr):
                flagged, checked = True, flag_checks(jaxpr)

                def program(*dynamic):
                    outputs, failed = checked(*dynamic)
                    return (*outputs, failed)

            exported = jax.export.export(
                jax.jit(program), platforms=[self._platform()]
            )(*dynamic_specs)
            serialized = bytes(exported.serialize())
        except NotFlaggable as error:
            return NotExportable(f"it holds {error}, which jax.export cannot keep")
        except Exception as error:  # another refusal, or no flatbuffers
            return NotExportable(f"jax.export refused it: {type(error).__name__}")
        return Exported(serialized, output_shapes, flagged)


def _default_device() -> jax.Device:
    """Return JAX's default device (its flag ``jax_default_device``, else the first)."""
    device = jax.config.jax_default_device or jax.devices()[0]
    if isinstance(device, str):  # JAX's flag may name a platform
        device = jax.devices(device)[0]
    return device
