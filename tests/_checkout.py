"""The checkout the tests run against, and the package's modules in it."""

from pathlib import Path


#: The root of the checkout (beside ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[1]


def module_files() -> dict[str, Path]:
    """Every module of the package in the checkout: dotted name to file, sorted."""
    paths = sorted((ROOT / "pytensor").rglob("jax_ofg*.py"))
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in paths}
