"""A child process for the Ctrl-C tests: one fit by one route, interrupted.

``python -m _interrupt_routes ROUTE ops|plain`` builds a tiny model (``x``, two
standard normals, and a potential ``-|x|^2 / 2``: posterior N(0, 1/2) each),
with the potential computed by a wrapped JAX function (``ops``) or by
PyTensor (``plain``), and fits it by ROUTE with far more draws than can be
made before the test's SIGINT (with ``INTERRUPT_DURING=tuning``, as many
tuning steps). It prints ``SAMPLING`` when sampling starts
(after compilation), then one JSON line: what the interrupted fit gave
(``returned`` with the draws made, or the exception raised), the child
processes left after it, and a second, short fit of the same route in the
same process (its posterior mean and standard deviation).

Routes: ``nutpie`` (threads), ``processes`` (``sample_in_processes``),
``pymc`` (PyMC's NUTS, ``cores=2``), ``numpyro`` (``mode="JAX"``), ``smc``
and ``dask`` (one fit as a task on a ``LocalCluster`` of one worker process,
as ``examples/sbc_boarding_school.py`` runs many).

Module-level functions, so that worker processes import them by name.
"""

import contextlib
import json
import logging
import os
import signal
import sys
import time
import warnings


SLOW_DRAWS = 10**6
#: numpyro's draws per chain: each chain is one XLA program, which an
#: interrupt does not stop, so it must outlast the test's wait (a million
#: draws of this model take about 3 s here); only every NUMPYRO_THINNING-th
#: is kept, to hold memory down.
NUMPYRO_DRAWS = 6 * 10**6
NUMPYRO_THINNING = 100
#: SMC's particles per chain: its stages outlast the interrupt (20,000
#: plain PyTensor particles finished before it on a quiet machine).
SMC_DRAWS = 80_000


def build_model(ops: bool = True):
    import jax.numpy as jnp
    import pymc as pm

    import pytensor.tensor as pt
    from pytensor.compile.jax_ofg import as_jax_op

    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        if ops:
            pm.Potential("p", as_jax_op(lambda v: -0.5 * jnp.sum(v**2))(x))
        else:
            pm.Potential("p", -0.5 * pt.sum(x**2))
    return model


def build_with_ops():
    return build_model(True)


def build_plain():
    return build_model(False)


def _marker() -> None:
    print("SAMPLING", flush=True)


def _children() -> list[int]:
    """The pids of this process's live children (Linux's /proc), but for
    multiprocessing's forkserver and resource tracker, which stay by design.
    """
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) != me or fields[0] == "Z":
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    command = file.read()
            except OSError:
                continue
            if b"forkserver" not in command and b"resource_tracker" not in command:
                found.append(int(entry))
    return found


def _tune(first: bool) -> int:
    """Tuning steps: 100, or for the first fit of ``INTERRUPT_DURING=tuning``
    as many as the draws, so that the signal lands while tuning."""
    during = os.environ.get("INTERRUPT_DURING", "draws")
    return SLOW_DRAWS if first and during == "tuning" else 100


def _fit(route: str, ops: bool, draws: int, first: bool):
    import pymc as pm

    builder = build_with_ops if ops else build_plain
    common = {
        "chains": 2,
        "tune": _tune(first),
        "draws": draws,
        "random_seed": 1,
        "progressbar": False,
    }
    if route == "nutpie":
        import nutpie

        original = nutpie.sample

        def sample(*args, **kwargs):
            if first:
                _marker()
            return original(*args, **kwargs)

        nutpie.sample = sample
        try:
            with builder():
                return pm.sample(nuts_sampler="nutpie", cores=2, **common)
        finally:
            nutpie.sample = original
    if route == "pymc":
        seen = []

        def callback(trace, draw):
            if first and not seen:
                seen.append(draw)
                _marker()

        with builder():
            return pm.sample(nuts_sampler="pymc", cores=2, callback=callback, **common)
    if route == "processes":
        from pytensor.compile.jax_ofg import sample_in_processes

        sampling = set()

        class Watch(logging.Handler):
            def emit(self, record):
                message = record.getMessage()
                if message.endswith(" sampling"):
                    sampling.add(message)
                    if first and len(sampling) == 2:
                        _marker()

        logger = logging.getLogger("pytensor.compile.jax_ofg")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(Watch())
        return sample_in_processes(
            builder,
            chains=2,
            cores=2,
            seed=1,
            tune=_tune(first),
            draws=draws,
            timeout=300,
        )
    if route == "numpyro":
        # Chains run one after the other (chain_method="sequential"), each one
        # XLA program: the marker comes when the second chain starts, so that
        # compilation (done by then) does not decide where the signal lands.
        import numpyro.infer
        import numpyro.infer.mcmc as mcmc

        laxmap, init = mcmc._laxmap, numpyro.infer.MCMC.__init__

        def each_chain(f, xs):
            started = []

            def chain(x):
                started.append(x)
                if first and len(started) == 2:
                    _marker()
                return f(x)

            return laxmap(chain, xs)

        def thinned(self, *args, **kwargs):
            init(self, *args, thinning=NUMPYRO_THINNING if first else 1, **kwargs)

        mcmc._laxmap, numpyro.infer.MCMC.__init__ = each_chain, thinned
        if first:
            common["draws"] = NUMPYRO_DRAWS
        try:
            with builder():
                return pm.sample(
                    nuts_sampler="numpyro",
                    nuts={"chain_method": "sequential"},
                    **common,
                )
        finally:
            mcmc._laxmap, numpyro.infer.MCMC.__init__ = laxmap, init
    if route == "smc":
        import pymc.smc.sampling as smc

        original = smc.ParallelSMCSampler

        class Marked(original):
            def __enter__(self):
                if first:
                    _marker()
                return super().__enter__()

        smc.ParallelSMCSampler = Marked
        try:
            with builder():
                return pm.sample_smc(
                    draws=min(draws, SMC_DRAWS),
                    chains=2,
                    cores=2,
                    random_seed=1,
                    progressbar=False,
                )
        finally:
            smc.ParallelSMCSampler = original
    if route == "dask":
        from dask.distributed import Client, LocalCluster

        with (
            LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            fit = client.submit(_dask_fit, ops, draws, first, pure=False)
            return fit.result()
    raise ValueError(route)


def _dask_fit(ops: bool, draws: int, first: bool):
    """One fit as a Dask task: PyMC's NUTS, chains one after the other."""
    import pymc as pm

    seen = []

    def callback(trace, draw):
        if first and not seen:
            seen.append(draw)
            _marker()

    with build_model(ops):
        return pm.sample(
            chains=2,
            cores=1,
            tune=_tune(first),
            draws=draws,
            random_seed=1,
            progressbar=False,
            callback=callback,
            compute_convergence_checks=False,
        )


def planned_draws(route: str) -> int:
    """The draws of the interrupted fit, both chains, had it run to the end."""
    per_chain = {"numpyro": NUMPYRO_DRAWS // NUMPYRO_THINNING, "smc": SMC_DRAWS}
    return 2 * per_chain.get(route, SLOW_DRAWS)


def _posterior_draws(trace):
    import numpy as np

    posterior = trace.posterior if hasattr(trace, "posterior") else trace["posterior"]
    values = np.asarray(posterior["x"].values, dtype=float)
    return values[~np.isnan(values).any(axis=-1)]


def _raised(error: BaseException) -> str:
    """The name of what the fit raised: KeyboardInterrupt also when a C function
    returned with it pending, which CPython raises as a SystemError caused by it
    (seen now and then with PyMC's SMC, on the model without the ops)."""
    cause = error
    while cause is not None:
        if isinstance(cause, KeyboardInterrupt):
            return "KeyboardInterrupt"
        cause = cause.__cause__ or cause.__context__
    return type(error).__name__


def main(route: str, ops: bool) -> None:
    outcome = {"route": route, "ops": ops}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trace = _fit(route, ops, SLOW_DRAWS, first=True)
        except BaseException as error:
            outcome["outcome"] = f"raised {_raised(error)}"
        else:
            outcome["outcome"] = "returned"
            outcome["draws"] = len(_posterior_draws(trace))
            if outcome["draws"] >= planned_draws(route):
                # The fit ended before the signal came: wait for it here,
                # rather than let it land in the second fit.
                outcome["outcome"] = "finished before the interrupt"
                with contextlib.suppress(KeyboardInterrupt):
                    time.sleep(60)
    outcome["warnings"] = sorted({type(w.message).__name__ for w in caught})
    deadline = time.monotonic() + 20
    while _children() and time.monotonic() < deadline:
        time.sleep(0.2)
    outcome["children"] = len(_children())
    again = _posterior_draws(_fit(route, ops, 300, first=False))
    outcome["again"] = {
        "draws": len(again),
        "mean": again.mean(axis=0).tolist(),
        "sd": again.std(axis=0).tolist(),
    }
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    # Ctrl-C as a terminal gives it: a process started in the background
    # (nohup, `&` without job control) passes SIGINT on ignored, and Python
    # then installs no KeyboardInterrupt handler, so the fit would run on.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main(sys.argv[1], sys.argv[2] == "ops")
