"""A warm process: ``pm.sample()`` traces and compiles nothing that an earlier process did.

Fresh processes share one ``compiledir`` (the trace cache, JAX's persistent
cache) and one Numba cache. What is asserted is what ran, by count: the
wrapped function prints ``TRACED`` whenever JAX traces its body, and JAX's
compilation-cache events count the programs XLA compiled. How long the second
process takes to its first gradient is measured by the benchmarks, not here.
"""

import json
import textwrap

import numpy as np
import pytest
from _fresh_process import SERVE_HITS, run_script


MODEL = """
import diffrax
import jax.numpy as jnp
import numpy as np
import pymc as pm
from pytensor.compile.jax_ofg import as_jax_op

TIMES = np.linspace(0.5, 4.0, 8)
OBSERVED = 3.0 * np.exp(-0.7 * TIMES) + 0.05 * np.sin(5.0 * TIMES)


@as_jax_op
def decay(y0, rate):
    print("TRACED")
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, k: -k * y),
        diffrax.Tsit5(),
        0.0,
        float(TIMES[-1]),
        0.1,
        y0,
        args=rate,
        saveat=diffrax.SaveAt(ts=TIMES),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        throw=False,
    )
    return solution.ys


def build():
    with pm.Model() as model:
        y0 = pm.LogNormal("y0", np.log(3.0), 0.5)
        rate = pm.LogNormal("rate", np.log(0.5), 0.5)
        sigma = pm.HalfNormal("sigma", 0.2)
        pm.Normal("y", mu=decay(y0, rate), sigma=sigma, observed=OBSERVED)
    return model
"""

#: The guide's call, counted: XLA's compilation-cache events (every request of
#: a program goes through JAX's persistent cache, whose misses are compiles),
#: and what the trace cache served. The listener is a list's ``append``, not a
#: Python function: user code run inside a trace would keep it from the cache.
SCRIPT = """
import json
import jax

events = []
jax.monitoring.register_event_listener(events.append)

import pymc as pm
import model
from pytensor.compile.jax_ofg import trace_cache_info

with model.build():
    idata = pm.sample(
        draws=20, tune=20, chains=1, cores=1, random_seed=1,
        progressbar=False, compute_convergence_checks=False,
    )
info = trace_cache_info()
print("RESULT", json.dumps(dict(
    xla_requests=events.count("/jax/compilation_cache/compile_requests_use_cache"),
    xla_misses=events.count("/jax/compilation_cache/cache_misses"),
    trace_hits=info["hits"],
    trace_misses=info["misses"],
    uncached=info["uncached_functions"],
    rate=float(idata.posterior["rate"].mean()),
)))
"""


def sample(folder, pin: str) -> tuple[int, dict]:
    """Traces of the wrapped function, and what the process counted."""
    env = {
        "PYTENSOR_FLAGS": (
            f"{SERVE_HITS},base_compiledir={folder / 'compiledir'},"
            f"jax_ofg__pin_sampler_threads={pin}"
        ),
        "NUMBA_CACHE_DIR": str(folder / "numba"),
        # Every program is kept, the quickest compiles too: a warm process
        # then compiles none.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "EQX_ON_ERROR": "nan",
    }
    (folder / "model.py").write_text(textwrap.dedent(MODEL))
    done = run_script(SCRIPT, folder, env=env, timeout=900)
    lines = done.stdout.splitlines()
    result = next(json.loads(line[7:]) for line in lines if line.startswith("RESULT "))
    return lines.count("TRACED"), result


@pytest.mark.slow
@pytest.mark.parametrize("pin", ["False", "True"], ids=["unpinned", "pinned"])
def test_a_warm_process_samples_without_tracing_or_compiling(tmp_path, pin):
    traces, first = sample(tmp_path, pin)
    assert traces >= 1 and first["trace_misses"] >= 1
    assert first["xla_misses"] >= 1
    traces, warm = sample(tmp_path, pin)
    assert traces == 0, warm
    assert warm["trace_misses"] == 0 and warm["trace_hits"] >= 1, warm
    assert warm["uncached"] == {}
    assert warm["xla_requests"] >= 1 and warm["xla_misses"] == 0, warm
    assert np.isclose(warm["rate"], first["rate"], rtol=1e-10)
