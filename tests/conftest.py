"""The whole suite checks the trace cache: every hit is verified against a fresh trace.

Test helpers in this folder (``_fresh_process``) are importable from every test:
pytest puts the folder of each ``conftest.py`` on ``sys.path`` (the default
"prepend" import mode), also when only a sub-folder's tests are collected.

The suite runs with ``jax_ofg__trace_cache=verify``: in this process with a
trace folder of its own (a test counting traces must not depend on what
earlier runs left on disk), and in the fresh processes tests start (through
a ``PYTENSORRC`` file, unless a test sets the flag itself: ``_fresh_process.SERVE_HITS``)
with the usual one,
where entries of earlier runs are verified too. A test that counts traces
switches to ``on`` itself. At the end, the run says how many hits were
verified (every process's counts, collected in a folder named by
``JAX_OFG_TRACE_CACHE_COUNTS``).
"""

import os
import tempfile
from pathlib import Path

import _trace_cache_counts
import pytest


def pytest_configure(config):
    if _trace_cache_counts.VARIABLE not in os.environ:  # the controller
        os.environ[_trace_cache_counts.VARIABLE] = tempfile.mkdtemp(
            prefix="jax_ofg_trace_cache_counts-"
        )
        # A configuration file, not PYTENSOR_FLAGS: PyTensor warns on import of
        # every flag it does not know yet (ours are registered after it), and
        # tests of examples assert that their output holds no warning. Read
        # last, it overrides the user's file; PYTENSOR_FLAGS overrides both.
        rc = Path(os.environ[_trace_cache_counts.VARIABLE]) / "pytensorrc"
        # PyTensor reads a flag ``a__b`` from option ``b`` of section ``[a]``.
        rc.write_text("[jax_ofg]\ntrace_cache = verify\n")
        user_rc = os.environ.get("PYTENSORRC", str(Path.home() / ".pytensorrc"))
        os.environ["PYTENSORRC"] = os.pathsep.join((user_rc, str(rc)))


@pytest.fixture(autouse=True, scope="session")
def _trace_cache_verified(tmp_path_factory):
    import pytensor
    from pytensor.compile import jax_ofg  # noqa: F401  (declares the flag below)
    from pytensor.compile._jax_ofg.cache import api as trace_cache

    folder = tmp_path_factory.mktemp("jax_ofg_traces")
    leases = _leases_of_this_worker(tmp_path_factory)
    with (
        trace_cache.trace_cache_dir_set_to(folder),
        pytensor.config.change_flags(
            jax_ofg__trace_cache="verify", jax_ofg__cpu_leases=str(leases)
        ),
    ):
        yield
    _trace_cache_counts.write()


def _leases_of_this_worker(tmp_path_factory) -> Path:
    """A folder of CPU leases for this test process and the processes it starts.

    Test processes run side by side (pytest-xdist), each sampling now and then:
    sharing the machine's leases, a test's chains would land on whichever
    CPUs another test left free. Tests of the leases between processes use
    folders of their own.
    """
    leases = tmp_path_factory.mktemp("jax_ofg_cpu_leases")
    rc = leases / "pytensorrc"
    rc.write_text(f"[jax_ofg]\ncpu_leases = {leases}\n")
    os.environ["PYTENSORRC"] = os.pathsep.join(
        (*os.environ.get("PYTENSORRC", "").split(os.pathsep), str(rc))
    ).lstrip(os.pathsep)
    return leases


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        line = _trace_cache_counts.summary()
        if line:
            terminalreporter.write_line(line)
