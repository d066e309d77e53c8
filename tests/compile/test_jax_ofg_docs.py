"""The examples in the documentation and in the docstrings run and print what they say."""

import doctest
import importlib

import pytest
from _checkout import ROOT, module_files

import pytensor.compile.jax_ofg  # noqa: F401 (installs the package first)


CHECKOUT = ROOT
DOC = CHECKOUT / "doc" / "library" / "jax_ofg.rst"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: Every module of the package, by dotted name.
MODULES = list(module_files())


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.failed == 0


def test_user_guide_examples():
    # Sphinx's `testsetup` block is not a doctest: run its imports first.
    setup = DOC.read_text().split(".. testsetup::")[1].split("\n\n")[1]
    globs = {}
    exec("\n".join(line.strip() for line in setup.splitlines()), globs)
    result = doctest.testfile(
        str(DOC), module_relative=False, globs=globs, optionflags=FLAGS
    )
    assert result.attempted >= 10
    assert result.failed == 0
