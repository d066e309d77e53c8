"""The examples in the documentation's pages and in the docstrings run and print what they say."""

import doctest
import importlib

import pytest
from _checkout import ROOT, module_files

import pytensor.compile.jax_ofg  # noqa: F401 (installs the package first)


CHECKOUT = ROOT
DOC = CHECKOUT / "doc"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: Every module of the package, by dotted name.
MODULES = list(module_files())


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.failed == 0


def pages_with_examples() -> list:
    """The documentation's hand-written pages that hold ``>>>`` examples."""
    pages = sorted(DOC.rglob("*.rst"))
    return [
        page
        for page in pages
        if not {"_build", "tutorials"} & set(page.relative_to(DOC).parts)
        and ">>> " in page.read_text()
    ]


def test_the_pages_with_examples_are_the_expected_ones():
    names = {str(page.relative_to(DOC)) for page in pages_with_examples()}
    expected = {"getting_started.rst", "guide/wrapping.rst", "guide/derivatives.rst"}
    assert expected <= names, names


@pytest.mark.parametrize(
    "page", pages_with_examples(), ids=lambda page: str(page.relative_to(DOC))
)
def test_documentation_examples(page):
    text = page.read_text()
    globs = {}
    if ".. testsetup::" in text:
        # Sphinx's `testsetup` block is not a doctest: run its imports first.
        setup = text.split(".. testsetup::")[1].split("\n\n")[1]
        exec("\n".join(line.strip() for line in setup.splitlines()), globs)
    result = doctest.testfile(
        str(page), module_relative=False, globs=globs, optionflags=FLAGS
    )
    assert result.attempted >= 1
    assert result.failed == 0
