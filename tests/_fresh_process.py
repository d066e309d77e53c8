"""Run test code in a new interpreter that imports this checkout's modules."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "tests" / "compile"

#: Runs the root conftest.py (the checkout's folders first on PyTensor's
#: package paths) and makes the helper modules of tests/compile importable.
PRELUDE = f"""
import importlib.util, sys
_spec = importlib.util.spec_from_file_location("checkout", {str(ROOT / "conftest.py")!r})
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
sys.path.insert(0, {str(HELPERS)!r})
"""


def run_script(
    code: str, folder: Path, *, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess:
    """Run ``code`` as the script ``folder/script.py``; return its outcome.

    A file rather than ``python -c``: worker processes started with ``spawn``
    or ``forkserver`` re-import the main script, so they run :data:`PRELUDE`
    and import this checkout's modules too, not an installed copy. The script
    runs in its own process group, which is killed when ``timeout`` (seconds)
    passes: a hang fails the test and leaves no worker processes behind.
    With ``check``, a non-zero exit fails the test with the end of stderr.
    """
    script = Path(folder) / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
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
