"""Every test process's trace cache counts, gathered for the run's summary.

``tests/conftest.py`` names a folder in ``$JAX_OFG_TRACE_CACHE_COUNTS``; each
process of the run (pytest's workers, and the fresh processes tests start,
through ``_fresh_process.SITECUSTOMIZE``) writes its counts there when it ends.
"""

import json
import os
import sys
from pathlib import Path


VARIABLE = "JAX_OFG_TRACE_CACHE_COUNTS"
KEYS = ("hits", "verified", "stale", "uncached", "misses")


def write() -> None:
    """Write this process's counts (when it used the trace cache at all)."""
    folder = os.environ.get(VARIABLE)
    trace_cache = sys.modules.get("pytensor.compile.jax_ofg_trace_cache")
    if folder is None or trace_cache is None or not Path(folder).is_dir():
        return
    info = trace_cache.trace_cache_info()
    counts = {key: info[key] for key in KEYS}
    if any(counts.values()):
        (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps(counts))


def summary() -> str | None:
    """The run's totals, in a line; None when no process wrote any."""
    folder = os.environ.get(VARIABLE)
    if folder is None:
        return None
    totals = dict.fromkeys(KEYS, 0)
    processes = 0
    for path in Path(folder).glob("*.json"):
        processes += 1
        for key, value in json.loads(path.read_text()).items():
            totals[key] += value
    if not processes:
        return None
    return (
        f"trace cache (verify): {totals['verified']} of {totals['hits']} hits "
        f"verified against a fresh trace, in {processes} processes; "
        f"{totals['stale']} stale entries traced again; {totals['uncached']} "
        "uncached lookups"
    )
