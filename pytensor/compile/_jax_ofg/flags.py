"""Every PyTensor flag of this package, in one table: name, doc, default, when it is read.

As JAX's ``config.py`` keeps its options, each ``jax_ofg__*`` flag is one
:class:`Flag` below, and :data:`FLAGS` lists them all. :func:`declare` adds
them to PyTensor's ``config`` (``install()`` runs it first, so a value set in
``PYTENSOR_FLAGS`` or ``.pytensorrc`` applies); nothing else in the package
calls ``config.add``. A flag is read through its :attr:`Flag.value`, in one
place of the package, at the moment its :attr:`Flag.read` names. The docs'
tables of flags ("What importing the package changes", the API page) are
generated from this table (the ``jax-ofg-flags`` directive).

Examples
--------
>>> XLA_CACHE.name, XLA_CACHE.default, XLA_CACHE.read
('jax_ofg__xla_cache', True, 'when the package is imported')
>>> len({flag.name for flag in FLAGS}) == len(FLAGS)
True
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

from pytensor import config
from pytensor.configparser import BoolParam, ConfigParam, IntParam


__all__ = [
    "AT_COMPILE",
    "AT_IMPORT",
    "AT_LOOKUP",
    "AT_LOWERING",
    "AT_SAMPLE",
    "AT_SAMPLER_START",
    "FLAGS",
    "MOMENTS",
    "Flag",
    "declare",
]

# ------------------------------------------------------- when flags are read
AT_IMPORT = "when the package is imported"
AT_COMPILE = "when a function is compiled"
AT_LOWERING = "when JAX lowers a program for the CPU"
AT_LOOKUP = "at import and at every trace-cache lookup (while a function compiles)"
AT_SAMPLER_START = "when a sampler starts its chains (nutpie's threads)"
AT_SAMPLE = "when pm.sample chooses its default cores"
#: Every moment a flag is read at.
MOMENTS = (
    AT_IMPORT,
    AT_COMPILE,
    AT_LOWERING,
    AT_LOOKUP,
    AT_SAMPLER_START,
    AT_SAMPLE,
)


#: A flag's :attr:`Flag.undeclared` unless said: its default.
_DEFAULT: Any = object()


@dataclasses.dataclass(frozen=True)
class Flag:
    """One PyTensor flag ``jax_ofg__<name>``: what it is, and when it is read."""

    #: the flag's full name, ``jax_ofg__...``
    name: str
    #: what it does (PyTensor's help for it)
    doc: str
    #: its value unless the user sets one
    default: bool | int | str
    #: when the package reads it: one of :data:`MOMENTS`
    read: str
    #: what the package changes in the process that the flag turns off (for
    #: the docs' table "What importing the package changes"), or None: a setting
    change: str | None = None
    #: the value that turns the change off
    off: str | None = None
    #: what a value the user sets becomes (it raises for a bad one)
    apply: Callable[[Any], Any] | None = None
    #: whether a value is allowed
    validate: Callable[[Any], bool] | None = None
    #: part of every trace-cache key (it changes the programs JAX lowers)
    keyed: bool = False
    #: the value read before :func:`declare` added the flag (the package not
    #: installed in this process); the default unless said
    undeclared: Any = _DEFAULT

    @property
    def value(self) -> Any:
        """The flag's value now."""
        try:
            return getattr(config, self.name)
        except AttributeError:
            return self.default if self.undeclared is _DEFAULT else self.undeclared

    def param(self) -> ConfigParam:
        """The PyTensor parameter that holds the flag."""
        if isinstance(self.default, bool):
            return BoolParam(self.default)
        if isinstance(self.default, int):
            return IntParam(self.default, self.validate)
        return ConfigParam(self.default, apply=self.apply, validate=self.validate)


def declare() -> None:
    """Add every flag of :data:`FLAGS` to PyTensor's ``config`` (those not added yet)."""
    for flag in FLAGS:
        if not hasattr(config, flag.name):
            config.add(flag.name, flag.doc, flag.param(), in_c_key=False)


# ------------------------------------------------------------- value parsers
_TRACE_CACHE_MODES = types.MappingProxyType(
    {
        "on": "on",
        "true": "on",
        "1": "on",
        "off": "off",
        "false": "off",
        "0": "off",
        "verify": "verify",
    }
)


def _trace_cache_mode(value: Any) -> str:
    """``"on"``, ``"off"`` or ``"verify"`` from what a user may set (booleans too)."""
    mode = _TRACE_CACHE_MODES.get(str(value).strip().lower())
    if mode is None:
        raise ValueError(
            "jax_ofg__trace_cache must be 'on', 'off' or 'verify' (or True/False), "
            f"got {value!r}."
        )
    return mode


def _device_name(value: Any) -> str:
    return str(value).strip().lower()


# ----------------------------------------------------------------- the flags
#: The largest matrix (rows) lowered without LAPACK by default: the largest size
#: at which both unrolled algorithms beat LAPACK's calls, measured by
#: ``benchmarks/small_linalg.py`` (``benchmarks/results/small_linalg.md``: a
#: solve in a loop, LU 0.65x and Cholesky 0.53x LAPACK's time at 10 x 10; at
#: 12, Cholesky's unrolled n^3/6 scalar steps cost 3.1x and LU 0.85x).
SMALL_LINALG_DEFAULT = 10

SMALL_LINALG_MAX_SIZE = Flag(
    "jax_ofg__small_linalg_max_size",
    "Square matrices of at most this many rows are factorised and solved by "
    "unrolled XLA operations instead of LAPACK calls in every JAX program "
    "compiled for the CPU in this process (0: always LAPACK).",
    SMALL_LINALG_DEFAULT,
    AT_LOWERING,
    change="In every JAX program compiled for the CPU, LU, triangular solves and "
    f"Cholesky of matrices up to {SMALL_LINALG_DEFAULT} rows are a few XLA "
    "operations instead of LAPACK calls (faster stiff solvers: "
    ":doc:`/howto/stiff_models`).",
    off="0",
    validate=lambda n: n >= 0,
    keyed=True,
)
XLA_CACHE = Flag(
    "jax_ofg__xla_cache",
    "Cache the XLA programs of pytensor-jax-ofg's ops on disk, in "
    "compiledir/jax_ofg_xla, unless JAX's own cache directory is configured.",
    True,
    AT_IMPORT,
    change="JAX's persistent compilation cache goes to ``compiledir/jax_ofg_xla``, "
    "unless you configured JAX's cache yourself.",
    off="False",
)
XLA_CACHE_ATOMIC_WRITES = Flag(
    "jax_ofg__xla_cache_atomic_writes",
    "Make JAX's persistent compilation cache write each entry whole or not at "
    "all (a temporary file renamed into place).",
    True,
    AT_IMPORT,
    change="JAX's compilation cache writes each entry whole or not at all (a "
    "process killed mid-write leaves no broken entry).",
    off="False",
)
TRACE_CACHE = Flag(
    "jax_ofg__trace_cache",
    "Keep traces of pytensor-jax-ofg's wrapped functions (exported programs, "
    "output types) in memory and in compiledir/jax_ofg_traces, reused instead "
    "of tracing again: 'on', 'off', or 'verify' (trace anyway and check every "
    "hit). Off when the package is imported: no trace is kept in the process.",
    "on",
    AT_LOOKUP,
    change="Traces of wrapped functions are kept in memory and in "
    "``compiledir/jax_ofg_traces`` (:doc:`/howto/caches`); to check what a "
    "trace runs, the first one adds an audit hook and a :mod:`sys.monitoring` "
    "tool to the process; its programs are exported as ``jax.jit`` lowers them "
    "for this jaxlib (the first export wraps ``jax.export``'s serializer, which "
    "serializes anyone else's exports as before).",
    off="off",
    apply=_trace_cache_mode,
    undeclared="off",
)
DEFERRED_IMPORTS = Flag(
    "jax_ofg__deferred_imports",
    "Wait for PyTensor's JAX backend and Numba dispatch, PyMC's sampling modules "
    "and nutpie to be imported before registering with them (one finder on "
    "sys.meta_path), instead of importing them with this package.",
    True,
    AT_IMPORT,
    change="One import finder on :data:`sys.meta_path` waits for PyTensor's JAX "
    "backend and Numba dispatch, PyMC's samplers and nutpie, to register with "
    "them only once they are imported (off: they are imported with the package).",
    off="False",
)
FORK_GUARD = Flag(
    "jax_ofg__fork_guard",
    "Make a process forked after JAX started raise ForkedAfterJaxError at the "
    "first call of a wrapped function, instead of deadlocking in JAX.",
    True,
    AT_IMPORT,
    change="A process forked after JAX started raises "
    ":class:`~pytensor.compile.jax_ofg.ForkedAfterJaxError` at the first call "
    "of a wrapped function, instead of hanging (at-fork handlers).",
    off="False",
)
PYMC_START_METHOD = Flag(
    "jax_ofg__pymc_start_method",
    "Make pm.sample and pm.sample_smc start worker processes with forkserver "
    "(spawn where there is none), not fork, for models holding JAX ops when no "
    "mp_ctx is given.",
    True,
    AT_IMPORT,
    change="``pm.sample`` and ``pm.sample_smc`` start worker processes with "
    "``forkserver`` (``spawn`` where there is none) for models holding wrapped "
    "functions, when you pass no ``mp_ctx``.",
    off="False",
)
PYMC_DEFAULT_CORES = Flag(
    "jax_ofg__pymc_default_cores",
    "Make pm.sample's default `cores` the physical cores this process may use "
    "(capped by a CPU quota and the number of chains) for models holding JAX "
    "ops, instead of PyMC's cpu_count() // 2.",
    True,
    AT_SAMPLE,
    change="``pm.sample``'s default ``cores``, for models holding wrapped "
    "functions, is the number of physical cores this process may use (capped by "
    "a CPU quota and the number of chains), instead of PyMC's "
    "``cpu_count() // 2``.",
    off="False",
)
JAX_LINKER_CHECK = Flag(
    "jax_ofg__jax_linker_check",
    "Make functions compiled with mode='JAX' that hold wrapped JAX functions "
    "refuse to run in a process forked after JAX started, and name the wrapped "
    "functions in their errors.",
    True,
    AT_IMPORT,
    change='A function compiled with ``mode="JAX"`` that holds wrapped '
    "functions refuses to run in a forked process, and its errors name them.",
    off="False",
)
NUMBA_DIRECT_THUNK = Flag(
    "jax_ofg__numba_direct_thunk",
    "Run a graph that is one JAX op (a model's logp_dlogp, usually) from a "
    "Python thunk calling its XLA program, not from a Numba function entering "
    "object mode.",
    True,
    AT_IMPORT,
    change="A compiled function that is one JAX program (a model's log-density, "
    "usually) calls it directly, not through Numba's object mode.",
    off="False",
)
NUTPIE_HOST_CALLBACKS = Flag(
    "jax_ofg__nutpie_host_callbacks",
    "Make nutpie's Numba backend call a model holding JAX ops through host "
    "callbacks (its XLA program, called from C), not a numba.cfunc it compiles "
    "in every process.",
    True,
    AT_IMPORT,
    change="nutpie calls a model holding wrapped functions through their XLA "
    "programs, instead of compiling a ``numba.cfunc`` in every process.",
    off="False",
)
PIN_SAMPLER_THREADS = Flag(
    "jax_ofg__pin_sampler_threads",
    "Pin each of nutpie's chain threads to a CPU no other chain of this "
    "package holds (machine-wide) and run its programs on an XLA CPU runtime "
    "made there (synchronous, its thread pools on that CPU). Off, or where no "
    "CPU is free: chains call JAX's default CPU device from unpinned threads.",
    True,
    AT_SAMPLER_START,
    change="nutpie's chain threads, while they sample such a model, are each "
    "pinned to a CPU no other chain of this package holds (in any process of "
    "the machine: a lock file per CPU in the temporary directory), whose XLA "
    "CPU runtime (made once, its few threads on that CPU) runs their programs. "
    "Where no CPU is free a chain is left where the OS puts it. Python threads "
    "are never pinned.",
    off="False",
    undeclared=False,
)
CPU_LEASES = Flag(
    "jax_ofg__cpu_leases",
    "The folder of the machine-wide leases on CPUs that keep two chains of this "
    "package's processes off one CPU (a lock file per CPU); empty: "
    "'pytensor-jax-ofg-cpus' in the system's temporary directory. Only "
    "processes that share it agree.",
    "",
    AT_SAMPLER_START,
)
NUTPIE_DRAW_DIAG = Flag(
    "jax_ofg__nutpie_draw_diag",
    "Make nutpie adapt the mass matrix of a model holding JAX ops from the "
    "draws' variances (adaptation='draw_diag') unless told otherwise.",
    True,
    AT_IMPORT,
    change="nutpie adapts the mass matrix of such a model from the draws' "
    'variances (``adaptation="draw_diag"``, as Stan does) unless you choose '
    "one.",
    off="False",
)
MUTE_CALLBACK_LOGS = Flag(
    "jax_ofg__mute_callback_logs",
    "Drop JAX's log record of a failed callback when the error comes out of one "
    "of pytensor-jax-ofg's calls, whose error names the function.",
    True,
    AT_IMPORT,
    change="JAX's log of a failed callback is dropped when the error comes out "
    "of a wrapped function's call, whose error names the function.",
    off="False",
)
HOST_DEVICE = Flag(
    "jax_ofg__host_device",
    "The device that runs pytensor-jax-ofg's programs in host calls (every "
    "linker but JAX's: NumPy arrays in and out per call): 'cpu' (JAX's first "
    "CPU device), 'default' (JAX's default device, as under mode='JAX'), or a "
    "platform and an optional index, e.g. 'gpu', 'cuda:1', 'cpu:1'.",
    "cpu",
    AT_COMPILE,
    apply=_device_name,
)

#: Every flag of the package, in the order the docs list them.
FLAGS: tuple[Flag, ...] = (
    SMALL_LINALG_MAX_SIZE,
    XLA_CACHE,
    XLA_CACHE_ATOMIC_WRITES,
    TRACE_CACHE,
    DEFERRED_IMPORTS,
    FORK_GUARD,
    PYMC_START_METHOD,
    PYMC_DEFAULT_CORES,
    JAX_LINKER_CHECK,
    NUMBA_DIRECT_THUNK,
    NUTPIE_HOST_CALLBACKS,
    PIN_SAMPLER_THREADS,
    CPU_LEASES,
    NUTPIE_DRAW_DIAG,
    MUTE_CALLBACK_LOGS,
    HOST_DEVICE,
)
