"""Make the test suite import this checkout's modules, never a stale installed copy.

``pytensor/`` here has no ``__init__.py`` (it would shadow PyTensor), so
``import pytensor`` is the installed PyTensor. Its sub-packages' ``__path__``
lists get this checkout's folders first, so ``pytensor.compile.jax_ofg`` and
friends resolve to the files next to this conftest even when an older version
of this project is installed in site-packages.
"""

import importlib
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parent

for package in (
    "pytensor.compile",
    "pytensor.link.jax.dispatch",
    "pytensor.link.numba.dispatch",
    "pytensor.tensor.rewriting",
):
    folder = CHECKOUT.joinpath(*package.split("."))
    if folder.is_dir():
        module = importlib.import_module(package)
        module.__path__.insert(0, str(folder))
