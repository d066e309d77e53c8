"""The Sphinx documentation builds with warnings as errors, API reference included."""

import subprocess
import sys
from pathlib import Path


DOC = Path(__file__).resolve().parents[1] / "doc"


def test_sphinx_html_build_has_no_warnings(tmp_path):
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html"]
    result = subprocess.run(
        [*command, str(DOC), str(tmp_path / "html")],
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
