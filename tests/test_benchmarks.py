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


#: Every table stored in ``benchmarks/results/``: the script that renders it,
#: and how it renders the table from the stored runs (its ``.json``, or
#: ``stan_ode.jsonl``).
RENDERED = {
    "cold_start": ("cold_start", lambda m: m.report(load("cold_start"))),
    "cold_start_nutpie": ("cold_start", lambda m: m.report(load("cold_start_nutpie"))),
    "default_route": ("default_route", lambda m: m.report(load("default_route"))),
    "many_fits": ("many_fits", lambda m: m.report(load("many_fits"))),
    "memory": ("memory", lambda m: m.report(load("memory"))),
    "routes": ("routes", lambda m: m.report(load("routes"))),
    "small_linalg": ("small_linalg", lambda m: m.report(load("small_linalg"))),
    "small_odes": ("small_odes", lambda m: m.report(load("small_odes"))),
    "speed": ("speed", lambda m: m.report(load("speed"))),
    "stan_ode": ("stan_ode", lambda m: m.report()),
    "vs_stan": ("vs_stan", lambda m: m.report(load("vs_stan"), m.parse_args([]))),
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
    script, render = RENDERED[name]
    with imported_scripts(BENCHMARKS / f"{script}.py") as (module,):
        rendered = render(module)
    assert rendered == (BENCHMARKS / "results" / f"{name}.md").read_text()


def test_every_stored_table_has_its_runs_beside_it_and_is_rendered_above():
    results = BENCHMARKS / "results"
    tables = {path.stem for path in results.glob("*.md")}
    assert tables == set(RENDERED)
    for name in tables:
        data = [results / f"{name}{suffix}" for suffix in (".json", ".jsonl")]
        assert any(path.exists() for path in data), f"{name}.md has no data"


def test_the_room_edits_no_import_path():
    """Its modules come from where Python finds them (``benchmarks/_checkout.py``)."""
    for path in BENCHMARKS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert getattr(node.value, "id", None) != "sys", path.name


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


def test_the_room_uses_the_trace_cache_through_its_door():
    """No benchmark imports a module of ``cache/`` but ``cache/api.py``."""
    door = "pytensor.compile._jax_ofg.cache"
    for path in BENCHMARKS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module.startswith(door):
                names = [alias.name for alias in node.names]
                assert (node.module, names) in ((door, ["api"]), (f"{door}.api", names))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith(f"{door}.") or alias.name == (
                        f"{door}.api"
                    ), path.name
