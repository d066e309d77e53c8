"""The documentation builds with warnings as errors, and what it builds holds up.

The build command is the one in ``scripts/docs`` (what the README says to
run). The tutorials are scripts that sphinx-gallery runs during the build; an
executed build runs them (on one Python only: ``one_python``), the other
builds their pages without running them. Every build checks the API
reference and every link between the built pages (the machines have no
internet: only internal links are checked). The executed build is then read
as a reader reads it: every page in headless Chromium at 1400 and 1024 px
(``_browser``), for tables and code blocks wider than their column, broken
links and images, code without a copy button and a navbar on two rows.
"""

import fcntl
import html.parser
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import _browser
import pytest


ROOT = Path(__file__).resolve().parents[1]
DOCS_SCRIPT = ROOT / "scripts" / "docs"
#: The hand-written content pages and the tutorials, by purpose.
CONTENT_PAGES = [
    "getting_started",
    "guide/wrapping",
    "guide/derivatives",
    "howto/samplers",
    "howto/stan",
    "howto/stiff_models",
    "howto/caches",
    "howto/dask",
    "howto/errors",
    "howto/accelerator",
    "howto/faults",
    "explanation/islands",
    "explanation/host_calls",
    "explanation/trace_cache",
    "library/jax_ofg",
    "benchmarks",
    "developer",
]
TUTORIALS = [
    "tutorials/ode_model",
    "tutorials/stan_port",
    "tutorials/stiff_pkpd",
    "tutorials/hierarchical_outbreaks",
    "tutorials/seir_time_varying",
]
#: What user pages leave to the developer notes: private modules, issues, the
#: state of the machine a figure was measured on.
HISTORY = (
    r"[./]_jax_ofg\b|\bissue \d+|\bissues? (?:that|#)|project's (?:shared )?2-core"
    r"|load average|loaded by|load about|shared 2-core"
)
#: Pages for the project's developers, which may name its private modules.
DEVELOPER_PAGES = {"developer.rst", "benchmark_notes.md"}


def read_in_a_browser(site: Path) -> list[str]:
    """What headless Chromium finds wrong on the site's pages (see ``_browser``).

    Chromium missing is a failure, not a skip: ``.ci/run`` installs it.
    """
    missing = _browser.chromium_missing()
    if missing:
        pytest.fail(missing)
    return _browser.layout_problems(site)


def docs_command(out: Path) -> list[str]:
    """The Sphinx command line of ``scripts/docs``, run by this interpreter into ``out``."""
    (line,) = [s for s in DOCS_SCRIPT.read_text().splitlines() if " -m sphinx " in s]
    python, *arguments = shlex.split(line)
    assert python == "$venv/bin/python" and arguments[-1] == "$@", line
    *arguments, build_dir = arguments[:-1]
    assert build_dir == "doc/_build/html", line
    return [sys.executable, *arguments, "--keep-going", str(out)]


def build(out: Path, *, run_tutorials: bool) -> str:
    """Build the HTML docs into ``out``; fail the test on any warning; return
    Sphinx's output.

    sphinx-gallery writes the tutorials' pages into the source folder
    (``doc/tutorials/``): builds in parallel test workers take turns. With
    ``run_tutorials``, every tutorial runs, even one whose output a build
    before kept.
    """
    command = docs_command(out)
    if run_tutorials:
        command[-1:-1] = ["-D", "sphinx_gallery_conf.run_stale_examples=1"]
    else:
        command[-1:-1] = ["-D", "plot_gallery=0"]
    with open(ROOT / "doc" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=1200
        )
    assert result.returncode == 0, (
        f"sphinx exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout[-5000:]}\n--- stderr ---\n{result.stderr}"
    )
    return result.stdout


class Links(html.parser.HTMLParser):
    """The ids a page defines and the addresses it links to (href and src)."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "a" or (tag == "link" and attrs.get("rel") == "stylesheet"):
            target = attrs.get("href")
        else:
            target = attrs.get("src") if tag in ("img", "script") else None
        if target:
            self.targets.append(target)


def broken_internal_links(site: Path) -> list[str]:
    """Every link between the site's pages (and to its files) that leads
    nowhere: a missing file, or an anchor its page does not define."""
    pages = {}
    for page in site.rglob("*.html"):
        if "_static" in page.relative_to(site).parts:
            continue  # the theme's template fragments, not pages
        parser = Links()
        parser.feed(page.read_text(errors="replace"))
        pages[page.resolve()] = parser
    broken = []
    for page, parser in pages.items():
        for target in parser.targets:
            parts = urlsplit(target)
            if (
                parts.scheme
                or parts.netloc
                or target.startswith(("mailto:", "javascript:", "data:"))
            ):
                continue  # external: not checked (no internet here)
            path = unquote(parts.path)
            file = (page.parent / path).resolve() if path else page
            if file.is_dir():
                file = file / "index.html"
            if not file.exists():
                broken.append(f"{page.relative_to(site.resolve())}: {target} (no file)")
            elif (
                parts.fragment
                and file.suffix == ".html"
                and unquote(parts.fragment) not in pages[file].ids
            ):
                broken.append(
                    f"{page.relative_to(site.resolve())}: {target} (no anchor)"
                )
    return broken


def check_site(site: Path) -> None:
    for name in ["index", *CONTENT_PAGES, *TUTORIALS]:
        assert (site / f"{name}.html").is_file(), name
    reference = (site / "library" / "jax_ofg.html").read_text()
    facade = importlib.import_module("pytensor.compile.jax_ofg")
    # autodoc really imported the module and rendered every public name
    missing = [
        name
        for name in facade.__all__
        if f'id="pytensor.compile.jax_ofg.{name}"' not in reference
    ]
    assert not missing, f"not in the API reference: {missing}"
    # what as_jax_op returns, and nothing PyTensor's base classes document
    assert 'id="pytensor.compile.jax_ofg.JaxOpWrapper"' in reference
    assert "OpFromJax.pullback" not in reference, "PyTensor's generic text"
    assert broken_internal_links(site) == []


def test_the_link_checker_finds_a_broken_link_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text(
        '<p id="here"></p><a href="b.html#there">b</a><a href="#here">self</a>'
        '<a href="c.html">c</a><a href="https://example.org/x">out</a>'
    )
    (tmp_path / "b.html").write_text('<p id="elsewhere"></p>')
    assert sorted(broken_internal_links(tmp_path)) == [
        "a.html: b.html#there (no anchor)",
        "a.html: c.html (no file)",
    ]


def test_the_browser_check_finds_what_a_reader_trips_over(tmp_path):
    """A page with a table and a code block too wide for the pydata theme's
    column, an image that is not there, a broken link and code without copy
    buttons: the browser check reports each; a tidy page, nothing."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(
        'project = "demo"\nhtml_theme = "pydata_sphinx_theme"\n'
        "html_sidebars = {'**': []}\n"
    )
    row = "   * - " + "\n     - ".join(f"column {i} " + "x" * 30 for i in range(12))
    (source / "index.rst").write_text(
        "Demo\n====\n\n.. toctree::\n\n   wide\n   tidy\n"
    )
    (source / "wide.rst").write_text(
        "Wide\n====\n\n.. list-table::\n   :header-rows: 1\n\n"
        f"{row}\n{row}\n\n"
        ".. code-block:: python\n\n   x = " + " + ".join(["1"] * 150) + "\n\n"
        ".. raw:: html\n\n"
        '   <img src="nowhere.png" alt="missing"> <a href="nowhere.html">gone</a>\n'
    )
    (source / "tidy.rst").write_text(
        "Tidy\n====\n\n.. list-table::\n   :header-rows: 1\n\n"
        "   * - a\n     - b\n   * - 1\n     - 2\n"
    )
    site = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source), str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    missing = _browser.chromium_missing()
    if missing:
        pytest.fail(missing)
    wide = _browser.layout_problems(site, [site / "wide.html"])
    for width in (1400, 1024):
        found = [p for p in wide if f"@ {width}px" in p]
        assert any("table" in p and "wider than its column" in p for p in found), wide
        assert any("code block" in p and "wider than" in p for p in found), wide
        assert any("image does not load: nowhere.png" in p for p in found), wide
        assert any("1 of 1 code blocks without a copy button" in p for p in found)
    assert any("broken link" in p and "nowhere.html" in p for p in wide), wide
    assert _browser.layout_problems(site, [site / "tidy.html"]) == []


def test_user_pages_show_results_not_the_projects_history():
    """No page but the developer notes names an issue or a private module."""
    doc = ROOT / "doc"
    sources = [
        *doc.glob("*.rst"),
        *doc.glob("*.md"),
        *doc.glob("*/*.rst"),
        *(doc / "tutorials_src").glob("*.py"),
    ]
    found = []
    for source in sources:
        name = str(source.relative_to(doc))
        if name in DEVELOPER_PAGES or "_build" in name or name.startswith("tutorials/"):
            continue
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if re.search(HISTORY, line, re.I):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_sphinx_html_build_without_running_the_tutorials(tmp_path):
    build(tmp_path / "html", run_tutorials=False)
    check_site(tmp_path / "html")


@pytest.mark.slow
@pytest.mark.one_python
def test_sphinx_html_build_runs_the_tutorials_and_shows_their_figures(tmp_path):
    site = tmp_path / "html"
    output = build(site, run_tutorials=True)
    scripts = sorted((ROOT / "doc" / "tutorials_src").glob("[!_]*.py"))
    assert [f"tutorials/{s.stem}" for s in scripts] == sorted(TUTORIALS)
    ran = f"successfully executed {len(scripts)} out of {len(scripts)} files"
    assert ran in output, output[-3000:]
    check_site(site)
    for name in TUTORIALS:
        page = (site / f"{name}.html").read_text()
        parser = Links()
        parser.feed(page)
        figures = [
            site / "tutorials" / target
            for target in parser.targets
            if "/sphx_glr_" in target
            and target.endswith(".png")
            and "thumb" not in target
        ]
        assert figures, f"{name}: no figure made by running its code"
        for figure in figures:
            assert figure.stat().st_size > 10_000, figure  # a real plot, not empty
        assert "sphx-glr-script-out" in page, f"{name}: no printed output"
    assert read_in_a_browser(site) == []
