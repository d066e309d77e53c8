"""Simulation-based calibration of Stan's boarding-school SIR model, one fit per Dask task.

SBC (Talts et al., 2018) checks that a model and its sampler can be trusted:
draw parameters from the prior and a dataset from each draw (the prior
predictive), fit the model to every dataset, and rank each true parameter
among its posterior draws. When the fits are right, the ranks are uniform;
ArviZ's PIT-ECDF plot (``arviz.plot_ecdf_pit``: the ECDF of the normalized
ranks minus the uniform CDF, with its 99% simultaneous band) shows where they
are not.

The model is ``examples/boarding_school_sir.py``'s (diffrax's ``Dopri5``
inside :func:`~pytensor.compile.jax_ofg.as_jax_op`). The fits run on a
``dask.distributed`` cluster: a ``LocalCluster`` of one single-threaded worker
per core by default, each fit's chains one after the other on its worker
(nutpie with ``cores=1``), so that workers do not compete for cores; or the
cluster at ``--scheduler ADDRESS``. A fit that raises is recorded and
reported, and the run goes on; a worker that dies mid-fit is replaced and its
fit runs again.

Workers on one machine share PyTensor's ``compiledir`` with this process:
their first fit traces and compiles nothing that this process or an earlier
run did (the observed data are inputs of the model's XLA program, so every
dataset shares it). Workers on other machines share it through a shared file
system (``base_compiledir`` in their ``.pytensorrc``), or get this process's
cache folders with ``--ship-caches`` (:class:`ShipCaches`).

Run it where the project is installed with its ``examples`` and
``distributed`` extras (``pip install "pytensor-jax-ofg[examples,distributed]"``;
the ``.venv`` of ``bash scripts/test`` has both)::

    .venv/bin/python examples/sbc_boarding_school.py                # 100 fits
    .venv/bin/python examples/sbc_boarding_school.py --quick        # 2 fits (CI)
    .venv/bin/python examples/sbc_boarding_school.py --scheduler tcp://host:8786
"""

import os


if __name__ == "__main__":
    # As in boarding_school_sir.py: equinox's failing checks give NaN (a
    # rejected proposal), which keeps the program in the trace cache. Set
    # before anything imports equinox; the workers inherit it.
    os.environ.setdefault("EQX_ON_ERROR", "nan")

import argparse
import io
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from distributed import WorkerPlugin


HERE = Path(__file__).resolve().parent
#: The parameters whose ranks are checked.
PARAMETERS = ("beta", "gamma", "phi_inv")


# ---------------------------------------------------------------------------
# One fit (runs on a worker)
# ---------------------------------------------------------------------------


@dataclass
class Fit:
    """The outcome of one fit: ranks of the true values, or the error."""

    index: int
    #: per parameter: the fraction of (thinned) posterior draws below the
    #: true value, the normalized rank (uniform on [0, 1] when all is right)
    pit: dict[str, float] = field(default_factory=dict)
    #: posterior draws the ranks are taken among (after thinning)
    draws: int = 0
    divergences: int = 0
    seconds: float = 0.0
    worker: str = ""
    #: the trace cache in the worker during this fit: lookups served, and
    #: traces run (a first fit on a warm cache runs none)
    cache_hits: int = 0
    cache_misses: int = 0
    error: str | None = None


def fit_dataset(
    index: int,
    cases: np.ndarray,
    truth: dict[str, float],
    *,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
) -> Fit:
    """Fit the model to one simulated dataset; rank the true parameters.

    Runs on a Dask worker: the chains run one after the other in this
    process (``cores=1``). The ranks are taken among draws thinned to about
    the smallest bulk effective sample size, so that they are nearly
    independent, as SBC assumes.
    """
    import arviz as az
    import pymc as pm
    from boarding_school_sir import build_model

    from pytensor.compile.jax_ofg import trace_cache_info

    before = trace_cache_info()
    start = time.perf_counter()
    with build_model(cases=np.asarray(cases), data=True):
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    posterior = idata.posterior
    ess = az.ess(idata, var_names=list(PARAMETERS))
    total = posterior.sizes["chain"] * posterior.sizes["draw"]
    smallest = min(float(ess[name]) for name in PARAMETERS)
    thin = max(1, int(total // smallest)) if smallest >= 1.0 else 1
    pit = {}
    for name in PARAMETERS:
        values = posterior[name].values[:, ::thin].ravel()
        pit[name] = float(np.mean(values < truth[name]))
    after = trace_cache_info()
    return Fit(
        index=index,
        pit=pit,
        draws=values.size,
        divergences=int(idata.sample_stats["diverging"].sum()),
        seconds=time.perf_counter() - start,
        worker=f"{os.uname().nodename}:{os.getpid()}",
        cache_hits=after["hits"] - before["hits"],
        cache_misses=after["misses"] - before["misses"],
    )


# ---------------------------------------------------------------------------
# The prior predictive (runs here)
# ---------------------------------------------------------------------------


def simulate(fits: int, seed: int) -> tuple[list[dict[str, float]], np.ndarray]:
    """``fits`` draws of the parameters from the prior, and a dataset from each."""
    import pymc as pm
    from boarding_school_sir import build_model

    with build_model():
        prior = pm.sample_prior_predictive(draws=fits, random_seed=seed)
    truths = [
        {name: float(prior.prior[name].values[0, k]) for name in PARAMETERS}
        for k in range(fits)
    ]
    cases = np.asarray(prior.prior_predictive["cases"].values[0])
    return truths, cases


# ---------------------------------------------------------------------------
# Many fits on a cluster
# ---------------------------------------------------------------------------


class Progress:
    """Fits done of total, failures, time spent and left, on one line."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.failed = total, 0, 0
        self.start = time.perf_counter()
        self.stream = stream

    def update(self, fit: Fit) -> str:
        self.done += 1
        self.failed += fit.error is not None
        spent = time.perf_counter() - self.start
        left = spent / self.done * (self.total - self.done)
        line = (
            f"fits {self.done}/{self.total} done"
            + (f" ({self.failed} failed)" if self.failed else "")
            + f", {_clock(spent)} spent, about {_clock(left)} left"
        )
        end = "\r" if self.stream.isatty() and self.done < self.total else "\n"
        print(line, end=end, file=self.stream, flush=True)
        return line


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def run_fits(
    client,
    tasks: Sequence[dict],
    fit: Callable[..., Fit] = fit_dataset,
    *,
    retries: int = 1,
    progress: Progress | None = None,
) -> list[Fit]:
    """Run ``fit(**task)`` for every task on the cluster; the fits by index.

    A fit that raises (again after ``retries``) is recorded with its error,
    and the others go on. A fit whose worker dies is run again on another
    (Dask's scheduler sees to it, up to ``distributed.scheduler.allowed-failures``
    times).
    """
    from dask.distributed import as_completed

    progress = progress or Progress(len(tasks))
    futures = {
        client.submit(fit, **task, retries=retries, pure=False): task["index"]
        for task in tasks
    }
    fits = {}
    for future in as_completed(futures):
        index = futures[future]
        try:
            outcome = future.result()
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            outcome = Fit(index=index, error=message.strip())
        fits[index] = outcome
        progress.update(outcome)
    return [fits[k] for k in sorted(fits)]


# ---------------------------------------------------------------------------
# The caches, for workers that share no file system with this process
# ---------------------------------------------------------------------------


def cache_folders() -> dict[str, Path]:
    """This process's cache folders: traces, XLA programs, Numba code."""
    from pytensor import config
    from pytensor.compile._jax_ofg.patches.xla_cache import xla_cache_dir
    from pytensor.compile.jax_ofg import trace_cache_info

    folders = {"xla": xla_cache_dir(), "numba": Path(config.base_compiledir) / "numba"}
    traces = trace_cache_info()["path"]
    if traces is not None:
        folders["traces"] = Path(traces)
    return folders


class ShipCaches(WorkerPlugin):
    """A Dask worker plugin carrying this process's cache folders to every worker.

    For workers without a file system shared with this process: the entries
    are packed here (newest first, up to ``max_bytes``) and unpacked into each
    worker's own folders when it starts, each file written to a temporary
    name and renamed (a worker reading the folder meanwhile never sees half a
    file), files the worker has already kept. Register it before submitting:
    ``client.register_plugin(ShipCaches())``.
    """

    name = "pytensor-jax-ofg-caches"
    idempotent = True

    def __init__(self, max_bytes: int = 512 * 2**20):
        buffer, total = io.BytesIO(), 0
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for role, folder in cache_folders().items():
                files = [p for p in folder.rglob("*") if _shippable(p)]
                for path in sorted(files, key=lambda p: -p.stat().st_mtime):
                    total += path.stat().st_size
                    if total > max_bytes:
                        break
                    archive.add(path, arcname=f"{role}/{path.relative_to(folder)}")
        self.archive = buffer.getvalue()

    def setup(self, worker=None) -> None:
        import pytensor.compile.jax_ofg  # noqa: F401  (its flags)

        folders = cache_folders()
        with tarfile.open(fileobj=io.BytesIO(self.archive), mode="r:gz") as archive:
            for member in archive.getmembers():
                role, _, name = member.name.partition("/")
                if role not in folders or not member.isfile():
                    continue
                target = folders[role] / name
                if target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
                with os.fdopen(handle, "wb") as file:
                    file.write(archive.extractfile(member).read())
                os.replace(temporary, target)


def _shippable(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".")


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


def plot(fits: Sequence[Fit], out: Path) -> Path:
    """ArviZ's PIT-ECDF plot of the ranks, with the 99% simultaneous uniformity band."""
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import xarray as xr
    from arviz_stats.ecdf_utils import ecdf_pit
    from xarray import DataTree

    done = [f for f in fits if f.error is None]
    pit = xr.Dataset(
        {
            name: (("chain", "draw"), np.array([[f.pit[name] for f in done]]))
            for name in PARAMETERS
        }
    )
    collection = az.plot_ecdf_pit(
        DataTree.from_dict({"prior_sbc": pit}), backend="matplotlib"
    )
    # The band of method="envelope", drawn here: that method fails in
    # arviz-plots 1.0 (np.linspace of a DataArray).
    x, _, lower, upper = ecdf_pit(
        np.linspace(0.0, 1.0, len(done)), 0.99, n_simulations=1000
    )
    figure = plt.gcf()
    for axes in figure.axes:
        axes.fill_between(x, lower - x, upper - x, step="post", alpha=0.2, lw=0)
    figure.suptitle(f"SBC of the boarding-school SIR model: {len(done)} fits")
    out.parent.mkdir(parents=True, exist_ok=True)
    collection.savefig(out)
    plt.close(figure)
    return out


def report(fits: Sequence[Fit], seconds: float) -> str:
    """A summary: fits done and failed, time, cache use of the workers."""
    done = [f for f in fits if f.error is None]
    failed = [f for f in fits if f.error is not None]
    first = {}
    for f in sorted(done, key=lambda f: f.index):
        first.setdefault(f.worker, f)
    lines = [
        f"{len(done)} fits done, {len(failed)} failed, in {seconds:.1f} s "
        f"({60 * len(done) / seconds:.1f} fits per minute), on "
        f"{len({f.worker for f in done})} workers.",
        f"Each fit: {np.median([f.seconds for f in done]):.1f} s (median), "
        f"{sum(f.divergences for f in done)} divergences in all."
        if done
        else "No fit finished.",
        "Trace cache in the workers' first fits: "
        + ", ".join(
            f"{f.cache_misses} traced, {f.cache_hits} served" for f in first.values()
        )
        + ".",
    ]
    for f in failed:
        lines.append(f"Fit {f.index} failed: {f.error[:500]}")
    if done:
        lines.append("Normalized ranks (uniform when all is right):")
        for name in PARAMETERS:
            values = np.sort([f.pit[name] for f in done])
            quartiles = np.quantile(values, [0.25, 0.5, 0.75])
            lines.append(
                f"  {name:8s} quartiles {quartiles.round(2).tolist()} (uniform: 0.25, 0.5, 0.75)"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


@dataclass
class Settings:
    """What to run; built from the command line by :func:`parse_args`."""

    fits: int
    draws: int
    tune: int
    chains: int
    seed: int
    workers: int
    scheduler: str | None
    ship_caches: bool
    out: Path


def warm_up(task: dict) -> None:
    """A short fit here, first: it traces and compiles what every fit needs, once.

    The workers then find it all in the caches (a shared ``compiledir``, or
    shipped with ``--ship-caches``) instead of each doing it again at once.
    """
    start = time.perf_counter()
    short = {**task, "draws": 10, "tune": 10, "chains": 1}
    try:
        fit = fit_dataset(**short)
    except Exception as error:  # the fits will say more
        print(f"Warm-up fit failed ({type(error).__name__}: {error})", flush=True)
        return
    print(
        f"Warm-up fit here: {time.perf_counter() - start:.1f} s, "
        f"{fit.cache_misses} traced, {fit.cache_hits} served from the trace cache.",
        flush=True,
    )


def start_client(settings: Settings):
    """A client of the cluster at ``--scheduler``, or of a new ``LocalCluster``."""
    from dask.distributed import Client, LocalCluster

    if settings.scheduler is not None:
        client = Client(settings.scheduler)
        # The model's modules, for workers that do not have them.
        for name in ("_boarding_school_report.py", "boarding_school_sir.py"):
            client.upload_file(str(HERE / name))
        return client, None
    cluster = LocalCluster(
        n_workers=settings.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
    )
    return Client(cluster), cluster


def stop_client(client, cluster) -> None:
    """Close ``client`` and, if this script started it, ``cluster``.

    distributed's nanny gives a worker process 4 s to exit, then kills it and
    waits 5 s more (timeouts it fixes), and raises ``TimeoutError`` past that.
    On a busy machine a worker with JAX loaded can take longer to be reaped.
    The fits have all returned by then, so a slow teardown is reported and
    the results are kept.
    """
    client.close()
    if cluster is None:
        return
    try:
        cluster.close()
    except TimeoutError:
        print(
            "The local cluster's worker processes took longer than distributed's "
            "timeout to stop (they were killed); every fit had returned.",
            file=sys.stderr,
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> list[Fit]:
    """Simulate, fit every dataset on the cluster, plot and report the ranks."""
    settings = parse_args(argv)
    start = time.perf_counter()
    truths, cases = simulate(settings.fits, settings.seed)
    tasks = [
        {
            "index": k,
            "cases": cases[k],
            "truth": truths[k],
            "draws": settings.draws,
            "tune": settings.tune,
            "chains": settings.chains,
            "seed": settings.seed + 1 + k,
        }
        for k in range(settings.fits)
    ]
    warm_up(tasks[0])
    client, cluster = start_client(settings)
    try:
        if settings.ship_caches:
            client.register_plugin(ShipCaches())
        if cluster is not None:
            client.wait_for_workers(settings.workers)
        workers = len(client.scheduler_info()["workers"])
        print(
            f"SBC: {settings.fits} fits of {settings.chains} chains of "
            f"{settings.tune} + {settings.draws} draws, on {workers} workers "
            f"({client.scheduler.address}).",
            flush=True,
        )
        fits = run_fits(client, tasks)
    finally:
        stop_client(client, cluster)
    seconds = time.perf_counter() - start
    print(report(fits, seconds))
    if sum(f.error is None for f in fits) >= 2:  # a band needs two
        path = plot(fits, settings.out)
        print(f"\nFigure written to {path.resolve()}")
    return fits


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    """Read the command line; ``--quick`` changes the defaults, not explicit flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fits", type=int, help="datasets to fit (default 100; quick: 2)"
    )
    parser.add_argument("--draws", type=int, help="per chain (default 500; quick: 100)")
    parser.add_argument("--tune", type=int, help="per chain (default 500; quick: 100)")
    parser.add_argument("--chains", type=int, help="per fit (default 2)")
    parser.add_argument("--seed", type=int, default=1978, help="default 1978")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="workers of the local cluster (default: one per core)",
    )
    parser.add_argument(
        "--scheduler", help="the address of an existing Dask scheduler to use instead"
    )
    parser.add_argument(
        "--ship-caches",
        action="store_true",
        help="send this process's cache folders to the workers (when they share "
        "no file system with it)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 2 small fits"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "output" / "sbc_boarding_school.png",
        help="the figure (PNG; default output/sbc_boarding_school.png next to "
        "this script)",
    )
    args = parser.parse_args(argv)

    def pick(value: int | None, normal: int, quick: int) -> int:
        return value if value is not None else (quick if args.quick else normal)

    return Settings(
        fits=pick(args.fits, 100, 2),
        draws=pick(args.draws, 500, 100),
        tune=pick(args.tune, 500, 100),
        chains=pick(args.chains, 2, 2),
        seed=args.seed,
        workers=max(1, args.workers),
        scheduler=args.scheduler,
        ship_caches=args.ship_caches,
        out=args.out,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    fits = main()
    sys.exit(0 if any(f.error is None for f in fits) else 1)
