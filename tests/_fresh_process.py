"""Run Python in new processes that import this checkout's modules, workers included."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

#: Run at start-up by every Python process of a test run (see
#: :func:`run_python`): the root conftest.py puts the checkout's folders first
#: on PyTensor's package paths, the test helpers (and, from the checkout's
#: root as under pytest, ``examples._sir_models``) become importable, and
#: the process's trace cache counts join the run's summary when it ends.
SITECUSTOMIZE = f"""
import atexit, importlib.util, sys
_spec = importlib.util.spec_from_file_location("checkout", {str(ROOT / "conftest.py")!r})
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
sys.path += [{str(ROOT)!r}, {str(ROOT / "tests")!r}, {str(ROOT / "tests" / "compile")!r}]
atexit.register(lambda: __import__("_trace_cache_counts").write())
"""

#: The ``PYTENSOR_FLAGS`` entry of a fresh process whose traces a test counts.
#: The suite's fresh processes verify every trace cache hit (conftest.py), and
#: verifying a hit traces again; PyTensor merges ``PYTENSOR_FLAGS`` with the
#: suite's ``PYTENSORRC`` flag by flag, so a test that sets only
#: ``base_compiledir`` still verifies.
SERVE_HITS = "jax_ofg__trace_cache=on"


def run_python(
    arguments: list[str],
    folder: Path,
    *,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``python *arguments`` in ``folder``; return its outcome.

    Every Python process it starts imports this checkout's modules, not an
    installed copy: a ``sitecustomize.py`` on ``PYTHONPATH`` runs
    :data:`SITECUSTOMIZE` at start-up. That includes the worker processes that
    ``spawn`` and ``forkserver`` start, which import the main script again
    (whichever file that is) and would otherwise import the installed copy.
    They take CPU leases in a folder of their own (see ``start_python``).
    The processes run in their own process group, which is killed when
    ``timeout`` (seconds) passes: a hang fails the test and leaves no worker
    behind. With ``check``, a non-zero exit fails the test with the end of
    stderr. ``env`` adds to (or overrides) the environment.
    """
    process = start_python(arguments, folder, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the script did not finish within {timeout} s (killed)\n"
            f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}"
        ) from None
    result = subprocess.CompletedProcess(
        process.args, process.returncode, stdout, stderr
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def start_python(
    arguments: list[str], folder: Path, *, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start ``python *arguments`` in ``folder`` (see :func:`run_python`), not waiting.

    Its output is piped (text); it runs in a process group of its own.
    """
    startup = Path(folder) / "_checkout_startup"
    startup.mkdir(exist_ok=True)
    (startup / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # CPU leases of the process's own: processes of earlier tests (workers
    # still exiting) hold none of its CPUs. Read last, the file wins.
    rc = startup / "pytensorrc"
    rc.write_text(f"[jax_ofg]\ncpu_leases = {startup / 'cpu_leases'}\n")
    env = {**os.environ, **(env or {})}
    env = {
        **env,
        "PYTHONPATH": os.pathsep.join([str(startup), *_pythonpath()]),
        "PYTENSORRC": os.pathsep.join(
            [p for p in env.get("PYTENSORRC", "").split(os.pathsep) if p] + [str(rc)]
        ),
    }
    return subprocess.Popen(
        [sys.executable, *arguments],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_script(
    code: str,
    folder: Path | None = None,
    *,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``code`` as the script ``folder/script.py`` (see :func:`run_python`).

    Without ``folder``, in a temporary folder removed afterwards.
    """
    if folder is None:
        with tempfile.TemporaryDirectory() as temporary:
            return run_script(
                code, Path(temporary), timeout=timeout, check=check, env=env
            )
    script = Path(folder) / "script.py"
    script.write_text(textwrap.dedent(code))
    return run_python([str(script)], folder, timeout=timeout, check=check, env=env)


def _pythonpath() -> list[str]:
    existing = os.environ.get("PYTHONPATH", "")
    return [entry for entry in existing.split(os.pathsep) if entry]
