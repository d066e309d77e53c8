"""The Sphinx documentation builds with warnings as errors, API reference included.

The build command is the one in ``scripts/docs`` (what the README says to run).
"""

import shlex
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
DOCS_SCRIPT = ROOT / "scripts" / "docs"


def docs_command(out: Path) -> list[str]:
    """The Sphinx command line of ``scripts/docs``, run by this interpreter into ``out``."""
    (line,) = [s for s in DOCS_SCRIPT.read_text().splitlines() if " -m sphinx " in s]
    python, *arguments = shlex.split(line)
    assert python == "$venv/bin/python" and arguments[-1] == "$@", line
    *arguments, build_dir = arguments[:-1]
    assert build_dir == "doc/_build/html", line
    return [sys.executable, *arguments, "--keep-going", str(out)]


def test_sphinx_html_build_has_no_warnings(tmp_path):
    result = subprocess.run(
        docs_command(tmp_path / "html"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"sphinx exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    page = (tmp_path / "html" / "library" / "jax_ofg.html").read_text()
    # autodoc really imported the module and rendered the reference section
    for name in ("as_jax_op", "OpFromJax", "SymbolicCallable", "ShapeInferenceError"):
        assert f'id="pytensor.compile.jax_ofg.{name}"' in page, name
    assert "jax_ofg" in (tmp_path / "html" / "index.html").read_text()
