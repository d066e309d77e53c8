"""SBC of the boarding-school model on Dask (examples/sbc_boarding_school.py).

Each test runs fresh processes (the example, Dask's workers) with a
``compiledir`` of its own, given in a ``.pytensorrc`` file (``PYTENSOR_FLAGS``
would make PyTensor warn about the trace cache's flag).
"""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _fresh_process import ROOT, SITECUSTOMIZE, run_python

import pytensor.compile.jax_ofg  # noqa: F401  (registers its flags)
from pytensor.compile._jax_ofg.cache.api import Entry


SCRIPT = ROOT / "examples" / "sbc_boarding_school.py"

pytestmark = pytest.mark.slow


def settings(folder: Path, name: str) -> dict[str, str]:
    """The environment of a process whose caches are under ``folder/name``."""
    rc = folder / f"{name}.pytensorrc"
    rc.write_text(
        f"[global]\nbase_compiledir = {folder / name}\njax_ofg__trace_cache = on\n"
    )
    return {"PYTENSORRC": str(rc), "EQX_ON_ERROR": "nan"}


def first_fits_traced(output: str) -> list[int]:
    """Traces run in each worker's first fit, from the example's report."""
    line = next(
        line for line in output.splitlines() if line.startswith("Trace cache in the")
    )
    return [int(n) for n in re.findall(r"(\d+) traced", line)]


def trace_entries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("jax_ofg_traces/*") if not p.name.startswith(".")]


def test_quick_run_as_a_script(tmp_path):
    """Two fits on a local cluster: ranks, figure, and workers that trace nothing."""
    out = tmp_path / "sbc.png"
    done = run_python(
        [str(SCRIPT), "--quick", "--out", str(out)],
        tmp_path,
        timeout=600,
        env=settings(tmp_path, "compiledir"),
    )
    output = done.stdout
    assert "2 fits done, 0 failed" in output, output
    assert re.search(r"fits 2/2 done, \d+:\d\d spent", done.stderr), done.stderr
    # This process traced and compiled the model once (a cold cache) ...
    warm_up = re.search(r"Warm-up fit here: .* (\d+) traced", output)
    assert warm_up and int(warm_up.group(1)) > 0, output
    # ... and no worker did it again.
    assert first_fits_traced(output) == [0, 0], output
    for name in ("beta", "gamma", "phi_inv"):
        assert re.search(rf"  {name} +quartiles", output)
    assert out.stat().st_size > 10_000


def test_caches_reach_workers_without_a_shared_file_system(tmp_path):
    """``--ship-caches``: a worker with a compiledir of its own traces nothing."""
    startup = tmp_path / "startup"
    startup.mkdir()
    (startup / "sitecustomize.py").write_text(SITECUSTOMIZE)
    environment = {
        **os.environ,
        **settings(tmp_path, "worker-compiledir"),
        "PYTHONPATH": str(startup),
    }
    address_file = tmp_path / "scheduler.json"
    cluster = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--scheduler-file",
                str(address_file),
                "--port",
                "0",
                "--dashboard-address",
                ":0",
            ],
            env=environment,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(address_file.read_text())["address"]
        cluster.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                ],
                env=environment,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        done = run_python(
            [
                str(SCRIPT),
                "--quick",
                "--fits",
                "1",
                "--scheduler",
                address,
                "--ship-caches",
                "--out",
                str(tmp_path / "sbc.png"),
            ],
            tmp_path,
            timeout=600,
            env=settings(tmp_path, "compiledir"),
        )
    finally:
        for process in cluster:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
    assert "1 fits done, 0 failed" in done.stdout, done.stdout
    assert first_fits_traced(done.stdout) == [0], done.stdout
    shipped = trace_entries(tmp_path / "worker-compiledir")
    assert {p.name for p in shipped} == {
        p.name for p in trace_entries(tmp_path / "compiledir")
    }


#: A fit that kills its worker in the middle (the first time), one that
#: raises from a wrapped function, and ordinary ones.
FAULTS = """
import os, signal, threading
from pathlib import Path

import jax
import numpy as np
import sbc_boarding_school as sbc


def fit(index, marker, **task):
    if index == 0 and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        threading.Timer(8.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
    if index == 1:
        return run_broken_solve()
    return sbc.fit_dataset(index=index, **task)


def run_broken_solve():
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.jax_ofg import as_jax_op

    @as_jax_op
    def broken_solve(x):
        def fail(value):
            raise ValueError("the solver failed")

        return jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = pt.vector("x", shape=(3,))
    return pytensor.function([x], pt.sum(broken_solve(x)))(np.ones(3))
"""

FAULTS_SCRIPT = """
import dataclasses, json, sys
sys.path.insert(0, {examples!r})
import sbc_boarding_school as sbc
import faults
from dask.distributed import Client, LocalCluster

if __name__ == "__main__":
    truths, cases = sbc.simulate(3, seed=7)
    tasks = [
        dict(index=k, cases=cases[k], truth=truths[k], draws=30, tune=30, chains=1,
             seed=k, marker="killed.txt")
        for k in range(3)
    ]
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
    client = Client(cluster)
    try:
        fits = sbc.run_fits(client, tasks, faults.fit)
    finally:
        sbc.stop_client(client, cluster)
    print("FITS", json.dumps([dataclasses.asdict(f) for f in fits]))
"""


def test_a_killed_worker_and_a_raising_fit(tmp_path):
    (tmp_path / "faults.py").write_text(FAULTS)
    script = tmp_path / "faults_run.py"
    script.write_text(FAULTS_SCRIPT.format(examples=str(ROOT / "examples")))
    done = run_python(
        [str(script)], tmp_path, timeout=900, env=settings(tmp_path, "compiledir")
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("FITS "))
    fits = json.loads(line[5:])
    assert [f["index"] for f in fits] == [0, 1, 2]
    killed = int((tmp_path / "killed.txt").read_text())
    # The killed fit ran again, on another worker process, to the end.
    assert fits[0]["error"] is None, fits[0]["error"]
    assert not fits[0]["worker"].endswith(f":{killed}")
    assert all(0.0 <= p <= 1.0 for p in fits[0]["pit"].values())
    assert fits[2]["error"] is None and len(fits[2]["pit"]) == 3
    # The raising fit is reported, naming the wrapped function, and the
    # others went on.
    assert "broken_solve" in fits[1]["error"], fits[1]["error"]
    assert "the solver failed" in fits[1]["error"]
    # No entry the killed worker was writing is left half-written.
    entries = trace_entries(tmp_path / "compiledir")
    assert entries
    for path in entries:
        assert isinstance(pickle.loads(path.read_bytes()), Entry), path.name


class _Closing:
    """A client or cluster whose ``close`` records the call, or raises."""

    def __init__(self, error: Exception | None = None):
        self.error = error
        self.closed = False

    def close(self):
        self.closed = True
        if self.error is not None:
            raise self.error


def test_a_slow_teardown_keeps_the_fits(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import sbc_boarding_school as sbc

    client, cluster = _Closing(), _Closing(TimeoutError())
    sbc.stop_client(client, cluster)
    assert client.closed and cluster.closed
    assert "took longer than distributed's timeout" in capsys.readouterr().err
    # Any other error of the teardown is the caller's to see.
    with pytest.raises(OSError, match="lost"):
        sbc.stop_client(_Closing(), _Closing(OSError("lost")))
