"""The benchmark room: results stored as data, tables rendered from them, a lean room.

The benchmarks themselves never run in the test suite; these tests check that
their stored runs render as the tables beside them, and the room's size.
"""

import ast
import json
import os
from pathlib import Path

import pytest
from _scripts import BENCHMARKS, ROOT, imported_scripts


#: Benchmarks whose stored runs the tables in ``benchmarks/results/`` were
#: rendered from: script, how to render the stored runs.
RENDERED = {
    "small_odes": lambda module: module.report(load("small_odes")),
    "vs_stan": lambda module: module.report(load("vs_stan"), module.parse_args([])),
    "default_route": lambda module: module.report(load("default_route")),
    "stan_ode": lambda module: module.report(),
}


@pytest.fixture(autouse=True)
def _environment_kept():
    """A benchmark sets variables for its own runs as it is imported
    (``EQX_ON_ERROR=nan``): not for the tests after it."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def load(name: str):
    return json.loads((BENCHMARKS / "results" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_the_stored_tables_are_rendered_from_the_stored_runs(name):
    with imported_scripts(BENCHMARKS / f"{name}.py") as (module,):
        rendered = RENDERED[name](module)
    assert rendered == (BENCHMARKS / "results" / f"{name}.md").read_text()


def python_lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def test_the_benchmark_room_is_at_most_half_the_product():
    product = python_lines(ROOT / "pytensor")
    room = python_lines(BENCHMARKS)
    assert room <= product / 2, f"benchmarks/: {room} lines, the product {product}"


def long_functions(folder: Path, most: int = 80) -> list[str]:
    """The functions of ``folder``'s modules longer than ``most`` lines."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > most:
                    found.append(f"{path.relative_to(ROOT)}:{node.name} ({lines})")
    return found


def test_no_function_is_longer_than_80_lines():
    """In the benchmarks (the product's: the architecture test)."""
    assert not long_functions(BENCHMARKS)


def test_every_report_text_is_a_benchmarks():
    """Each ``benchmarks/texts/<name>.md`` belongs to a script that reads it."""
    for text in (BENCHMARKS / "texts").glob("*.md"):
        script = BENCHMARKS / f"{text.stem}.py"
        assert script.exists(), text.name
        assert f'texts("{text.stem}")' in script.read_text(), text.name
