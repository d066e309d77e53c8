"""Content keys for traced JAX programs: everything a trace depends on, or nothing.

:func:`fingerprint` describes a value by all it depends on, or returns None
(then nothing is cached). Registers nothing.

Notes
-----
* A value that cannot be described faithfully (a lock, a generator, an
  object whose state lives in C, a user's C extension, code that looks its
  globals up dynamically) makes the whole description None: nothing is
  cached.
* Descriptions over-approximate: a change that does not matter (a global
  that only shares its name with an attribute the code reads) may change the
  key, which costs one trace; nothing that matters leaves it equal.
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import hashlib
import importlib.machinery
import importlib.util
import itertools
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import jax
import numpy as np

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cache.code_origin import Kind, module_kind
from pytensor.compile._jax_ofg.cache.storage import STATE
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.type import Type


__all__ = [
    "Undescribable",
    "describe",
    "describe_or_raise",
    "describe_with_code",
    "digest",
    "fingerprint",
    "fingerprint_or_raise",
]


def digest(data: str | bytes) -> str:
    """Return a short hex digest of ``data`` (text as UTF-8): SHA-256's first 128 bits.

    >>> digest("abc")
    'ba7816bf8f01cfea414140de5dae2223'
    >>> digest(b"abc") == digest("abc")
    True
    """
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()[:32]


class Undescribable(Exception):
    """Raised inside the strict describer for a value it cannot describe faithfully."""


def fingerprint(value: Any) -> str | None:
    """Return a digest of everything ``value`` computes with, or None if that cannot be
    known.

    Combine it with :func:`~pytensor.compile._jax_ofg.cache.environment.environment_fingerprint` for a cache key.

    >>> def scale(x):
    ...     return 2.0 * x
    >>> fingerprint(scale) == fingerprint(scale)
    True
    >>> import threading
    >>> fingerprint(threading.Lock()) is None
    True
    """
    text = describe(value)
    return None if text is None else digest(text)


def fingerprint_or_raise(value: Any) -> str:
    """As :func:`fingerprint`; raises :class:`Undescribable` with the reason."""
    return digest(describe_or_raise(value))


def describe(value: Any) -> str | None:
    """Return the readable description behind :func:`fingerprint`.

    None when some part of ``value`` cannot be described faithfully.

    >>> describe((1, 1.0, True, None, "a"))
    "(1, 0x1.0000000000000p+0, True, None, 'a')"
    >>> describe({"k": [np.float32(0.5)]})
    "{'k': [scalar(<f4, 0000003f)]}"
    >>> import threading
    >>> describe(threading.Lock()) is None
    True
    """
    try:
        return describe_or_raise(value)
    except Undescribable:
        return None


def describe_or_raise(value: Any) -> str:
    """As :func:`describe`; raises :class:`Undescribable` with the reason.

    Any error while describing counts as undescribable: a description is
    never made weaker by leaving out what failed.

    >>> import threading
    >>> describe_or_raise(threading.Lock())
    Traceback (most recent call last):
    ...
    pytensor.compile._jax_ofg.cache.fingerprints.Undescribable: an object with opaque state: lock
    """
    return describe_with_code(value)[0]


def describe_with_code(value: Any) -> tuple[str, tuple[types.CodeType, ...]]:
    """:func:`describe_or_raise`, and the user code the description covers.

    The code objects of every user function described, nested ones
    (lambdas, inner functions) included: what a trace of ``value`` may run
    that the description vouches for. They are told apart by identity, not
    by ``==``: equal code (a notebook cell run again, the same function in
    two modules) runs in other globals, which the description may not hold.

    >>> user_module = {"__name__": "__main__"}
    >>> exec("def scale(x):\\n    return (lambda y: 2.0 * y)(x)", user_module)
    >>> scale = user_module["scale"]
    >>> text, codes = describe_with_code(scale)
    >>> scale.__code__ in codes, len(codes)
    (True, 2)
    """
    describer = _Describer()
    try:
        return describer(value), tuple(describer.codes.values())
    except Undescribable:
        raise
    except RecursionError:  # a structure too deep to describe
        raise Undescribable("a structure too deep to describe") from None
    except Exception as error:
        raise Undescribable(
            f"describing it raised {type(error).__name__}: {error}"
        ) from error


# --------------------------------------------------------------------- code
@dataclasses.dataclass(frozen=True)
class _CodeInfo:
    #: digest of everything that defines the behaviour of the code
    text: str
    #: every name in co_names of the code and its nested code
    names: frozenset[str]
    #: the attributes of a user module the code may read (None: any): names
    #: plus identifier-like string constants (getattr(module, "x"))
    attributes: frozenset[str] | None
    #: (module name, level) of every import statement
    imports: tuple[tuple[str, int], ...]
    #: the code and every code nested in it (what a trace of it may run)
    codes: tuple[types.CodeType, ...]


_DYNAMIC_BUILTINS = frozenset({"eval", "exec", "globals", "__import__", "compile"})
_DYNAMIC_ATTRIBUTES = frozenset({"getattr", "vars"})


def _code_info(code: types.CodeType) -> _CodeInfo:
    memo = STATE.code_info
    entry = memo.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1]
    info = _compute_code_info(code)
    key = id(code)
    memo[key] = (weakref.ref(code, lambda _, t=memo: t.pop(key, None)), info)
    return info


def _compute_code_info(code: types.CodeType) -> _CodeInfo:
    names: set[str] = set()
    strings: set[str] = set()
    imports: list[tuple[str, int]] = []
    codes: list[types.CodeType] = []

    def walk(c: types.CodeType) -> str:
        codes.append(c)
        names.update(c.co_names)
        consts = []
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                consts.append(walk(const))
            else:
                if isinstance(const, str) and const.isidentifier():
                    strings.add(const)
                consts.append(_const(const))
        previous: list[Any] = []
        for instruction in dis.get_instructions(c):
            if instruction.opname == "IMPORT_NAME":
                level = previous[-2].argval if len(previous) >= 2 else 0
                imports.append((instruction.argval, level if type(level) is int else 0))
            previous.append(instruction)
        return "|".join(
            [
                c.co_name,
                c.co_code.hex(),
                c.co_exceptiontable.hex(),
                f"[{', '.join(consts)}]",
                repr(c.co_names),
                repr(c.co_varnames),
                repr(c.co_freevars),
                repr(c.co_cellvars),
                f"{c.co_argcount},{c.co_posonlyargcount},{c.co_kwonlyargcount},{c.co_flags}",
            ]
        )

    text = digest(walk(code))
    dynamic = not names.isdisjoint(_DYNAMIC_ATTRIBUTES)
    return _CodeInfo(
        text,
        frozenset(names),
        None if dynamic else frozenset(names | strings),
        tuple(dict.fromkeys(imports)),
        tuple(codes),
    )


def _const(value: Any) -> str:
    """Describe a code constant (immutable by construction; never needs back-references)."""
    if isinstance(value, tuple | frozenset):
        items = [_const(v) for v in value]
        if isinstance(value, frozenset):
            return "frozenset({" + ", ".join(sorted(items)) + "})"
        return "(" + ", ".join(items) + ")"
    if isinstance(value, types.CodeType):
        return f"code:{_code_info(value).text}"
    return _ATOMS[type(value)](value)


# ----------------------------------------------------------------- describer
_HEAPTYPE = 1 << 9
_SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES) + tuple(
    importlib.machinery.BYTECODE_SUFFIXES
)
#: C types whose instances the describer handles by value
_VALUE_BASES = frozenset(
    {object, int, float, complex, str, bytes, tuple, list, dict, set, frozenset}
)
#: class attributes that are machinery, not behaviour
_CLASS_MACHINERY = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__doc__",
        "__module__",
        "__qualname__",
        "__firstlineno__",
        "__static_attributes__",
        "__annotations__",
        "__annotate__",
        "__annotate_func__",
        "__annotations_cache__",
        "__orig_bases__",
        "__parameters__",
        "__type_params__",
        "_abc_impl",
        "__dataclass_fields__",
    }
)


_ATOMS: dict[type, Callable[[Any], str]] = {
    type(None): repr,
    bool: repr,
    int: repr,
    str: repr,
    bytes: repr,
    float: float.hex,
    complex: lambda v: f"complex({v.real.hex()}, {v.imag.hex()})",
    type(Ellipsis): repr,
    type(NotImplemented): repr,
}


@functools.lru_cache(maxsize=4096)
def _is_c_class(cls: type) -> bool:
    """Return whether instances of ``cls`` may keep state that Python cannot see."""
    if cls in _VALUE_BASES:
        return False
    if not cls.__flags__ & _HEAPTYPE:
        return True
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    return file is not None and not file.endswith(_SOURCE_SUFFIXES)


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


def _kind_tag(kind: Kind) -> str:
    return kind[1] if kind[0] == "library" else kind[0]


class _Describer:
    """One description: refers back to what it is describing (a cycle).

    The text depends on values only, never on which of them are the same
    object: equal values sharing objects differently (a type PyTensor
    interns, a list held twice) describe alike. A value met again is
    described again -- from a memo of finished descriptions -- and only a
    value met *while it is being described* (a recursive function holding
    itself) is a back-reference, ``@depth``, to that enclosing description.
    """

    __slots__ = ("active", "codes", "done", "keep", "modules")

    def __init__(self):
        #: the user code described: what a trace of the value may run (by
        #: identity: ``==`` equates code of other globals)
        self.codes: dict[int, types.CodeType] = {}
        #: ids of the values being described, by depth
        self.active: dict[int, int] = {}
        #: finished descriptions by id (those that refer to no enclosing one)
        self.done: dict[int, str] = {}
        #: what ``done`` refers to, kept alive so that no id is reused
        self.keep: list[Any] = []
        #: (module id, names) being described, to cut import cycles
        self.modules: set[tuple[int, frozenset[str] | None]] = set()

    # ------------------------------------------------------------- plumbing
    def __call__(self, value: Any) -> str:
        cls = type(value)
        atom = _ATOMS.get(cls)
        if atom is not None:
            return atom(value)
        entry = STATE.describers.get(cls) or _dispatch(cls)
        method, referenced = entry
        if not referenced:
            return method(self, value)
        key = id(value)
        text = self.done.get(key)
        if text is not None:
            return text
        depth = self.active.get(key)
        if depth is not None:
            return f"@{depth}"
        if len(self.active) > _max_nesting():
            raise RecursionError("nested too deeply to describe")
        self.active[key] = len(self.active)
        try:
            text = method(self, value)
        finally:
            del self.active[key]
        if "@" not in text:  # else it depends on where it stands
            self.done[key] = text
            self.keep.append(value)
        return text

    def refuse(self, value: Any, why: str) -> NoReturn:
        """Raise :class:`Undescribable`: ``value`` cannot be described, for ``why``."""
        raise Undescribable(f"{why}: {type(value).__qualname__}")

    def items(self, values: Iterable[Any]) -> str:
        """Return the descriptions of ``values``, comma-separated."""
        return ", ".join(self(v) for v in values)

    def keyword_items(self, items: Iterable[tuple[str, Any]]) -> str:
        """Return ``name=description`` of each ``(name, value)``, comma-separated."""
        return ", ".join(f"{k}={self(v)}" for k, v in items)

    # ------------------------------------------------------------ containers
    def tuple_(self, value: tuple) -> str:
        return f"({self.items(value)}{',' if len(value) == 1 else ''})"

    def list_(self, value: list) -> str:
        return f"[{self.items(value)}]"

    def dict_(self, value: dict) -> str:
        # Insertion order is observable (iteration), so it is kept.
        items = list(value.items())
        return "{" + ", ".join(f"{self(k)}: {self(v)}" for k, v in items) + "}"

    def set_(self, value: set | frozenset) -> str:
        # Iteration order follows hashes, which differ between processes.
        items = ", ".join(sorted(self(v) for v in value))
        return f"{type(value).__name__}({{{items}}})"

    def subclass(self, value: Any) -> str:
        """Describe an instance of a subclass of a built-in value type (namedtuple,
        IntEnum...).
        """
        cls = type(value)
        base = next(b for b in cls.__mro__ if b in _VALUE_BASES)
        content = _EXACT[base](self, base(value))
        if isinstance(value, dict) and hasattr(value, "default_factory"):
            content += f", default_factory={self(value.default_factory)}"
        return f"{self(cls)}({content}{self.state(value)})"

    # ---------------------------------------------------------------- arrays
    def ndarray(self, value: np.ndarray) -> str:
        if type(value) is not np.ndarray:
            state = self.state(value)
            return f"{self(type(value))}({self.ndarray(np.asarray(value))}{state})"
        if value.dtype.hasobject:
            return f"array(object, {value.shape}, {self(value.tolist())})"
        content = digest(value.tobytes())  # in C order, whatever the layout
        return f"array({self.dtype(value.dtype)}, {value.shape}, {content})"

    def scalar(self, value: np.generic) -> str:
        if value.dtype.hasobject:
            return f"scalar(object, {self(value.item())})"
        return f"scalar({self.dtype(value.dtype)}, {value.tobytes().hex()})"

    def dtype(self, value: np.dtype) -> str:
        if value.fields is None and value.subdtype is None:
            return value.str
        return repr(value.descr)

    def jax_array(self, value: jax.Array) -> str:
        if isinstance(value, jax.core.Tracer):
            return self.refuse(value, "a tracer (a leaked intermediate of a trace)")
        weak = ", weak" if getattr(value, "weak_type", False) else ""
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            data = np.asarray(jax.random.key_data(value))
            return f"key_array({value.dtype}, {self.ndarray(data)})"
        try:
            data = np.asarray(value)
        except Exception:  # deleted or otherwise unreadable
            return self.refuse(value, "an array that cannot be read")
        return f"jax_{self.ndarray(data)}{weak}"

    # ------------------------------------------------------------- functions
    def function(self, fn: types.FunctionType) -> str:
        globals_ = fn.__globals__
        module = globals_.get("__name__")
        kind = module_kind(module)
        # Named by where its code was defined: functools.wraps copies the
        # wrapped function's names onto a wrapper.
        name = f"{module}.{fn.__code__.co_qualname}"
        if kind[0] != "user":
            tag = _kind_tag(kind)
            if fn.__closure__ is None and "<locals>" not in name:
                return f"function({tag}:{name})"
            # Made at run time by library code (jax.vmap(f)'s wrapper): its
            # code is the library's, what it closes over is not.
            return (
                f"function({tag}:{name}, closure=({self.closure(fn)}), "
                f"defaults={self(fn.__defaults__)}, "
                f"kwdefaults={self(fn.__kwdefaults__)}, "
                f"dict={self.dict_(_function_attributes(fn))})"
            )
        info = _code_info(fn.__code__)
        self.codes.update((id(code), code) for code in info.codes)
        parts = [
            name,
            f"code={info.text}",
            f"closure=({self.closure(fn, info.attributes)})",
            f"defaults={self(fn.__defaults__)}",
            f"kwdefaults={self(fn.__kwdefaults__)}",
            f"globals={{{self.globals_(globals_, info)}}}",
        ]
        if info.imports:
            parts.append(f"imports=[{self.imports(fn, info)}]")
        attributes = _function_attributes(fn)
        if attributes:
            parts.append(f"dict={self.dict_(attributes)}")
        return f"function({', '.join(parts)})"

    def closure(
        self, fn: types.FunctionType, attributes: frozenset[str] | None = None
    ) -> str:
        cells = []
        for cell in fn.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:
                cells.append("<empty>")
                continue
            cells.append(self.read_value(content, attributes))
        return ", ".join(cells)

    def globals_(self, globals_: dict, info: _CodeInfo) -> str:
        builtins = globals_.get("__builtins__", {})
        if isinstance(builtins, types.ModuleType):
            builtins = vars(builtins)
        parts = []
        for name in sorted(info.names):
            if name in globals_:
                value = globals_[name]
                if isinstance(value, types.ModuleType):
                    self.check_dynamic_module(value, info)
                parts.append(f"{name}={self.read_value(value, info.attributes)}")
            elif name in _DYNAMIC_BUILTINS and name in builtins:
                self.refuse(builtins[name], f"code calling {name}()")
        return ", ".join(parts)

    def check_dynamic_module(self, module: types.ModuleType, info: _CodeInfo) -> None:
        if (module is sys and "modules" in info.names) or (
            module.__name__ == "importlib" and "import_module" in info.names
        ):
            self.refuse(module, "code looking modules up by name")

    def imports(self, fn: types.FunctionType, info: _CodeInfo) -> str:
        """Return the modules a function imports in its body (``import helpers`` inside
        it).
        """
        package = fn.__globals__.get("__package__") or ""
        parts = []
        for name, level in info.imports:
            try:
                absolute = importlib.util.resolve_name("." * level + name, package)
            except (ImportError, ValueError):
                absolute = name
            # the module and every package above it, which importing it runs
            for module_name in itertools.accumulate(
                absolute.split("."), "{}.{}".format
            ):
                module = sys.modules.get(module_name)
                if module is None:
                    kind = module_kind(module_name)
                    if kind[0] == "user":
                        self.refuse(name, "a local import of a module not imported yet")
                    parts.append(f"{module_name}={_kind_tag(kind)}")
                else:
                    parts.append(
                        f"{module_name}={self.module(module, info.attributes)}"
                    )
        return ", ".join(parts)

    def method(self, value: types.MethodType) -> str:
        return f"method({self(value.__self__)}, {self(value.__func__)})"

    def builtin(self, value: types.BuiltinFunctionType) -> str:
        owner = getattr(value, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            return f"bound({self(owner)}.{value.__name__})"
        module = getattr(value, "__module__", None) or getattr(owner, "__name__", None)
        kind = module_kind(module)
        if kind[0] == "user":
            return self.refuse(value, "a function of a user's C extension")
        return f"builtin({_kind_tag(kind)}:{module}.{value.__qualname__})"

    def descriptor(self, value: Any) -> str:
        owner = getattr(value, "__self__", None)
        if owner is not None and not isinstance(owner, type | types.ModuleType):
            return f"bound({self(owner)}.{value.__name__})"
        objclass = getattr(value, "__objclass__", None) or owner
        return f"descriptor({self(objclass)}.{value.__name__})"

    def partial(self, value: functools.partial) -> str:
        return (
            f"partial({self(type(value))}, {self(value.func)}, "
            f"({self.items(value.args)}), {self.dict_(value.keywords)}"
            f"{self.state(value)})"
        )

    def wrapped_method(self, value: classmethod | staticmethod) -> str:
        return f"{type(value).__name__}({self(value.__func__)})"

    def property_(self, value: property) -> str:
        return f"property({self(value.fget)}, {self(value.fset)}, {self(value.fdel)})"

    # --------------------------------------------------------------- modules
    def module(
        self, module: types.ModuleType, attributes: frozenset[str] | None = None
    ) -> str:
        """Describe a module: a user's by the attributes read; a library's or the standard
        library's by name, and by the plain data it holds that code may read
        (``sys.argv``, a constant set at run time): its code is pinned, such values are
        not.
        """
        kind = module_kind(module.__name__)
        if kind[0] != "user":
            namespace = vars(module)
            read = namespace if attributes is None else attributes
            data = [
                (name, namespace[name])
                for name in sorted(read)
                if not name.startswith("__")
                and name in namespace
                and _is_plain_data(namespace[name])
            ]
            text = f"module({_kind_tag(kind)}:{module.__name__}"
            return f"{text}, {self.keyword_items(data)})" if data else f"{text})"
        file = getattr(module, "__file__", None) or ""
        if file and not file.endswith(_SOURCE_SUFFIXES):
            return self.refuse(module, "a user's C extension module")
        key = (id(module), attributes)
        if key in self.modules:  # an import cycle
            return f"module({module.__name__}, ...)"
        self.modules.add(key)
        self.keep.append(module)
        try:
            namespace = vars(module)
            # Any attribute: all but the machinery (__name__, __spec__...).
            read = attributes
            if read is None:
                read = {n for n in namespace if not n.startswith("__")}
            names = sorted(n for n in read | {"__getattr__"} if n in namespace)
            parts = [f"{n}={self.read_value(namespace[n], attributes)}" for n in names]
            return f"module({module.__name__}, {{{', '.join(parts)}}})"
        finally:
            self.modules.discard(key)

    def read_value(self, value: Any, attributes: frozenset[str] | None) -> str:
        """Describe a value code reads: a module by the ``attributes`` it may read of it."""
        if isinstance(value, types.ModuleType):
            return self.module(value, attributes)
        return self(value)

    # --------------------------------------------------------------- classes
    def class_(self, cls: type) -> str:
        kind = module_kind(getattr(cls, "__module__", None))
        if kind[0] != "user" and "<locals>" not in cls.__qualname__:
            return f"class({_kind_tag(kind)}:{_qualified(cls)})"
        if kind[0] == "user" and _is_c_class(cls):
            return self.refuse(cls, "a class of a user's C extension")
        parts = [_qualified(cls)]
        if type(cls) is not type:
            parts.append(f"meta={self(type(cls))}")
        parts.append(f"bases=({self.items(cls.__bases__)})")
        members = sorted(
            (item for item in vars(cls).items() if item[0] not in _CLASS_MACHINERY),
            key=lambda item: item[0],
        )
        parts.append(f"dict={{{self.keyword_items(members)}}}")
        fields = vars(cls).get("__dataclass_fields__")
        if fields is not None:
            parts.append(f"fields=[{self.fields(fields)}]")
        entry = _pytree_registration(cls)
        if entry is not None:
            parts.append(f"pytree={self(entry)}")
        return f"class({', '.join(parts)})"

    def fields(self, fields: dict) -> str:
        """Describe a dataclass's field definitions (their types are annotations: left
        out).
        """
        return ", ".join(
            f"{name}:{getattr(f, '_field_type', None)!r}"
            f"(default={self(f.default)}, factory={self(f.default_factory)}, "
            f"init={f.init}, kw_only={f.kw_only}, compare={f.compare}, "
            f"metadata={self.dict_(dict(f.metadata))})"
            for name, f in fields.items()
        )

    # ------------------------------------------------------------- instances
    def instance(self, value: Any) -> str:
        cls = type(value)
        if isinstance(value, enum.Enum):
            return f"enum({self(cls)}, {value.name})"
        if any(b in _VALUE_BASES and b is not object for b in cls.__mro__):
            return self.subclass(value)
        kind = module_kind(getattr(cls, "__module__", None))
        if kind[0] == "project":
            return self.project_instance(value)
        if kind[0] == "user":
            for base in cls.__mro__:
                if _is_c_class(base):
                    return self.refuse(value, f"an instance of the C type {base}")
            return f"{self(cls)}({self.state(value)[2:]})"
        return self.library_instance(value, cls)

    def project_instance(self, value: Any) -> str:
        cls = type(value)
        if dataclasses.is_dataclass(value):
            # This project's inner functions: their identity is their compared
            # fields; fields computed from others (init=False) are left out.
            fields = [
                (field.name, getattr(value, field.name))
                for field in dataclasses.fields(value)
                if field.compare and field.init
            ]
            return f"{_qualified(cls)}({self.keyword_items(fields)})"
        # Not a dataclass (the decorator's wrapper): its public attributes;
        # private ones are caches.
        state = sorted((k, v) for k, v in _state(value) if not k.startswith("_"))
        return f"{_qualified(cls)}({self.keyword_items(state)})"

    def library_instance(self, value: Any, cls: type) -> str:
        header = self(cls)
        named = _importable_name(value)
        if named is not None:
            return f"{header}:{named}"
        if dataclasses.is_dataclass(value):
            fields = [
                (f.name, getattr(value, f.name, "<unset>"))
                for f in dataclasses.fields(value)
            ]
            return f"{header}({self.keyword_items(fields)})"
        wrapped = getattr(value, "__wrapped__", None)
        jitted = compat.jitted_function(value)
        if jitted is not None:
            return self.jitted(header, *jitted)
        has_dict = hasattr(value, "__dict__")
        if any(_is_c_class(b) for b in cls.__mro__):
            # A C wrapper of a Python function (functools.lru_cache): what it
            # wraps is in its __dict__, its C state is bookkeeping.
            python_state = has_dict and wrapped is not None
        else:
            python_state = has_dict or bool(_slot_names(cls))
        if python_state:
            return f"{header}({self.state(value)[2:]})"
        pytree = self.pytree_node(value)
        if pytree is not None:
            return f"{header}{pytree}"
        return self.reduced(value, header)

    def jitted(self, header: str, wrapped: Any, info: Any) -> str:
        """Describe a ``jax.jit`` function: what it wraps, and its options."""
        if isinstance(wrapped, types.FunctionType):
            kind = module_kind(wrapped.__globals__.get("__name__"))
            if kind[0] != "user" and "<locals>" not in wrapped.__qualname__:
                return f"jit({self(wrapped)})"  # a library's own jitted function
        options = compat.jit_options(info)
        if options is None:
            raise Undescribable("the options of a jax.jit function cannot be read")
        return f"jit({self(wrapped)}, {self(options)})"

    def pytree_node(self, value: Any) -> str | None:
        try:
            leaves, treedef = jax.tree_util.tree_flatten(
                value, is_leaf=lambda x: x is not value
            )
        except Exception:
            return None
        if treedef.num_nodes == 1:  # a leaf: not a registered node
            return None
        return f"<pytree {self.treedef(treedef)}: ({self.items(leaves)})>"

    def reduced(self, value: Any, header: str) -> str:
        """Describe what ``pickle`` would save: the last way to see an object's state."""
        try:
            reduced = value.__reduce_ex__(4)
        except Exception:
            return self.refuse(value, "an object with opaque state")
        if isinstance(reduced, str):  # a global, pickled by name
            return f"{header}:{reduced}"
        parts = list(reduced[:3])
        for iterator in reduced[3:5]:
            if iterator is not None:
                parts.append(list(iterator))
        return f"{header}<{self.items(parts)}>"

    def state(self, value: Any) -> str:
        """Return ``, name=value...`` for an object's ``__dict__`` and slots."""
        return "".join(f", {k}={self(v)}" for k, v in _state(value))

    # ------------------------------------------------------------- PyTensor
    def props(self, value: Op | Type) -> str:
        """Describe an op's or a type's ``__props__``, or else its state."""
        props = getattr(value, "__props__", None)
        if props is None:
            return self.state(value)[2:]
        return self.keyword_items((p, getattr(value, p)) for p in props)

    def op(self, op: Op) -> str:
        fgraph = getattr(op, "fgraph", None)
        inner = isinstance(fgraph, AbstractFunctionGraph)
        parts = [self(type(op))]
        if not inner or getattr(op, "__props__", None) is not None:
            parts.append(self.props(op))
        lowering = _user_lowering(type(op))
        if lowering is not None:  # what JAX runs for it in an island
            parts.append(f"lowering={self(lowering)}")
        # An inner-graph op (OpFromGraph, JaxIsland) computes its graph.
        if inner:
            parts.append(f"graph={self.fgraph(fgraph)}")
            if hasattr(op, "static_inputs"):
                parts.append(f"static_inputs={self(op.static_inputs)}")
        return f"op({', '.join(parts)})"

    def fgraph(self, fgraph: AbstractFunctionGraph) -> str:
        position: dict[Variable, str] = {
            v: f"in{i}" for i, v in enumerate(fgraph.inputs)
        }
        nodes = []
        for k, node in enumerate(fgraph.toposort()):
            sources = [position.get(x) or self(x) for x in node.inputs]
            nodes.append(f"{self(node.op)}[{', '.join(sources)}]")
            position.update({out: f"{k}.{j}" for j, out in enumerate(node.outputs)})
        outputs = [position.get(out) or self(out) for out in fgraph.outputs]
        inputs = self.items(x.type for x in fgraph.inputs)
        return (
            f"fgraph(inputs=[{inputs}], nodes=[{', '.join(nodes)}], outputs={outputs})"
        )

    def variable(self, variable: Variable) -> str:
        if isinstance(variable, Constant):
            return f"constant({self(variable.type)}, {self(variable.data)})"
        return f"variable({self(variable.type)})"

    def pytensor_type(self, value: Type) -> str:
        return f"{self(type(value))}({self.props(value)})"

    # ------------------------------------------------------------ tree defs
    def treedef(self, treedef: Any, depth: int = 0) -> str:
        """Describe a tree structure, node by node: node types and their auxiliary data.

        Its ``str`` would show auxiliary data by ``repr``, which may be lossy or
        show addresses; the structure itself describes it exactly.
        """
        if depth > _max_nesting():
            raise RecursionError("nested too deeply to describe")
        data = treedef.node_data()
        if data is None:
            return "*"
        node_type, aux = data
        children = treedef.children()
        inner = ", ".join(self.treedef(c, depth + 1) for c in children)
        return f"{self(node_type)}[{self(aux)}]({inner})"


_PLAIN_ATOMS = (type(None), bool, int, float, complex, str, bytes, np.generic)


def _is_plain_data(value: Any, depth: int = 0) -> bool:
    """Return whether ``value`` is data a module holds (numbers, strings, arrays and
    containers of them), not code, classes or modules (pinned by versions).
    """
    if isinstance(value, (*_PLAIN_ATOMS, np.ndarray)):
        return not isinstance(value, np.ndarray) or not value.dtype.hasobject
    if depth > 4 or not isinstance(value, tuple | list | dict | set | frozenset):
        return False
    items = value.items() if isinstance(value, dict) else ((v, None) for v in value)
    return all(
        _is_plain_data(k, depth + 1) and _is_plain_data(v, depth + 1) for k, v in items
    )


def _max_nesting() -> int:
    """Return how deep a description may nest: well before Python's recursion limit,
    where even an audit hook fails (``Exception ignored in audit hook``).
    """
    return sys.getrecursionlimit() // 8


#: function attributes derived from the function (functools.wraps, inspect)
_DERIVED_ATTRIBUTES = frozenset(
    {"__signature__", "__annotations__", "__type_params__", "__doc__", "__source__"}
)


def _function_attributes(fn: types.FunctionType) -> dict[str, Any]:
    return {k: v for k, v in vars(fn).items() if k not in _DERIVED_ATTRIBUTES}


def _slot_names(cls: type) -> list[str]:
    names = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        owner = klass.__name__.lstrip("_")
        for name in slots:
            if name.startswith("__") and not name.endswith("__") and owner:
                name = f"_{owner}{name}"  # a private slot's mangled name
            if name not in ("__dict__", "__weakref__"):
                names.append(name)
    return names


def _state(value: Any) -> list[tuple[str, Any]]:
    state = sorted(getattr(value, "__dict__", {}).items(), key=lambda item: item[0])
    for name in _slot_names(type(value)):
        if hasattr(value, name):
            state.append((name, getattr(value, name)))
    return state


def _importable_name(value: Any) -> str | None:
    """Return ``module.qualname`` when ``value`` is that attribute of a library module.

    A library's own module-level object (``numpy.sin``, ``jax.nn.relu``) is
    what that library's version defines: its name describes it, as ``pickle``
    would refer to it.
    """
    module_name = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    kind = module_kind(module_name)
    module = sys.modules.get(module_name)
    if kind[0] in ("user", "project") or module is None:
        return None
    target = functools.reduce(
        lambda owner, part: getattr(owner, part, None), qualname.split("."), module
    )
    return f"{module_name}.{qualname}" if target is value else None


def _user_lowering(op_type: type) -> Any:
    """Return the JAX lowering (``jax_funcify``) user code registered for ``op_type``,
    if any.

    PyTensor's own lowerings and this project's are pinned by their
    versions; none is registered before PyTensor's JAX backend is imported.
    """
    backend = sys.modules.get("pytensor.link.jax.dispatch.basic")
    dispatcher = getattr(backend, "jax_funcify", None)
    if dispatcher is None:
        return None
    lowering = dispatcher.dispatch(op_type)
    module = getattr(lowering, "__module__", None)
    return lowering if module_kind(module)[0] == "user" else None


def _pytree_registration(cls: type) -> Any:
    """Return the flatten/unflatten functions JAX holds for a user's pytree class.

    Read from JAX's registry (private); a JAX without it cannot describe a
    user's pytree class faithfully, so the description is refused.
    """
    try:
        return compat.pytree_registration(cls)
    except Exception as error:
        raise Undescribable(
            f"JAX's pytree registry cannot be read ({error}) to describe {cls!r}"
        ) from error


#: by exact type (subclasses of the containers are described by ``subclass``)
_EXACT: Mapping[type, Callable[[_Describer, Any], str]] = types.MappingProxyType(
    {
        tuple: _Describer.tuple_,
        list: _Describer.list_,
        dict: _Describer.dict_,
        set: _Describer.set_,
        frozenset: _Describer.set_,
        types.MethodType: _Describer.method,
        types.BuiltinFunctionType: _Describer.builtin,
        types.CodeType: lambda self, v: _const(v),
        types.MappingProxyType: lambda self, v: f"mappingproxy({self.dict_(dict(v))})",
        range: lambda self, v: repr(v),
        slice: lambda self, v: (
            f"slice({self(v.start)}, {self(v.stop)}, {self(v.step)})"
        ),
        jax.tree_util.PyTreeDef: _Describer.treedef,
    }
)

_BY_SUBCLASS: tuple[tuple[tuple[type, ...], Callable[[_Describer, Any], str]], ...] = (
    ((jax.Array, jax.core.Tracer), _Describer.jax_array),
    ((np.ndarray,), _Describer.ndarray),
    ((np.generic,), _Describer.scalar),
    ((np.dtype,), _Describer.dtype),  # dtype subclasses (np.dtypes.Float64DType)
    ((type,), _Describer.class_),
    ((types.FunctionType,), _Describer.function),
    ((types.ModuleType,), _Describer.module),
    ((functools.partial,), _Describer.partial),
    (
        (
            types.MethodDescriptorType,
            types.WrapperDescriptorType,
            types.MethodWrapperType,
            types.ClassMethodDescriptorType,
            types.GetSetDescriptorType,
            types.MemberDescriptorType,
        ),
        _Describer.descriptor,
    ),
    ((classmethod, staticmethod), _Describer.wrapped_method),
    ((property,), _Describer.property_),
    ((Op,), _Describer.op),
    ((Variable,), _Describer.variable),
    ((Type,), _Describer.pytensor_type),
    ((types.GeneratorType,), lambda self, v: self.refuse(v, "a generator")),
    (
        (types.CoroutineType, types.AsyncGeneratorType, types.FrameType),
        lambda self, v: self.refuse(v, "running code"),
    ),
)

_UNREFERENCED = (tuple, frozenset, np.dtype, np.generic, types.ModuleType)


def _dispatch(cls: type) -> tuple[Callable[[_Describer, Any], str], bool]:
    """Return how to describe instances of ``cls``, and whether to refer back to
    one met again (immutable values are described again: sharing them is not
    observable, and they cannot form cycles on their own); kept per class in
    ``STATE.describers``."""
    # By the MRO, not issubclass: an ABC's check walks all its subclasses.
    mro = set(cls.__mro__)
    method = _EXACT.get(cls)
    if method is None:
        method = next(
            (m for kinds, m in _BY_SUBCLASS if not mro.isdisjoint(kinds)),
            _Describer.instance,
        )
    referenced = mro.isdisjoint(_UNREFERENCED)
    entry = STATE.describers[cls] = (method, referenced)
    return entry
