"""Sphinx's side of :mod:`figures`: the ``result`` role and the
``results-table`` directive, which render stored benchmark results.

Everything they render carries the class ``from-results``: the docs' figures
test (``tests/test_docs_build.py``) reads the built pages, leaves out what
has that class, and fails on any number of seconds or ratio that remains.
"""

from __future__ import annotations

import re
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from figures import figure, results_table
from stored_results import MissingResult, StoredTable


#: The class of every node rendered from the stored results.
FROM_RESULTS = "from-results"


def inline_cells(text: str) -> list[nodes.Node]:
    """A cell's text with ``code`` in backticks as literals, ``**bold**`` bold."""
    parts: list[nodes.Node] = []
    for piece in re.split(r"(`[^`]+`|\*\*[^*]+\*\*)", text):
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            parts.append(nodes.literal(piece[1:-1], piece[1:-1]))
        elif piece.startswith("**") and piece.endswith("**") and len(piece) > 4:
            parts.append(nodes.strong(piece[2:-2], piece[2:-2]))
        elif piece:
            parts.append(nodes.Text(piece))
    return parts


def table_node(found: StoredTable) -> nodes.table:
    """A docutils table of a stored or rendered table."""
    group = nodes.tgroup(cols=len(found.header))
    for _ in found.header:
        group += nodes.colspec(colwidth=1)
    head, body = nodes.thead(), nodes.tbody()
    for section, rows in ((head, [found.header]), (body, found.rows)):
        for cells in rows:
            row = nodes.row()
            for number, text in enumerate(cells):
                entry = nodes.entry()
                if number < len(found.right_aligned) and found.right_aligned[number]:
                    entry["classes"].append("text-right")
                entry += nodes.paragraph("", "", *inline_cells(text))
                row += entry
            section += row
    group += head
    group += body
    return nodes.table("", group, classes=[FROM_RESULTS, "colwidths-auto"])


def result_role(name, rawtext, text, lineno, inliner, options=None, content=()):
    """``:result:`sir.ours.later``` -- a figure rendered from the stored results."""
    try:
        rendered = figure(text.strip())
    except (KeyError, MissingResult) as error:
        message = inliner.reporter.error(f"result {text!r}: {error}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.inline(rawtext, rendered, classes=[FROM_RESULTS])], []


def only_rows(found: StoredTable, starts: str) -> StoredTable:
    """The rows whose first cell starts with one of the comma-separated words."""
    words = tuple(word.strip() for word in starts.split(","))
    rows = [row for row in found.rows if row[0].startswith(words)]
    if not rows:
        raise MissingResult(f"no row starts with {words}")
    return StoredTable(found.header, found.right_aligned, rows)


def only_columns(found: StoredTable, named: str) -> StoredTable:
    """The columns named (separated by commas, or by ``|`` where one holds a comma)."""
    keep = [c.strip() for c in named.split("|" if "|" in named else ",")]
    indices = [found.column(c) for c in keep]
    return StoredTable(
        [found.header[i] for i in indices],
        [found.right_aligned[i] for i in indices],
        [[row[i] for i in indices] for row in found.rows],
    )


class ResultsTable(Directive):
    """``.. results-table:: NAME`` -- a table rendered from the stored results.

    ``:columns:`` keeps only the columns named (header cells separated by
    commas, or by ``|`` where a header holds a comma);
    ``:rows:`` only the rows whose first cell starts with one of the
    (comma-separated) words given.
    """

    required_arguments = 1
    option_spec: ClassVar = {
        "columns": directives.unchanged,
        "rows": directives.unchanged,
    }

    def run(self):
        name = self.arguments[0]
        try:
            found = results_table(name)
            if "rows" in self.options:
                found = only_rows(found, self.options["rows"])
            if "columns" in self.options:
                found = only_columns(found, self.options["columns"])
        except (KeyError, MissingResult) as error:
            raise self.error(f"results-table {name!r}: {error}") from None
        return [table_node(found)]


def setup(app):
    app.add_role("result", result_role)
    app.add_directive("results-table", ResultsTable)
    # A page is rebuilt when the results it renders change.
    app.connect("env-get-outdated", _pages_with_results)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _pages_with_results(app, env, added, changed, removed):
    return [
        name
        for name in env.found_docs
        if name not in added | changed
        and any(
            marker in (env.doc2path(name).read_text(errors="replace"))
            for marker in ("results-table", ":result:", "{result}")
        )
    ]
