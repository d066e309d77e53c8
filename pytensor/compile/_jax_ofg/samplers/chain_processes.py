"""nutpie's chains in worker processes, each confined to a CPU of its own.

``pm.sample()`` runs nutpie's chains on threads of one process, each pinned
to a free CPU with an XLA runtime of its own
(:mod:`~pytensor.compile._jax_ofg.cores.threads`). :func:`sample_in_processes`
is the other way: one worker process per CPU, confined to it (Linux's
:func:`os.sched_setaffinity`) from its first instruction, so that JAX's own
CPU client sizes its thread pools to that one CPU. The CPUs are chosen as
sampler threads choose theirs: by what no process of this package holds
(a lease on each, handed to its worker: :func:`~pytensor.compile._jax_ofg.cores.api.worker_leases`),
distinct physical cores first; a worker beyond the free CPUs runs where the
OS puts it. Each worker gets the model by :mod:`cloudpickle`, compiles it
for nutpie and samples its share of the chains with ``cores=1``; the
workers' traces are merged along ``chain``. The price is each worker's
start-up before its first draw: its imports, the model's compilation and
its program's first call.

Notes
-----
* Confinement is Linux's; elsewhere the workers run where the OS puts them.
* The workers show no progress bar; a failing worker's output ends the
  :class:`ChainProcessError` that stops the others.
* Each worker seeds its chains from its own seed, drawn from ``seed``: the
  draws depend on the number of workers (by default the physical cores this
  process may use), and differ from ``pm.sample``'s with the same seed.

Examples
--------
>>> import pymc as pm                                         # doctest: +SKIP
>>> from pytensor.compile._jax_ofg.samplers.chain_processes import sample_in_processes
>>> trace = sample_in_processes(model, chains=4, cores=2, seed=1,
...                             tune=1000, draws=1000)        # doctest: +SKIP
>>> trace.posterior.sizes["chain"]                            # doctest: +SKIP
4
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import operator
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytensor.compile._jax_ofg.cores import api as cores_api
from pytensor.compile._jax_ofg.samplers.nutpie import LOGP_SIGNATURE


if TYPE_CHECKING:
    import xarray as xr


__all__ = [
    "ChainProcessError",
    "SamplingInterrupted",
    "WorkerResult",
    "merge_chains",
    "run_chain_processes",
    "sample_in_processes",
]

# A worker's script. Its job is plain data (the model travels as a file of
# cloudpickle's bytes), read before any import so that the caller's sys.path
# decides which copy of this package and of PyTensor it imports. Like a
# user's script, it imports the facade, whose install() gives nutpie the ops'
# host callbacks. A worker whose parent is gone (its stdin, a pipe the parent
# holds open, ends) exits at once: no worker outlives the process that waits
# for it, even one killed by SIGKILL.
_BOOTSTRAP = """\
import os, pickle, sys, threading, time
started = time.perf_counter()
def _orphaned():  # the parent holds stdin open while it waits for this worker
    # os.read, not sys.stdin: a daemon thread blocked inside the buffered
    # reader holds its lock, and interpreter shutdown then aborts (SIGABRT)
    while os.read(0, 4096):
        pass
    os._exit(70)
threading.Thread(target=_orphaned, daemon=True).start()
with open(sys.argv[1], "rb") as file:
    job = pickle.load(file)
sys.path[:] = job["sys_path"]
import pytensor.compile.jax_ofg
from pytensor.compile._jax_ofg.samplers.chain_processes import _work
sys.exit(_work(job, started))
"""

#: The arguments of ``nutpie.sample`` that :func:`sample_in_processes` sets itself.
_SET_HERE = frozenset({"chains", "cores", "seed", "progress_bar"})
#: The arguments of ``nutpie.sample`` whose results cannot come back from a
#: worker: a sampler running in the background, a callback into this process,
#: one zarr store written by every worker, nutpie's raw trace.
_NOT_FROM_WORKERS = frozenset(
    {"blocking", "progress_callback", "zarr_store", "return_raw_trace"}
)
#: Arguments of ``nutpie.compile_pymc_model`` that may name the model's variables
#: by the variables themselves.
_KEYED_BY_VARIABLE = ("initial_points", "jitter_rvs")

LOGGER = logging.getLogger("pytensor.compile.jax_ofg")

_OUTPUT_TAIL_LINES = 30
#: Seconds a worker may take to exit once its result is written; then it is killed.
_EXIT_GRACE = 60.0
#: Seconds the workers may take, once interrupted, to write the draws they made;
#: then the ones still running are killed.
_INTERRUPT_GRACE = 60.0
#: What a worker does, as it tells its parent (a file it rewrites), in order.
_PHASES = ("starting", "compiling", "first call", "sampling", "writing its result")


class ChainProcessError(RuntimeError):
    """A worker process of :func:`sample_in_processes` failed or timed out."""


class SamplingInterrupted(UserWarning):
    """:func:`sample_in_processes` was interrupted (Ctrl-C) and returns the draws
    made so far.
    """


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """What one worker sampled, and where its time went.

    Attributes
    ----------
    trace : xarray.DataTree
        nutpie's trace of the worker's chains.
    core : int or None
        The core the worker was pinned to (``None``: not pinned).
    affinity : tuple of int
        The cores the worker's process could run on, as it reported them.
    chains : int
        How many chains the worker sampled.
    seconds : dict of str to float
        ``"imports"``: from the start of the worker's script to the model in
        memory (this package, nutpie, the model's modules; the model unpickled,
        or built by the function that builds it); ``"compile"``:
        ``nutpie.compile_pymc_model``; ``"first call"``: the log-density once,
        through nutpie's C function (XLA loads its program; absent for nutpie's
        other backends); ``"sampling"``: ``nutpie.sample``.
    sampled : tuple of float
        When the worker's ``nutpie.sample`` started and ended, in
        :func:`time.time`'s seconds.
    interrupted : bool
        Whether sampling was interrupted: the trace holds the draws made
        until then (nutpie pads the chains it had not finished with NaN).
    """

    trace: xr.DataTree
    core: int | None
    affinity: tuple[int, ...]
    chains: int
    seconds: dict[str, float]
    sampled: tuple[float, float]
    interrupted: bool = False


def sample_in_processes(
    model: Any = None,
    *,
    chains: int = 4,
    cores: int | None = None,
    seed: int | None = None,
    compile_kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    **sample_kwargs: Any,
) -> xr.DataTree:
    """Sample a PyMC model with nutpie, its chains in processes confined to CPUs.

    Parameters
    ----------
    model : pymc.Model or callable, optional
        The model (by default the one of the enclosing ``with`` block), or a
        function of no arguments that builds it. Sent by :mod:`cloudpickle`:
        functions and classes of an importable module are sent by reference
        and imported in the workers (which get this process's :data:`sys.path`).
    chains : int
        How many chains in all (4 by default).
    cores : int, optional
        How many workers, each confined to a free CPU (others run where the OS
        puts them); by default the physical cores this process may use, capped
        by its quota, its CPUs and ``chains``, which are split among them.
    seed : int, optional
        The seed of every worker's own seed (a :class:`numpy.random.SeedSequence`);
        by default fresh entropy.
    compile_kwargs : dict, optional
        Keyword arguments of ``nutpie.compile_pymc_model`` (``initial_points``,
        ``jitter_rvs``, ``backend``, ...), sent with the model (variables used
        as keys stay the model's own; with a function building it, use names).
    timeout : float, optional
        Seconds the workers may take in all; by default no limit.
    **sample_kwargs
        Keyword arguments of ``nutpie.sample`` (``tune``, ``draws``,
        ``target_accept``, ``adaptation``, ``save_warmup``, ...), but not
        ``chains``, ``cores``, ``seed`` or ``progress_bar`` (set here), nor
        ``blocking``, ``progress_callback``, ``zarr_store``, ``return_raw_trace``.

    Returns
    -------
    xarray.DataTree
        nutpie's trace of all chains, numbered ``0`` to ``chains - 1`` in the
        workers' order (see :func:`merge_chains`), with the groups
        ``pm.sample(nuts_sampler="nutpie")`` adds to it for a ``pymc.Model``:
        the model's ``observed_data`` and ``constant_data``, and the
        posterior's ``sampling_time`` (seconds from the first worker's start
        of sampling to the last one's end) and ``tuning_steps``. Warm-up
        groups are kept (nutpie's default) unless ``save_warmup=False``
        (which ``pm.sample`` passes unless told to keep them).

    Raises
    ------
    ChainProcessError
        When a worker fails (with the end of its output), is killed, or the
        workers run out of ``timeout``.
    KeyboardInterrupt
        When interrupted before any worker started sampling.

    Warns
    -----
    SamplingInterrupted
        When interrupted (Ctrl-C, SIGINT) once a worker sampled: as
        ``pm.sample`` does, it returns the draws made so far (none when
        interrupted during tuning). The interrupt reaches every worker, each
        returns its trace so far (shorter chains padded with NaN, as nutpie
        pads its own), and no worker is left running. A second interrupt
        while they write their traces stops them at once and raises.
    """
    results = run_chain_processes(
        model,
        chains=chains,
        cores=cores,
        seed=seed,
        compile_kwargs=compile_kwargs,
        timeout=timeout,
        **sample_kwargs,
    )
    return _merged(results)


def _merged(results: list[WorkerResult]) -> xr.DataTree:
    """The workers' traces as one, warning when they were interrupted."""
    interrupted = [k for k, result in enumerate(results) if result.interrupted]
    trace = merge_chains([result.trace for result in results], ragged=bool(interrupted))
    if interrupted:
        draws = trace.posterior.sizes.get("draw", 0)
        warnings.warn(
            f"sample_in_processes was interrupted: the trace holds the draws made "
            f"so far ({draws} at most per chain, {trace.posterior.sizes['chain']} "
            f"chains, shorter chains padded with NaN); it is not a full run",
            SamplingInterrupted,
            stacklevel=3,
        )
    if "sampling_time" in trace.posterior.attrs:
        started = min(result.sampled[0] for result in results)
        ended = max(result.sampled[1] for result in results)
        trace.posterior.attrs["sampling_time"] = ended - started
    return trace


def run_chain_processes(
    model: Any = None,
    *,
    chains: int = 4,
    cores: int | None = None,
    seed: int | None = None,
    compile_kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    **sample_kwargs: Any,
) -> list[WorkerResult]:
    """Run :func:`sample_in_processes`'s workers and return their results, unmerged.

    Takes the arguments of :func:`sample_in_processes`.

    Returns
    -------
    list of WorkerResult
        One per worker, in the order of their chains; when interrupted, one
        per worker that had started sampling (see ``interrupted``).

    Raises
    ------
    KeyboardInterrupt
        When interrupted before any worker started sampling.
    """
    import numpy as np

    chains, cores = _checked_arguments(chains, cores, sample_kwargs)
    if model is None:
        import pymc as pm

        model = pm.modelcontext(None)
    compile_kwargs = dict(compile_kwargs or {})
    payload = _payload(model, compile_kwargs, sample_kwargs)

    workers = min(cores or cores_api.default_cores(), cores_api.usable_cpus(), chains)
    shares = [chains // workers + (k < chains % workers) for k in range(workers)]
    seeds = np.random.SeedSequence(seed).generate_state(workers).tolist()
    leases = cores_api.worker_leases(workers)
    pins = [None if lease is None else lease.cpu for lease in leases]

    with tempfile.TemporaryDirectory(prefix="jax_ofg_chains_") as folder:
        jobs, logs, results, statuses = _write_jobs(
            Path(folder), payload, shares, seeds
        )
        with _workers(jobs, logs, leases) as processes:
            interrupted = _wait(processes, logs, results, statuses, pins, timeout)
        done = {
            k: pickle.loads(result.read_bytes())
            for k, result in enumerate(results)
            if result.exists()
        }
    if interrupted and not any(d["trace"] is not None for d in done.values()):
        raise KeyboardInterrupt(
            "sample_in_processes was interrupted before its workers sampled"
        )
    return [
        WorkerResult(
            d["trace"],
            pins[k],
            d["affinity"],
            shares[k],
            d["seconds"],
            d["sampled"],
            d["interrupted"],
        )
        for k, d in done.items()
        if d["trace"] is not None
    ]


def _checked_arguments(
    chains: int, cores: int | None, sample_kwargs: dict[str, Any]
) -> tuple[int, int | None]:
    """``chains`` and ``cores`` checked; a TypeError for arguments of nutpie.sample
    that :func:`sample_in_processes` sets itself or cannot pass."""
    chains = _positive_int("chains", chains)
    if cores is not None:
        cores = _positive_int("cores", cores)
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
    return chains, cores


def _write_jobs(
    folder: Path, payload: bytes, shares: list[int], seeds: list[int]
) -> tuple[list[Path], list[Path], list[Path], list[Path]]:
    """Each worker's job file in ``folder`` (the pickled model beside them), and
    where it logs, writes its result and its status."""
    model_file = folder / "model.pickle"
    model_file.write_bytes(payload)
    jobs, logs, results, statuses = [], [], [], []
    for k in range(len(shares)):
        results.append(folder / f"result-{k}.pickle")
        statuses.append(folder / f"status-{k}")
        logs.append(folder / f"worker-{k}.log")
        jobs.append(folder / f"job-{k}.pickle")
        job = {
            "sys_path": list(sys.path),
            "model": str(model_file),
            "chains": shares[k],
            "seed": seeds[k],
            "result": str(results[k]),
            "status": str(statuses[k]),
        }
        jobs[k].write_bytes(pickle.dumps(job))
    return jobs, logs, results, statuses


def merge_chains(traces: Sequence[xr.DataTree], *, ragged: bool = False) -> xr.DataTree:
    """Concatenate nutpie traces along ``chain``, renumbering the chains from 0.

    Parameters
    ----------
    traces : sequence of xarray.DataTree
        nutpie's traces of the same model and the same numbers of draws.
    ragged : bool
        Let the traces hold different numbers of draws (interrupted runs):
        shorter ones are padded with NaN (integer and boolean statistics
        become floats or objects), as nutpie pads an interrupted run's chains.

    Returns
    -------
    xarray.DataTree
        Every group of the first trace, concatenated along ``chain``; groups
        without a ``chain`` dimension (the model's data) and attributes are
        the first trace's, except that nutpie's settings
        (``sample_stats.attrs["inference_library_settings"]``) count all the
        chains and hold every trace's seed, in order.
    """
    import numpy as np
    import xarray as xr

    groups = {}
    for name in traces[0].children:
        datasets = [trace[name].to_dataset() for trace in traces if name in trace]
        if "chain" not in datasets[0].dims:
            groups[name] = datasets[0]
            continue
        merged = xr.concat(
            datasets,
            dim="chain",
            data_vars="minimal",
            coords="minimal",
            compat="override",
            # The same draws in every trace, or an error (unless ragged).
            join="outer" if ragged else "exact",
            combine_attrs="override",
        )
        groups[name] = merged.assign_coords(chain=np.arange(merged.sizes["chain"]))
    settings = _merged_settings(
        [trace["sample_stats"].attrs for trace in traces if "sample_stats" in trace]
    )
    if settings is not None:
        groups["sample_stats"].attrs["inference_library_settings"] = settings
    tree = xr.DataTree.from_dict(groups)
    tree.attrs = dict(traces[0].attrs)
    return tree


def _merged_settings(attrs: list[dict[str, Any]]) -> str | None:
    """Return nutpie's settings of several traces as one trace's (JSON), or None."""
    try:
        settings = [json.loads(a["inference_library_settings"]) for a in attrs]
        merged = settings[0]
        merged["settings"]["num_chains"] = sum(
            s["settings"]["num_chains"] for s in settings
        )
        merged["settings"]["seed"] = [s["settings"]["seed"] for s in settings]
    except (KeyError, IndexError, TypeError, ValueError):  # not nutpie's settings
        return None
    return json.dumps(merged)


def _positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, if it is a positive integer (not a bool)."""
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if isinstance(value, bool) or number is None or number < 1:
        raise ValueError(
            f"sample_in_processes: {name} must be a positive int, not {value!r}"
        )
    return number


def _payload(model: Any, compile_kwargs: dict, sample_kwargs: dict) -> bytes:
    """Return the model and the sampler's arguments as cloudpickle's bytes, together.

    Pickled together, a variable of the model used as a key of
    ``initial_points`` (or in ``jitter_rvs``) is the worker's model's own, as
    PyMC, which matches them by identity, needs.
    """
    import cloudpickle

    if not _is_pymc_model(model) and any(
        not isinstance(key, str)
        for name in _KEYED_BY_VARIABLE
        for key in (compile_kwargs.get(name) or ())
    ):
        raise TypeError(
            "sample_in_processes: compile_kwargs name variables by the variables "
            f"themselves ({' or '.join(_KEYED_BY_VARIABLE)}), but the model is a "
            "function the workers call: name them by their names instead"
        )
    try:
        return cloudpickle.dumps((model, compile_kwargs, sample_kwargs))
    except Exception as error:
        raise TypeError(
            f"sample_in_processes could not pickle the model or the sampler's "
            f"arguments with cloudpickle ({type(error).__name__}: {error}); pass a "
            "function that builds the model instead, defined in a module the "
            "workers can import"
        ) from error


def _is_pymc_model(model: Any) -> bool:
    pymc = sys.modules.get("pymc")
    return pymc is not None and isinstance(model, pymc.Model)


@contextlib.contextmanager
def _workers(
    jobs: list[Path], logs: list[Path], leases: list[cores_api.Lease | None]
) -> Iterator[list[subprocess.Popen]]:
    """Start a worker per job, each confined to its lease's CPU and holding the
    lease (this process's copy is released once they started); kill them all
    on an error.

    Each worker runs in a session of its own, so that a terminal's Ctrl-C
    reaches this process only, which passes it on (:func:`_wait`), and holds
    a pipe from this process as its stdin, whose end tells it this process is
    gone. On leaving the block normally, the workers finish exiting in the
    background (JAX's and nutpie's threads, finalizers: about a second after
    their result is written), reaped there, and killed if they take longer
    than :data:`_EXIT_GRACE`.
    """
    processes: list[subprocess.Popen] = []
    try:
        for job, log, lease in zip(jobs, logs, leases):
            cpu = None if lease is None else lease.cpu
            with open(log, "wb") as output, cores_api.pinned_while(cpu):
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _BOOTSTRAP, str(job)],
                        stdin=subprocess.PIPE,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        pass_fds=() if lease is None else (lease.fd,),
                    )
                )
        for lease in leases:
            if lease is not None:
                lease.release()  # the worker holds it now
        yield processes
    except BaseException:
        for lease in leases:
            if lease is not None:
                lease.release()
        for process in processes:
            if process.poll() is None:
                process.kill()
        for process in processes:
            _close_stdin(process)
        raise
    finally:
        threading.Thread(target=_reap, args=(processes,), daemon=True).start()


def _close_stdin(process: subprocess.Popen) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()


def _reap(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        try:
            process.wait(timeout=_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _close_stdin(process)


def _phase(status: Path) -> str:
    """Return what a worker said it is doing (:data:`_PHASES`)."""
    try:
        return status.read_text() or _PHASES[0]
    except OSError:
        return _PHASES[0]


def _how_it_ended(returncode: int) -> str:
    if returncode == 0:
        return "exited without a result"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = (
            " (the system kills the largest process when it runs out of memory: "
            "see dmesg, and try fewer cores or a smaller model)"
            if name == "SIGKILL"
            else ""
        )
        return f"was killed by {name}{why}"
    return f"failed with exit code {returncode}"


def _wait(
    processes: list[subprocess.Popen],
    logs: list[Path],
    results: list[Path],
    statuses: list[Path],
    pins: list[int | None],
    timeout: float | None,
) -> bool:
    """Wait until every worker has written its result; raise on the first failure or
    the timeout. Return whether it was interrupted.

    A worker writes its result whole (to a file then renamed), its last act
    before it exits. On KeyboardInterrupt (Ctrl-C: a worker in a session of
    its own does not get the terminal's) each running worker gets a SIGINT
    and has :data:`_INTERRUPT_GRACE` seconds to write the trace it has so far
    (:func:`_gather_interrupted`).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    phases = [_PHASES[0]] * len(processes)
    try:
        while not all(result.exists() for result in results):
            for k, process in enumerate(processes):
                phase = _phase(statuses[k])
                if phase != phases[k]:
                    phases[k] = phase
                    LOGGER.debug("sample_in_processes: worker %d %s", k, phase)
                if process.poll() is not None and not results[k].exists():
                    raise ChainProcessError(
                        f"sample_in_processes: worker {k} (core {pins[k]}) "
                        f"{_how_it_ended(process.returncode)} while "
                        f"{_phase(statuses[k])}; the end of its output:\n"
                        f"{_tail(logs[k])}"
                    )
            if deadline is not None and time.monotonic() > deadline:
                running = [k for k, r in enumerate(results) if not r.exists()]
                raise ChainProcessError(
                    f"sample_in_processes: workers {running} ran out of the timeout "
                    f"of {timeout} s and were stopped; the end of worker "
                    f"{running[0]}'s output:\n{_tail(logs[running[0]])}"
                )
            time.sleep(0.02)
    except KeyboardInterrupt:
        _gather_interrupted(processes, results)
        return True
    return False


def _gather_interrupted(processes: list[subprocess.Popen], results: list[Path]) -> None:
    """Pass an interrupt on to the running workers and wait for them to end.

    A worker that was sampling writes the trace it has so far; one that had
    not started exits without a result. Those still running after
    :data:`_INTERRUPT_GRACE` seconds are killed; a second KeyboardInterrupt
    while waiting kills them at once (by :func:`_workers`) and propagates.
    """
    LOGGER.debug("sample_in_processes: interrupted; passing it on to the workers")
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + _INTERRUPT_GRACE
    for k, process in enumerate(processes):
        while process.poll() is None and not results[k].exists():
            if time.monotonic() > deadline:
                process.kill()
                break
            time.sleep(0.02)


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-_OUTPUT_TAIL_LINES:]) or "(no output)"


def _call_log_density_once(compiled: Any) -> bool:
    """Call nutpie's C log-density of ``compiled`` once, at a start point; return
    whether it has one.

    XLA loads the model's program (from JAX's cache) now, not in the first
    leapfrog step, so that a worker's seconds tell start-up from sampling.
    nutpie's other backends have no C function. What the call returns is of
    no interest: nutpie calls the log-density again at its own start points.
    """
    import numpy as np

    function = getattr(compiled, "compiled_logp_func", None)
    if function is None:
        return False
    point = np.ascontiguousarray(compiled.initial_point_func(0), dtype=np.float64)
    gradient, logp = np.empty_like(point), np.empty(1)
    LOGP_SIGNATURE(function.address)(
        point.size,
        point.ctypes.data,
        gradient.ctypes.data,
        logp.ctypes.data,
        compiled.user_data.ctypes.data,
    )
    return True


def _say(job: dict[str, Any], phase: str) -> None:
    """Tell the parent what this worker now does (one of :data:`_PHASES`)."""
    status = Path(job["status"])
    fresh = status.with_suffix(".new")
    fresh.write_text(phase)
    fresh.replace(status)


def _work(job: dict[str, Any], start: float) -> int:
    """Do a worker's job, after its script's first imports (from ``start``).

    Unpickle the model, compile it, sample, write the result; return the
    exit status. Interrupted (SIGINT, from the parent) while sampling, nutpie
    returns the trace so far, which is written as the result, marked; any
    earlier, the worker exits with status 130 and no result; any later, the
    interrupt is ignored and the whole result written.
    """
    interrupted = []

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        import cloudpickle
        import nutpie

        _say(job, "compiling")
        model, compile_kwargs, sample_kwargs = cloudpickle.loads(
            Path(job["model"]).read_bytes()
        )
        if not _is_pymc_model(model):
            model = model()
        seconds = {"imports": time.perf_counter() - start}
        before = time.perf_counter()
        compiled = nutpie.compile_pymc_model(model, **compile_kwargs)
        seconds["compile"] = time.perf_counter() - before
        before = time.perf_counter()
        _say(job, "first call")
        if _call_log_density_once(compiled):
            seconds["first call"] = time.perf_counter() - before
        _say(job, "sampling")
        before, started = time.perf_counter(), time.time()
        # nutpie catches the KeyboardInterrupt and returns the trace so far.
        trace = nutpie.sample(
            compiled,
            chains=job["chains"],
            cores=1,
            seed=job["seed"],
            progress_bar=False,
            **sample_kwargs,
        )
        signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
        _say(job, "writing its result")
        seconds["sampling"] = time.perf_counter() - before
        sampled = (started, time.time())
        if _is_pymc_model(model):
            from pymc.backends.arviz import patch_nutpie_idata

            # What pm.sample adds to nutpie's trace: the model's data groups.
            patch_nutpie_idata(trace, model, sampling_time=seconds["sampling"])
        affinity = (
            tuple(sorted(os.sched_getaffinity(0)))
            if hasattr(os, "sched_getaffinity")
            else ()
        )
        result = Path(job["result"])
        partial = result.with_suffix(".partial")
        partial.write_bytes(
            pickle.dumps(
                {
                    "trace": trace,
                    "seconds": seconds,
                    "affinity": affinity,
                    "sampled": sampled,
                    "interrupted": bool(interrupted),
                }
            )
        )
        partial.replace(result)
    except KeyboardInterrupt:
        print("sample_in_processes worker: interrupted before sampling", flush=True)
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
