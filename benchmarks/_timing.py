"""Timing and reporting helpers shared by the benchmark scripts.

* :func:`interleaved_medians` times several callables side by side: batches of
  calls, taken round-robin (in a rotating order) so that a burst of noise from
  another process hits every candidate alike; the median batch is reported.
* :func:`time_once` times a single call (compilations, first calls);
  :func:`best_ms` the best of a few runs of many calls.
* :func:`markdown_table`, :func:`machine_header` and :func:`package_versions`
  format the results; :func:`median` summarizes values that may hold NaN.
"""

from __future__ import annotations

import gc
import importlib.metadata
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Call:
    """A callable and the positional arguments it is timed with."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()

    def __call__(self) -> Any:
        return self.fn(*self.args)


@dataclass(frozen=True)
class Stats:
    """Seconds per call: the median batch, the spread of batches, the best batch.

    Noise from other processes only adds time, so on a busy machine the best
    batch is the steadier estimate of the cost itself.
    """

    median: float
    q25: float
    q75: float
    best: float

    @property
    def spread(self) -> float:
        """Interquartile range over the median: the noise of this measurement."""
        return (self.q75 - self.q25) / self.median if self.median else 0.0


@contextmanager
def gc_disabled() -> Iterator[None]:
    """No garbage-collector pauses inside timed regions (as :mod:`timeit` does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_batch(
    call: Call, number: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Seconds per call, averaged over ``number`` back-to-back calls.

    ``clock`` may be :func:`time.process_time`: the CPU time of all the
    process's threads, which other processes' load inflates less.
    """
    fn, args = call.fn, call.args
    start = clock()
    for _ in range(number):
        fn(*args)
    return (clock() - start) / number


def time_once(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Seconds taken by one call, and its result."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def calls_per_batch(call: Call, batch_seconds: float) -> int:
    """How many calls fill a batch of about ``batch_seconds``."""
    seconds, _ = time_once(call)  # warm, but possibly the slowest call
    seconds = min(seconds, time_batch(call, 3))
    return max(1, min(100_000, round(batch_seconds / max(seconds, 1e-9))))


def interleaved_medians(
    candidates: Mapping[str, Call],
    *,
    repeats: int,
    batch_seconds: float,
    warmup_calls: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Stats]:
    """Seconds per call of each candidate, measured side by side.

    Each candidate is warmed up, then sized so one batch takes about
    ``batch_seconds``. Every round times one batch of each candidate, in an
    order rotated by one from round to round, on ``clock`` (see
    :func:`time_batch`).
    """
    for call in candidates.values():
        for _ in range(warmup_calls):
            call()
    numbers = {
        name: calls_per_batch(c, batch_seconds) for name, c in candidates.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    with gc_disabled():
        for round_ in range(repeats):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(time_batch(candidates[name], numbers[name], clock))
    return {name: summarize(values) for name, values in samples.items()}


def summarize(samples: Sequence[float]) -> Stats:
    """Median and quartiles of timing samples."""
    if len(samples) < 2:
        return Stats(samples[0], samples[0], samples[0], samples[0])
    q25, _, q75 = statistics.quantiles(samples, n=4)
    return Stats(statistics.median(samples), q25, q75, min(samples))


def median_of(fn: Callable[[], float], repeats: int) -> Stats:
    """Run a function returning seconds ``repeats`` times; summarize."""
    with gc_disabled():
        return summarize([fn() for _ in range(repeats)])


def best_ms(fn: Callable[[], Any], calls: int = 200, runs: int = 5) -> float:
    """Milliseconds per call: the best of ``runs`` runs of ``calls`` calls."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def median(values: Sequence[float]) -> float:
    """The median of the values that are not NaN (NaN when none is)."""
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


# ---------------------------------------------------------------- formatting
def machine_header(versions: Mapping[str, str]) -> str:
    """One line naming the machine and the package versions."""
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


def package_versions(distributions: Mapping[str, str]) -> dict[str, str]:
    """The installed version of each distribution, by label ("not installed").

    ``distributions`` maps a label (``"JAX"``) to a distribution name (``"jax"``).
    """
    found = {}
    for label, name in distributions.items():
        try:
            found[label] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[label] = "not installed"
    return found


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1
) -> str:
    """A markdown table; columns from ``numeric_from`` on are right-aligned."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(headers))]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(align) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def format_seconds(seconds: float, unit: str) -> str:
    """Seconds shown in ``unit`` (``"us"``, ``"ms"`` or ``"s"``), 3 significant digits."""
    scale = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    value = seconds * scale
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_ratio(ratio: float) -> str:
    """A ratio with two decimals."""
    return f"{ratio:.2f}"
