"""Faults mid-run lose nothing already done.

A cache write that fails (a full disk, a quota, a folder removed meanwhile)
leaves no entry, half-written or whole, and the run goes on, the reason in
the debug log; the next run is correct and fills the cache. A worker of
``sample_in_processes`` killed by the OS gives an error naming it and what
it was doing, and the same process samples again. A writer killed mid-write
leaves a temporary file, which the next write removes.
"""

import contextlib
import errno
import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _fresh_process import run_python

import pytensor
from pytensor.compile._jax_ofg import compat, files
from pytensor.compile._jax_ofg.cache import api as trace_cache
from pytensor.compile._jax_ofg.patches import xla_cache_writes as xla_cache_module


LOGGER = "pytensor.compile.jax_ofg"


class HalfWritten:
    """A file whose ``write`` writes half of what it is given, then finds the
    disk full."""

    def __init__(self, file):
        self.file = file

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def write(self, data):
        self.file.write(data[: len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.file, name)


def inject(fault: str, monkeypatch) -> None:
    """Make the next cache writes fail: mid-write, at the rename, or by a
    folder removed between the two."""
    if fault == "full disk":
        real = os.fdopen
        monkeypatch.setattr(
            os, "fdopen", lambda fd, *a, **k: HalfWritten(real(fd, *a, **k))
        )
    elif fault == "quota":

        def over_quota(source, target):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

        monkeypatch.setattr(os, "replace", over_quota)
    else:
        real_replace = os.replace

        def folder_removed(source, target):
            shutil.rmtree(Path(source).parent)
            return real_replace(source, target)

        monkeypatch.setattr(os, "replace", folder_removed)


FAULTS = ["full disk", "quota", "folder removed"]


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@contextlib.contextmanager
def trace_cache_on(folder: Path) -> Iterator[None]:
    """The trace cache on, its entries on disk in ``folder``."""
    with (
        pytensor.config.change_flags(jax_ofg__trace_cache="on"),
        trace_cache.trace_cache_dir_set_to(folder),
    ):
        yield


@pytest.mark.parametrize("fault", FAULTS)
def test_a_trace_cache_write_that_fails_leaves_nothing_and_the_run_goes_on(
    fault, tmp_path, monkeypatch, caplog
):
    folder = tmp_path / "traces"
    kind = f"fault-test-{fault.replace(' ', '-')}"
    compute = functools.partial(np.full, 1000, 3.0)

    with (
        trace_cache_on(folder),
        monkeypatch.context() as faulty,
        caplog.at_level(logging.DEBUG, LOGGER),
    ):
        inject(fault, faulty)
        value = trace_cache.cached(kind, ("x",), compute, name="f")
    np.testing.assert_array_equal(value, np.full(1000, 3.0))
    assert files_in(folder) == []  # no entry, no temporary file
    reasons = [
        r.getMessage() for r in caplog.records if "not written" in r.getMessage()
    ]
    assert len(reasons) == 1 and kind in reasons[0]
    expected = {"full disk": "ENOSPC", "quota": "EDQUOT"}.get(fault, "ENOENT")
    assert os.strerror(getattr(errno, expected)) in reasons[0]

    # The next process (nothing in memory) computes it again and keeps it.
    with trace_cache_on(folder):
        trace_cache.reset()
        misses = trace_cache.trace_cache_info()["misses"]
        assert trace_cache.cached(kind, ("x",), compute, name="f")[0] == 3.0
        assert trace_cache.trace_cache_info()["misses"] == misses + 1
        assert [Path(name).suffix for name in files_in(folder)] == [f".{kind}"]
        trace_cache.reset()
        never = functools.partial(pytest.fail, "served from disk, not computed")
        np.testing.assert_array_equal(
            trace_cache.cached(kind, ("x",), never, name="f"), np.full(1000, 3.0)
        )


@pytest.mark.parametrize("fault", FAULTS)
def test_an_xla_cache_write_that_fails_leaves_nothing(
    fault, tmp_path, monkeypatch, caplog
):
    """JAX's cache class, as install() patched it."""
    cls, suffix = compat.persistent_cache_class()
    cache = cls(str(tmp_path), max_size=-1)
    with monkeypatch.context() as faulty, caplog.at_level(logging.DEBUG, LOGGER):
        inject(fault, faulty)
        cache.put("program", b"x" * 10_000)  # no error
    assert files_in(tmp_path) == []
    assert any("was not written" in r.getMessage() for r in caplog.records)
    tmp_path.mkdir(exist_ok=True)
    assert cache.get("program") is None
    # A truncated entry (written by JAX before the patch, or by hand) is
    # replaced by the next write of that program.
    (tmp_path / f"program{suffix}").write_bytes(b"x" * 10)
    cache.put("program", b"y" * 10_000)
    assert cache.get("program") == b"y" * 10_000
    assert files_in(tmp_path) == [f"program{suffix}"]


@pytest.mark.parametrize("cache", ["traces", "xla"])
def test_a_writer_killed_mid_write_leaves_a_file_the_next_write_removes(
    cache, tmp_path, request
):
    """A process killed between writing its temporary file and renaming it
    leaves that file (no reader takes it for an entry); the next write to the
    folder removes it once no live writer can own it, and keeps a fresh one."""
    old = time.time() - 2 * files.ORPHAN_AGE
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)
    if cache == "traces":
        folder = tmp_path / "traces"
        stack.enter_context(trace_cache_on(folder))
        prefix = trace_cache.TEMPORARY_PREFIX
        trace_cache.cached("orphans", ("a",), functools.partial(np.ones, 3), name="f")
        trace_cache.reset()

        def write():
            trace_cache.cached(
                "orphans", ("b",), functools.partial(np.zeros, 3), name="g"
            )

    else:
        folder = tmp_path
        cls, _ = compat.persistent_cache_class()
        xla_cache = cls(str(folder), max_size=-1)
        prefix = xla_cache_module.TEMPORARY_PREFIX

        def write():
            xla_cache.put("program", b"y" * 1000)

    (folder / f"{prefix}killed").write_bytes(b"half an entry")
    os.utime(folder / f"{prefix}killed", (old, old))
    (folder / f"{prefix}writing").write_bytes(b"a live writer's")
    entries_before = [n for n in files_in(folder) if not n.startswith(".")]
    write()
    names = files_in(folder)
    assert f"{prefix}killed" not in names
    assert f"{prefix}writing" in names
    assert len([n for n in names if not n.startswith(".")]) == len(entries_before) + 1
    if cache == "traces":  # the entry written before is served, untouched
        never = functools.partial(pytest.fail, "served from disk, not computed")
        np.testing.assert_array_equal(
            trace_cache.cached("orphans", ("a",), never, name="f"), np.ones(3)
        )


#: A value and gradient through a wrapped function, in a fresh process, with
#: every write to disk failing half-way (``FAULT``) or not; prints the result
#: and the files the caches hold.
XLA_SCRIPT = """
import errno, json, os, sys
import jax.numpy as jnp, numpy as np
import pytensor, pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op, trace_cache_info
from pytensor.compile._jax_ofg.patches.xla_cache import xla_cache_dir

if sys.argv[1] == "full":
    from test_jax_ofg_faults import HalfWritten
    real = os.fdopen
    os.fdopen = lambda fd, *a, **k: HalfWritten(real(fd, *a, **k))

@as_jax_op
def f(x):
    return jnp.sum(jnp.sin(x) ** 2 * jnp.arange(1.0, 4.0))

x = pt.vector("x", shape=(3,))
cost = f(x) + pt.sum(x**2)
function = pytensor.function([x], [cost, pt.grad(cost, x)], mode="CVM")
value, gradient = function(np.array([0.1, 0.2, 0.3]))
folders = [xla_cache_dir(), trace_cache_info()["path"]]
print(json.dumps({
    "value": float(value),
    "gradient": gradient.tolist(),
    "files": [sorted(os.listdir(d)) if os.path.isdir(d) else [] for d in folders],
}))
"""


@pytest.mark.slow
@pytest.mark.one_python
def test_a_full_disk_under_the_caches_loses_nothing_and_the_next_run_fills_them(
    tmp_path,
):
    (tmp_path / "script.py").write_text(XLA_SCRIPT)
    env = {
        "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'compiledir'}",
        # Every program kept: this one compiles in about the package's
        # threshold (0.1 s), kept or not by the machine's speed.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }

    def run_with(argument):
        done = run_python(
            [str(tmp_path / "script.py"), argument], tmp_path, env=env, timeout=120
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    full = run_with("full")
    x = np.array([0.1, 0.2, 0.3])
    weights = np.arange(1.0, 4.0)
    expected = np.sum(np.sin(x) ** 2 * weights) + np.sum(x**2)
    gradient = 2 * np.sin(x) * np.cos(x) * weights + 2 * x
    np.testing.assert_allclose(full["value"], expected, rtol=1e-12)
    np.testing.assert_allclose(full["gradient"], gradient, rtol=1e-12)
    assert full["files"] == [[], []]  # nothing written, not even half

    fine = run_with("fine")
    np.testing.assert_allclose(fine["value"], expected, rtol=1e-12)
    np.testing.assert_allclose(fine["gradient"], gradient, rtol=1e-12)
    xla_files, trace_files = fine["files"]
    assert xla_files and trace_files
    assert not [name for name in xla_files + trace_files if name.startswith(".")]


@pytest.mark.slow
@pytest.mark.one_python
def test_a_worker_killed_by_the_os_is_named_and_the_next_fit_is_correct(tmp_path):
    (tmp_path / "script.py").write_text(KILLED_WORKER_SCRIPT)
    done = run_python([str(tmp_path / "script.py")], tmp_path, timeout=240)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    error = result["error"]
    # A worker confined to one CPU is named by it; one left where the OS puts
    # it (its CPU held by another process's chain) has none.
    killed = result["killed"]
    core = killed[0] if len(killed) == 1 else None
    assert error.startswith("sample_in_processes: worker ")
    assert f"(core {core})" in error.split(" was killed")[0]
    assert "was killed by SIGKILL" in error and "out of memory" in error
    assert "while compiling" in error  # what it was doing
    assert result["left"] == []  # the other worker was stopped too
    assert result["again"]["draws"] == 400
    for mean, sd in zip(result["again"]["mean"], result["again"]["sd"]):
        assert abs(mean) < 0.25  # posterior N(0, 1/2)
        assert 0.5 < sd < 0.9


#: Workers that, while a flag file exists, say who they are and wait; the
#: parent's thread kills the first with SIGKILL (what the OOM killer sends).
KILLED_WORKER_SCRIPT = """
import json, os, signal, threading, time
from pathlib import Path
import numpy as np
from _interrupt_routes import build_with_ops
from pytensor.compile._jax_ofg.samplers.chain_processes import (
    ChainProcessError, sample_in_processes,
)

FLAG, HERE = Path("kill-me").absolute(), Path(".").absolute()

def model():
    if FLAG.exists():
        (HERE / f"worker-{os.getpid()}").write_text(json.dumps(sorted(os.sched_getaffinity(0))))
        time.sleep(200)
    return build_with_ops()

killed = {}

def kill_one():
    while not (found := sorted(HERE.glob("worker-*"))):
        time.sleep(0.05)
    pid = int(found[0].name.split("-")[1])
    killed["affinity"] = json.loads(found[0].read_text())
    os.kill(pid, signal.SIGKILL)

FLAG.write_text("")
threading.Thread(target=kill_one, daemon=True).start()
try:
    sample_in_processes(model, chains=2, cores=2, seed=1, timeout=150)
except ChainProcessError as error:
    message = str(error)
time.sleep(1.5)
left = []
for path in HERE.glob("worker-*"):
    pid = int(path.name.split("-")[1])
    try:
        os.kill(pid, 0)
        left.append(pid)
    except ProcessLookupError:
        pass
FLAG.unlink()
trace = sample_in_processes(model, chains=2, cores=2, seed=1, tune=200, draws=200)
x = trace.posterior["x"].values.reshape(-1, 2)
print(json.dumps({
    "error": message,
    "killed": killed["affinity"],
    "left": left,
    "again": {"draws": len(x), "mean": x.mean(0).tolist(), "sd": x.std(0).tolist()},
}))
"""
