"""nutpie's chains in worker processes pinned to cores (``sample_in_processes``).

The samplers run in a fresh process (:func:`_fresh_process.run_script`), so
that it and the workers it starts import this checkout's modules and a hang
fails within the timeout; argument checks and the merge run here.
"""

import json
import threading
import time

import numpy as np
import pytest
import xarray as xr
from _fresh_process import run_script

from pytensor.compile.jax_ofg_chain_processes import (
    merge_chains,
    run_chain_processes,
    sample_in_processes,
)


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_chains_in_pinned_processes_sample_the_analytic_posterior():
    done = run_script(
        """
        import json, os
        import numpy as np
        from _conjugate_model import build_model, check_posterior, observed_data
        from pytensor.compile.jax_ofg_chain_processes import (
            merge_chains, run_chain_processes,
        )

        def model():  # defined here: sent to the workers by value
            return build_model(pool_work=False)

        workers = run_chain_processes(
            model, chains=3, cores=2, seed=5, tune=300, draws=300
        )
        trace = merge_chains([w.trace for w in workers])
        draws = trace.posterior["theta"].values
        check_posterior(draws)
        observed = [w.trace.observed_data["y"].values.tolist() for w in workers]
        print(json.dumps({
            "cpus": sorted(os.sched_getaffinity(0)),
            "workers": [[w.core, list(w.affinity), w.chains] for w in workers],
            "shape": list(draws.shape),
            "chain": trace.posterior["chain"].values.tolist(),
            "warmup chain": trace.warmup_posterior["chain"].values.tolist(),
            "stats shape": list(trace.sample_stats["diverging"].shape),
            "chain means": draws.mean(axis=1)[:, 0].tolist(),
            "phases": sorted({phase for w in workers for phase in w.seconds}),
            "observed by worker": observed,
            "observed merged": trace.observed_data["y"].values.tolist(),
            "data": observed_data().tolist(),
        }))
        """,
        timeout=400,
    )
    result = last_json(done.stdout)
    assert result["shape"] == [3, 300, 2]
    assert result["chain"] == result["warmup chain"] == [0, 1, 2]
    assert result["stats shape"] == [3, 300]
    cores = result["cpus"][:2]
    expected = [
        [cores[0], [cores[0]], 2],
        [cores[1 % len(cores)], [cores[1 % len(cores)]], 1],
    ]
    assert result["workers"] == expected
    assert len(set(result["chain means"])) == 3  # every chain its own seed
    assert result["phases"] == ["compile", "first call", "imports", "sampling"]
    # Each worker adds the groups pm.sample adds to nutpie's trace.
    assert result["observed by worker"] == [result["data"]] * 2
    assert result["observed merged"] == result["data"]


@pytest.mark.slow
def test_a_failing_worker_is_named_with_its_error():
    done = run_script(
        """
        from pytensor.compile.jax_ofg_chain_processes import (
            ChainProcessError, sample_in_processes,
        )

        def model():
            raise ValueError("no observations for region 3")

        try:
            sample_in_processes(model, chains=2, cores=2, timeout=300)
        except ChainProcessError as error:
            print(str(error))
        """,
        timeout=400,
    )
    assert "sample_in_processes: worker" in done.stdout
    assert "failed with exit code 1" in done.stdout
    assert "ValueError: no observations for region 3" in done.stdout


@pytest.mark.slow
def test_workers_that_outlast_the_timeout_are_stopped():
    done = run_script(
        """
        import time
        from pytensor.compile.jax_ofg_chain_processes import (
            ChainProcessError, sample_in_processes,
        )

        def model():
            time.sleep(120)

        start = time.monotonic()
        try:
            sample_in_processes(model, chains=2, cores=2, timeout=2)
        except ChainProcessError as error:
            print(str(error).splitlines()[0])
        print(f"after {time.monotonic() - start:.0f} s")
        """,
        timeout=100,
    )
    first, after = done.stdout.strip().splitlines()[-2:]
    assert "ran out of the timeout of 2 s and were stopped" in first
    assert int(after.split()[1]) < 60


def test_the_arguments_it_sets_itself_are_refused():
    with pytest.raises(TypeError, match=r"sets progress_bar of nutpie\.sample itself"):
        sample_in_processes(lambda: None, chains=2, progress_bar=True)


def test_what_cannot_come_back_from_a_worker_is_refused():
    with pytest.raises(
        TypeError, match=r"cannot pass blocking, zarr_store to nutpie\.sample"
    ):
        sample_in_processes(lambda: None, blocking=False, zarr_store=object())


def test_chains_must_be_a_positive_int():
    with pytest.raises(ValueError, match="chains must be a positive int, not 0"):
        run_chain_processes(lambda: None, chains=0)


def test_a_model_cloudpickle_cannot_send_gets_a_clear_error():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="could not pickle the model with cloudpickle"):
        sample_in_processes(lambda: lock, chains=1)


def trace(chains: int, offset: float) -> xr.DataTree:
    draws = offset + np.arange(chains * 4.0).reshape(chains, 4)
    posterior = xr.Dataset(
        {"mu": (("chain", "draw"), draws)},
        coords={"chain": np.arange(chains), "draw": np.arange(4)},
    )
    stats = xr.Dataset({"n_steps": (("chain", "draw"), np.ones((chains, 4)))})
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})


def test_merged_chains_keep_each_workers_draws_in_order():
    first, second = trace(2, 0.0), trace(1, 100.0)
    merged = merge_chains([first, second])
    np.testing.assert_array_equal(merged.posterior["chain"], [0, 1, 2])
    np.testing.assert_array_equal(
        merged.posterior["mu"],
        np.concatenate([first.posterior["mu"], second.posterior["mu"]]),
    )
    assert merged.sample_stats["n_steps"].shape == (3, 4)


def test_the_merged_trace_keeps_the_first_workers_data_and_the_whole_time(
    monkeypatch,
):
    from pytensor.compile import jax_ofg_chain_processes as chain_processes

    first, second = trace(2, 0.0), trace(1, 100.0)
    for part, name in ((first, "first"), (second, "second")):
        part["observed_data"] = xr.DataTree(xr.Dataset({"y": ("y_dim", [1.0, 2.0])}))
        part.posterior.attrs["sampling_time"] = 0.001
        part.posterior.attrs["worker"] = name

    def two_workers(model, **kwargs):
        time.sleep(0.2)
        return [
            chain_processes.WorkerResult(t, core, (core,), n, {"sampling": 0.001})
            for t, core, n in ((first, 0, 2), (second, 1, 1))
        ]

    monkeypatch.setattr(chain_processes, "run_chain_processes", two_workers)
    merged = sample_in_processes(lambda: None, chains=3)
    np.testing.assert_array_equal(merged.posterior["chain"], [0, 1, 2])
    np.testing.assert_array_equal(merged.observed_data["y"], [1.0, 2.0])
    assert merged.posterior.attrs["worker"] == "first"
    assert merged.posterior.attrs["sampling_time"] >= 0.2
