"""The built documentation as a reader sees it: every page in headless Chromium.

:func:`layout_problems` opens each page of a built site at the widths a reader
uses (1400 px, a laptop; 1024 px, a small one) and reports what a reader
would trip over:

* a table, code block or signature wider than the column it sits in (cut
  off, or scrolled sideways inside the page), and text of a sidebar (the
  page's table of contents, the section's pages) running past its edge;
* an image that does not load, a link to a page of the site that does not
  exist or to an anchor the page does not define;
* a code block without its copy button (sphinx-copybutton);
* the top navigation bar on more than one row;
* an object's default repr (``<arviz_plots... object at 0x7f...>``) or a
  doctest placeholder (``0.93...``) shown as if it were a result.

Chromium and its driver are Debian's (``apt-get install chromium
chromium-driver``; ``.ci/run`` installs them), driven through Selenium.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit


#: Where Debian's packages put the browser and its driver.
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTHS = (1400, 1024)

#: Run in the page: what a reader would trip over, as plain data.
_INSPECT = r"""
const slack = 2;  // px: rounding
const report = {overflows: [], images: [], links: [], code: 0, buttons: 0, rows: 1,
                cut: [], reprs: [], placeholders: []};
const article = document.querySelector("article.bd-article") || document.body;
const column = article.getBoundingClientRect();
const label = (el) => {
  const text = (el.innerText || "").trim().split("\n")[0].slice(0, 60);
  const section = el.closest("section[id]");
  return (section ? "#" + section.id + ": " : "") + text;
};
const wide = (el) => {
  const box = el.getBoundingClientRect();
  // Wider than the column, or scrolling sideways inside its own box.
  const beyond = Math.max(box.right - column.right, column.left - box.left);
  const scrolled = el.scrollWidth - el.clientWidth;
  return Math.max(beyond, scrolled);
};
for (const el of article.querySelectorAll("table")) {
  if (el.closest(".sphx-glr-thumbnails")) continue;
  const container = el.closest(".pst-scrollable-table-container") || el;
  const over = Math.max(wide(el), wide(container), el.scrollWidth - container.clientWidth);
  if (over > slack) report.overflows.push(["table", Math.round(over), label(el)]);
}
for (const el of article.querySelectorAll("pre")) {
  const over = wide(el);
  if (over > slack) report.overflows.push(["code block", Math.round(over), label(el)]);
}
for (const el of article.querySelectorAll("dl.py > dt")) {
  const over = wide(el);
  if (over > slack) report.overflows.push(["signature", Math.round(over), label(el)]);
}
// Sidebar text past the sidebar's visible edge (the sidebar clips it, or
// scrolls it sideways): the extent of each entry's text, not of its box.
for (const side of document.querySelectorAll(".bd-sidebar-primary, .bd-sidebar-secondary")) {
  if (side.offsetParent === null) continue;
  const edge = side.getBoundingClientRect();
  const right = edge.left + side.clientLeft + side.clientWidth;
  for (const el of side.querySelectorAll("a, code")) {
    const range = document.createRange();
    range.selectNodeContents(el);
    const box = range.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if (box.right > right + slack || box.left < edge.left - slack) {
      report.cut.push((el.innerText || "").trim().split("\n")[0].slice(0, 60));
    }
  }
}
// What a reader would take for a result: default reprs, doctest placeholders.
const shown = article.innerText || "";
for (const m of shown.matchAll(/<[\w.]+ object at 0x[0-9a-fA-F]+>/g)) report.reprs.push(m[0]);
for (const m of shown.matchAll(/\S*\d\.\d*\.\.\.\S*/g)) report.placeholders.push(m[0]);
for (const el of article.querySelectorAll("img")) {
  if (!el.complete || el.naturalWidth === 0) report.images.push(el.getAttribute("src"));
  else {
    const over = wide(el);
    if (over > slack) report.overflows.push(["image", Math.round(over), el.getAttribute("src")]);
  }
}
for (const el of document.querySelectorAll("a[href]")) report.links.push(el.href);
const blocks = article.querySelectorAll("div.highlight pre");
report.code = blocks.length;
for (const el of blocks) if (el.parentElement.querySelector("button.copybtn")) report.buttons += 1;
// The header's items (brand, page links, search, theme switch) by their
// vertical centres: one row when they all share one.
const centres = [...document.querySelectorAll(
  ".bd-header .navbar-brand, .bd-header .bd-navbar-elements > li, "
  + ".bd-header .search-button-field, .bd-header .search-button, "
  + ".bd-header .theme-switch-button, .bd-header .navbar-icon-links")]
  .filter((el) => el.offsetParent !== null && el.getBoundingClientRect().height > 0)
  .map((el) => { const b = el.getBoundingClientRect(); return (b.top + b.bottom) / 2; })
  .sort((a, b) => a - b);
report.rows = centres.length ? 1 : 0;
for (let i = 1; i < centres.length; i++) if (centres[i] - centres[i - 1] > 16) report.rows += 1;
return report;
"""


def chromium_missing() -> str | None:
    """Why Chromium cannot run here, or None when it can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return (
                f"{path} is missing: install Debian's packages "
                "(apt-get install chromium chromium-driver; .ci/run does)"
            )
    return None


def browser():
    """A headless Chromium (Selenium's driver); quit it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    driver._profile_dir = profile  # removed by close()
    return driver


def close(driver) -> None:
    driver.quit()
    shutil.rmtree(driver._profile_dir, ignore_errors=True)


def site_pages(site: Path) -> list[Path]:
    """Every page of a built Sphinx site (not search, index or source pages)."""
    skip = {"search.html", "genindex.html", "py-modindex.html"}
    return sorted(
        page
        for page in site.rglob("*.html")
        if page.name not in skip
        and not {"_static", "_sources", "_images", "_modules"}
        & set(page.relative_to(site).parts)
    )


def _anchor_exists(driver, file: Path, fragment: str, cache: dict) -> bool:
    if file not in cache:
        from html.parser import HTMLParser

        ids: set[str] = set()

        class Ids(HTMLParser):
            def handle_starttag(self, tag, attrs):
                attrs = dict(attrs)
                if attrs.get("id"):
                    ids.add(attrs["id"])
                if tag == "a" and attrs.get("name"):
                    ids.add(attrs["name"])

        Ids().feed(file.read_text(errors="replace"))
        cache[file] = ids
    return fragment in cache[file]


def layout_problems(
    site: Path,
    pages: Iterable[Path] | None = None,
    widths: Sequence[int] = WIDTHS,
    *,
    one_row_navbar_at: int = 1024,
) -> list[str]:
    """Open every page at every width; return one line per problem found."""
    site = site.resolve()
    pages = site_pages(site) if pages is None else [Path(p).resolve() for p in pages]
    problems: list[str] = []
    anchors: dict[Path, set[str]] = {}
    driver = browser()
    try:
        for width in widths:
            driver.set_window_size(width, 900)
            for page in pages:
                name = str(page.relative_to(site))
                driver.get(page.as_uri())
                report = driver.execute_script(_INSPECT)
                for kind, pixels, where in report["overflows"]:
                    problems.append(
                        f"{name} @ {width}px: {kind} {pixels}px wider than "
                        f"its column ({where})"
                    )
                problems += [
                    f"{name} @ {width}px: image does not load: {src}"
                    for src in report["images"]
                ]
                if report["buttons"] < report["code"]:
                    problems.append(
                        f"{name} @ {width}px: {report['code'] - report['buttons']} "
                        f"of {report['code']} code blocks without a copy button"
                    )
                problems += [
                    f"{name} @ {width}px: cut off at the sidebar's edge: {text!r}"
                    for text in dict.fromkeys(report["cut"])
                ]
                if width == widths[0]:  # what the page says is the same at any width
                    problems += [
                        f"{name}: an object's repr shown: {text}"
                        for text in dict.fromkeys(report["reprs"])
                    ]
                    problems += [
                        f"{name}: a doctest placeholder shown: {text}"
                        for text in dict.fromkeys(report["placeholders"])
                    ]
                if width >= one_row_navbar_at and report["rows"] > 1:
                    problems.append(
                        f"{name} @ {width}px: the navbar takes {report['rows']} rows"
                    )
                if width != widths[0]:
                    continue  # links do not depend on the width
                for href in report["links"]:
                    parts = urlsplit(href)
                    if parts.scheme != "file":
                        continue  # external: not checked (no internet here)
                    file = Path(unquote(parts.path))
                    if file.is_dir():
                        file = file / "index.html"
                    if not file.exists():
                        problems.append(f"{name}: broken link {href}")
                    elif (
                        parts.fragment
                        and file.suffix == ".html"
                        and not _anchor_exists(
                            driver, file, unquote(parts.fragment), anchors
                        )
                    ):
                        problems.append(f"{name}: link to a missing anchor {href}")
    finally:
        close(driver)
    return problems
