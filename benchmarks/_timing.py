"""Timing helpers shared by the benchmark scripts.

* :func:`interleaved_medians` times several callables side by side: batches of
  calls, taken round-robin (in a rotating order) so that a burst of noise from
  another process hits every candidate alike; the median batch is reported.
* :func:`time_once` times a single call (compilations, first calls).
* :func:`calls_per_second` counts calls made from several threads at once;
  :func:`median` summarizes values that may hold NaN.

Tables are rendered by :mod:`_report`.
"""

from __future__ import annotations

import gc
import math
import statistics
import threading
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


def calls_per_second(calls: Sequence[Callable[[], Any]], seconds: float = 1.0) -> float:
    """Calls per second of ``calls`` made at once, each from a thread of its own,
    for ``seconds``."""
    counts = [0] * len(calls)
    stop = time.perf_counter() + seconds

    def run(k: int) -> None:
        while time.perf_counter() < stop:
            calls[k]()
            counts[k] += 1

    workers = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - start)


def median(values: Sequence[float]) -> float:
    """The median of the values that are not NaN (NaN when none is)."""
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan
