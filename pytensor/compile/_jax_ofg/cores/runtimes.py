"""XLA CPU runtimes made on a few cores, and programs compiled for them.

JAX's CPU client runs a program on thread pools of its own: it hands the
whole call to one (asynchronous dispatch), and XLA's executor hands ready
operations of the program to another (the intra-op pool), both sized to the
cores the process may use. A small program's call is then a chain of
hand-offs between threads; when two sampler threads call at once, their
hand-offs meet in the same pools, cross cores, and the pools' idle threads
spin on the core the other chain needs. A :class:`Runtime` is a client made
by a thread pinned to its cores, so that its pools are sized to them and
their threads stay there; it runs each call on the calling thread
(synchronous dispatch), as a process pinned to one core does.

Each runtime is a client of its own, and XLA compiles for a client. A
:class:`CompiledPerRuntime` compiles a program for one runtime at a time: the
first compile writes JAX's persistent compilation cache, and the others
read it back in a fraction of the time. (Serializing the compiled program
into the other clients directly, with ``jax.experimental.serialize_executable``,
is refused for some programs and, for others, loads kernels that fail at
run time: JAX 0.12.) XLA compiles without the GIL: work handed to
:func:`beside_next_compile` runs then, on a thread of its own. Registers
nothing.

Examples
--------
>>> import jax, numpy as np
>>> runtime = runtime_on((sorted(os.sched_getaffinity(0))[-1],))
>>> def double(x):
...     return (2.0 * x,)
>>> spec = jax.ShapeDtypeStruct((3,), np.float64)
>>> program = CompiledPerRuntime(jax.jit(double), [spec])
>>> [float(v) for v in program.on(runtime)(np.ones(3))[0]]
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from pytensor.compile._jax_ofg import compat


__all__ = ["CompiledPerRuntime", "Runtime", "beside_next_compile", "runtime_on"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class Runtime:
    """An XLA CPU client made on some cores: those cores, and its one device."""

    cores: tuple[int, ...]
    device: jax.Device


_RUNTIMES: dict[tuple[int, ...], Runtime] = {}
_LOCK = threading.Lock()


def runtime_on(cores: tuple[int, ...]) -> Runtime:
    """Return the runtime made on ``cores``, once per process.

    The client is made with this thread pinned to ``cores``: XLA sizes its
    pools to the cores the creating thread may use, and their threads
    inherit its pin. The calling thread's affinity is restored.
    """
    with _LOCK:
        runtime = _RUNTIMES.get(cores)
        if runtime is None:
            with _on_cores(cores):
                client = compat.make_cpu_client(asynchronous=False)
            (device,) = client.local_devices()
            runtime = _RUNTIMES[cores] = Runtime(cores, device)
            _log.debug("Made an XLA CPU runtime on cores %s", cores)
        return runtime


@contextlib.contextmanager
def _on_cores(cores: tuple[int, ...]) -> Iterator[None]:
    """Run the block with this thread pinned to ``cores``; its affinity is restored."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


class CompiledPerRuntime:
    """A jitted function compiled for each :class:`Runtime` that runs it, once.

    One compile at a time: JAX's persistent compilation cache (the package
    turns it on: ``patches/xla_cache``) then serves every runtime but the
    first with the program the first compiled.
    """

    def __init__(self, jitted: Callable, specs: Sequence[Any]):
        self._jitted = jitted
        self._specs = list(specs)
        self._compiled: dict[Runtime, Callable] = {}
        self._lock = threading.Lock()

    def on(self, runtime: Runtime) -> Callable:
        """Return the function compiled for ``runtime`` (compiled at the first call)."""
        compiled = self._compiled.get(runtime)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(runtime)
                if compiled is None:
                    with jax.default_device(runtime.device):
                        lowered = self._jitted.lower(*self._specs)
                        with _work_beside():
                            compiled = lowered.compile()
                    self._compiled[runtime] = compiled
        return compiled


#: Python work waiting for the next XLA compile (the newest few: a process
#: whose programs are all compiled never runs them, and keeps no more).
_WAITING: collections.deque[Callable[[], Any]] = collections.deque(maxlen=4)


def beside_next_compile(work: Callable[[], Any]) -> None:
    """Run ``work`` on a thread of its own while a runtime next compiles a program.

    For work a sampler's thread would otherwise do later while holding the
    GIL (Numba compiling the function that turns a point into a draw, at its
    first call): beside XLA's compile, which holds no GIL, it costs no wall
    time. It runs on every CPU of the process, not the compiling thread's
    core; an exception is logged (debug) and dropped -- the sampler's own
    call then does the work, as it would have. Work that meets no compile
    never runs.
    """
    _WAITING.append(work)


@contextlib.contextmanager
def _work_beside() -> Iterator[None]:
    """Start the waiting work on a thread of its own for the block."""
    work = []
    while _WAITING:
        try:
            work.append(_WAITING.popleft())
        except IndexError:  # another thread took it
            break
    if work:
        threading.Thread(
            target=_run_unpinned, args=(work,), name="jax_ofg-beside-compile"
        ).start()
    yield


def _run_unpinned(work: list[Callable[[], Any]]) -> None:
    # A thread inherits its creator's affinity: the compiling thread's core.
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, os.sched_getaffinity(os.getpid()))
    for item in work:
        try:
            item()
        except Exception:
            _log.debug("Work beside an XLA compile raised", exc_info=True)
