"""Every test process's trace cache counts, gathered for the run's summary.

``tests/conftest.py`` names a folder in ``$JAX_OFG_TRACE_CACHE_COUNTS``; each
process of the run (pytest's workers, and the fresh processes tests start,
through ``_fresh_process.SITECUSTOMIZE``) writes its counts there when it ends.
"""

import json
import os
import sys
from collections import Counter
from pathlib import Path


VARIABLE = "JAX_OFG_TRACE_CACHE_COUNTS"
KEYS = ("hits", "verified", "uncached", "misses")


def write() -> None:
    """Write this process's counts (when it used the trace cache at all)."""
    folder = os.environ.get(VARIABLE)
    trace_cache = sys.modules.get("pytensor.compile._jax_ofg.cache.api")
    if folder is None or trace_cache is None or not Path(folder).is_dir():
        return
    info = trace_cache.trace_cache_info()
    counts = {key: info[key] for key in KEYS}
    if any(counts.values()):
        counts["reasons"] = sorted(set(info["uncached_functions"].values()))
        # Whole or not at all: a process killed while writing (tests kill
        # some) must not leave a truncated file for the summary.
        path = Path(folder) / f"{os.getpid()}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(counts))
        os.replace(partial, path)


def summary() -> str | None:
    """The run's totals, and why lookups were left uncached (the most frequent
    reasons first, by how many processes gave them); None when no process
    wrote any."""
    folder = os.environ.get(VARIABLE)
    if folder is None:
        return None
    totals = dict.fromkeys(KEYS, 0)
    reasons: Counter = Counter()
    processes = unreadable = 0
    for path in Path(folder).glob("*.json"):
        try:
            counts = json.loads(path.read_text())
        except (OSError, ValueError):  # not write()'s: it replaces whole files
            unreadable += 1
            continue
        processes += 1
        reasons.update(counts.pop("reasons", ()))
        for key, value in counts.items():
            totals[key] += value
    if not processes and not unreadable:
        return None
    lines = [
        f"trace cache (verify): {totals['verified']} of {totals['hits']} hits "
        f"verified against a fresh trace, in {processes} processes; "
        f"{totals['uncached']} uncached lookups; why, in how many processes:"
    ]
    if unreadable:
        lines.insert(1, f"  ({unreadable} processes' counts could not be read)")
    lines += [f"  {n:4d}  {reason[:300]}" for reason, n in reasons.most_common(40)]
    return "\n".join(lines)
