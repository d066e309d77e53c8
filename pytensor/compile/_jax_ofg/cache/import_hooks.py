"""Run code right after a module is first imported, or now if it already is.

For modules too costly to import up front (PyMC's sampling, PyTensor's JAX
backend). Registers nothing itself: :func:`pytensor.compile.jax_ofg.install`
calls :func:`after_import`, which adds one finder to :data:`sys.meta_path`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg.cache.watch import paused


__all__ = ["JAX_BACKEND", "RunAfterImport", "after_import", "jax_backend"]

#: PyTensor's JAX backend: its ``jax_funcify`` lowers graphs to JAX.
JAX_BACKEND = "pytensor.link.jax.dispatch"

Callback = Callable[[ModuleType], None]


class RunAfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after the modules they wait for are first imported."""

    def __init__(self):
        self.waiting: dict[str, list[Callback]] = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.waiting:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if not callable(getattr(loader, "exec_module", None)):
            return None  # leave it to the other finders, without the callbacks
        exec_module = loader.exec_module

        def exec_and_run(module: ModuleType) -> None:
            exec_module(module)
            for callback in self.waiting.pop(fullname, []):
                callback(module)

        loader.exec_module = exec_and_run  # this module's own loader only
        return spec


_FINDER = RunAfterImport()
_LOCK = threading.Lock()


def after_import(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after it is."""
    with _LOCK:
        module = sys.modules.get(name)
        if module is None:
            _FINDER.waiting.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback(module)


def jax_backend() -> ModuleType:
    """PyTensor's JAX backend, imported on first use (its callbacks run then)."""
    module = sys.modules.get(JAX_BACKEND)
    if module is None:
        with paused():  # what importing it runs is no part of a trace
            module = importlib.import_module(JAX_BACKEND)
    return module
