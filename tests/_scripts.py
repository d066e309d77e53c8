"""Scripts of ``examples/`` and ``benchmarks/`` (no packages), and the guide's code, for tests."""

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"


@contextlib.contextmanager
def imported_scripts(*paths: Path) -> Iterator[tuple[ModuleType, ...]]:
    """The scripts at ``paths``, imported as modules named by their file names.

    While in use, their folders are on ``sys.path`` (for the helper modules
    they import) and the modules in ``sys.modules`` (dataclasses and pickle
    look them up there, and a later script imports an earlier one); their
    ``main`` is not run (``__name__`` is not ``"__main__"``).
    """
    folders = list(dict.fromkeys(str(path.parent) for path in paths))
    sys.path[:0] = folders
    try:
        modules = []
        for path in paths:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
            modules.append(module)
        yield tuple(modules)
    finally:
        for path in paths:
            sys.modules.pop(path.stem, None)
        for folder in folders:
            sys.path.remove(folder)


def guide_block(language: str, section: str = "Port a Stan model") -> str:
    """The first ``language`` code block of the guide's ``section``, dedented."""
    guide = "\n".join(
        page.read_text() for page in sorted((ROOT / "doc").glob("*/*.rst"))
    )
    text = guide[guide.index(f"{section}\n") :]
    block = text[text.index(f".. code-block:: {language}\n") :].split("\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("   "):
            break
        lines.append(line[3:])
    return "\n".join(lines).strip()
