"""Run code right after a module is first imported, or now if it already is.

Changes
-------
Puts one finder (:class:`RunAfterImport`) first on :data:`sys.meta_path`
while some module awaited is not imported yet. It answers only for those
modules (PyTensor's JAX backend and Numba dispatch, PyMC's sampling modules,
nutpie): it finds them as Python's own path finder does, and runs the
callbacks waiting for one right after the module is executed. Every other
import passes it by.

Why
---
Registering with a module, or wrapping one of its functions, needs the
module; importing it up front would cost every process its import time
(PyTensor's JAX backend takes about a second, and a process whose programs
the trace cache serves never needs it; PyMC's sampling modules, nutpie).

Upstream
--------
https://github.com/pymc-devs/pytensor/issues/2427 (a backend-dispatch
registration hook for third-party packages) would remove its use for
PyTensor's JAX backend; PyMC and nutpie would need a hook of their own for a
package to choose a start method or a compiler (the ``patches/`` modules).

Checked with
------------
CPython 3.12 and 3.13 (``importlib.machinery.PathFinder``, loaders with
``exec_module``).

Off switch
----------
``jax_ofg__deferred_imports=False``: no finder; the modules awaited are
imported when the package is (those not installed are left out), and their
callbacks run then.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg.flags import DEFERRED_IMPORTS


__all__ = ["RunAfterImport", "after_import"]

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
    deferred = DEFERRED_IMPORTS.value
    with _LOCK:
        module = sys.modules.get(name)
        if module is None and deferred:
            _FINDER.waiting.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    if module is None:
        try:
            module = importlib.import_module(name)
        except ImportError:  # not installed: nothing to register with
            return
    callback(module)
