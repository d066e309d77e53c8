"""Many fits of one model on Dask: fits per minute with 1 and 2 workers, start-up, SBC.

The model is Stan's boarding-school SIR case study, each fit ``pm.sample()``
(nutpie) on a dataset simulated from the prior, as
``examples/sbc_boarding_school.py`` runs them: one single-threaded worker per
core, on a ``compiledir`` of the run's own. Measured: a cold fit in this
process (it fills the caches); a fresh process's second run; a worker's
start-up to the end of its first fit; fits per minute with 1 and 2 warm
workers; the whole SBC of the example at its quick size.

Run (under the machine's exclusive lock: the timings need the cores)::

    .venv/bin/python benchmarks/many_fits.py            # ~6 minutes
    .venv/bin/python benchmarks/many_fits.py --fits 6   # more fits per measure

Writes ``benchmarks/results/many_fits.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("EQX_ON_ERROR", "nan")  # as the example: NaN, not a raise

from _processes import run_python, startup_env
from _room import EXAMPLES


# Dask's workers start as this process did (the checkout's modules, the examples').
os.environ.update(startup_env())

#: The caches of this run, in a .pytensorrc file its processes read (set
#: before PyTensor is imported, here and in every process started later;
#: Dask's workers import this script again, and keep its folder).
if "MANY_FITS_COMPILEDIR" not in os.environ:
    os.environ["MANY_FITS_COMPILEDIR"] = tempfile.mkdtemp(prefix="many_fits_cache-")
_compiledir = Path(os.environ["MANY_FITS_COMPILEDIR"])
_rc = _compiledir / "pytensorrc"
_rc.write_text(
    f"[global]\nbase_compiledir = {_compiledir}\njax_ofg__trace_cache = on\n"
)
os.environ["PYTENSORRC"] = str(_rc)

import _report  # noqa: E402
import numpy as np  # noqa: E402
from _report import fill, package_versions  # noqa: E402
from dask.distributed import Client, LocalCluster  # noqa: E402
from sbc_boarding_school import fit_dataset, run_fits, simulate  # noqa: E402


SINGLE_FIT = """
import json
import numpy as np
from sbc_boarding_school import fit_dataset
task = dict(np.load({task!r}, allow_pickle=True).item())
fit = fit_dataset(**task)
print(json.dumps({{"seconds": fit.seconds, "cache_misses": fit.cache_misses}}))
"""


class Quiet:
    """Progress lines dropped (the benchmark prints its own)."""

    def update(self, fit) -> None:
        pass


def timed_fits(client: Client, tasks: list[dict]) -> tuple[float, list]:
    start = time.perf_counter()
    fits = run_fits(client, tasks, progress=Quiet())
    return time.perf_counter() - start, fits


def cluster_of(workers: int) -> tuple[LocalCluster, Client]:
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = Client(cluster)
    client.wait_for_workers(workers)
    return cluster, client


def single_process(task: dict) -> tuple[float, dict]:
    """A fresh process fitting one dataset on the warm caches: its seconds, its result."""
    with tempfile.TemporaryDirectory() as folder:
        task_file = Path(folder) / "task.npy"
        np.save(task_file, np.array(task, dtype=object), allow_pickle=True)
        script = Path(folder) / "single.py"
        script.write_text(SINGLE_FIT.format(task=str(task_file)))
        done = run_python([script], timeout=900)
    return done.seconds, done.result


def on_workers(workers: int, first: list[dict], batch: list[dict], data: dict) -> None:
    """A new cluster: its start-up (to each worker's first fit), then fits per minute."""
    start = time.perf_counter()
    cluster, client = cluster_of(workers)
    started = time.perf_counter() - start
    try:
        first_seconds, first_fits = timed_fits(client, first)
        seconds, fits = timed_fits(client, batch)
    finally:
        client.close()
        cluster.close()
    failed = [f for f in fits + first_fits if f.error]
    assert not failed, failed[0].error
    if workers == 1:
        data["rows"] += [
            ("worker start-up: cluster of 1 worker ready", started),
            ("worker start-up: ready + its first fit", started + first_seconds),
            ("  of which its first fit (pm.sample)", first_fits[0].seconds),
        ]
        data["traces"].append(
            f"worker's first fit: {first_fits[0].cache_misses} traces run"
        )
    data["per_minute"][str(workers)] = 60 * len(fits) / seconds
    data["rows"].append((f"{len(fits)} fits on {workers} warm worker(s)", seconds))


def measure(args: argparse.Namespace, command: str) -> dict:
    size = {"draws": args.draws, "tune": args.tune, "chains": args.chains}
    versions = package_versions(["pytensor", "jax", "pymc", "nutpie", "distributed"])
    data = {"meta": _report.meta(command, versions) | size}
    data |= {"rows": [], "per_minute": {}, "traces": []}
    count = 5 + 2 * args.fits  # cold, second run, 1 + 2 first fits, 2 batches
    truths, cases = simulate(count, seed=2024)
    tasks = [
        dict(index=k, cases=cases[k], truth=truths[k], seed=k, **size)
        for k in range(count)
    ]
    start = time.perf_counter()  # a cold fit here: traces, compiles, fills the caches
    cold = fit_dataset(**tasks[0])
    seconds = time.perf_counter() - start
    data["rows"].append(("cold fit in this process (fills the caches)", seconds))
    data["traces"].append(f"cold fit: {cold.cache_misses} traces run")
    seconds, result = single_process(tasks[1])
    data["rows"].append(("single process, second run: start to end", seconds))
    data["rows"].append(("  of which its fit (pm.sample)", result["seconds"]))
    data["traces"].append(f"second run: {result['cache_misses']} traces run")
    fits = args.fits
    on_workers(1, tasks[2:3], tasks[3 : 3 + fits], data)
    on_workers(2, tasks[3 + fits : 5 + fits], tasks[5 + fits :], data)
    sbc = [
        EXAMPLES / "sbc_boarding_school.py",
        "--quick",
        "--out",
        _compiledir / "sbc.png",
    ]
    done = run_python(sbc, timeout=900, result=False)
    data["rows"].append(
        ("whole SBC, --quick (2 fits, 2 workers), start to end", done.seconds)
    )
    return data


def report(data: dict) -> str:
    text, rates = _report.texts("many_fits"), data["per_minute"]
    rows = [(name, f"{value:.1f}") for name, value in data["rows"]]
    rate_rows = [(w, f"{r:.2f}", f"{r / rates['1']:.2f}") for w, r in rates.items()]
    return (
        fill(text["report"], rows, **data["meta"])
        + "\n\n"
        + fill(
            text["rates"],
            rate_rows,
            speedup=rates["2"] / rates["1"],
            traces="; ".join(data["traces"]),
        )
        + "\n"
        + _report.transcribed(data["meta"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=4, help="fits per throughput run")
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--tune", type=int, default=100)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args()
    if not args.report:
        command = "python benchmarks/many_fits.py" + "".join(
            f" {a}" for a in sys.argv[1:]
        )
        _report.save("many_fits", measure(args, command))
    _report.write("many_fits", report(_report.load("many_fits")))


if __name__ == "__main__":
    main()
