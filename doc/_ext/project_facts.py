"""What ``pyproject.toml`` says, rendered on the install page: the supported
versions and the extras, never typed into a page.

``.. supported-versions::`` renders a table of the Python version and every
dependency with its supported range; ``.. extras::`` one of the optional
extras with what each installs.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from docutils.parsers.rst import Directive
from packaging.requirements import Requirement
from results_sphinx import table_node
from stored_results import StoredTable


PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@functools.cache
def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


#: Extras for the project's own work, not a modeller's: left off the versions.
TOOLING_EXTRAS = {"docs", "test"}


def _range(requirement: Requirement) -> str:
    """``>=3.3.8, <3.4``: lower bounds first."""
    parts = sorted(requirement.specifier, key=lambda s: (s.operator[0] != ">", str(s)))
    return ", ".join(map(str, parts)) if parts else "any"


def supported_versions() -> StoredTable:
    """Python and each package a modeller installs, with the versions supported."""
    rows = [["Python", project()["requires-python"], "required"]]
    for line in project()["dependencies"]:
        requirement = Requirement(line)
        rows.append([requirement.name, _range(requirement), "required"])
    for extra, lines in project()["optional-dependencies"].items():
        if extra in TOOLING_EXTRAS:
            continue
        for line in lines:
            requirement = Requirement(line)
            if requirement.name != project()["name"]:
                rows.append([requirement.name, _range(requirement), f"`{extra}` extra"])
    seen, unique = set(), []
    for row in rows:  # a package in two extras: its first, fullest range
        if row[0] not in seen:
            seen.add(row[0])
            unique.append(row)
    return StoredTable(["package", "versions", "installed by"], [False] * 3, unique)


def extras() -> StoredTable:
    """Each extra and what it adds (other extras it includes by name)."""
    rows = []
    for extra, lines in project()["optional-dependencies"].items():
        names = []
        for line in lines:
            requirement = Requirement(line)
            if requirement.name == project()["name"]:
                names += [f"the `{e}` extra" for e in sorted(requirement.extras)]
            else:
                names.append(requirement.name)
        rows.append([f'`pip install ".[{extra}]"`', ", ".join(names)])
    return StoredTable(["command", "adds"], [False, False], rows)


class SupportedVersions(Directive):
    def run(self):
        found = table_node(supported_versions())
        found["classes"] = ["colwidths-auto"]
        return [found]


class Extras(Directive):
    def run(self):
        found = table_node(extras())
        found["classes"] = ["colwidths-auto"]
        return [found]


def setup(app):
    app.add_directive("supported-versions", SupportedVersions)
    app.add_directive("extras", Extras)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
