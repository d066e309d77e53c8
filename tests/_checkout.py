"""The checkout the tests run against, and the package's modules in it."""

from pathlib import Path


#: The root of the checkout (beside ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[1]

#: The private package holding the implementation, one folder per subsystem.
PRIVATE = ROOT / "pytensor" / "compile" / "_jax_ofg"

#: The modules outside it: the public facade and the two linkers' dispatches.
PUBLIC = (
    ROOT / "pytensor" / "compile" / "jax_ofg.py",
    ROOT / "pytensor" / "link" / "jax" / "dispatch" / "jax_ofg.py",
    ROOT / "pytensor" / "link" / "numba" / "dispatch" / "jax_ofg.py",
)


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def module_files() -> dict[str, Path]:
    """Every module of the package in the checkout: dotted name to file, sorted.

    The private package's ``__init__.py`` files (a docstring each) are not
    modules here: :func:`package_files` lists them.
    """
    paths = [*PUBLIC, *(p for p in PRIVATE.rglob("*.py") if p.name != "__init__.py")]
    return {_dotted(p): p for p in sorted(paths)}


def package_files() -> dict[str, Path]:
    """The private package's ``__init__.py`` files, by package name."""
    return {_dotted(p.parent): p for p in sorted(PRIVATE.rglob("__init__.py"))}
