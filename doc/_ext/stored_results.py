"""The stored benchmark results, read by key: the one reader of their files.

Every figure the documentation and the README state comes from
``benchmarks/results/`` through :func:`lookup` (a value in a JSON file, by its
path of keys) or :func:`stored_table` (a table of a stored markdown report,
by the heading it sits under). Which keys hold what is said in
:mod:`result_keys` alone: when a benchmark changes how it stores its results,
that module changes with it, nothing else. A missing file or key raises :class:`MissingResult`,
naming both, so that a build never shows a figure that is not stored.

>>> lookup("vs_stan", "stan|1000000|cold", "chains")
4
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


#: Where the benchmarks store their results.
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


class MissingResult(LookupError):
    """A figure asked for a result that is not stored."""


@functools.cache
def stored(name: str) -> Any:
    """The whole of ``benchmarks/results/<name>.json``."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise MissingResult(f"no stored results {path.name} in {RESULTS}")
    return json.loads(path.read_text())


def lookup(name: str, *path: str | int) -> Any:
    """The value at ``path`` (keys and list indices) in ``results/<name>.json``."""
    value = stored(name)
    for depth, key in enumerate(path):
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            where = " / ".join(map(repr, path[: depth + 1]))
            raise MissingResult(f"{name}.json has nothing at {where}") from None
    return value


def keys_of(name: str, *path: str | int) -> list[str]:
    """The keys of the mapping at ``path`` in ``results/<name>.json``, in order."""
    value = lookup(name, *path)
    if not isinstance(value, dict):
        raise MissingResult(f"{name}.json: {path!r} holds no mapping")
    return [key for key in value if key != "meta"]


@dataclass(frozen=True)
class StoredTable:
    """A markdown table of a stored report: header cells, alignments and rows."""

    header: list[str]
    right_aligned: list[bool]
    rows: list[list[str]]

    def column(self, name: str) -> int:
        """The index of the column headed ``name``."""
        try:
            return self.header.index(name)
        except ValueError:
            raise MissingResult(f"no column {name!r} in {self.header}") from None

    def cell(self, row: str, column: str) -> str:
        """The cell of the row whose first cell is ``row``, in ``column``."""
        for cells in self.rows:
            if cells[0] == row:
                return cells[self.column(column)]
        raise MissingResult(f"no row {row!r} in the table headed {self.header}")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@functools.cache
def stored_tables(name: str) -> dict[str, list[StoredTable]]:
    """The tables of ``results/<name>.md``, by the heading each follows."""
    path = RESULTS / f"{name}.md"
    if not path.exists():
        raise MissingResult(f"no stored report {path.name} in {RESULTS}")
    tables: dict[str, list[StoredTable]] = {}
    heading, lines = "", path.read_text().splitlines()
    for at, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif re.match(r"^\|\s*:?-{3}", line) and at > 0:
            rows = []
            for following in lines[at + 1 :]:
                if not following.startswith("|"):
                    break
                rows.append(_cells(following))
            alignment = [cell.endswith(":") for cell in _cells(line)]
            tables.setdefault(heading, []).append(
                StoredTable(_cells(lines[at - 1]), alignment, rows)
            )
    return tables


def stored_table(name: str, heading: str, index: int = 0) -> StoredTable:
    """Table ``index`` under the heading that starts with ``heading`` in
    ``results/<name>.md``."""
    found = [
        table
        for title, tables in stored_tables(name).items()
        if title.startswith(heading)
        for table in tables
    ]
    if index >= len(found):
        raise MissingResult(f"{name}.md has no table {index} under {heading!r}")
    return found[index]
