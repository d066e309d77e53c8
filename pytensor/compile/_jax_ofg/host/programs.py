"""The jitted program of a host-called op, traced once across processes.

A :class:`Program` asks the trace cache before JAX traces: a hit calls the
exported program; a miss traces, exports, stores and calls the export
(:mod:`~pytensor.compile._jax_ofg.host.exports`). It runs on the device the
flag ``jax_ofg__host_device`` names (:mod:`~pytensor.compile._jax_ofg.host.placement`).
Its jobs, one class each:

* :class:`Program` routes a call: from a sampler thread pinned to a core,
  to that core's runtime (:class:`CoreRoute`); from any other thread,
  through ``jax.jit`` on the program's device;
* :class:`CoreRoute` compiles the program for each core's runtime, one at a
  time, so that JAX's persistent compilation cache serves all but the first
  (:class:`~pytensor.compile._jax_ofg.cores.api.CompiledPerRuntime`);
* :class:`OriginalProgram` runs the program as traced, equinox's checks and
  all, when a check fails, so that the user sees the error JAX would raise.

Registers nothing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.cores import api as cores
from pytensor.compile._jax_ofg.host.checks import is_failed_check, raise_if_failed
from pytensor.compile._jax_ofg.host.exports import (
    Exported,
    NotExportable,
    entries_differ,
    export_jaxpr,
)
from pytensor.compile._jax_ofg.host.packing import DtypePacking
from pytensor.compile._jax_ofg.host.placement import (
    default_device,
    host_device,
    on_device,
    runs_on_cpu,
)


__all__ = ["WIDE_FLOPS", "CoreRoute", "OriginalProgram", "Program", "static_value"]

#: A program whose operations add up to this many floating-point operations
#: (XLA's cost analysis: a loop's body counted once) runs on all of its
#: thread's cores, where it has more than one: a 500 x 500 matrix product is
#: 2.5e8; an ODE solve's step, a few thousand.
WIDE_FLOPS = 1e7


def static_value(x: Any) -> int | tuple[int, ...]:
    """Return a static input as ``jax.jit`` takes it: a Python integer, or a tuple of
    them.

    >>> static_value(np.array(3)), static_value(np.array([2, 5]))
    (3, (2, 5))
    """
    if np.ndim(x) == 0:
        return int(x)
    return tuple(int(v) for v in np.ravel(x))


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
        #: whether it runs on a CPU, and so on a pinned thread's core runtime
        self.on_cpu = runs_on_cpu(self.device)
        #: output shapes by input signature, from the traces that served them
        self.output_shapes: dict[tuple, tuple] = {}
        #: why a trace of this program was not kept by the trace cache (None:
        #: every one was)
        self.not_kept: str | None = None
        #: > 0 while the trace cache traces the program (to export it)
        self._exporting = 0

        def recorded(*inputs):
            if self._exporting:  # the trace cache watches it
                outputs = function(*inputs)
            elif key is None:
                self.not_kept = self.not_kept or "its key cannot be described"
                outputs = function(*inputs)
            else:  # jit traces it: watched here, for reuse in this process
                outputs, refusal = trace_cache.proven_trace(
                    lambda: function(*inputs), key
                )
                self.not_kept = self.not_kept or refusal
            self.output_shapes[self.signature(inputs)] = tuple(
                tuple(o.shape) for o in outputs
            )
            return packing.pack(outputs)

        self._function = recorded
        self.cached = key is not None and trace_cache.mode() != "off"
        self.original = OriginalProgram(
            jax.jit(recorded, static_argnums=self.static), self.device
        )
        #: the program on host arrays, traced through the trace cache (the
        #: original where the cache does not keep it)
        self.through_trace_cache = (
            on_device(
                jax.jit(self._traced_or_loaded, static_argnums=self.static),
                self.device,
            )
            if self.cached
            else self.original.raising
        )
        self.core_route = CoreRoute(self)

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
        return self.not_kept is None

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """Return the packed output buffers for host ``inputs``, as (read-only) NumPy
        arrays.
        """
        if self.static:
            inputs = tuple(
                static_value(x) if i in self.static else x for i, x in enumerate(inputs)
            )
        pin = cores.thread_pin() if self.on_cpu else None
        if pin is not None and pin.runtime is not None:
            buffers = self.core_route(pin, inputs)
            if buffers is not None:
                return buffers
        try:
            buffers = [np.asarray(b) for b in self.through_trace_cache(*inputs)]
        except Exception as error:
            if not is_failed_check(error):
                raise
            # The original program raises the user's error.
            return self.original.raise_for(inputs)
        self.original.passed()
        return buffers

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
    def cached_entry(self, inputs: Sequence[Any]) -> Exported | NotExportable | None:
        """Return the trace cache's entry for ``inputs`` (arrays or tracers): the
        exported program, why it cannot be kept, or None where the cache does
        not keep this program (no key, the cache off, or not arrays).
        """
        if not self.cached:
            return None
        dynamic = [x for i, x in enumerate(inputs) if i not in self.static]
        statics = [inputs[i] for i in self.static]
        try:
            avals = [(tuple(x.shape), np.dtype(x.dtype).name) for x in dynamic]
        except (AttributeError, TypeError):  # not arrays: JAX says what is wrong
            return None
        specs = [
            x if i in self.static else jax.ShapeDtypeStruct(x.shape, x.dtype)
            for i, x in enumerate(inputs)
        ]
        with trace_cache.unproven_traces() as unkept:
            entry = trace_cache.cached(
                "program",
                (self.key, avals, statics, self._platform()),
                lambda: self._export(specs),
                name=self.name,
                differs=entries_differ,
            )
        self.not_kept = self.not_kept or (unkept[0] if unkept else None)
        if isinstance(entry, NotExportable):
            trace_cache.uncached(self.name, "program", entry.reason)
        elif isinstance(entry, Exported):
            self.output_shapes[self.signature(inputs)] = entry.output_shapes
        return entry

    def _traced_or_loaded(self, *inputs: Any) -> Any:
        """Traced by JAX once per signature: the exported program, or the raising one.

        A flagged export's flag is checked here, in the program
        (:func:`raise_if_failed`), not by the caller.
        """
        if jax.config.jax_disable_jit:  # eager: other shapes than traced
            return self.original.raising(*inputs)
        entry = self.cached_entry(inputs)
        if not isinstance(entry, Exported):
            return self.original.raising(*inputs)
        dynamic = [x for i, x in enumerate(inputs) if i not in self.static]
        try:
            outputs = entry.program().call(*dynamic)
        except Exception:  # damaged, or from a JAX that cannot read it
            return self.original.raising(*inputs)
        if entry.flagged:
            *outputs, failed = outputs
            return raise_if_failed(outputs, failed)
        return outputs

    def _platform(self) -> str:
        """Return the platform the program is lowered for (exports are per platform)."""
        return (self.device or default_device()).platform

    def _export(self, specs: Sequence[Any]) -> Exported | NotExportable:
        function, dynamic_specs = self._of_dynamic(specs)
        self._exporting += 1
        try:
            jaxpr = jax.make_jaxpr(function)(*dynamic_specs)
        finally:
            self._exporting -= 1
        output_shapes = self.output_shapes[self.signature(specs)]
        return export_jaxpr(jaxpr, dynamic_specs, output_shapes, self._platform())


class OriginalProgram:
    """The program as traced, equinox's checks raising: what runs when one fails.

    ``raising`` is the jitted original on the program's device. JAX raises a
    callback's error as ``JaxRuntimeError``, except from a jitted function
    whose first call passed: its C++ fast path raises a ``ValueError`` with
    the same message. Without the cache, the first call would have passed as
    the cached program's did: :meth:`raise_for` raises what it would have.
    """

    def __init__(self, jitted: Callable, device: jax.Device | None):
        self.jitted = jitted
        self.raising = on_device(jitted, device)
        #: whether the program's first call passed its checks (None: no call yet)
        self.first_call_passed: bool | None = None

    def passed(self) -> None:
        """Note a call that passed its checks."""
        if self.first_call_passed is None:
            self.first_call_passed = True

    def raise_for(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Run the original program on ``inputs``, which fail one of its checks."""
        if self.first_call_passed is None:
            self.first_call_passed = False
        try:
            return [np.asarray(b) for b in self.raising(*inputs)]
        except jax.errors.JaxRuntimeError as error:
            if not self.first_call_passed:
                raise
            raise ValueError(str(error)) from None


_MISSING = object()


class CoreRoute:
    """A program's calls from sampler threads pinned to cores.

    Each core's runtime is a client of its own, which compiles its own
    programs: one at a time, so that JAX's persistent compilation cache
    serves all but the first
    (:class:`~pytensor.compile._jax_ofg.cores.api.CompiledPerRuntime`). The
    program compiled is the trace cache's export, equinox's checks as a flag
    output read here: a host callback would keep JAX from caching it. A
    thread whose share has several cores runs a program of
    :data:`WIDE_FLOPS` or more on all of them. Where the trace cache does not
    keep the program, the original (callbacks and all) is compiled for each
    core's runtime. Any failure to prepare a route leaves those calls on the
    default route, with one warning.
    """

    def __init__(self, program: Program):
        self._program = program
        #: by (the pin's runtime, share, input shapes, static values): the
        #: executable, the dynamic inputs' positions and whether it is flagged
        self._calls: dict[tuple, tuple[Callable, list[int] | None, bool] | None] = {}
        #: by signature: the program, whether flagged, whether big
        self._executables: dict[tuple, tuple[cores.CompiledPerRuntime, bool, bool]] = {}
        self._lock = threading.Lock()

    def __call__(self, pin: cores.ThreadPin, inputs: tuple) -> list[np.ndarray] | None:
        """Return the packed buffers, or None to take the default route."""
        program = self._program
        key = (pin.runtime, pin.share, tuple([getattr(x, "shape", x) for x in inputs]))
        found = self._calls.get(key, _MISSING)
        if found is _MISSING:
            found = self._calls[key] = self._prepare(pin, inputs)
        if found is None:
            return None
        run, dynamic, flagged = found
        outputs = (
            run(*inputs) if dynamic is None else run(*[inputs[i] for i in dynamic])
        )
        if flagged:
            *outputs, failed = outputs
            if np.asarray(failed):
                return program.original.raise_for(inputs)
        program.original.passed()
        return [np.asarray(b) for b in outputs]

    def _prepare(self, pin: cores.ThreadPin, inputs: tuple) -> tuple | None:
        program = self._program
        if jax.config.jax_disable_jit:
            return None
        try:
            executable, flagged, big = self._executable(pin.runtime, inputs)
            on_share = pin.runtime_on_share() if big else None
            run = executable.on(on_share or pin.runtime)
        except Exception as error:
            _warn_once(program.name, error)
            return None
        dynamic = [i for i in range(len(inputs)) if i not in program.static]
        return run, (dynamic if program.static else None), flagged

    def _executable(
        self, runtime: cores.Runtime, inputs: tuple
    ) -> tuple[cores.CompiledPerRuntime, bool, bool]:
        program = self._program
        signature = program.signature(inputs)
        with self._lock:
            found = self._executables.get(signature)
            if found is None:
                jitted, specs, flagged = self._jitted(inputs)
                executable = cores.CompiledPerRuntime(jitted, specs)
                costs = executable.on(runtime).cost_analysis() or {}
                if isinstance(costs, list):  # older JAX: one per program
                    costs = costs[0] if costs else {}
                big = costs.get("flops", 0) >= WIDE_FLOPS
                found = self._executables[signature] = (executable, flagged, big)
        return found

    def _jitted(self, inputs: tuple) -> tuple[Callable, list, bool]:
        """Return the function to compile, its arguments' specs, whether flagged."""
        program = self._program
        entry = program.cached_entry(inputs)
        if isinstance(entry, Exported):
            exported = entry.program()
            specs = [
                jax.ShapeDtypeStruct(np.shape(x), x.dtype)
                for i, x in enumerate(inputs)
                if i not in program.static
            ]

            def program_on_core(*dynamic):  # XLA's name for it: jit_program_on_core
                return exported.call(*dynamic)

            return jax.jit(program_on_core), specs, entry.flagged
        specs = [
            x if i in program.static else jax.ShapeDtypeStruct(np.shape(x), x.dtype)
            for i, x in enumerate(inputs)
        ]
        return program.original.jitted, specs, False


_warned: list[str] = []


def _warn_once(name: str, error: Exception) -> None:
    if _warned:
        return
    _warned.append(name)
    warnings.warn(
        f"pytensor-jax-ofg could not run {name} on a sampler thread's own core "
        f"({type(error).__name__}: {error}); those calls run on JAX's CPU device "
        "instead, with the same results.",
        RuntimeWarning,
        stacklevel=3,
    )
