"""The examples in the documentation's pages and in the docstrings run and print what they say.

A page's examples are code a reader pastes: ``.. testcode::`` blocks (shown
as plain Python, with a copy button), each followed, where it prints, by a
``.. testoutput::`` block with what it prints. The blocks of a page run in
order in one namespace, as a reader running them one after the other would;
a page's ``.. testsetup::`` runs first. Pages and docstrings may also hold
``>>>`` examples, run as doctests.
"""

import contextlib
import doctest
import importlib
import io
import re
import textwrap

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


#: A Sphinx doctest directive and its indented content.
BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?P<kind>testsetup|testcode|testoutput)::[^\n]*\n"
    r"(?P<body>(?:(?P=indent)[ \t]+[^\n]*\n|[ \t]*\n)*)",
    re.M,
)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The page's ``testsetup``, ``testcode`` and ``testoutput`` blocks in
    order, as ``(kind, dedented source)`` (the directives' options left out)."""
    blocks = []
    for match in BLOCK.finditer(text):
        body = textwrap.dedent(match["body"])
        lines = body.splitlines()
        while lines and re.match(r"^:\w[\w-]*:", lines[0]):
            lines.pop(0)  # an option such as :hide:
        blocks.append((match["kind"], "\n".join(lines).strip("\n") + "\n"))
    return blocks


def run_code_blocks(text: str, name: str) -> int:
    """Run a page's code blocks in one namespace; check each printed output.

    Returns the number of ``testcode`` blocks run; raises AssertionError
    naming the block whose output differs from its ``testoutput``.
    """
    checker = doctest.OutputChecker()
    # As a script a reader runs: code under ``if __name__ == "__main__":`` runs.
    namespace = {"__name__": "__main__"}
    ran, printed = 0, None
    for number, (kind, source) in enumerate(code_blocks(text)):
        if kind == "testoutput":
            assert printed is not None, f"{name}: output block {number} follows no code"
            assert checker.check_output(source, printed, FLAGS), (
                f"{name}, block {number}: expected\n{source}\ngot\n{printed}"
            )
            printed = None
            continue
        if kind == "testsetup" and ".. testcode::" not in text:
            continue  # the setup of a page with doctests only: run with them
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compile(source, f"<{name}, block {number}>", "exec"), namespace)
        printed = output.getvalue() if kind == "testcode" else None
        ran += kind == "testcode"
    return ran


def test_code_blocks_run_and_their_output_is_checked():
    page = """
Text.

.. testcode::

   x = 2
   print(x + 1)

.. testoutput::

   3

.. testcode::
   :hide:

   print(x * 10)

.. testoutput::

   20
"""
    assert run_code_blocks(page, "demo") == 2
    with pytest.raises(AssertionError, match="expected"):
        run_code_blocks(page.replace("   20", "   21"), "demo")


def pages_with_code() -> list:
    """The hand-written pages that hold ``testcode`` blocks."""
    return [
        page
        for page in sorted(DOC.rglob("*.rst"))
        if not {"_build", "tutorials"} & set(page.relative_to(DOC).parts)
        and ".. testcode::" in page.read_text()
    ]


def test_the_pages_with_code_are_the_expected_ones():
    names = {str(page.relative_to(DOC)) for page in pages_with_code()}
    expected = {
        "getting_started.rst",
        "guide/wrapping.rst",
        "guide/derivatives.rst",
        "howto/stan.rst",
    }
    assert expected <= names, names


@pytest.mark.parametrize(
    "page", pages_with_code(), ids=lambda page: str(page.relative_to(DOC))
)
def test_documentation_code_blocks(page):
    assert run_code_blocks(page.read_text(), str(page.relative_to(DOC))) >= 1


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
    assert {"explanation/islands.rst"} <= names, names


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
