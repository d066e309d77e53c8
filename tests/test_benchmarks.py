"""The benchmark room: results stored as data, tables rendered from them, a lean room.

The benchmarks themselves never run in the test suite; these tests check that
their stored runs render as the tables beside them, and the room's size.
"""

import ast
import json
import logging
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
    "cold_start_first_value": (
        "cold_start",
        lambda m: m.report(load("cold_start_first_value")),
    ),
    "default_route": ("default_route", lambda m: m.report(load("default_route"))),
    "forward_mode": ("forward_mode", lambda m: m.report(load("forward_mode"))),
    "islands_quick": ("islands", lambda m: m.report(load("islands_quick"))),
    "many_fits": ("many_fits", lambda m: m.report(load("many_fits"))),
    "memory": ("memory", lambda m: m.report(load("memory"))),
    "pinning": ("pinning", lambda m: m.report(load("pinning"))),
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
    """Its modules come from where Python finds them (``benchmarks/_room.py``)."""
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


@pytest.fixture
def chains():
    with imported_scripts(BENCHMARKS / "_chains.py") as (module,):
        yield module


def test_chain_threads_sampling_at_once_and_their_homes(chains):
    thread = chains.ChainThread  # pid, tid, cores it may run on, last core, ticks
    watch = chains.ThreadWatch([10, 11])
    watch.reads = [
        [thread(10, 1, (0,), 0, 5), thread(11, 2, (0,), 0, 5)],  # the first read
        [thread(10, 1, (0,), 0, 9), thread(11, 2, (0,), 0, 7)],  # both on core 0
        [thread(10, 1, (0, 1), 1, 12), thread(11, 2, (0, 1), 0, 7)],  # 11 waits
        [thread(10, 1, (0, 1), 1, 13), thread(11, 2, (0, 1), 0, 9)],  # 1 each
    ]
    assert [[t.tid for t in r] for r in watch.sampling()] == [[1, 2], [1], [1, 2]]
    assert watch.at_once() == 2
    assert watch.crowding([0, 1]) == {
        "reads": 3,
        "crowded": 1,  # the second read: core 0 held both, core 1 none
        "homes": {"0": [0, 1], "1": [0]},
    }
    assert chains.cpu_list("0-2,5\n") == (0, 1, 2, 5)


def test_chains_at_once_read_from_pymcs_jobs(chains):
    found = {}
    with chains.chains_recorded(found, nutpie=False):
        message = "Multiprocess sampling (4 chains in 2 jobs)"
        logging.getLogger("pymc.sampling.mcmc").info(message)
    assert found == {"passed": "PyMC: 2 job(s)", "threads": 0, "at once": 2}
    runs = [{chains.KEY: found}, {chains.KEY: {"at once": 1}}, {"chains": 4}]
    assert chains.at_once(runs) == "1, 2, not recorded"


def test_pinning_reports_on_over_off_per_round():
    def run(round_, n, pin, walls):
        return {"round": round_, "n": n, "pin": pin, "walls": walls, "reads": 4}

    processes = [
        run(0, 2, True, [10.0, 12.0]) | {"crowded": 0},
        run(0, 2, False, [20.0, 24.0]) | {"crowded": 3},
        run(1, 2, False, [30.0, 30.0]) | {"crowded": 1},
        run(1, 2, True, [15.0, 15.0]) | {"crowded": 0},
    ]
    for r in processes:
        r["homes"] = {"0": [0], "1": [1]} if r["pin"] else {"0": [0, 1], "1": [0, 1]}
    with imported_scripts(BENCHMARKS / "pinning.py") as (pinning,):
        rows = pinning.processes_rows(processes)
    assert rows == [
        [2, "on", "13.0", "11.0, 15.0", "0.50, 0.50", "0.50", "0 of 8", "0/1; 0/1"],
        [2, "off", "26.0", "22.0, 30.0", "", "", "4 of 8", "01/01; 01/01"],
    ]
