"""Sphinx configuration for the pytensor-jax-ofg documentation.

Build with ``python -m sphinx -W -b html doc doc/_build/html``.
"""

import runpy
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parent.parent

# Document this checkout's modules, never a stale installed copy. The root
# conftest.py does exactly that for the tests (``pytensor/`` here has no
# ``__init__.py``, so it puts the checkout's folders first on the installed
# PyTensor sub-packages' search paths); run it rather than repeat it.
runpy.run_path(str(CHECKOUT / "conftest.py"))

project = "pytensor-jax-ofg"
author = "pytensor-jax-ofg developers"
copyright = "pytensor-jax-ofg developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
]

# Bundled theme only: nothing to download.
html_theme = "alabaster"
exclude_patterns = ["_build"]
nitpicky = False
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False

# `python -m sphinx -b doctest doc <dir>` runs the guide's examples and the
# autodoc'd docstrings in one namespace; give it the module's own names, as
# `doctest.testmod` does.
doctest_global_setup = "from pytensor.compile.jax_ofg import *"
