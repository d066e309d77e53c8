"""Figures a page states by hand: the check behind "one source for every figure".

Every timing and ratio in the documentation and the README is rendered from
``benchmarks/results/`` (``doc/_ext/figures.py``); what the Sphinx side
renders carries the class ``from-results``, and the README's rendered parts
sit between ``<!-- results:NAME -->`` markers. What is left is typed by hand,
and must state no number of seconds and no ratio:

* :data:`FIGURE`: a number of seconds, milliseconds, microseconds or
  minutes (``13 s``, ``0.15 s``, ``3.7 µs``, ``7 minutes``), or a ratio
  written with an ``x`` or ``×`` after it (``0.33x``, ``1.03-1.28×``, not
  ``2 x 2`` nor ``4 × (1000 + 1000)``);
* a table whose header speaks of time or ratios (``µs per call``,
  ``x Stan``, ``wall``) with a bare number in its body.

>>> stated_figures("<p>took 13 s, 0.33x Stan's</p>")
['13 s', '0.33x']
>>> stated_figures('<p><span class="from-results">13 s</span>, 4 × (1000 + 1000)</p>')
[]
"""

from __future__ import annotations

import html.parser
import re


FIGURE = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?"
    r"(?:(?:s|ms|µs|μs|us|ns|seconds?|minutes?|mins?)\b(?![-/])"
    r"|[x×](?!\w)(?!\s*[\d(]))"
)
#: A header cell that says its column holds times or ratios.
TIMING_HEADER = re.compile(
    r"(?<![\w])(?:s|ms|µs|μs|us|seconds?|minutes?|wall|ESS/s|speed-up)(?![\w/])"
    r"|(?:^|\s)[x×](?:\s|$)",
    re.I,
)
NUMBER = re.compile(r"[\d.,]+(?:\s*\(.*\))?")
#: Elements whose text is rendered from the results, or is not text a reader reads.
FROM_RESULTS = "from-results"
_SKIPPED_TAGS = {"script", "style", "head"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
         "meta", "source", "track", "wbr"}  # fmt: skip
_BLOCKS = {"p", "div", "li", "td", "th", "tr", "pre", "br", "h1", "h2", "h3",
           "h4", "h5", "h6", "dt", "dd", "section", "table", "caption"}  # fmt: skip


class _Page(html.parser.HTMLParser):
    """A page's text and tables, without what was rendered from the results."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    @property
    def skipping(self) -> bool:
        return any(skipped for _, skipped in self.stack)

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag in _BLOCKS:
            self.text.append("\n")
        if tag in _VOID:
            return
        skipped = tag in _SKIPPED_TAGS or FROM_RESULTS in classes
        self.stack.append((tag, skipped))
        if self.skipping:
            return
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and not self.skipping:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        for at in range(len(self.stack) - 1, -1, -1):
            if self.stack[at][0] == tag:
                del self.stack[at:]
                break
        if tag in _BLOCKS:
            self.text.append("\n")

    def handle_data(self, data):
        if self.skipping:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _figures_in(text: str, context: int = 0) -> list[str]:
    """The figures in ``text``; with ``context``, each with the text around it."""
    found = []
    for match in FIGURE.finditer(text):
        if not context:
            found.append(match[0])
            continue
        around = text[max(0, match.start() - context) : match.end() + context]
        found.append(f"{match[0]!r} in {' '.join(around.split())!r}")
    return found


def typed_table_figures(rows: list[list[str]]) -> list[str]:
    """Bare numbers under a header of times or ratios, in a table typed by hand."""
    if len(rows) < 2:
        return []
    header, body = rows[0], rows[1:]
    timed = [i for i, cell in enumerate(header) if TIMING_HEADER.search(cell)]
    return [
        f"{header[i]}: {row[i]}"
        for row in body
        for i in timed
        if i < len(row) and NUMBER.fullmatch(row[i])
    ]


def stated_figures(page_html: str, context: int = 0) -> list[str]:
    """Every number of seconds or ratio a page states outside what was
    rendered from the stored results, and every bare number in a table of
    times typed by hand (``context``: characters of text around each)."""
    page = _Page()
    page.feed(page_html)
    found = _figures_in("".join(page.text), context)
    for table in page.tables:
        found += typed_table_figures(table)
    return found


def stated_figures_in_markdown(text: str, context: int = 0) -> list[str]:
    """The same in a markdown text (the README, its rendered blocks removed)."""
    found = _figures_in(text, context)
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
        elif rows:
            found += typed_table_figures(rows)
            rows = []
    return found
