"""What a trace reads from outside the program: environment variables and files.

Noted while a trace runs under :func:`recording`; :meth:`Reads.changed` tells
whether they would now read differently. :func:`install` (run by
:func:`pytensor.compile.jax_ofg.install`) adds the audit hook. What is seen:
the guide's developer notes, "The trace cache".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import site
import sys
import threading
from collections.abc import Iterator
from typing import Any

from pytensor.compile import jax_ofg_compat as compat


__all__ = ["ReadLog", "Reads", "ignored", "install", "note", "recording"]

_state = threading.local()


@dataclasses.dataclass(frozen=True)
class Reads:
    """What one or more traces read: each item with the value it had then.

    ``environment`` holds ``(name, value or None)``; ``files`` and ``folders``
    hold ``(path, digest or None)`` (None: it did not exist). The set of
    environment names, when the environment was listed, is ``("*", digest)``
    in ``environment``.
    """

    environment: tuple[tuple[str, str | None], ...] = ()
    files: tuple[tuple[str, str | None], ...] = ()
    folders: tuple[tuple[str, str | None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.environment or self.files or self.folders)

    def changed(self) -> str | None:
        """What reads differently now, in words; None when nothing does.

        >>> Reads(environment=(("JAX_OFG_UNSET_EXAMPLE", None),)).changed() is None
        True
        >>> Reads(environment=(("JAX_OFG_UNSET_EXAMPLE", "1"),)).changed()
        'the environment variable JAX_OFG_UNSET_EXAMPLE (was set, is not)'
        """
        for name, value in self.environment:
            now = _environment_value(name)
            if now != value:
                if name == "*":
                    return "the set of environment variables"
                was = "set" if value is not None else "not set"
                is_ = "set" if now is not None else "not"
                if value is not None and now is not None:
                    return f"the environment variable {name}"
                return f"the environment variable {name} (was {was}, is {is_})"
        for path, digest in self.files:
            if _file_digest(path) != digest:
                return f"the file {path}"
        for path, digest in self.folders:
            if _folder_digest(path) != digest:
                return f"the folder {path}"
        return None


class ReadLog:
    """The reads noted by a :func:`recording` (or several)."""

    def __init__(self):
        self.environment: dict[str, str | None] = {}
        self.files: dict[str, str | None] = {}
        self.folders: dict[str, str | None] = {}

    def reads(self) -> Reads:
        return Reads(
            tuple(sorted(self.environment.items())),
            tuple(sorted(self.files.items())),
            tuple(sorted(self.folders.items())),
        )


@contextlib.contextmanager
def recording(log: ReadLog | None = None) -> Iterator[ReadLog]:
    """Note what the current thread reads, until the block ends.

    Recordings nest: a read is noted in every recording under way. Pass a
    ``log`` to add to it (the reads of several traces of one program).

    >>> with recording() as log:
    ...     _ = os.environ.get("JAX_OFG_UNSET_EXAMPLE")
    >>> log.reads().environment
    (('JAX_OFG_UNSET_EXAMPLE', None),)
    """
    log = ReadLog() if log is None else log
    logs = _logs()
    logs.append(log)
    try:
        yield log
    finally:
        logs.remove(log)


def note(reads: Reads) -> None:
    """Note ``reads`` in the recordings under way (a cached trace used by another)."""
    for log in _logs():
        for name, value in reads.environment:
            log.environment.setdefault(name, value)
        for path, digest in reads.files:
            log.files.setdefault(path, digest)
        for path, digest in reads.folders:
            log.folders.setdefault(path, digest)


def _logs() -> list[ReadLog]:
    logs = getattr(_state, "logs", None)
    if logs is None:
        logs = _state.logs = []
    return logs


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """Reads made in this block are not noted (this module's own, a lazy import)."""
    busy = getattr(_state, "busy", False)
    _state.busy = True
    try:
        yield
    finally:
        _state.busy = busy


def _noting() -> list[ReadLog]:
    if getattr(_state, "busy", False):
        return []
    return getattr(_state, "logs", None) or []


# --------------------------------------------------------------- environment
def _environment_value(name: str) -> str | None:
    with ignored():
        if name == "*":
            return _names_digest(os.environ)
        return os.environ.get(name)


def _names_digest(names: Any) -> str:
    text = "\0".join(sorted(map(str, names)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _note_environment(environ: Any, name: Any, value: Any) -> None:
    logs = _noting()
    if logs and environ is os.environ:
        for log in logs:
            log.environment.setdefault(str(name), value)


def _install_environment_notes() -> None:
    environ_class = compat.environ_class()
    if getattr(environ_class, "_jax_ofg_noted", False):
        return
    getitem, iterate = environ_class.__getitem__, environ_class.__iter__

    def __getitem__(self, key):
        try:
            value = getitem(self, key)
        except KeyError:
            _note_environment(self, key, None)
            raise
        _note_environment(self, key, value)
        return value

    def __iter__(self):
        if _noting() and self is os.environ:
            _note_environment(self, "*", _environment_value("*"))
        return iterate(self)

    environ_class.__getitem__ = __getitem__
    environ_class.__iter__ = __iter__
    environ_class._jax_ofg_noted = True


# --------------------------------------------------------------------- files
_DIGESTS: dict[str, tuple[tuple, str | None]] = {}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _file_digest(path: str) -> str | None:
    """A digest of the file's content (None: no such file), memoized by its stat."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    cached = _DIGESTS.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    digest = hashlib.sha256()
    try:
        with ignored(), open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    text = digest.hexdigest()[:32]
    _DIGESTS[path] = (signature, text)
    return text


def _folder_digest(path: str) -> str | None:
    try:
        with ignored():
            return _names_digest(os.listdir(path))
    except OSError:
        return None


@functools.cache
def _unnoted_folders() -> tuple[str, ...]:
    """Files read there are not a trace's input: the Python installation and
    installed packages (code, pinned by versions: a lazy import while tracing
    reads them) and the system's own (``/proc``, ``/sys``, ``/dev``)."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/sys", "/dev"}
    with contextlib.suppress(AttributeError):
        folders.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        folders.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.abspath(f), "") for f in folders)


def _path(value: Any) -> str | None:
    """The absolute path of a file read, or None when it is not noted."""
    if isinstance(value, int):  # a file descriptor: its opening was noted
        return None
    try:
        path = os.path.abspath(os.fsdecode(value))
    except TypeError:
        return None
    return None if path.startswith(_unnoted_folders()) else path


#: Noted in place of a read that the recursion limit kept from being noted:
#: no file has this path, so the trace's entry is never used.
_UNNOTED = "<a read while the recursion limit was reached>"


def _audit(event: str, args: tuple) -> None:
    if event not in ("open", "os.listdir", "os.scandir"):
        return
    try:
        _note_read(event, args)
    except RecursionError:  # no Python call here: the stack is at its limit
        for log in getattr(_state, "logs", ()):
            log.files[_UNNOTED] = "unnoted"


def _note_read(event: str, args: tuple) -> None:
    logs = _noting()
    if not logs:
        return
    path = _path(args[0] if args and args[0] is not None else ".")
    if path is None:
        return
    if event == "open":
        mode, flags = ((*args, None, None))[1:3]
        writing = (mode is not None and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing or os.path.isdir(path):
            return  # a side effect, not a read (a cached trace does not redo it)
        digest = _file_digest(path)
        for log in logs:
            log.files.setdefault(path, digest)
    else:
        digest = _folder_digest(path)
        for log in logs:
            log.folders.setdefault(path, digest)


_installed = False


def install() -> None:
    """Start noting reads for :func:`recording` (once per process; cannot be undone)."""
    global _installed
    if _installed:
        return
    _installed = True
    _install_environment_notes()
    sys.addaudithook(_audit)
