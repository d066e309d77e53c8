"""The examples in the documentation and in the docstrings run and print what they say."""

import doctest
from pathlib import Path

import pytest

import pytensor.compile.jax_ofg as jax_ofg
import pytensor.compile.jax_ofg_dims as jax_ofg_dims
import pytensor.compile.jax_ofg_functions as jax_ofg_functions
import pytensor.compile.jax_ofg_shapes as jax_ofg_shapes


DOC = Path(__file__).resolve().parents[2] / "doc" / "library" / "jax_ofg.rst"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize(
    "module",
    [jax_ofg, jax_ofg_dims, jax_ofg_functions, jax_ofg_shapes],
    ids=lambda m: m.__name__,
)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.attempted > 0
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
