"""This package's on/off switches: PyTensor flags, each added once, read when used.

Every change importing the package makes to the process that can be turned
off on its own has a flag ``jax_ofg__<name>`` (default on), read by
:func:`switch` when the change is made -- when the package is imported, so
set it in ``PYTENSOR_FLAGS`` or ``.pytensorrc``. Getting started, "What
importing the package changes", lists them.
"""

from __future__ import annotations

from pytensor import config
from pytensor.configparser import BoolParam


__all__ = ["switch"]


def switch(name: str, doc: str) -> bool:
    """Return the PyTensor flag ``name`` (``jax_ofg__...``, default True), added
    with ``doc`` first if it is not yet (a value set in ``PYTENSOR_FLAGS`` or
    ``.pytensorrc`` applies then)."""
    if not hasattr(config, name):
        config.add(name, doc, BoolParam(True), in_c_key=False)
    return bool(getattr(config, name))
