"""The distribution: what the wheel ships, what the tests import, missing JAX."""

import importlib
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _checkout import PRIVATE, ROOT, module_files, package_files

from pytensor.compile._jax_ofg.cache.api import project_files


CHECKOUT = ROOT
#: Every module of the package in the checkout.
MODULES = [str(path.relative_to(ROOT)) for path in module_files().values()]
#: Our private package's own __init__.py files (the only ones we may ship).
PACKAGES = [str(path.relative_to(ROOT)) for path in package_files().values()]
#: What the wheel must ship, exactly: the modules and our packages' __init__.py.
SHIPPED = sorted(MODULES + PACKAGES)
PRIVATE_PACKAGE = str(PRIVATE.relative_to(ROOT)) + "/"


def test_tests_import_the_checkout():
    for name in MODULES:
        module = importlib.import_module(name.removesuffix(".py").replace("/", "."))
        assert Path(module.__file__).resolve() == CHECKOUT / name
    for name, path in package_files().items():
        assert Path(importlib.import_module(name).__file__).resolve() == path


def test_a_module_not_in_the_checkout_is_not_imported_from_elsewhere():
    """A name of the old flat layout fails, not a stale installed copy."""
    with pytest.raises(ModuleNotFoundError, match="in the checkout"):
        importlib.import_module("pytensor.compile.jax_ofg_op")


def test_the_trace_cache_keys_cover_every_shipped_file():
    """The trace cache's key digests this project's source: every file shipped."""
    files = project_files()
    assert sorted(str(Path(p).relative_to(CHECKOUT)) for p in files.values()) == SHIPPED
    assert set(module_files()) | set(package_files()) == set(files)


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
    assert shipped == SHIPPED
    # Never one of PyTensor's own files: no __init__.py but our private
    # package's (pytensor/__init__.py, pytensor/compile/__init__.py, ...).
    theirs = [
        n
        for n in names
        if n.endswith("__init__.py") and not n.startswith(PRIVATE_PACKAGE)
    ]
    assert not theirs
    assert "pytensor/compile/_jax_ofg/__init__.py" in names
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
    assert sorted(installed) == SHIPPED
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
        Path(result.stdout.strip()).resolve()
        == Path(installed["pytensor/compile/jax_ofg.py"]).resolve()
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
