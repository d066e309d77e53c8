"""Many fits of one model on Dask: fits per minute with 1 and 2 workers, start-up, SBC.

The model is Stan's boarding-school SIR case study
(``examples/boarding_school_sir.py``), each fit ``pm.sample()`` (nutpie) on a
dataset simulated from the prior, as ``examples/sbc_boarding_school.py``
runs them: one single-threaded worker per core, each fit's chains one after
the other on its worker. Measured, on a ``compiledir`` of the run's own:

* a cold fit in this process (it traces and compiles; the caches are filled);
* a single process's second run: a fresh process fitting one dataset, from
  its start to its end, on the warm caches;
* a worker's start-up: a new ``LocalCluster`` of one worker, from its start
  to the end of the worker's first fit, on the same caches;
* fits per minute with 1 and with 2 workers (workers started, each has fitted
  once), and the speed-up;
* the whole SBC of the example at its quick size (``--quick``), from the
  command line to its end.

Run (under the machine's exclusive lock: the timings need the cores)::

    .venv/bin/python benchmarks/many_fits.py            # ~6 minutes
    .venv/bin/python benchmarks/many_fits.py --fits 6   # more fits per measure

Results are printed and written to ``benchmarks/results/many_fits.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("EQX_ON_ERROR", "nan")  # as the example: NaN, not a raise

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path[:0] = [str(EXAMPLES), str(Path(__file__).resolve().parent)]

from _processes import IN_CHECKOUT, checkout_startup, run_python  # noqa: E402


if IN_CHECKOUT:  # inside the checkout: this process and its workers use its modules
    _startup = Path(tempfile.mkdtemp(prefix="many_fits_startup-"))
    os.environ.update(checkout_startup(_startup))
    sys.path.insert(0, str(ROOT))
    import conftest  # noqa: F401

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

from _timing import machine_header, markdown_table, package_versions  # noqa: E402
from dask.distributed import Client, LocalCluster  # noqa: E402
from sbc_boarding_school import fit_dataset, run_fits, simulate  # noqa: E402


SINGLE_FIT = """
import json, sys
sys.path.insert(0, {examples!r})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=4, help="fits per throughput run")
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--tune", type=int, default=100)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument(
        "--output", type=Path, default=ROOT / "benchmarks/results/many_fits.md"
    )
    args = parser.parse_args()
    command = "python benchmarks/many_fits.py" + "".join(f" {a}" for a in sys.argv[1:])
    size = {"draws": args.draws, "tune": args.tune, "chains": args.chains}
    count = 5 + 2 * args.fits  # cold, second run, 1 + 2 first fits, 2 batches
    truths, cases = simulate(count, seed=2024)
    tasks = [
        dict(index=k, cases=cases[k], truth=truths[k], seed=k, **size)
        for k in range(count)
    ]
    rows, notes = [], []

    # A cold fit here: traces and compiles, fills the caches.
    start = time.perf_counter()
    cold = fit_dataset(**tasks[0])
    rows.append(
        ("cold fit in this process (fills the caches)", time.perf_counter() - start)
    )
    notes.append(f"cold fit: {cold.cache_misses} traces run")

    # A single process's second run: a fresh process, warm caches.
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        task_file = Path(folder) / "task.npy"
        np.save(task_file, np.array(tasks[1], dtype=object), allow_pickle=True)
        script = Path(folder) / "single.py"
        script.write_text(
            SINGLE_FIT.format(examples=str(EXAMPLES), task=str(task_file))
        )
        done = run_python([script], timeout=900)
    rows.append(("single process, second run: start to end", done.seconds))
    rows.append(("  of which its fit (pm.sample)", done.result["seconds"]))
    notes.append(f"second run: {done.result['cache_misses']} traces run")

    # A worker's start-up: a new cluster of one worker, to the end of its
    # first fit; then fits per minute with that worker.
    per_minute = {}
    position = 2
    for workers in (1, 2):
        start = time.perf_counter()
        cluster, client = cluster_of(workers)
        started = time.perf_counter() - start
        try:
            # Each worker's first fit (start-up of its libraries and model).
            first_tasks = tasks[position : position + workers]
            position += workers
            first_seconds, first = timed_fits(client, first_tasks)
            if workers == 1:
                rows.append(("worker start-up: cluster of 1 worker ready", started))
                rows.append(
                    ("worker start-up: ready + its first fit", started + first_seconds)
                )
                rows.append(("  of which its first fit (pm.sample)", first[0].seconds))
                notes.append(f"worker's first fit: {first[0].cache_misses} traces run")
            batch = tasks[position : position + args.fits]
            position += args.fits
            seconds, fits = timed_fits(client, batch)
        finally:
            client.close()
            cluster.close()
        failed = [f for f in fits + first if f.error]
        assert not failed, failed[0].error
        per_minute[workers] = 60 * len(fits) / seconds
        rows.append((f"{len(fits)} fits on {workers} warm worker(s)", seconds))
    speedup = per_minute[2] / per_minute[1]

    # The whole SBC at the example's quick size.
    sbc = [
        EXAMPLES / "sbc_boarding_school.py",
        "--quick",
        "--out",
        _compiledir / "sbc.png",
    ]
    done = run_python(sbc, timeout=900, result=False)
    rows.append(("whole SBC, --quick (2 fits, 2 workers), start to end", done.seconds))

    table = markdown_table(
        ["measure", "seconds"], [(name, f"{value:.1f}") for name, value in rows]
    )
    rates = markdown_table(
        ["workers", "fits per minute", "x 1 worker"],
        [(w, f"{r:.2f}", f"{r / per_minute[1]:.2f}") for w, r in per_minute.items()],
    )
    text = "\n".join(
        [
            "# Many fits on Dask: the boarding-school SIR model",
            "",
            f"`{command}` (under `flock -x /work/.heavy.lock`); each fit "
            f"`pm.sample()` with nutpie, {args.chains} chains of {args.tune} + "
            f"{args.draws} draws one after the other (`cores=1`), on a "
            "dataset simulated from the prior; one single-threaded worker per "
            "core; caches in a `compiledir` of the run's own.",
            "",
            machine_header(
                package_versions(
                    {
                        name: name
                        for name in ("pytensor", "jax", "pymc", "nutpie", "distributed")
                    }
                )
            ),
            "",
            table,
            "",
            rates,
            "",
            f"Speed-up with 2 workers: {speedup:.2f}x (target 1.7x).",
            "",
            "Traces: " + "; ".join(notes) + ".",
            "",
        ]
    )
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
