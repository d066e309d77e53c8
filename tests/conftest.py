"""Test helpers in this folder (``_fresh_process``) are importable from every test.

Pytest puts the folder of each ``conftest.py`` on ``sys.path`` (the default
"prepend" import mode), also when only a sub-folder's tests are collected.
"""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_trace_cache_in_this_process():
    """Tests in this process see only its own traces, not earlier runs' on disk.

    The trace cache (``compiledir/jax_ofg_traces``) would make traces that a
    test counts depend on what earlier test runs left there. Fresh-process
    tests (``test_jax_ofg_trace_cache.py``, ``test_jax_ofg_cold_start.py``)
    run with their own ``compiledir`` and the cache on.
    """
    import pytensor
    import pytensor.compile.jax_ofg

    with pytensor.config.change_flags(jax_ofg__trace_cache=False):
        yield
