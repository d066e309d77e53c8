"""Where a benchmark's code comes from: this checkout's package and its examples.

Every benchmark imports this module first (a script's own folder,
``benchmarks/``, is where Python looks first). Inside a checkout it

* makes ``pytensor.compile.jax_ofg`` and the rest of this project's modules
  the checkout's, not an installed copy: the root ``conftest.py``'s finder,
  loaded by its path, unless a process already has one (``routes.py``'s
  processes run another checkout's);
* makes the examples' modules (``examples/*.py``) importable by their names,
  as the examples import each other: a finder for exactly those files, put
  before Python's own, so that ``stan_ode`` is the example, not
  ``benchmarks/stan_ode.py``.

Processes a benchmark starts run it too: :data:`STARTUP` is the
``sitecustomize`` of :func:`_processes.checkout_startup`, which every Python
process of the run executes at start-up (Dask's workers and PyMC's included).
Outside a checkout (an unpacked sdist without ``conftest.py``) the installed
package is used and only the examples' finder is added.

No ``sys.path`` entry is added: nothing else in ``examples/`` or the root
can shadow a module.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: Inside a checkout: its root ``conftest.py`` points imports at its modules.
IN_CHECKOUT = (ROOT / "conftest.py").exists()

#: Run at start-up by the processes a benchmark starts (see above).
STARTUP = f"""
import importlib.util
_spec = importlib.util.spec_from_file_location("_room", {str(Path(__file__))!r})
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
"""


class ExampleModules(importlib.abc.MetaPathFinder):
    """Finds the top-level modules that are files of ``examples/``."""

    def find_spec(self, fullname, path, target=None):
        file = EXAMPLES / f"{fullname}.py"
        if path is None and "." not in fullname and file.is_file():
            return importlib.util.spec_from_file_location(fullname, file)
        return None


def _has_checkout_finder() -> bool:
    """Whether a checkout's ``conftest.py`` finder is installed (any checkout's)."""
    for finder in sys.meta_path:
        code = getattr(getattr(type(finder), "find_spec", None), "__code__", None)
        if code is not None and code.co_filename.endswith("conftest.py"):
            return True
    return False


if IN_CHECKOUT and not _has_checkout_finder():
    _spec = importlib.util.spec_from_file_location(
        "_checkout_modules", ROOT / "conftest.py"
    )
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
if not any(type(f).__name__ == "ExampleModules" for f in sys.meta_path):
    sys.meta_path.insert(0, ExampleModules())
