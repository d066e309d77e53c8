"""nutpie's chains in worker processes pinned to cores (``sample_in_processes``).

The samplers run in a fresh process (:func:`_fresh_process.run_script`), so
that it and the workers it starts import this checkout's modules and a hang
fails within the timeout; argument checks and the merge run here.
"""

import json
import threading

import cloudpickle
import numpy as np
import pymc as pm
import pytest
import xarray as xr
from _fresh_process import run_script

from pytensor.compile._jax_ofg.samplers import chain_processes
from pytensor.compile._jax_ofg.samplers.chain_processes import (
    WorkerResult,
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
        from pytensor.compile._jax_ofg.samplers.chain_processes import (
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
            "sampled in order": all(w.sampled[0] < w.sampled[1] for w in workers),
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
    expected = [[cores[0], [cores[0]], 2], [cores[1], [cores[1]], 1]]
    assert result["workers"] == expected
    assert len(set(result["chain means"])) == 3  # every chain its own seed
    assert result["phases"] == ["compile", "first call", "imports", "sampling"]
    assert result["sampled in order"]
    # Each worker adds the groups pm.sample adds to nutpie's trace.
    assert result["observed by worker"] == [result["data"]] * 2
    assert result["observed merged"] == result["data"]


@pytest.mark.slow
def test_a_seed_gives_the_same_draws_and_the_model_of_the_with_block_is_sampled():
    done = run_script(
        """
        import json
        import pymc as pm
        from _conjugate_model import build_model
        from pytensor.compile._jax_ofg.samplers.chain_processes import sample_in_processes

        model = build_model(pool_work=False)
        theta = model["theta"]
        runs = {}
        for name, seed in (("first", 5), ("again", 5), ("other", 6)):
            with model:  # the model of the with block
                trace = sample_in_processes(
                    chains=2, cores=2, seed=seed, tune=30, draws=20,
                    # A variable as a key (that it stays the workers' model's
                    # own is checked without processes, below).
                    compile_kwargs={"initial_points": {theta: [0.5, -0.5]}},
                )
            runs[name] = trace.posterior["theta"].values.tolist()
        settings = json.loads(trace.sample_stats.attrs["inference_library_settings"])
        print(json.dumps({
            "same seed": runs["first"] == runs["again"],
            "other seed": runs["first"] == runs["other"],
            "chains": settings["settings"]["num_chains"],
            "seeds": settings["settings"]["seed"],
            "sampling_time": trace.posterior.attrs["sampling_time"],
            "tuning_steps": trace.posterior.attrs["tuning_steps"],
        }))
        """,
        timeout=400,
    )
    result = last_json(done.stdout)
    assert result["same seed"] and not result["other seed"]
    assert result["chains"] == 2 and len(set(result["seeds"])) == 2
    assert 0 < result["sampling_time"] < 60
    assert result["tuning_steps"] == 30


@pytest.mark.slow
def test_a_failing_worker_stops_the_others_and_is_named_with_its_error(tmp_path):
    done = run_script(
        f"""
        import os, time
        from pytensor.compile._jax_ofg.samplers.chain_processes import (
            ChainProcessError, sample_in_processes,
        )

        def model():
            if min(os.sched_getaffinity(0)) == min(CPUS):
                raise ValueError("no observations for region 3")
            with open({str(tmp_path / "sleeper")!r}, "w") as file:
                file.write(str(os.getpid()))
            time.sleep(120)

        CPUS = os.sched_getaffinity(0)
        start = time.monotonic()
        try:
            sample_in_processes(model, chains=2, cores=2, timeout=300)
        except ChainProcessError as error:
            print(str(error))
        print(f"after {{time.monotonic() - start:.0f}} s")
        """,
        tmp_path,
        timeout=400,
    )
    assert "sample_in_processes: worker 0" in done.stdout
    assert "failed with exit code 1" in done.stdout
    assert "ValueError: no observations for region 3" in done.stdout
    assert int(done.stdout.split("after ")[-1].split()[0]) < 60
    assert_gone(int((tmp_path / "sleeper").read_text()))


@pytest.mark.slow
def test_workers_that_outlast_the_timeout_are_stopped(tmp_path):
    done = run_script(
        f"""
        import os, time
        from pytensor.compile._jax_ofg.samplers.chain_processes import (
            ChainProcessError, sample_in_processes,
        )

        def model():
            with open({str(tmp_path)!r} + f"/sleeper-{{os.getpid()}}", "w"):
                pass
            time.sleep(120)

        start = time.monotonic()
        try:
            sample_in_processes(model, chains=2, cores=2, timeout=2)
        except ChainProcessError as error:
            print(str(error).splitlines()[0])
        print(f"after {{time.monotonic() - start:.0f}} s")
        """,
        tmp_path,
        timeout=100,
    )
    first, after = done.stdout.strip().splitlines()[-2:]
    assert "ran out of the timeout of 2 s and were stopped" in first
    assert int(after.split()[1]) < 60
    sleepers = list(tmp_path.glob("sleeper-*"))
    for sleeper in sleepers:
        assert_gone(int(sleeper.name.split("-")[1]))


def assert_gone(pid: int) -> None:
    """Assert that process ``pid`` has ended (not even a zombie of ours)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return
    assert state in ("Z", "X"), f"worker {pid} still runs (state {state})"


def test_the_arguments_it_sets_itself_are_refused():
    with pytest.raises(TypeError, match=r"sets progress_bar of nutpie\.sample itself"):
        sample_in_processes(lambda: None, chains=2, progress_bar=True)


def test_what_cannot_come_back_from_a_worker_is_refused():
    with pytest.raises(
        TypeError, match=r"cannot pass blocking, zarr_store to nutpie\.sample"
    ):
        sample_in_processes(lambda: None, blocking=False, zarr_store=object())


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2"])
@pytest.mark.parametrize("name", ["chains", "cores"])
def test_chains_and_cores_must_be_positive_ints(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a positive int, not"):
        run_chain_processes(lambda: None, **{name: value})


def test_a_model_cloudpickle_cannot_send_gets_a_clear_error():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="could not pickle the model or the sampler"):
        sample_in_processes(lambda: lock, chains=1)


def small_model() -> pm.Model:
    with pm.Model() as model:
        pm.Normal("mu", 0.0, 1.0)
        pm.HalfNormal("sigma", 1.0)
    return model


def test_variables_as_keys_reach_the_workers_as_the_models_own():
    model = small_model()
    mu, sigma = model["mu"], model["sigma"]
    payload = chain_processes._payload(
        model, {"initial_points": {mu: 0.5}, "jitter_rvs": {sigma}}, {}
    )
    sent, compile_kwargs, _ = cloudpickle.loads(payload)
    (key,) = compile_kwargs["initial_points"]
    assert key is sent["mu"]
    assert compile_kwargs["jitter_rvs"] == {sent["sigma"]}


def test_variables_as_keys_with_a_model_built_by_the_workers_are_refused():
    mu = small_model()["mu"]
    with pytest.raises(TypeError, match="name them by their names instead"):
        sample_in_processes(small_model, compile_kwargs={"initial_points": {mu: 0.5}})


def trace(chains: int, offset: float, *, draws: int = 4, seed: int = 0) -> xr.DataTree:
    values = offset + np.arange(chains * float(draws)).reshape(chains, draws)
    posterior = xr.Dataset(
        {"mu": (("chain", "draw"), values)},
        coords={"chain": np.arange(chains), "draw": np.arange(draws)},
    )
    stats = xr.Dataset(
        {"n_steps": (("chain", "draw"), np.ones((chains, draws)))},
        coords={"chain": np.arange(chains), "draw": np.arange(draws)},
        attrs={
            "inference_library_settings": json.dumps(
                {"settings": {"num_chains": chains, "seed": seed, "num_tune": 9}}
            )
        },
    )
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})


def test_merged_chains_keep_each_workers_draws_in_order():
    first, second = trace(2, 0.0, seed=11), trace(1, 100.0, seed=12)
    merged = merge_chains([first, second])
    np.testing.assert_array_equal(merged.posterior["chain"], [0, 1, 2])
    np.testing.assert_array_equal(
        merged.posterior["mu"],
        np.concatenate([first.posterior["mu"], second.posterior["mu"]]),
    )
    assert merged.sample_stats["n_steps"].shape == (3, 4)
    settings = json.loads(merged.sample_stats.attrs["inference_library_settings"])
    assert settings["settings"] == {"num_chains": 3, "seed": [11, 12], "num_tune": 9}


def test_traces_of_different_draws_are_not_merged():
    with pytest.raises(ValueError, match="draw"):
        merge_chains([trace(1, 0.0, draws=4), trace(1, 0.0, draws=5)])


def test_interrupted_traces_of_different_draws_are_merged_padded_with_nan():
    short, long = trace(1, 0.0, draws=3), trace(2, 100.0, draws=5)
    merged = merge_chains([short, long], ragged=True)
    mu = merged.posterior["mu"].values
    assert mu.shape[:2] == (3, 5)
    np.testing.assert_array_equal(mu[0, :3], short.posterior["mu"].values[0])
    assert np.isnan(mu[0, 3:]).all()
    np.testing.assert_array_equal(mu[1:], long.posterior["mu"].values)
    assert merged.sample_stats["n_steps"].shape == (3, 5)


def test_the_merged_trace_keeps_the_first_workers_data_and_the_sampling_span(
    monkeypatch,
):
    first, second = trace(2, 0.0), trace(1, 100.0)
    for part, name in ((first, "first"), (second, "second")):
        part["observed_data"] = xr.DataTree(xr.Dataset({"y": ("y_dim", [1.0, 2.0])}))
        part.posterior.attrs["sampling_time"] = 0.001
        part.posterior.attrs["worker"] = name

    def two_workers(model, **kwargs):
        return [
            WorkerResult(first, 0, (0,), 2, {"sampling": 4.0}, (1000.0, 1004.0)),
            WorkerResult(second, 1, (1,), 1, {"sampling": 4.5}, (1001.0, 1005.5)),
        ]

    monkeypatch.setattr(chain_processes, "run_chain_processes", two_workers)
    merged = sample_in_processes(lambda: None, chains=3)
    np.testing.assert_array_equal(merged.posterior["chain"], [0, 1, 2])
    np.testing.assert_array_equal(merged.observed_data["y"], [1.0, 2.0])
    assert merged.posterior.attrs["worker"] == "first"
    # From the first worker's start of sampling to the last one's end.
    assert merged.posterior.attrs["sampling_time"] == 5.5
