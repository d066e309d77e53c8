"""Sphinx configuration for the pytensor-jax-ofg documentation.

Build with ``bash scripts/docs`` (``python -m sphinx -W -b html doc
doc/_build/html``). The tutorials in ``doc/tutorials_src/`` are scripts that
sphinx-gallery runs during the build, in this process, to make their figures
and output (``-D plot_gallery=0`` builds them without running them).
"""

import doctest
import runpy
import sys
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parent.parent
# The docs' own extensions: figures rendered from benchmarks/results/
# (results_sphinx, charts) and facts read from pyproject.toml (project_facts).
sys.path.insert(0, str(CHECKOUT / "doc" / "_ext"))
#: The project's repository (the install page and the navbar link to it).
REPOSITORY = "https://github.com/pymc-devs/pytensor-jax-ofg"

# Document this checkout's modules, never a stale installed copy. The root
# conftest.py does exactly that for the tests (``pytensor/`` here has no
# ``__init__.py``, so it puts the checkout's folders first on the installed
# PyTensor sub-packages' search paths); run it rather than repeat it.
runpy.run_path(str(CHECKOUT / "conftest.py"))
# This folder's extensions (``flags_directive``: the tables of flags).
sys.path.insert(0, str(Path(__file__).resolve().parent))

project = "pytensor-jax-ofg"
author = "pytensor-jax-ofg developers"
copyright = "pytensor-jax-ofg developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "matplotlib.sphinxext.plot_directive",
    "results_sphinx",
    "project_facts",
    "flags_directive",
]

html_theme = "pydata_sphinx_theme"
html_title = "pytensor-jax-ofg"
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 8,
    "navbar_align": "left",
    # The search as an icon (Ctrl+K opens it): the page links get one row.
    "navbar_persistent": ["search-button"],
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
    "icon_links": [
        {
            "name": "Repository on GitHub",
            "url": REPOSITORY,
            "icon": "fa-brands fa-github",
            "type": "fontawesome",
        }
    ],
}
rst_epilog = f"""
.. _repository: {REPOSITORY}
"""
# Pages without siblings need no section navigation: their tables get the width.
html_sidebars = {
    page: []
    for page in (
        "index",
        "install",
        "getting_started",
        "guide/compared_with_wrap_jax",
        "library/jax_ofg",
        "benchmarks",
        "benchmark_notes",
        "developer",
        "tutorials/*",
    )
}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
exclude_patterns = [
    "_build",
    "_ext",
    "tutorials_src/README.rst",
    "_why.rst",
    # pages of running times an older sphinx-gallery run may have left
    "sg_execution_times.rst",
    "tutorials/sg_execution_times.rst",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_heading_anchors = 3
nitpicky = False
autodoc_member_order = "bysource"
# Document what this package writes: a method without a docstring of its own
# (an Op's ``pullback``, say) must not show PyTensor's generic text.
autodoc_inherit_docstrings = False
autosummary_generate = False

# A copy button on every code block; what it copies leaves out ``>>>`` and
# ``...`` prompts, shell prompts and the output lines of a doctest.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_exclude = ".linenos, .gp, .go"

# The landing page's model runs while the docs build (``.. plot::``): its
# figure is made by its code, shown with it.
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.figsize": (7.0, 3.2)}
napoleon_numpy_docstring = True
napoleon_google_docstring = False

sphinx_gallery_conf = {
    "examples_dirs": "tutorials_src",
    "gallery_dirs": "tutorials",
    # Every script is a tutorial, run top to bottom (not only plot_*.py).
    "filename_pattern": r"/",
    "ignore_pattern": r"/_",
    "download_all_examples": False,
    "show_memory": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "reference_url": {},
    "first_notebook_cell": None,
    # Tutorials show what a model gives, not how long a build beside other
    # work took: no running time under a tutorial, no page of running times.
    "min_reported_time": float("inf"),
    "write_computation_times": False,
    # A cell's last expression is not shown (a plot call's return value would
    # show as "<... object at 0x...>"): tutorials print what they show.
    "capture_repr": (),
}

# `python -m sphinx -b doctest doc <dir>` runs the guide's examples and the
# autodoc'd docstrings in one namespace; give it the module's own names, as
# `doctest.testmod` does.
# Run as a script: code under the pages' ``if __name__ == "__main__":`` runs.
doctest_global_setup = '__name__ = "__main__"\nfrom pytensor.compile.jax_ofg import *'
# As the docs test compares them (tests/compile/test_jax_ofg_docs.py): printed
# tables and long messages may wrap.
doctest_default_flags = (
    doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.DONT_ACCEPT_TRUE_FOR_1
)
