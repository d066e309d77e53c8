"""Make the test suite import this checkout's modules, never a stale installed copy.

``pytensor/`` here has no ``__init__.py`` (it would shadow PyTensor), so
``import pytensor`` is the installed PyTensor. A finder put first on
:data:`sys.meta_path` resolves this package's modules -- the facade
``pytensor.compile.jax_ofg``, the private package ``pytensor.compile._jax_ofg``
and everything in it, the dispatches ``pytensor.link.*.dispatch.jax_ofg`` --
to the files next to this conftest, even when an older version of this
project is installed in site-packages; a module of ours that is not in the
checkout (a name from an older layout, say) is an error, not the installed
copy. It imports no package of PyTensor's itself (PyTensor's JAX backend,
say, which this package imports only when needed).
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parent


def _ours(fullname: str) -> bool:
    """Whether ``fullname`` names a module of this project (found or not)."""
    parts = fullname.split(".")
    return parts[0] == "pytensor" and any(
        part.startswith(("jax_ofg", "_jax_ofg")) for part in parts[1:]
    )


class CheckoutModules(importlib.abc.MetaPathFinder):
    """Finds this project's ``pytensor.*`` modules and packages in this checkout."""

    def find_spec(self, fullname, path, target=None):
        if not _ours(fullname):
            return None
        location = CHECKOUT.joinpath(*fullname.split("."))
        package = location / "__init__.py"
        if package.is_file():
            return importlib.util.spec_from_file_location(
                fullname, package, submodule_search_locations=[str(location)]
            )
        file = location.with_suffix(".py")
        if file.is_file():
            return importlib.util.spec_from_file_location(fullname, file)
        raise ModuleNotFoundError(
            f"No module named {fullname!r} in the checkout {CHECKOUT} "
            "(not importing an installed copy instead)",
            name=fullname,
        )


if not any(isinstance(f, CheckoutModules) for f in sys.meta_path):
    sys.meta_path.insert(0, CheckoutModules())
