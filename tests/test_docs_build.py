"""The documentation builds with warnings as errors, and what it builds holds up.

The build command is the one in ``scripts/docs`` (what the README says to
run). The tutorials are scripts that sphinx-gallery runs during the build; an
executed build runs them (on one Python only: ``one_python``), the other
builds their pages without running them. Every build checks the API
reference, every link between the built pages (the machines have no
internet: only internal links are checked) and every figure the pages state:
none but those rendered from ``benchmarks/results/`` (``_stated_figures``).
The executed build is then read as a reader reads it: every page in headless
Chromium at 1400 and 1024 px (``_browser``), for tables and code blocks wider
than their column, text cut off at a sidebar's edge, broken links and
images, code without a copy button, a navbar on two rows, object reprs and
doctest placeholders. Each tutorial's downloaded script runs from an empty
folder.
"""

import ast
import fcntl
import html
import html.parser
import importlib
import re
import shlex
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import _browser
import pytest
from _fresh_process import run_python
from _stated_figures import stated_figures


ROOT = Path(__file__).resolve().parents[1]
DOCS_SCRIPT = ROOT / "scripts" / "docs"
#: The hand-written content pages and the tutorials, by purpose.
CONTENT_PAGES = [
    "install",
    "getting_started",
    "guide/compared_with_wrap_jax",
    "howto/troubleshooting",
    "library/process_changes",
    "benchmark_notes",
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
    signature = signature_text(reference, "as_jax_op")
    assert "→ JaxOpWrapper" in signature and "→ Any" not in signature, signature
    assert "OpFromJax.pullback" not in reference, "PyTensor's generic text"
    assert broken_internal_links(site) == []
    # the repository: in the navbar of every page, and on the install page
    (repository,) = re.findall(
        r'^REPOSITORY = "(.+)"$', (ROOT / "doc" / "conf.py").read_text(), re.M
    )
    for name in ("index", "install", "benchmarks"):
        assert f'href="{repository}"' in (site / f"{name}.html").read_text(), name
    # the pages a new reader needs, linked from the landing page
    landing = (site / "index.html").read_text()
    for page in ("install", "howto/troubleshooting", "guide/compared_with_wrap_jax"):
        assert f'href="{page}.html"' in landing, page
    assert figures_not_from_results(site) == []


def signature_text(page: str, name: str) -> str:
    """The text of a documented function's signature line."""
    start = page.index(f'id="pytensor.compile.jax_ofg.{name}"')
    text = re.sub(r"<[^>]+>", "", page[start : page.index("</dt>", start)])
    return html.unescape(text)


def figures_not_from_results(site: Path) -> list[str]:
    """Every number of seconds or ratio a built page states that was not
    rendered from the stored results (``_stated_figures``)."""
    return [
        f"{page.relative_to(site)}: {figure}"
        for page in _browser.site_pages(site)
        for figure in stated_figures(page.read_text(), context=30)
    ]


@pytest.mark.parametrize(
    "name", ["stored_results", "figures", "_stated_figures", "test_docs_build"]
)
def test_the_examples_of_the_docs_helpers_run(name):
    """The docstring examples of the docs' extensions and of these checks."""
    import doctest

    if str(ROOT / "doc" / "_ext") not in sys.path:
        sys.path.append(str(ROOT / "doc" / "_ext"))
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted >= 1 and result.failed == 0


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
    column, an image that is not there, a broken link, code without copy
    buttons, an object's repr and a doctest placeholder shown as output, and
    a heading too long for the page's table of contents: the browser check
    reports each; a tidy page, nothing."""
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
    long_name = "WrappedFunctionRuntimeWarning" * 3
    (source / "wide.rst").write_text(
        "Wide\n====\n\n.. list-table::\n   :header-rows: 1\n\n"
        f"{row}\n{row}\n\n"
        ".. code-block:: python\n\n   x = " + " + ".join(["1"] * 150) + "\n\n"
        ".. raw:: html\n\n"
        '   <img src="nowhere.png" alt="missing"> <a href="nowhere.html">gone</a>\n\n'
        "Output\n------\n\n::\n\n"
        "   <arviz_plots.plot_collection.PlotCollection object at 0x7f3a2b1c0d90>\n"
        "   rate  0.7...  0.0...  1.0...\n\n"
        f"``{long_name}``\n{'-' * (len(long_name) + 4)}\n\nText.\n"
    )
    (source / "tidy.rst").write_text(
        "Tidy\n====\n\n.. list-table::\n   :header-rows: 1\n\n"
        "   * - a\n     - b\n   * - 1\n     - 2\n\n"
        "Ranges: ``x[..., 0]``, 1, 2, ..., 10; a memory at 0x10.\n"
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
        assert any("2 of 2 code blocks without a copy button" in p for p in found)
    assert any("broken link" in p and "nowhere.html" in p for p in wide), wide
    assert any(
        "cut off at the sidebar's edge" in p and long_name[:20] in p for p in wide
    )
    assert any("an object's repr shown: <arviz_plots" in p for p in wide), wide
    assert any("a doctest placeholder shown: 0.7..." in p for p in wide), wide
    assert _browser.layout_problems(site, [site / "tidy.html"]) == []


def test_the_figures_check_finds_typed_figures_not_rendered_ones(tmp_path):
    """A page stating a time, a ratio and a table of times typed by hand:
    the figures check finds each, and none of the figures and tables the
    same page renders from the stored results; a page naming a figure that
    is not stored fails the build."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'doc' / '_ext')!r})\n"
        'project = "demo"\nextensions = ["results_sphinx"]\n'
    )
    (source / "index.rst").write_text(
        "Demo\n====\n\n"
        "Typed: the fit took 13 s, 0.33x Stan's, and 4 × (1000 + 1000) draws.\n\n"
        ".. list-table::\n   :header-rows: 1\n\n"
        "   * - route\n     - ms per call\n   * - ours\n     - 0.19\n\n"
        "Rendered: :result:`sir.ours.later` (:result:`sir.ours.x_stan` Stan's).\n\n"
        ".. results-table:: sir\n"
    )
    site = tmp_path / "html"
    command = [sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html"]
    result = subprocess.run(
        [*command, str(source), str(site)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    found = stated_figures((site / "index.html").read_text())
    assert found == ["13 s", "0.33x", "ms per call: 0.19"], found
    (source / "index.rst").write_text("Demo\n====\n\n:result:`no.such.figure`\n")
    result = subprocess.run(
        [*command, str(source), str(tmp_path / "html2")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "no figure named 'no.such.figure'" in result.stderr, result.stderr


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


@pytest.fixture(scope="module")
def unexecuted_site(tmp_path_factory) -> Path:
    """The site built without running the tutorials (their pages and downloads)."""
    site = tmp_path_factory.mktemp("docs") / "html"
    build(site, run_tutorials=False)
    return site


def test_sphinx_html_build_without_running_the_tutorials(unexecuted_site):
    check_site(unexecuted_site)


#: A block of code in a page's source: reStructuredText's code directives and
#: literal blocks, MyST's fences.
_RST_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)(?:\.\. (?:code-block|code|testcode|plot)::[^\n]*|.*::)\n"
    r"(?P<body>(?:(?P=indent)[ \t]+[^\n]*\n|[ \t]*\n)*)",
    re.M,
)
_MD_BLOCK = re.compile(r"^```(?:python|\{eval-rst\})?\n(?P<body>.*?)^```", re.M | re.S)


def page_code_blocks(text: str) -> list[str]:
    """The Python blocks of a page's source, dedented (options left out)."""
    bodies = [m["body"] for m in _RST_BLOCK.finditer(text)]
    bodies += [m["body"] for m in _MD_BLOCK.finditer(text)]
    blocks = []
    for body in bodies:
        lines = textwrap.dedent(body).splitlines()
        while lines and re.match(r"^:\w[\w-]*:", lines[0]):
            lines.pop(0)
        blocks.append("\n".join(lines))
    return blocks


def unguarded_sampling(code: str) -> list[str]:
    """In a runnable model (a block that builds a ``pm.Model``), the sampling
    calls outside ``if __name__ == "__main__":``.

    >>> unguarded_sampling("with pm.Model():\\n    pm.sample()")
    ['pm.sample()']
    >>> unguarded_sampling(
    ...     'with pm.Model() as m:\\n    pass\\nif __name__ == "__main__":\\n    pm.sample()'
    ... )
    []
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []  # a fragment, not a runnable model
    source = ast.unparse(tree)
    if "pm.Model(" not in source:
        return []
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            guarded |= {id(inner) for inner in ast.walk(node)}
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("pm.sample", "pm.sample_smc")
        and id(node) not in guarded
    ]


def test_every_runnable_model_on_a_page_has_the_main_guard():
    """Getting started says a script that samples needs the guard (PyMC's
    workers import it again): every page's runnable model has it, the README's
    and the landing page's included."""
    doc = ROOT / "doc"
    sources = [*doc.glob("*.rst"), *doc.glob("*.md"), *doc.glob("*/*.rst")]
    found, models = [], 0
    for source in [*sources, ROOT / "README.md"]:
        for block in page_code_blocks(source.read_text()):
            models += "pm.Model(" in block and "pm.sample" in block
            found += [f"{source.name}: {call}" for call in unguarded_sampling(block)]
    assert models >= 4, models  # the landing page, getting started, stan, README
    assert found == [], found


def downloaded_scripts(site: Path) -> dict[str, Path]:
    """Each tutorial's downloadable ``.py``, by tutorial name."""
    return {
        path.stem: path
        for path in (site / "_downloads").rglob("*.py")
        if f"tutorials/{path.stem}" in TUTORIALS
    }


#: Runs a downloaded tutorial as ``python NAME.py`` would, with fewer draws:
#: every ``pm.sample`` call gets at most ``DRAWS`` tuning steps and draws.
QUICK_RUN = """
import runpy, sys
import pymc
DRAWS = 60
_sample = pymc.sample
def _fewer_draws(*args, **kwargs):
    kwargs["draws"] = min(kwargs.get("draws", 1000), DRAWS)
    kwargs["tune"] = min(kwargs.get("tune", 1000), DRAWS)
    return _sample(*args, **kwargs)
pymc.sample = _fewer_draws
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_tutorials_downloads_carry_what_they_read(unexecuted_site):
    """Each tutorial's .py download is its source, and its .zip holds it and
    the notebook: nothing a script reads is left out (none reads a file)."""
    scripts = downloaded_scripts(unexecuted_site)
    assert sorted(f"tutorials/{name}" for name in scripts) == sorted(TUTORIALS)
    for name, script in scripts.items():
        text = script.read_text()
        assert text == (ROOT / "doc" / "tutorials_src" / f"{name}.py").read_text()
        assert not re.search(r"open\(|read_text\(|np\.load|read_csv", text), name
        (archive,) = (unexecuted_site / "_downloads").rglob(f"{name}.zip")
        with zipfile.ZipFile(archive) as contents:
            assert sorted(contents.namelist()) == [f"{name}.ipynb", f"{name}.py"]


@pytest.mark.slow
@pytest.mark.one_python
@pytest.mark.parametrize("name", [name.split("/")[1] for name in TUTORIALS])
def test_a_downloaded_tutorial_runs_from_an_empty_folder(
    unexecuted_site, name, tmp_path
):
    script = downloaded_scripts(unexecuted_site)[name]
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / script.name).write_text(script.read_text())
    # run_python fails the test on a non-zero exit, with the end of stderr.
    run_python(
        ["-c", QUICK_RUN, script.name], folder, timeout=900, env={"MPLBACKEND": "Agg"}
    )


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
