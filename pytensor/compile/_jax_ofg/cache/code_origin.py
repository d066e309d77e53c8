"""Where a module's code comes from: the standard library, a pinned release, this project or the user.

:func:`module_kind` decides (library code is keyed by its release, user code
is followed). Registers nothing.
"""

from __future__ import annotations

import csv
import functools
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pytensor.compile._jax_ofg.cache.storage import STATE


__all__ = [
    "PROJECT_MODULE",
    "Kind",
    "import_kind",
    "is_inside",
    "module_kind",
    "pinned_release",
]

#: Where a module's code comes from: ``("stdlib", "")``, ``("project", "")``,
#: ``("library", "dist==version")`` or ``("user", "")``.
Kind = tuple[str, str]

USER: Kind = ("user", "")
STDLIB: Kind = ("stdlib", "")
PROJECT: Kind = ("project", "")

#: This project's modules (their source is in the environment fingerprint).
PROJECT_MODULE = re.compile(
    r"pytensor\.(compile\.jax_ofg|compile\._jax_ofg|link\.\w+\.dispatch\.jax_ofg)(\..*)?"
)


def module_kind(name: str | None) -> Kind:
    """Return whether the module called ``name`` is stdlib, library, project or user
    code.

    >>> module_kind("json")
    ('stdlib', '')
    >>> module_kind("numpy")[0], module_kind("numpy")[1].startswith("numpy==")
    ('library', True)
    >>> module_kind("__main__")
    ('user', '')
    """
    if not name or not isinstance(name, str):
        return USER
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    cached = STATE.module_kinds.get(name)
    if cached is not None and cached[0] == file:
        return cached[1]
    kind = _classify(name, module, file)
    STATE.module_kinds[name] = (file, kind)
    return kind


def import_kind(name: str | None) -> str:
    """Return whether the module ``name``, which is about to be imported, is stdlib,
    library, project or user code (found by its spec, the module not being there yet).

    >>> import_kind("json"), import_kind("numpy.linalg")
    ('stdlib', 'library')
    """
    if not isinstance(name, str):
        return "user"
    if name in sys.modules:
        return module_kind(name)[0]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return "user"
    origin = getattr(spec, "origin", None)
    if origin in (None, "built-in", "frozen"):
        locations = list(getattr(spec, "submodule_search_locations", None) or ())
        origin = str(Path(locations[0]) / "__init__.py") if locations else origin
    if origin in ("built-in", "frozen"):
        return "stdlib"
    return _classify(name, None, origin)[0]


def _classify(name: str, module: Any, file: str | None) -> Kind:
    if PROJECT_MODULE.fullmatch(name):
        return PROJECT
    top = name.partition(".")[0]
    if top == "__main__":
        return USER
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        if file is None or is_inside(file, _stdlib_dirs()):
            return STDLIB
        return USER  # a user's module shadowing a stdlib name
    if module is None and top in sys.modules and top != name:
        # Not imported yet (a local import): the top-level package decides.
        return module_kind(top)
    if file is None:
        # A namespace package or a built-in: judge by a file of its package.
        paths = list(getattr(module, "__path__", ()) or ())
        file = str(Path(paths[0]) / "__init__.py") if paths else None
        if file is None:
            return USER
    release = _release_owning(top, file)
    return USER if release is None else ("library", release)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    import sysconfig

    return (os.path.dirname(os.__file__), sysconfig.get_path("stdlib"))


def is_inside(path: str, folders: Iterable[str]) -> bool:
    """Return whether ``path`` is below one of the absolute ``folders`` (not one of
    them).

    >>> is_inside("/a/b/c.py", ["/a"]), is_inside("/ab/c.py", ["/a"]), is_inside("/a", ["/a"])
    (True, False, False)
    """
    path = os.path.abspath(path)
    return any(path.startswith(os.path.join(folder, "")) for folder in folders)


def pinned_release(release: str, direct_url: str | None) -> str | None:
    """Return how an installed distribution's files are pinned (see
    ``direct_url.json``).

    An install by name from an index by its release; a VCS install by its
    commit, an archive by its hash; a local directory or file by nothing:
    it can be rebuilt under an unchanged version.

    >>> pinned_release("a==1", None)
    'a==1'
    >>> pinned_release("a==1", '{"url": "https://x/a.git", "vcs_info": {"commit_id": "c0ffee"}}')
    'a==1@c0ffee'
    >>> pinned_release("a==1", '{"url": "file:///src/a", "dir_info": {}}') is None
    True
    """
    if direct_url is None:
        return release
    try:
        info = json.loads(direct_url)
        url = info.get("url", "")
        commit = (info.get("vcs_info") or {}).get("commit_id")
        archive = info.get("archive_info") or {}
    except (ValueError, AttributeError):
        return None
    if url.startswith("file:") or "dir_info" in info:
        return None
    if commit:
        return f"{release}@{commit}"
    hashes = archive.get("hashes") or (
        {"hash": archive["hash"]} if "hash" in archive else {}
    )
    return f"{release}#{sorted(hashes.items())}" if hashes else None


@functools.lru_cache(maxsize=64)
def _distributions_in(entry: str) -> tuple[str, ...]:
    """Return the names of the distributions installed in the ``sys.path`` entry
    ``entry``.
    """
    return tuple(
        sorted(
            {d.metadata["Name"] for d in importlib.metadata.distributions(path=[entry])}
        )
    )


def _owner_candidates(top: str, file: str) -> Iterator[str]:
    """Distributions that may have recorded ``file``, the likeliest first.

    Only those installed in a ``sys.path`` entry holding ``file`` (a project
    folder holds none), the one named after the module first: no scan of
    every installed distribution (``packages_distributions()`` takes most of
    a second).
    """
    entries = [
        e for e in {os.path.abspath(p or ".") for p in sys.path} if is_inside(file, [e])
    ]
    yield top
    for entry in sorted(entries):
        yield from (name for name in _distributions_in(entry) if name != top)


@functools.lru_cache(maxsize=1024)
def _recorded_files(
    name: str, path: tuple[str, ...]
) -> tuple[str | None, str, frozenset[str]]:
    """Return a distribution's pin (:func:`pinned_release`), the folder its paths are
    relative to, and the paths it recorded (as its ``RECORD`` spells them).

    Paths are compared as recorded, not located one by one: a distribution
    like NumPy records thousands of files, and ``Distribution.files`` checks
    that each one exists: a stat per file, some 20x the time of reading
    ``RECORD``, in every process that computes a key.
    """
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None, "", frozenset()
    root = os.path.abspath(dist.locate_file(""))
    release = f"{dist.metadata['Name']}=={dist.version}"
    pin = pinned_release(release, dist.read_text("direct_url.json"))
    return pin, root, _recorded_paths(dist)


def _recorded_paths(dist: importlib.metadata.Distribution) -> frozenset[str]:
    """Return the paths a distribution recorded, as its ``RECORD`` spells them.

    Other layouts (``.egg-info``) as :mod:`importlib.metadata` lists them.
    """
    record = dist.read_text("RECORD")
    if record is None:
        return frozenset(str(f) for f in dist.files or ())
    return frozenset(row[0] for row in csv.reader(record.splitlines()) if row)


def _release_owning(top: str, file: str) -> str | None:
    """Return the pinned release of the distribution that recorded ``file``, if any.

    A file no distribution recorded (a checkout shadowing an installed copy,
    a module on ``sys.path``) has none: it is user code.
    """
    file, path = os.path.abspath(file), tuple(sys.path)
    for name in _owner_candidates(top, file):
        release, root, files = _recorded_files(name, path)
        if files and os.path.relpath(file, root).replace(os.sep, "/") in files:
            return release
    return None
