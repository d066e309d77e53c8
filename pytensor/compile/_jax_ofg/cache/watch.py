"""What a trace runs, checked against what its cache key describes: the allowlist.

A trace may be kept by the trace cache only if everything it ran is described
by its key. :func:`watching` watches a trace (Python code starting, calls of C
functions, audit events, in the tracing thread) and notes the first thing it
sees that the key cannot vouch for; :func:`paused` marks the cache's own work
(computing keys, reading and writing entries) as no part of the trace.
Registers nothing when imported: the first watched trace adds the watch's
process-wide hooks (``hooks/audit_hook``, ``hooks/monitoring_tool``); with
``jax_ofg__trace_cache=off`` no trace is watched.

What is allowed:

* Python code of JAX, jaxlib and this project: JAX's tracing machinery and
  ours, pinned by the versions and sources in every key. Whatever it calls
  is allowed (JAX's compilation cache reads files, its monitoring reads the
  clock; none of it changes a traced program).
* Python code of libraries pinned by the installed environment, and of the
  standard library: their code is pinned; what they call is checked as below.
* Python code of the user only where the key described it (``covered``: the
  code objects the fingerprint followed). Other user code -- a lowering
  registered for an op, a module imported while tracing -- is refused.
* C functions that compute from their arguments only (:data:`PURE_MODULES`:
  builtins, ``math``, ``itertools``, NumPy's array functions, jaxlib...).
* Memoised calls (``functools.cache`` wrappers), ``id``, ``hash``, ``exec``
  and frame introspection, except when user code makes them: a memo's
  contents are no part of any key.
* Anything else -- files and folders, the OS, the clock, random state,
  threads and locks, sockets, other C extensions -- only when JAX's or this
  project's code is the caller (the nearest caller outside the standard
  library), or a pair in :data:`TRUSTED_CALLS`.

JAX's own reuse of traces (``jax.jit``'s tracing cache, the jaxprs of
control flow) would hide what a helper did when it was first traced: a
watched trace runs under a fresh :func:`jax.make_user_context` value, so
JAX traces every jitted helper again, under the watch.

Notes
-----
What the watch cannot see, so that a key does not describe it either:

* a C callable passed by keyword to another C function (``sys.monitoring``
  sees the outer C call, not what it calls back);
* the iteration order of a set of strings, which hash randomization changes
  from process to process;
* state a library keeps in C, changed by earlier calls outside the trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import itertools
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

import jax

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.code_origin import import_kind, module_kind
from pytensor.compile._jax_ofg.cache.environment import UNKEYED_FLAGS
from pytensor.compile._jax_ofg.cache.storage import STATE
from pytensor.compile._jax_ofg.hooks import audit_hook, monitoring_tool


__all__ = [
    "PURE_MODULES",
    "TRUSTED_CALLS",
    "TraceWatch",
    "fresh_trace_context",
    "paused",
    "watching",
]

_monitoring = sys.monitoring
_EVENTS = _monitoring.events
_DISABLE = _monitoring.DISABLE
_get_ident = threading.get_ident

#: Modules whose C functions and types compute from their arguments only.
#: A name ending in "." covers its sub-modules too.
PURE_MODULES = frozenset(
    {
        "builtins",
        "math",
        "cmath",
        "_operator",
        "operator",
        "itertools",
        "_functools",
        "functools",
        "_collections",
        "collections",
        "_abc",
        "abc",
        "_weakref",
        "weakref",
        "_weakrefset",
        "_contextvars",
        "contextvars",
        "_struct",
        "_sre",
        "re",
        "_string",
        "_bisect",
        "_heapq",
        "_typing",
        "typing",
        "types",
        "_warnings",
        "warnings",
        "_codecs",
        "_stat",
        "_hashlib",
        "_sha2",
        "_blake2",
        "binascii",
        "_json",
        "enum",
        "numpy",
        "numpy.",
        "ml_dtypes",
        "ml_dtypes.",
        "jax.",
        "jaxlib.",
    }
)

#: In those modules, what is not pure after all: (module, qualified name).
_IMPURE_IN_PURE = frozenset(
    {
        ("builtins", "open"),
        ("builtins", "input"),
        ("builtins", "breakpoint"),
        ("builtins", "help"),
        ("numpy", "fromfile"),
        ("numpy", "ndarray.tofile"),
        ("numpy", "ndarray.dump"),
        ("functools", "_lru_cache_wrapper"),
    }
)

#: Pure C functions of otherwise impure modules.
_PURE_IN_IMPURE = frozenset(
    {
        ("posix", "fspath"),
        ("posix", "_path_normpath"),
        ("_io", "BytesIO"),
        ("_io", "StringIO"),
        ("_thread", "get_ident"),
        ("_thread", "get_native_id"),
        ("_thread", "allocate_lock"),
        ("_thread", "RLock"),
        ("_thread", "_local"),
        ("sys", "getrecursionlimit"),
        ("sys", "intern"),
        ("sys", "exc_info"),
        ("sys", "exception"),
        ("sys", "is_finalizing"),
        ("sys", "getsizeof"),
        ("sys", "getrefcount"),
        ("sys", "getdefaultencoding"),
        ("sys", "getfilesystemencoding"),
        ("sys", "getfilesystemencodeerrors"),
        ("sys", "get_int_max_str_digits"),
        ("sys", "audit"),
    }
)

#: Pure methods of the in-memory streams.
_PURE_OWNERS = frozenset({("_io", "BytesIO"), ("_io", "StringIO")})

#: Calls that answer from state no key holds -- a memo's contents, object
#: addresses, string hashes (they differ between processes), code run from
#: text, the caller's frames -- allowed unless user code makes them.
_OWN_STATE = frozenset(
    {
        ("functools", "_lru_cache_wrapper"),
        ("builtins", "id"),
        ("builtins", "hash"),
        ("builtins", "exec"),
        ("builtins", "eval"),
        ("builtins", "compile"),
        ("builtins", "__import__"),
        ("builtins", "globals"),
        ("builtins", "locals"),
        ("builtins", "vars"),
        ("sys", "_getframe"),
        ("sys", "_getframemodulename"),
    }
)

#: Impure calls that pinned libraries make while tracing, and that change no
#: traced program: (module, function, the C function called or "*" for any).
TRUSTED_CALLS = frozenset(
    {
        # a marker on the stack for equinox's traceback filtering
        ("equinox._jit", "_call", "posix.urandom"),
        # a check's message holds the stack where it was made, source lines
        # included (read from files): it stays in Python, not in the program
        ("equinox._errors", "branched_error_if_impl", "*"),
        # PyTensor's JAX lowering writes the source it generates to a file
        # (for tracebacks): a write, the code compiled is the string's
        ("pytensor.link.utils", "write_generated_src", "*"),
        # PyTensor notes where a variable was made (source lines read from
        # files, for tracebacks)
        ("pytensor.graph.utils", "simple_extract_stack", "posix.stat"),
    }
)


#: Modules whose reads of the clock only time their own work (profiling):
#: PyTensor times its rewrites, feature callbacks and compiles.
TIMING_MODULES = ("pytensor.compile.", "pytensor.graph.")
_TIMERS = frozenset({"time.perf_counter", "time.time"})


#: Builtins that call what they are given (checked like a call of it).
_HIGHER_ORDER = frozenset(
    {
        ("builtins", "map"),
        ("builtins", "filter"),
        ("functools", "partial"),
        ("_functools", "reduce"),
        ("itertools", "starmap"),
        ("collections", "defaultdict"),
    }
)

#: Audit events of pure work (the tracing machinery raises them all the time).
_PURE_EVENTS = frozenset(
    {
        "builtins.id",
        "object.__getattr__",
        "object.__setattr__",
        "object.__delattr__",
        "code.__new__",
        "function.__new__",
        "exec",
        "compile",
        "import",
        "marshal.loads",
        "marshal.dumps",
    }
    # frames looked up (traceback filtering), and events raised from Python
    | {f"sys.{name}" for name in ("_getframe", "_getframemodulename", "audit")}
)

#: The functions of the ``os`` module that only compute (the rest read the
#: environment or the system).
_PURE_OS_FUNCTIONS = frozenset(
    {"fsencode", "fsdecode", "_fscodec", "encode", "decode", "__subclasshook__"}
)

_FRESH_TRACES = jax.make_user_context(None)
_TRACE_NUMBERS = itertools.count(1)


# --------------------------------------------------------------------- state
@dataclasses.dataclass
class TraceWatch:
    """One watched trace: what its key covers, and why it cannot be kept."""

    #: the user code objects the key describes
    covered: tuple[types.CodeType, ...]
    #: their ids: code is told apart by identity (equal code of other globals
    #: is not described)
    covered_ids: frozenset[int] = frozenset()
    #: why the trace may not be kept (the first refusal), or None
    refusal: str | None = None


@dataclasses.dataclass
class _ThreadState:
    watches: list[TraceWatch]
    #: > 0 while the cache's own work (or this module's) runs: nothing is checked
    paused: int = 0
    #: the frames of the imports under way: only user code is checked
    imports: list[int] = dataclasses.field(default_factory=list)
    #: whether a garbage collection (which pauses the watch) is under way
    collecting: bool = False

    @property
    def quiet(self) -> bool:
        """Whether calls and audit events are left unchecked now."""
        return bool(self.paused or self.imports) or not self.watches


# The watch's state is the cache's (``STATE``): the watching threads' states
# by thread id (``threads``, read by every callback); the monitoring tool id
# (``tool_id``); the non-JAX code objects seen, by id, whose CALL events are on
# while anything is watched (``instrumented``). By identity, as everything
# here: code objects that are equal (``==``: a notebook cell run again) are
# other objects, with their own events. The callbacks, which run for every
# event of a watched trace, take its containers as defaults: locals.
#: Guards ``STATE.threads`` and the start and stop of monitoring.
_LOCK = threading.Lock()


def _refuse(state: _ThreadState, reason: str) -> None:
    for watch in state.watches:
        if watch.refusal is None:
            watch.refusal = reason


@contextlib.contextmanager
def watching(covered: Iterable[types.CodeType]) -> Iterator[TraceWatch]:
    """Watch the trace run in this block; the watch's ``refusal`` says why it
    may not be kept (None: everything it ran is covered).

    Watches nest: a refusal inside refuses the enclosing watches too (their
    traces depend on it).

    >>> user_module = {"__name__": "__main__"}
    >>> exec("def double(x):\\n    return 2 * x", user_module)
    >>> double = user_module["double"]
    >>> with watching([double.__code__]) as watch:
    ...     _ = double(1.0)
    >>> watch.refusal is None
    True
    >>> exec("import time\\ndef stamped(x):\\n    return x + time.time()", user_module)
    >>> stamped = user_module["stamped"]
    >>> with watching([stamped.__code__]) as watch:
    ...     _ = stamped(1.0)
    >>> watch.refusal
    'it called time.time (from __main__.stamped)'
    >>> with watching([]) as watch:
    ...     _ = double(1.0)
    >>> watch.refusal
    'it ran __main__.double, code its key does not describe'
    """
    covered = tuple(covered)
    watch = TraceWatch(covered, frozenset(map(id, covered)))
    ident = _get_ident()
    with _LOCK:
        first = not STATE.threads
        state = STATE.threads.setdefault(ident, _ThreadState([]))
        state.watches.append(watch)
        try:
            started = not first or _start_monitoring()
        except BaseException:
            _end_watch(state, ident)
            raise
    if not started:
        watch.refusal = "sys.monitoring has no free tool id (3 and 4 are taken)"
    try:
        with fresh_trace_context():
            yield watch
    finally:
        with _LOCK:
            _end_watch(state, ident)


def _end_watch(state: _ThreadState, ident: int) -> None:
    state.watches.pop()
    if not state.watches and not state.paused:
        STATE.threads.pop(ident, None)
    if not STATE.threads:
        _stop_monitoring()


def fresh_trace_context() -> Any:
    """Return a context in which JAX reuses no trace made before (``jax.jit``'s tracing
    cache, the jaxprs of control flow): the user's Python runs again.

    A jitted helper that reads a file when it is traced gives the file's
    content now, not when JAX first traced it.
    """
    return _FRESH_TRACES(next(_TRACE_NUMBERS))


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause the watch: what runs in this block is no part of a watched trace (the
    cache's own work).
    """
    state = STATE.threads.get(_get_ident())
    if state is None:
        yield
        return
    state.paused += 1
    try:
        yield
    finally:
        state.paused -= 1


def _start_monitoring() -> bool:
    if STATE.tool_id is None:
        # The process-wide hooks, added the first time a trace is watched.
        audit_hook.install(_on_audit)
        STATE.tool_id = monitoring_tool.claim(
            "pytensor-jax-ofg trace cache",
            {
                _EVENTS.PY_START: _on_start,
                _EVENTS.CALL: _on_call,
                _EVENTS.PY_RETURN: _on_import_end,
                _EVENTS.PY_UNWIND: _on_import_end,
            },
        )
        if STATE.tool_id is None:
            return False
    tool_id = STATE.tool_id
    _monitoring.set_events(tool_id, _EVENTS.PY_START | _EVENTS.PY_UNWIND)
    for code in tuple(STATE.instrumented.values()):  # other threads may add to it
        _monitoring.set_local_events(tool_id, code, _local_events(code))
    _bracket_gc_callbacks()
    return True


def _stop_monitoring() -> None:
    tool_id = STATE.tool_id
    if tool_id is None:
        return
    _monitoring.set_events(tool_id, 0)
    for callback in (_pause_for_gc, _resume_after_gc):
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    for code in tuple(STATE.instrumented.values()):
        _monitoring.set_local_events(tool_id, code, 0)


# A collection runs wherever an allocation triggers it: its callbacks
# (hypothesis times every collection) and the finalizers it runs are no part
# of the trace that happened to allocate. Ours come first and last, so that
# every other callback runs paused.
def _bracket_gc_callbacks() -> None:
    for callback in (_pause_for_gc, _resume_after_gc):
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    gc.callbacks.insert(0, _pause_for_gc)
    gc.callbacks.append(_resume_after_gc)


def _pause_for_gc(phase: str, info: dict, _threads: dict = STATE.threads) -> None:
    state = _threads.get(_get_ident())
    if phase == "start" and state is not None:
        state.paused += 1
        state.collecting = True


def _resume_after_gc(phase: str, info: dict, _threads: dict = STATE.threads) -> None:
    state = _threads.get(_get_ident())
    if phase == "stop" and state is not None and state.collecting:
        state.collecting = False
        state.paused -= 1


def _local_events(code: types.CodeType) -> int:
    if code is _FIND_AND_LOAD:
        return _EVENTS.PY_RETURN  # and PY_UNWIND, which is only global
    return _EVENTS.CALL


def _instrument(code: types.CodeType) -> None:
    STATE.instrumented[id(code)] = code
    _monitoring.set_local_events(STATE.tool_id, code, _local_events(code))


# ------------------------------------------------------------ Python code
_SKIP, _CHECKED, _USER, _ENVIRONMENT, _FLAG, _IMPORT = range(6)


def _verdict_of(
    code: types.CodeType, _verdicts: dict = STATE.code_verdicts
) -> int | None:
    """The verdict on a code object seen (``STATE.code_verdicts``), or None."""
    entry = _verdicts.get(id(code))
    return None if entry is None else entry[1]


#: The import machinery's entry: what an import runs is not the trace's.
_FIND_AND_LOAD = compat.import_entry_code()
#: Where every PyTensor flag is read.
_CONFIG_GET = compat.flag_getter_code()


def _module_of(frame: types.FrameType | None) -> str | None:
    """Return the module a frame's code belongs to.

    Code that a library generates with ``exec`` may run in globals without a
    ``__name__``: equinox's pytree functions of module classes (their file
    names start with ``<generated_``) belong to equinox.
    """
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    if name is None and frame.f_code.co_filename.startswith(
        compat.EQUINOX_GENERATED_FILES
    ):
        return "equinox._module._flatten"
    return name


def _is_tracing_machinery(module: str | None) -> bool:
    """JAX's code or this project's: allowed to do anything while tracing."""
    kind = module_kind(module)[0]
    return kind == "project" or (
        kind == "library" and (module or "").partition(".")[0] in ("jax", "jaxlib")
    )


def _code_verdict(code: types.CodeType, frame: types.FrameType) -> int:
    if code is _FIND_AND_LOAD:
        return _IMPORT
    if code is _CONFIG_GET:
        return _FLAG
    module = _module_of(frame)
    if _is_tracing_machinery(module):
        return _SKIP
    if code.co_filename == "<string>" and (module or "").startswith("namedtuple_"):
        return _CHECKED  # collections.namedtuple's generated __new__
    kind = module_kind(module)[0]
    if kind == "user":
        return _USER
    if module == "os" and code.co_name not in _PURE_OS_FUNCTIONS:
        return _ENVIRONMENT
    return _CHECKED


def _on_start(
    code: types.CodeType,
    offset: int,
    _verdicts: dict = STATE.code_verdicts,
    _threads: dict = STATE.threads,
) -> Any:
    entry = _verdicts.get(id(code))
    verdict = None if entry is None else entry[1]
    if verdict is None:
        with _quietly():
            verdict = _code_verdict(code, compat.caller_frame(1))
            _verdicts[id(code)] = (code, verdict)
            if verdict != _SKIP:
                _instrument(code)
    if verdict in (_SKIP, _CHECKED):
        return _DISABLE
    state = _threads.get(_get_ident())
    if state is None or state.paused or not state.watches:
        return None
    frame = compat.caller_frame(1)
    if verdict == _IMPORT:
        if not state.imports:
            name = frame.f_locals.get("name")
            with _quietly():
                kind = import_kind(name)
            if kind == "user":
                _refuse(state, f"it imported {name}, code its key does not describe")
        state.imports.append(id(frame))
    elif state.imports:
        pass  # what an import runs is the module's, not the trace's
    elif verdict == _USER:
        if id(code) not in state.watches[-1].covered_ids:
            _refuse(
                state,
                f"it ran {_module_of(frame)}.{code.co_qualname}, code its key "
                "does not describe",
            )
    elif verdict == _ENVIRONMENT:
        with _quietly():
            _check_caller(state, frame.f_back, f"os.{code.co_qualname}")
    elif verdict == _FLAG:
        name = getattr(frame.f_locals.get("self"), "name", None)
        if name in UNKEYED_FLAGS:
            with _quietly():
                reader = _nearest_non_stdlib(frame.f_back)
                # PyTensor reads where its caches live, and sets the flags it
                # compiles with around its rewrites: its own business
                if module_kind(_module_of(reader))[0] == "user":
                    _refuse(
                        state,
                        f"it read the PyTensor flag {name}, which no key holds "
                        f"(from {_where(reader)})",
                    )
    return None


def _on_import_end(
    code: types.CodeType, offset: int, value: Any, _threads: dict = STATE.threads
) -> Any:
    state = _threads.get(_get_ident())
    if (
        state is not None
        and state.imports
        and state.imports[-1] == id(compat.caller_frame(1))
    ):
        state.imports.pop()
    return None


#: This module's own work inside a callback (it may read files: no trace's).
_quietly = paused


# --------------------------------------------------------------- C calls
_PURE, _OWN, _SYNC, _WORLD, _PYTHON = range(5)
_DESCRIPTORS = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
)
_HEAPTYPE = 1 << 9
#: Types of compiled functions that carry their own module and name.
_NAMED_FUNCTION_TYPES = frozenset(
    {"nb_func", "nb_method", "nb_bound_method", "cython_function_or_method"}
)


def _defining_class(cls: type, name: str) -> type:
    """Return the first class in ``cls``'s MRO defining ``name`` in C (a bound C
    method's).
    """
    for klass in cls.__mro__:
        member = vars(klass).get(name)
        if member is not None and not isinstance(
            member, types.FunctionType | classmethod | staticmethod | property
        ):
            return klass
    return cls


def _c_name(callable_: Any, cls: type) -> tuple[str, str]:
    """Return the module and qualified name of a C callable."""
    if cls is types.BuiltinFunctionType:
        owner = callable_.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            module = callable_.__module__ or getattr(owner, "__name__", "?")
            return module, callable_.__qualname__
        if not isinstance(owner, type):
            owner = _defining_class(type(owner), callable_.__name__)
        return owner.__module__, f"{owner.__qualname__}.{callable_.__name__}"
    if cls in _DESCRIPTORS:
        owner = callable_.__objclass__
        return owner.__module__, f"{owner.__qualname__}.{callable_.__name__}"
    if cls is types.MethodWrapperType:
        owner = _defining_class(type(callable_.__self__), callable_.__name__)
        return owner.__module__, f"{owner.__qualname__}.{callable_.__name__}"
    module = getattr(callable_, "__module__", None)
    name = getattr(callable_, "__qualname__", None)
    if cls.__name__ in _NAMED_FUNCTION_TYPES and isinstance(module, str) and name:
        return module, name  # a jaxlib or Cython function: it says where it is from
    return cls.__module__, cls.__qualname__


def _in_pure_module(module: str) -> bool:
    return module in PURE_MODULES or any(
        prefix.endswith(".") and module.startswith(prefix) for prefix in PURE_MODULES
    )


def _kind_of_name(module: str, name: str) -> int:
    if (module, name) in _OWN_STATE:
        return _OWN
    if (module, name) in _PURE_IN_IMPURE:
        return _PURE
    if (module, name.rpartition(".")[0]) in _PURE_OWNERS:
        return _PURE
    if module == "_thread" and name.partition(".")[0] in ("lock", "RLock"):
        return _SYNC
    if module.startswith("numpy.random"):
        return _WORLD
    if _in_pure_module(module) and (module, name) not in _IMPURE_IN_PURE:
        return _PURE
    return _WORLD


def _is_c_class(cls: type) -> bool:
    if not cls.__flags__ & _HEAPTYPE:
        return True
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None) or ""
    return not file.endswith(".py")


def _class_kind(cls: type) -> int:
    """Return the kind of a class called: that of the least pure C class it builds on."""
    kinds = [
        _kind_of_name(base.__module__, base.__qualname__)
        for base in cls.__mro__
        if _is_c_class(base)
    ]
    return max(kinds, default=_PURE)


def _inherited_call(cls: type) -> Any:
    return next(
        (vars(k)["__call__"] for k in cls.__mro__ if "__call__" in vars(k)), None
    )


def _verdict_key(callable_: Any, cls: type) -> Any:
    """Return what the verdict on ``callable_`` depends on (cached under it)."""
    if cls is types.BuiltinFunctionType:
        owner = callable_.__self__
        if owner is None or isinstance(owner, types.ModuleType | type):
            return callable_
        return (type(owner), callable_.__name__)
    if cls is types.MethodWrapperType:
        return (type(callable_.__self__), callable_.__name__)
    if cls in _DESCRIPTORS:
        return callable_
    if isinstance(callable_, type) or cls.__name__ in _NAMED_FUNCTION_TYPES:
        return callable_
    # An instance: its type decides, under a key of its own. Calling the
    # class makes an instance (``functools.lru_cache`` making a memo, pure);
    # calling an instance runs it (a memo answering): other verdicts.
    return (cls, None)


def _callable_verdict(
    callable_: Any, cls: type, _verdicts: dict = STATE.callable_verdicts
) -> tuple[int, str]:
    """Return ``(kind, "module.name")`` of what is called (kept in
    ``STATE.callable_verdicts``)."""
    if cls is types.MethodType:
        function = callable_.__func__
        if type(function) is types.FunctionType:
            return _PYTHON, ""
        return _callable_verdict(function, type(function))
    if cls is functools.partial:
        inner = callable_.func
        return _callable_verdict(inner, type(inner))
    if cls is types.MethodWrapperType and callable_.__name__ == "__call__":
        owner = callable_.__self__  # ``memo.__call__(x)`` is ``memo(x)``
        if type(owner) is types.FunctionType:
            return _PYTHON, ""  # its start is checked
        return _callable_verdict(owner, type(owner))
    key = _verdict_key(callable_, cls)
    try:
        verdict = _verdicts.get(key)
    except TypeError:  # unhashable
        key, verdict = None, None
    if verdict is not None:
        return verdict
    if isinstance(callable_, type):
        module, name = callable_.__module__, callable_.__qualname__
        kind = _class_kind(callable_)
    elif not _is_c_class(cls) and isinstance(
        vars(cls).get("__call__") or _inherited_call(cls), types.FunctionType
    ):
        kind, module, name = _PYTHON, "", ""  # a Python class's __call__ runs
    else:
        module, name = _c_name(callable_, cls)
        kind = _kind_of_name(module, name)
    verdict = (kind, f"{module}.{name}")
    if key is not None:
        _verdicts[key] = verdict
    return verdict


#: Classes of the commonest callables, whose verdict is found under
#: :func:`_verdict_key` without the unwrapping of :func:`_callable_verdict`.
_DIRECTLY_KEYED = frozenset({type, types.BuiltinFunctionType, *_DESCRIPTORS})


def _on_call(
    code: types.CodeType,
    offset: int,
    callable_: Any,
    arg0: Any,
    _threads: dict = STATE.threads,
    _verdicts: dict = STATE.callable_verdicts,
) -> Any:
    # Runs at every call in the watched code (over a million in a trace of
    # diffrax's VJP): the common paths look their verdict up inline.
    cls = type(callable_)
    if cls is types.FunctionType:
        return None  # its start is checked
    state = _threads.get(_get_ident())
    if state is None or state.paused or state.imports or not state.watches:
        return None  # ``state.quiet``
    verdict = None
    if cls in _DIRECTLY_KEYED:
        verdict = _verdicts.get(_verdict_key(callable_, cls))
    kind, name = verdict or _callable_verdict(callable_, cls)
    if kind == _PYTHON:
        return None
    if kind == _PURE:
        if callable(arg0) and (
            _verdict_of(code) == _USER or tuple(name.rsplit(".", 1)) in _HIGHER_ORDER
        ):
            _check_argument(state, code, arg0)
        return None
    caller = compat.caller_frame(1)
    if kind == _OWN:
        if _verdict_of(code) == _USER:
            _refuse(state, f"it called {name} (from {_where(caller)})")
        return None
    with _quietly():
        _check_caller(state, caller, name, libraries=kind == _SYNC)
    return None


def _check_argument(state: _ThreadState, code: types.CodeType, value: Any) -> None:
    """Check a callable handed to a function that calls it (``map(os.stat, paths)``)."""
    cls = type(value)
    if cls is types.FunctionType:
        return
    kind, name = _callable_verdict(value, cls)
    if kind != _PURE and kind != _PYTHON:
        _refuse(state, f"it passed {name} to be called (from {code.co_qualname})")


def _where(frame: types.FrameType | None) -> str:
    if frame is None:
        return "?"
    return f"{_module_of(frame)}.{frame.f_code.co_qualname}"


def _nearest_non_stdlib(frame: types.FrameType | None) -> types.FrameType | None:
    while frame is not None and module_kind(_module_of(frame))[0] == "stdlib":
        frame = frame.f_back
    return frame


def _check_caller(
    state: _ThreadState,
    frame: types.FrameType | None,
    name: str,
    libraries: bool = False,
) -> None:
    """Allow an impure call only when the tracing machinery is behind it: the
    nearest caller outside the standard library is JAX's or this project's
    code (or a pair in :data:`TRUSTED_CALLS`; with ``libraries``, any code but
    the user's: a lock a library takes for itself)."""
    frame = _nearest_non_stdlib(frame)
    module = _module_of(frame)
    if _is_tracing_machinery(module) or (
        libraries and module_kind(module)[0] == "library"
    ):
        return
    function = "" if frame is None else frame.f_code.co_qualname
    if {(module, function, name), (module, function, "*")} & TRUSTED_CALLS:
        return
    if name in _TIMERS and module is not None and module.startswith(TIMING_MODULES):
        return
    _refuse(state, f"it called {name} (from {_where(frame)})")


# ------------------------------------------------------------ audit events
def _on_audit(
    event: str, args: tuple, _states: dict = STATE.threads, _ident: Any = _get_ident
) -> None:
    # the defaults hold on at exit, when module globals are gone
    state = _states.get(_ident())
    if state is None or state.quiet or event in _PURE_EVENTS:
        return
    try:
        with _quietly():
            _check_caller(state, compat.caller_frame(1), f"<audit event {event}>")
    except RecursionError:  # at the recursion limit: no Python call here
        _refuse(state, f"the audit event {event} at the recursion limit")
