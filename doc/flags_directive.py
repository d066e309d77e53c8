"""The ``jax-ofg-flags`` directive: the docs' tables of flags, generated from ``flags.FLAGS``.

No flag is typed into a page: each table is made from the package's one table
of flags (``pytensor/compile/_jax_ofg/flags.py``) while the docs build.

``.. jax-ofg-flags:: changes``
    What importing the package changes: the rows written in the directive's
    body first (``list-table`` rows: changes no flag turns off), then one row
    per flag that turns a change off -- the change, the value that turns it
    off and when the flag is read.
``.. jax-ofg-flags:: all``
    Every flag: its name, default, when it is read and what it does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from pytensor.compile._jax_ofg.flags import FLAGS, Flag


#: A table's kind: its header and column widths.
TABLES = {
    "changes": (("change", "turned off by"), (55, 45)),
    "all": (("flag", "default", "read", "what it does"), (24, 10, 22, 44)),
}


def _literal_backticks(text: str) -> str:
    """A flag's help (plain text, `name` for a name) as reStructuredText."""
    return re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", text)


def rows(kind: str, flags: tuple[Flag, ...] = FLAGS) -> list[tuple[str, ...]]:
    """The cells of each flag's row in the table ``kind`` (reStructuredText).

    >>> rows("all")[0][0]
    '``jax_ofg__small_linalg_max_size``'
    """
    if kind == "changes":
        return [
            (flag.change, f"``{flag.name}={flag.off}``, read {flag.read}")
            for flag in flags
            if flag.change is not None
        ]
    return [
        (
            f"``{flag.name}``",
            f"``{flag.default!r}``",
            flag.read,
            _literal_backticks(flag.doc),
        )
        for flag in flags
    ]


def list_table(kind: str, written: Sequence[str] = ()) -> list[str]:
    """The table ``kind`` as a ``list-table``: its header, the ``written`` rows
    (lines of ``list-table`` rows), then a row per flag."""
    header, widths = TABLES[kind]
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        f"   :widths: {' '.join(map(str, widths))}",
        "",
    ]
    lines += _row(header)
    lines += [f"   {line}" if line.strip() else "" for line in written]
    for cells in rows(kind):
        lines += _row(cells)
    return lines


def _row(cells: tuple[str, ...]) -> list[str]:
    first, *others = cells
    return [f"   * - {first}", *(f"     - {cell}" for cell in others)]


class FlagsTable(SphinxDirective):
    """``.. jax-ofg-flags:: changes|all``: a table of the package's flags."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        kind = self.arguments[0]
        if kind not in TABLES:
            raise self.error(
                f"jax-ofg-flags: unknown table {kind!r}; use one of {sorted(TABLES)}"
            )
        if kind == "all" and self.content:
            raise self.error("jax-ofg-flags: the table 'all' takes no rows of its own")
        lines = list_table(kind, list(self.content))
        container = nodes.container()
        self.state.nested_parse(
            StringList(lines, source=self.get_source_info()[0]),
            self.content_offset,
            container,
        )
        return container.children


def setup(app) -> dict:
    app.add_directive("jax-ofg-flags", FlagsTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
