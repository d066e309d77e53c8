"""nutpie's chains in worker processes, each pinned to a core of its own.

nutpie runs chains on threads of one process. A model holding JAX ops runs
its log-density as an XLA program, and XLA's CPU runtime runs each call on a
pool of threads of its own, one per core the process may use: the work of
every call moves from the calling thread to another core and back. For the
small programs of small ODE models that hand-off is about half of a call:
``examples/stan_ode.py``'s value and gradient takes 89 µs in a process
confined to one core (its pool has one thread, on the caller's core) and
189 µs in an unconfined one. Threads of one process share one pool, so two
chains on threads cannot each keep their calls on their own core; processes
can. On this project's 2-core machine, chains in processes pinned to
distinct cores took 101-110 µs per gradient against 200-242 µs on threads,
and two of them ran 1.80x as fast as one (``benchmarks/small_odes.py``).
The price is each worker's start-up before its first draw, beside the
others: its imports (about 3 s for PyMC, nutpie and JAX), the model's
compilation (0.5 s once the trace and XLA caches hold it) and its program's
first call.

:func:`sample_in_processes` starts one worker per core, pinned (Linux's
:func:`os.sched_setaffinity`) before it imports anything, sends it the model
by :mod:`cloudpickle`, lets it compile the model for nutpie and sample its
share of the chains with ``cores=1``, and merges the workers' traces along
``chain``.

Notes
-----
* Pinning is Linux's; elsewhere the workers run unpinned, in parallel but
  without the faster calls.
* The workers show no progress bar; a failing worker's error output ends the
  :class:`ChainProcessError` that stops the others.
* Each worker seeds its chains from its own seed, drawn from ``seed``: the
  draws differ from ``pm.sample``'s with the same seed.
* ``pm.sample()`` keeps nutpie's threads: no worker start-up, which is worth
  more than faster calls for short runs.

Examples
--------
>>> import pymc as pm                                         # doctest: +SKIP
>>> from pytensor.compile.jax_ofg_chain_processes import sample_in_processes
>>> trace = sample_in_processes(model, chains=4, cores=2, seed=1,
...                             tune=1000, draws=1000)        # doctest: +SKIP
>>> trace.posterior.sizes["chain"]                            # doctest: +SKIP
4
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any


__all__ = [
    "ChainProcessError",
    "WorkerResult",
    "merge_chains",
    "run_chain_processes",
    "sample_in_processes",
]

# A worker's script. The pin comes before any import that may start thread
# pools (XLA's, OpenBLAS's), which take the affinity they start with. Like a
# user's script, it imports the facade, whose install() gives nutpie the ops'
# host callbacks.
_BOOTSTRAP = """\
import os, sys, time
started = time.perf_counter()
if sys.argv[1] != "-" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(sys.argv[1])})
import pytensor.compile.jax_ofg
from pytensor.compile.jax_ofg_chain_processes import _work
sys.exit(_work(sys.argv[2], started))
"""

#: The arguments of ``nutpie.sample`` that :func:`sample_in_processes` sets itself.
_SET_HERE = frozenset({"chains", "cores", "seed", "progress_bar"})
#: The arguments of ``nutpie.sample`` whose results cannot come back from a
#: worker: a sampler running in the background, a callback into this process,
#: one zarr store written by every worker, nutpie's raw trace.
_NOT_FROM_WORKERS = frozenset(
    {"blocking", "progress_callback", "zarr_store", "return_raw_trace"}
)

_STDERR_TAIL_LINES = 30


class ChainProcessError(RuntimeError):
    """A worker process of :func:`sample_in_processes` failed or timed out."""


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """What one worker sampled, and where its time went.

    Attributes
    ----------
    trace
        nutpie's trace of the worker's chains (an ``xarray.DataTree``).
    core
        The core the worker was pinned to (``None``: not pinned).
    affinity
        The cores the worker's process could run on, as it reported them.
    chains
        How many chains the worker sampled.
    seconds
        Seconds from the start of the worker's script: ``"imports"`` (this
        package, nutpie and the model's modules; the model unpickled), ``"compile"``
        (``nutpie.compile_pymc_model``), ``"first call"`` (the log-density
        once: XLA loads its program), ``"sampling"`` (``nutpie.sample``).
    """

    trace: Any
    core: int | None
    affinity: tuple[int, ...]
    chains: int
    seconds: dict[str, float]


def sample_in_processes(
    model: Any,
    *,
    chains: int = 4,
    cores: int | None = None,
    seed: int | None = None,
    compile_kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    **sample_kwargs: Any,
) -> Any:
    """Sample a PyMC model with nutpie, its chains in processes pinned to cores.

    Parameters
    ----------
    model
        A ``pymc.Model``, or a function of no arguments that builds one. Sent
        to the workers by :mod:`cloudpickle`: functions and classes defined in
        an importable module are sent by reference and imported there (the
        workers get this process's :data:`sys.path`).
    chains
        How many chains in all.
    cores
        How many workers, each pinned to one of the cores this process may run
        on; by default as many as there are such cores, at most ``chains``.
        The chains are split among the workers as evenly as possible.
    seed
        The seed of every worker's own seed (a :class:`numpy.random.SeedSequence`);
        by default fresh entropy.
    compile_kwargs
        Keyword arguments of ``nutpie.compile_pymc_model`` (``initial_points``,
        ``backend``, ...).
    timeout
        Seconds the workers may take in all; by default no limit.
    **sample_kwargs
        Keyword arguments of ``nutpie.sample`` (``tune``, ``draws``,
        ``target_accept``, ``adaptation``, ...), but not ``chains``,
        ``cores``, ``seed`` or ``progress_bar``, which are set here, nor
        ``blocking``, ``progress_callback``, ``zarr_store`` or
        ``return_raw_trace``.

    Returns
    -------
    xarray.DataTree
        nutpie's trace of all chains, numbered ``0`` to ``chains - 1`` in the
        workers' order; as ``pm.sample(nuts_sampler="nutpie")`` returns it for
        a ``pymc.Model``: with the model's ``observed_data`` and
        ``constant_data`` groups, and the posterior's ``sampling_time``
        (seconds from the workers' start to the last one's end, their imports
        and compilation included) and ``tuning_steps``.

    Raises
    ------
    ChainProcessError
        When a worker fails (with the end of its error output) or the workers
        run out of ``timeout``.
    """
    start = time.perf_counter()
    results = run_chain_processes(
        model,
        chains=chains,
        cores=cores,
        seed=seed,
        compile_kwargs=compile_kwargs,
        timeout=timeout,
        **sample_kwargs,
    )
    trace = merge_chains([result.trace for result in results])
    if "sampling_time" in trace.posterior.attrs:
        trace.posterior.attrs["sampling_time"] = time.perf_counter() - start
    return trace


def run_chain_processes(
    model: Any,
    *,
    chains: int = 4,
    cores: int | None = None,
    seed: int | None = None,
    compile_kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    **sample_kwargs: Any,
) -> list[WorkerResult]:
    """Run :func:`sample_in_processes`'s workers; each worker's result, unmerged.

    Takes the arguments of :func:`sample_in_processes`.
    """
    import cloudpickle
    import numpy as np

    if not isinstance(chains, int) or chains < 1:
        raise ValueError(
            f"sample_in_processes: chains must be a positive int, not {chains!r}"
        )
    if cores is not None and (not isinstance(cores, int) or cores < 1):
        raise ValueError(
            f"sample_in_processes: cores must be a positive int, not {cores!r}"
        )
    if clash := sorted(_SET_HERE & sample_kwargs.keys()):
        raise TypeError(
            f"sample_in_processes sets {', '.join(clash)} of nutpie.sample itself; "
            "pass chains, cores and seed as its own arguments"
        )
    if unsupported := sorted(_NOT_FROM_WORKERS & sample_kwargs.keys()):
        raise TypeError(
            f"sample_in_processes cannot pass {', '.join(unsupported)} to nutpie.sample "
            "in its workers, whose traces come back whole when they are done; "
            "use nutpie.sample for that"
        )
    try:
        model_bytes = cloudpickle.dumps(model)
    except Exception as error:
        raise TypeError(
            f"sample_in_processes could not pickle the model with cloudpickle "
            f"({type(error).__name__}: {error}); pass a function that builds the "
            "model instead, defined in a module the workers can import"
        ) from error

    cpus = _usable_cpus()
    workers = min(cores or len(cpus or [0]), chains)
    shares = [chains // workers + (k < chains % workers) for k in range(workers)]
    seeds = np.random.SeedSequence(seed).generate_state(workers).tolist()
    pins = [cpus[k % len(cpus)] if cpus else None for k in range(workers)]

    with tempfile.TemporaryDirectory(prefix="jax_ofg_chains_") as folder:
        jobs = []
        for k in range(workers):
            job = {
                "sys_path": list(sys.path),
                "model": model_bytes,
                "compile_kwargs": dict(compile_kwargs or {}),
                "sample_kwargs": {
                    **sample_kwargs,
                    "chains": shares[k],
                    "seed": seeds[k],
                },
                "result": str(Path(folder, f"result-{k}.pickle")),
            }
            job_path = Path(folder) / f"job-{k}.pickle"
            job_path.write_bytes(pickle.dumps(job))
            jobs.append((job_path, Path(folder) / f"worker-{k}.log"))
        processes = _start(jobs, pins)
        results = [Path(folder, f"result-{k}.pickle") for k in range(workers)]
        _wait(processes, [log for _, log in jobs], results, pins, timeout)
        done_by_worker = []
        for k in range(workers):
            done = pickle.loads(results[k].read_bytes())
            done_by_worker.append(
                WorkerResult(
                    done["trace"], pins[k], done["affinity"], shares[k], done["seconds"]
                )
            )
    return done_by_worker


def merge_chains(traces: Sequence[Any]) -> Any:
    """Concatenate nutpie traces along ``chain``, renumbering the chains from 0.

    Every group of the first trace is concatenated; variables without a
    ``chain`` dimension are taken from the first trace.
    """
    import numpy as np
    import xarray as xr

    groups = {}
    for name in traces[0].children:
        datasets = [trace[name].to_dataset() for trace in traces]
        if "chain" not in datasets[0].dims:
            groups[name] = datasets[0]
            continue
        merged = xr.concat(
            datasets,
            dim="chain",
            data_vars="minimal",
            coords="minimal",
            compat="override",
            join="outer",
            combine_attrs="override",
        )
        groups[name] = merged.assign_coords(chain=np.arange(merged.sizes["chain"]))
    tree = xr.DataTree.from_dict(groups)
    tree.attrs = dict(traces[0].attrs)
    return tree


def _is_pymc_model(model: Any) -> bool:
    pymc = sys.modules.get("pymc")
    return pymc is not None and isinstance(model, pymc.Model)


def _usable_cpus() -> list[int]:
    """The cores this process may run on, or none where affinity is not Linux's."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return []


def _start(
    jobs: list[tuple[Path, Path]], pins: list[int | None]
) -> list[subprocess.Popen]:
    processes = []
    for (job_path, log), pin in zip(jobs, pins):
        with open(log, "wb") as output:
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        _BOOTSTRAP,
                        "-" if pin is None else str(pin),
                        str(job_path),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
    return processes


def _wait(
    processes: list[subprocess.Popen],
    logs: list[Path],
    results: list[Path],
    pins: list[int | None],
    timeout: float | None,
) -> None:
    """Wait until every worker has written its result; on the first failure or the
    timeout, stop them all and raise.

    A worker's result file appears whole (written, then renamed), about a
    second before its interpreter has shut down (JAX's and nutpie's threads,
    finalizers): the workers finish exiting in the background.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    done = False
    try:
        while not all(result.exists() for result in results):
            for k, process in enumerate(processes):
                if process.poll() is not None and not results[k].exists():
                    how = (
                        "exited without a result"
                        if process.returncode == 0
                        else f"failed with exit code {process.returncode}"
                    )
                    raise ChainProcessError(
                        f"sample_in_processes: worker {k} (core {pins[k]}) {how}; "
                        f"the end of its output:\n{_tail(logs[k])}"
                    )
            if deadline is not None and time.monotonic() > deadline:
                running = [k for k, r in enumerate(results) if not r.exists()]
                raise ChainProcessError(
                    f"sample_in_processes: workers {running} ran out of the timeout of "
                    f"{timeout} s and were stopped; the end of worker {running[0]}'s "
                    f"output:\n{_tail(logs[running[0]])}"
                )
            time.sleep(0.02)
        done = True
    finally:
        for process in processes:
            if not done and process.poll() is None:
                process.kill()
        # Reaped (no zombie left behind) without holding up the caller.
        threading.Thread(
            target=lambda: [process.wait() for process in processes], daemon=True
        ).start()


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-_STDERR_TAIL_LINES:]) or "(no output)"


#: nutpie's log-density: ``(n_dim, x, gradient out, logp out, user_data) -> status``.
_LOG_DENSITY = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, *[ctypes.c_void_p] * 4)


def _call_log_density_once(compiled: Any) -> None:
    """Call nutpie's log-density of ``compiled`` once, at a start point, as nutpie does.

    XLA loads the model's program (from JAX's cache) now rather than in the
    first leapfrog step, so that a worker's seconds tell start-up from
    sampling. Not for nutpie's other backends, whose models have no C function.
    """
    import numpy as np

    function = getattr(compiled, "compiled_logp_func", None)
    if function is None:
        return
    point = np.ascontiguousarray(compiled.initial_point_func(0), dtype=np.float64)
    gradient, logp = np.empty_like(point), np.empty(1)
    _LOG_DENSITY(function.address)(
        point.size,
        point.ctypes.data,
        gradient.ctypes.data,
        logp.ctypes.data,
        compiled.user_data.ctypes.data,
    )


def _work(job_path: str, start: float) -> int:
    """A worker's job after its script's first imports (from ``start``).

    Unpickle, compile, sample, write the result.
    """
    try:
        job = pickle.loads(Path(job_path).read_bytes())
        sys.path[:] = job["sys_path"]
        import cloudpickle
        import nutpie

        model = cloudpickle.loads(job["model"])
        if not _is_pymc_model(model) and callable(model):
            model = model()
        seconds = {"imports": time.perf_counter() - start}
        before = time.perf_counter()
        compiled = nutpie.compile_pymc_model(model, **job["compile_kwargs"])
        seconds["compile"] = time.perf_counter() - before
        before = time.perf_counter()
        _call_log_density_once(compiled)
        seconds["first call"] = time.perf_counter() - before
        before = time.perf_counter()
        trace = nutpie.sample(
            compiled, cores=1, progress_bar=False, **job["sample_kwargs"]
        )
        seconds["sampling"] = time.perf_counter() - before
        if _is_pymc_model(model):
            from pymc.backends.arviz import patch_nutpie_idata

            # What pm.sample adds to nutpie's trace: the model's data groups.
            patch_nutpie_idata(trace, model, sampling_time=seconds["sampling"])
        result = Path(job["result"])
        partial = result.with_suffix(".partial")
        affinity = sorted(os.sched_getaffinity(0)) if _usable_cpus() else []
        done = {"trace": trace, "seconds": seconds, "affinity": tuple(affinity)}
        partial.write_bytes(pickle.dumps(done))
        partial.replace(result)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
