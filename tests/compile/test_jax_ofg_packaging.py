"""The distribution: what the wheel ships, what the tests import, missing JAX."""

import importlib
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

from _checkout import ROOT, module_files


CHECKOUT = ROOT
#: Every module of the package in the checkout: the wheel must ship exactly these.
MODULES = [str(path.relative_to(ROOT)) for path in module_files().values()]


def test_tests_import_the_checkout():
    for name in MODULES:
        module = importlib.import_module(name.removesuffix(".py").replace("/", "."))
        assert Path(module.__file__).resolve() == CHECKOUT / name


def test_wheel_ships_only_the_modules(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(CHECKOUT),
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("pytensor_jax_ofg-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if not n.startswith("pytensor_jax_ofg-"))
    assert shipped == sorted(MODULES)
    assert not [n for n in names if n.endswith("__init__.py")]
    metadata = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith("METADATA")))
        .decode()
    )
    assert "Name: pytensor-jax-ofg" in metadata
    assert "Requires-Dist: pytensor<3.4,>=3.3.8" in metadata


def test_installed_copy_is_this_checkout(tmp_path):
    """`pip install .` (as scripts/test does) installs these very modules."""
    files = importlib.metadata.distribution("pytensor-jax-ofg").files
    installed = {
        str(f): f.locate()
        for f in files
        if str(f).startswith("pytensor/") and str(f).endswith(".py")
    }
    assert sorted(installed) == sorted(MODULES)
    for name, path in installed.items():
        assert Path(path).read_bytes() == (CHECKOUT / name).read_bytes(), (
            f"{path} is stale: reinstall with `pip install .` (scripts/test does)"
        )
    # Outside the test suite (no conftest), the installed copy is imported.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pytensor.compile.jax_ofg as m; print(m.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        Path(result.stdout.strip()).resolve() == Path(installed[MODULES[0]]).resolve()
    )


def test_missing_jax_gives_install_command(tmp_path):
    script = f"""
import importlib.abc, sys
class NoJax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ImportError("No module named 'jax'")
sys.meta_path.insert(0, NoJax())
import pytensor.compile
pytensor.compile.__path__.insert(0, {str(CHECKOUT / "pytensor" / "compile")!r})
try:
    import pytensor.compile.jax_ofg
except ImportError as error:
    print(error)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True
    )
    assert "needs JAX, which is not installed" in result.stdout, result.stderr
    assert "pip install jax" in result.stdout
