"""Make the test suite import this checkout's modules, never a stale installed copy.

``pytensor/`` here has no ``__init__.py`` (it would shadow PyTensor), so
``import pytensor`` is the installed PyTensor. A finder put first on
:data:`sys.meta_path` resolves this package's modules (``pytensor.*.jax_ofg*``)
to the files next to this conftest, even when an older version of this
project is installed in site-packages; it imports no package of PyTensor's
itself (PyTensor's JAX backend, say, which this package imports only when
needed).
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parent


class CheckoutModules(importlib.abc.MetaPathFinder):
    """Finds ``pytensor.<...>.jax_ofg*`` modules in this checkout."""

    def find_spec(self, fullname, path, target=None):
        package, _, name = fullname.rpartition(".")
        if not package.startswith("pytensor") or not name.startswith("jax_ofg"):
            return None
        file = CHECKOUT.joinpath(*fullname.split(".")).with_suffix(".py")
        if not file.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, file)


if not any(isinstance(f, CheckoutModules) for f in sys.meta_path):
    sys.meta_path.insert(0, CheckoutModules())
