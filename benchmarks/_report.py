"""Results as data, tables rendered from them: the one helper every benchmark reports through.

A benchmark measures into a JSON-able object, stores it in
``benchmarks/results/<name>.json`` (:func:`save`) and renders its markdown
tables from that object alone (:func:`fill`, :func:`markdown_table`), so
that ``--report`` writes every table again from the stored runs, timing
nothing. What a table needs beyond the measurements (the command, the
machine: :func:`machine_header`) is stored with them, under ``"meta"``. The
reports' fixed prose lives in ``benchmarks/texts/<name>.md`` (:func:`texts`),
apart from the code that measures.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import os
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


#: Where results are stored (``BENCHMARK_RESULTS``: elsewhere, for a trial run).
RESULTS = Path(
    os.environ.get("BENCHMARK_RESULTS") or Path(__file__).resolve().parent / "results"
)


# ------------------------------------------------------------------ storing
def load(name: str, default: Any = None) -> Any:
    """The stored results ``results/<name>.json``, or ``default`` if there are none."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else default


def save(name: str, data: Any, *, sort_keys: bool = False) -> Path:
    """Store ``data`` as ``results/<name>.json``; the path."""
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=sort_keys) + "\n")
    return path


def write(name: str, text: str) -> Path:
    """Print the report and write it to ``results/<name>.md``, beside its data."""
    path = RESULTS / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return path


def meta(command: str, versions: Mapping[str, str]) -> dict[str, str]:
    """What a report says of its run besides the measurements: command and machine."""
    return {"command": command, "machine": machine_header(versions)}


def transcribed(meta: Mapping[str, Any]) -> str:
    """The paragraph a report ends with when its figures were copied from an
    earlier table, not stored by its run: ``meta["transcribed"]`` says which."""
    return f"\n{meta['transcribed']}\n" if meta.get("transcribed") else ""


# ---------------------------------------------------------------- rendering
@functools.cache
def texts(name: str) -> dict[str, str]:
    """The fixed paragraphs of a report, by key: ``texts/<name>.md``, where each
    follows a line ``<!-- key -->`` (blank lines around it dropped)."""
    text = (Path(__file__).resolve().parent / "texts" / f"{name}.md").read_text()
    parts = re.split(r"^<!-- (\S+) -->\n", text, flags=re.MULTILINE)
    return {key: body.strip("\n") for key, body in zip(parts[1::2], parts[2::2])}


def fill(block: str, rows: Sequence[Sequence[Any]] = (), **fields: Any) -> str:
    """A report's section from a block of :func:`texts`: its fields filled in, and
    ``rows`` put in the table whose header (and alignment line) the block holds."""
    lines = (block.format(**fields) if fields else block).split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("|--")), None)
    if at is not None:
        lines[at + 1 : at + 1] = [markdown_row(row) for row in rows]
    return "\n".join(lines)


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1
) -> str:
    """A markdown table; columns from ``numeric_from`` on are right-aligned."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + [markdown_row(row) for row in rows])


def markdown_row(row: Sequence[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in row) + " |"


def format_seconds(seconds: float, unit: str) -> str:
    """Seconds shown in ``unit`` (``"us"``, ``"ms"`` or ``"s"``), 3 significant digits."""
    value = seconds * {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_ratio(ratio: float) -> str:
    """A ratio with two decimals."""
    return f"{ratio:.2f}"


def span(values: Sequence[float], form: str = "{:.2f}") -> str:
    """The smallest and largest of ``values``, each written by ``form``: ``"1.2–3.4"``."""
    return f"{form.format(min(values))}–{form.format(max(values))}"


# ------------------------------------------------------------------ machine
def machine_header(versions: Mapping[str, str]) -> str:
    """One line naming the machine, its load and the package versions."""
    cpu = _cpu_model() or platform.processor() or platform.machine()
    parts = [
        f"{platform.system()} {platform.machine()}",
        f"CPU {cpu}",
        f"{os.cpu_count()} logical CPUs",
        "load average {:.2f} {:.2f} {:.2f}".format(*load_averages()),
        f"Python {platform.python_version()}",
        *(f"{name} {version}" for name, version in versions.items()),
    ]
    return "Machine: " + "; ".join(parts)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def load_averages() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages (NaN where the system has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return (math.nan, math.nan, math.nan)


def package_versions(distributions: Mapping[str, str] | Sequence[str]) -> dict:
    """The installed version of each distribution, by label ("not installed").

    ``distributions`` maps a label (``"JAX"``) to a distribution name
    (``"jax"``), or is a list of names that are their own labels.
    """
    if not isinstance(distributions, Mapping):
        distributions = {name: name for name in distributions}
    found = {}
    for label, name in distributions.items():
        try:
            found[label] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[label] = "not installed"
    return found
