"""Small ODE models against Stan: start-up, per call, chains on two cores, whole fits.

Two of posteriordb's kind of small ODE posteriors, and Stan's SIR case study:

* ``lv``: the predator-prey model of ``examples/stan_ode.py`` (the case study's
  ``integrate_ode_rk45`` at 1e-5, 1e-3, 500 steps; 8 parameters), nutpie
  started at the priors' locations, its mass matrix adapted from the draws'
  variances (this package's default for such models, Stan's rule);
* ``pk``: the stiff PK model of :mod:`_pk_model` (``diffrax.Kvaerno5()`` as a
  user writes it, its 2 x 2 Newton systems solved by lineax's LU, which this
  package lowers without LAPACK; forward-mode gradients, as
  ``benchmarks/forward_mode.py``'s ``ours_forward``; 5 parameters);
* ``sir``: ``examples/boarding_school_sir.py`` (start-up only: its fits are
  ``vs_stan.py``'s).

Every measurement runs in a fresh process (``--child``), sharing one set of
caches per model and route that a first, untimed process fills; rounds are
interleaved, the tables give medians over rounds (what each measures: its
paragraph in ``texts/small_odes.md``). The kinds (``--skip``):

* ``startup``: a second process to the first log-density call, with the host
  callbacks this package gives nutpie (``ours``) and nutpie's ``numba.cfunc``:
  among them a warm process's build and compile before its first gradient;
* ``per_call``: value and gradient through the C function nutpie calls (from
  compiled code without the GIL), against ``jax.jit(jax.value_and_grad(...))``
  of PyMC's jaxified log-density;
* ``breakdown``: where a gradient's time goes, part by part, with one chain
  in a process pinned to one core, one chain on a thread, and two chains on
  threads (``pm.sample()``'s way), with this package's pinning of nutpie's
  threads on and off (``jax_ofg__pin_sampler_threads``);
* ``chains``: 2 chains of 1000 + 1000, ``cores=1`` against ``cores=2``, on
  threads (``nutpie.sample``) and in pinned worker processes
  (:func:`~pytensor.compile._jax_ofg.samplers.chain_processes.run_chain_processes`);
* ``fit``: 4 chains of 1000 + 1000 against Stan (PyStan 3, its cached build):
  ``pm.sample()`` with the arguments the guide gives the model (and no
  ``cores``), and, as extra rows, ``nutpie.sample(cores=2)`` and chains in
  processes; each posterior mean against Stan's. Every fit records how many
  chains ran at once (:mod:`_chains`).

Every round runs with the same seed: rounds differ only by the machine.

Run (with the machine to itself; PyStan 3 from the ``stan`` extra)::

    .venv/bin/python benchmarks/small_odes.py                # ~60 minutes
    .venv/bin/python benchmarks/small_odes.py --rounds 5 --skip startup,per_call,breakdown,chains
    .venv/bin/python benchmarks/small_odes.py --rounds 1 --skip fit --quick

Writes ``benchmarks/results/small_odes.md`` (and the runs, ``.json``: a run of
some kinds or models replaces their stored runs and keeps the others;
``--report`` writes the tables again from them).
"""

from __future__ import annotations

import time


START = time.perf_counter()

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402


os.environ.setdefault("EQX_ON_ERROR", "nan")  # exportable programs, as the examples

import _chains  # noqa: E402
import _report  # noqa: E402
import _room  # noqa: E402, F401  (the checkout's modules; stan_ode: the example)
import _stan  # noqa: E402
from _processes import ChildFailed, cache_env, run_python  # noqa: E402
from _report import fill, package_versions  # noqa: E402
from _timing import median  # noqa: E402


MODELS = ("lv", "pk", "sir")
#: The libraries whose versions a run stores.
VERSIONS = ("pymc", "pytensor", "jax", "diffrax", "nutpie", "pystan")
#: Models measured only in the ``startup`` kind.
STARTUP_ONLY = frozenset({"sir"})
#: The module each model comes from (its import is timed with the imports).
MODULES = {"lv": "stan_ode", "pk": "_pk_model", "sir": "boarding_school_sir"}
#: Warm-up and draws of each chain in the ``chains`` measurement.
CHAIN_LENGTH = 1000
#: Warm-up and draws of each chain in the ``fit`` measurement.
FIT_LENGTH = 1000


def steps(spec: dict, full: int) -> int:
    """A measurement's warm-up steps (and draws): a tenth with ``--quick``."""
    return full // 10 if spec.get("quick") else full


#: Routes whose processes compile what one process of ``ours`` does: they
#: share its caches (pinned calls and chains in processes).
WARMED_AS_OURS = frozenset({"ours", "processes"})

LV_STAN_PROGRAM = (
    Path(__file__).resolve().parent / "stan" / "lotka_volterra.stan"
).read_text()


# --------------------------------------------------------------------------
# The models (each imported from where it is defined)
# --------------------------------------------------------------------------
def pymc_model(name: str):
    """The PyMC model and nutpie's initial points for it."""
    if name == "lv":
        import stan_ode

        return stan_ode.build_model(), stan_ode.PRIOR_LOCATIONS
    if name == "sir":
        import boarding_school_sir

        return boarding_school_sir.build_model(), None
    import _pk_model as pk

    from pytensor.compile.jax_ofg import as_jax_op

    return pk.build_model(as_jax_op(pk.solve_forward_mode, name="pk_solve")), None


def stan_program(name: str) -> tuple[str, dict, list[str]]:
    """The Stan program, its data and the parameters compared."""
    if name == "lv":
        import numpy as np
        import stan_ode

        observed = np.stack([stan_ode.HARE, stan_ode.LYNX], axis=1)
        data = {
            "N": len(stan_ode.TS),
            "ts": stan_ode.TS.tolist(),
            "y_init": observed[0].tolist(),
            "y": observed[1:].tolist(),
        }
        return LV_STAN_PROGRAM, data, ["theta", "z_init", "sigma"]
    import _pk_model as pk

    return pk.STAN_PROGRAM, pk.stan_data(), ["log_theta", "sigma"]


# --------------------------------------------------------------------------
# One measurement, in a fresh process
# --------------------------------------------------------------------------
def since_start() -> float:
    return time.perf_counter() - START


def compile_ours(name: str, route: str, phases: dict, owners=None):
    """The compiled model for nutpie, its start point, phases timed (and, with
    :class:`_owners.Owners`, whose code each phase ran)."""

    def phase(name: str) -> None:
        if owners is not None:
            owners.phase = name

    phase("imports")
    import numpy as np
    import nutpie
    import nutpie.compile_pymc
    import pymc  # noqa: F401  (an example's build_model imports it inside)

    import pytensor.compile.jax_ofg  # noqa: F401

    __import__(MODULES[name])
    phases["imports"] = since_start()
    if route == "cfunc":  # nutpie's own numba.cfunc
        compiler = nutpie.compile_pymc._compile_pymc_model_numba
        nutpie.compile_pymc._compile_pymc_model_numba = compiler.__wrapped__
    phase("build")
    model, initial_points = pymc_model(name)
    phases["imports+build"] = since_start()
    phase("compile")
    before = since_start()
    compiled = nutpie.compile_pymc_model(model, initial_points=initial_points)
    phases["compile"] = since_start() - before
    x = np.asarray(compiled.initial_point_func(1), dtype=np.float64)
    call = logp_call(compiled, x)  # compiled here: nutpie's threads need none
    phase("first call")
    before = since_start()
    status, _, _ = call()
    phases["first call"] = since_start() - before
    phase("after")
    assert status == 0, status
    return model, compiled, x


def logp_call(compiled, x):
    """A call of nutpie's C log-density function at ``x``, as nutpie calls it.

    From compiled code that released the GIL (a Numba ``nogil`` function
    here, nutpie's Rust threads there), not through a :mod:`ctypes` call
    from Python, whose own cost nutpie does not pay.
    """
    import ctypes

    import numba
    import numpy as np

    address = ctypes.c_uint64
    logp_function = ctypes.CFUNCTYPE(ctypes.c_int64, *[address] * 5)(
        compiled.compiled_logp_func.address
    )

    # Compiled now (a signature given), not at the first call it would time.
    @numba.njit("int64(uint64, uint64, uint64, uint64, uint64)", nogil=True)
    def call_from_compiled_code(n_dim, x, gradient, logp, user_data):
        return logp_function(n_dim, x, gradient, logp, user_data)

    x = np.ascontiguousarray(x)
    gradient, logp = np.empty_like(x), np.empty(1)
    arguments = (
        len(x),
        x.ctypes.data,
        gradient.ctypes.data,
        logp.ctypes.data,
        compiled.user_data.ctypes.data,
    )

    def call():
        return call_from_compiled_code(*arguments), logp, gradient

    return call


def pure_jax(model, compiled, x):
    """The model's value and gradient in pure JAX, on nutpie's flat point."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from pymc.sampling.jax import get_jaxified_logp

    logp = get_jaxified_logp(model)
    names, slices, shapes = compiled.shape_info
    by_name = dict(zip(names, zip(slices, shapes)))
    parts = [by_name[v.name] for v in model.value_vars]

    def flat_logp(x):
        return logp([x[s].reshape(shape) for s, shape in parts])

    jitted = jax.jit(jax.value_and_grad(flat_logp))
    point = jnp.asarray(x)

    def call():
        value, gradient = jitted(point)
        return float(value), np.asarray(gradient)

    return call


def child_startup(spec: dict) -> dict:
    from _owners import Owners

    phases: dict = {}
    with Owners() as owners:
        compile_ours(spec["model"], spec["route"], phases, owners)
    return {"phases": phases, "owners": owners.seconds}


def child_per_call(spec: dict) -> dict:
    import numpy as np
    from _timing import Call, interleaved_medians

    phases: dict = {}
    model, compiled, x = compile_ours(spec["model"], "ours", phases)
    ours = logp_call(compiled, x)
    jax_call = pure_jax(model, compiled, x)
    status, logp, gradient = ours()
    assert status == 0, status
    value, grad = jax_call()
    np.testing.assert_allclose(logp[0], value, rtol=1e-8)
    np.testing.assert_allclose(gradient, grad, rtol=1e-6, atol=1e-8)
    stats = interleaved_medians(
        {"ours": Call(ours), "jax": Call(jax_call)},
        repeats=steps(spec, 31),
        batch_seconds=0.1,
    )
    return {name: s.median for name, s in stats.items()}


def sample(compiled, spec: dict, *, chains, cores, length=CHAIN_LENGTH, **options):
    """``nutpie.sample`` of ``spec``'s model (its settings, its seed; another one for
    a sampler in the background) with ``length`` tuning steps and draws."""
    import nutpie

    length = steps(spec, length)
    seed = spec["seed"] + (1 if options.get("blocking") is False else 0)
    return nutpie.sample(
        compiled,
        chains=chains,
        tune=length,
        draws=length,
        cores=cores,
        seed=seed,
        progress_bar=False,
        **options,
    )


def leapfrog_steps(trace) -> list[int]:
    """Each chain's leapfrog steps, warm-up included."""
    return (
        trace.warmup_sample_stats["n_steps"].sum("draw")
        + trace.sample_stats["n_steps"].sum("draw")
    ).values.tolist()


def child_chain_processes(spec: dict, chains: int, tune: int, draws: int) -> dict:
    """``run_chain_processes`` on ``spec["cores"]`` workers; where its time went."""
    from pytensor.compile._jax_ofg.samplers.chain_processes import run_chain_processes

    model, initial_points = pymc_model(spec["model"])
    phases = {"imports+build": since_start()}
    workers = run_chain_processes(
        model,
        chains=chains,
        cores=spec["cores"],
        seed=spec["seed"],
        tune=tune,
        draws=draws,
        compile_kwargs={"initial_points": initial_points} if initial_points else {},
        timeout=1800,
    )
    phases["workers' start-up"] = max(
        w.seconds["imports"] + w.seconds["compile"] + w.seconds["first call"]
        for w in workers
    )
    phases["workers' compile"] = max(w.seconds["compile"] for w in workers)
    phases["workers' first call"] = max(w.seconds["first call"] for w in workers)
    # From the first worker's start of sampling to the last one's end: a worker
    # that starts early samples alone for a while, which its own time hides.
    phases["sampling"] = max(w.sampled[1] for w in workers) - min(
        w.sampled[0] for w in workers
    )
    phases["sampling, the slowest worker's own"] = max(
        w.seconds["sampling"] for w in workers
    )
    phases["whole"] = since_start()
    return {
        "seconds": phases["sampling"],
        "steps": [n for w in workers for n in leapfrog_steps(w.trace)],
        "phases": phases,
        "workers": workers,
    }


def child_chains(spec: dict) -> dict:
    import nutpie

    if spec["route"] == "processes":
        result = child_chain_processes(
            spec,
            chains=2,
            tune=steps(spec, CHAIN_LENGTH),
            draws=steps(spec, CHAIN_LENGTH),
        )
        del result["workers"]
        return result

    phases: dict = {}
    _, compiled, _ = compile_ours(spec["model"], spec["route"], phases)
    nutpie.sample(compiled, chains=2, tune=20, draws=5, cores=2, progress_bar=False)
    before = time.perf_counter()
    trace = sample(compiled, spec, chains=2, cores=spec["cores"])
    seconds = time.perf_counter() - before
    return {"seconds": seconds, "steps": leapfrog_steps(trace)}


def guide_arguments(name: str) -> dict:
    """``pm.sample``'s arguments as the guide passes them for a model, besides
    draws, tune, chains, seed and ``progressbar=False``: ``examples/stan_ode.py``'s
    for ``lv`` (the priors' locations, Stan's rule for the mass matrix), none
    for ``pk``. No ``cores``: the guide passes none."""
    if name != "lv":
        return {}
    import stan_ode

    nuts = {"adaptation": "draw_diag"}
    return {
        "nuts_sampler": "nutpie",
        "nuts": nuts,
        "initvals": stan_ode.PRIOR_LOCATIONS,
    }


def fit_stan(spec: dict, phases: dict) -> tuple[dict, dict]:
    """Stan's fit (its cached build): what it found, its draws by parameter."""
    import stan  # noqa: F401  (timed with the imports)
    from _chains import stan_at_once

    program, data, parameters = stan_program(spec["model"])
    phases["imports+build"] = since_start()
    before = since_start()
    posterior = _stan.build(program, data, spec["seed"])
    phases["compile"] = since_start() - before
    if spec.get("build only"):
        return {}, {}
    before = since_start()
    length = steps(spec, FIT_LENGTH)
    fit = _stan.sample(posterior, parameters, chains=4, draws=length, tune=length)
    phases["sampling"] = since_start() - before
    result = {"gradients per draw": float(fit.leapfrog.mean())}
    result |= {"divergences": int(fit.diverging.sum()), _chains.KEY: stan_at_once(4)}
    return result, fit.draws


def fit_processes(spec: dict, phases: dict) -> tuple[dict, dict]:
    """Chains in 2 pinned worker processes (``sample_in_processes``' way)."""
    from pytensor.compile._jax_ofg.samplers.chain_processes import merge_chains

    length = steps(spec, FIT_LENGTH)
    run = child_chain_processes(
        spec | {"cores": 2}, chains=4, tune=length, draws=length
    )
    phases |= run["phases"]
    # The workers' imports and compilation, beside each other.
    phases["compile"] = phases["workers' start-up"]
    trace = merge_chains([w.trace for w in run["workers"]])
    chains = {"passed": "2 worker processes", "at once": len(run["workers"])}
    return traced(trace, sum(run["steps"])) | {_chains.KEY: chains}, trace


def fit_nutpie(spec: dict, phases: dict) -> tuple[dict, dict]:
    """``nutpie.sample(cores=2)`` of nutpie's compiled model (an extra row)."""
    from _chains import chains_recorded

    _, compiled, _ = compile_ours(spec["model"], "ours", phases)
    chains: dict = {}
    before = since_start()
    with chains_recorded(chains):
        trace = sample(compiled, spec, chains=4, cores=2, length=FIT_LENGTH)
    phases["sampling"] = since_start() - before
    return traced(trace, sum(leapfrog_steps(trace))) | {_chains.KEY: chains}, trace


def fit_pm_sample(spec: dict, phases: dict) -> tuple[dict, dict]:
    """``pm.sample()`` as the guide calls it (:func:`guide_arguments`)."""
    import pymc as pm
    from _chains import chains_recorded

    __import__(MODULES[spec["model"]])
    phases["imports"] = since_start()
    model, _ = pymc_model(spec["model"])
    arguments = guide_arguments(spec["model"])
    phases["imports+build"] = since_start()
    chains: dict = {}
    length = 10 if spec.get("build only") else steps(spec, FIT_LENGTH)  # caches
    before = since_start()
    with chains_recorded(chains), model:
        idata = pm.sample(
            draws=length,
            tune=length,
            chains=4,
            random_seed=spec["seed"],
            progressbar=False,
            **arguments,
        )
    phases["sampling"] = float(idata.posterior.attrs["sampling_time"])
    phases["compile"] = since_start() - before - phases["sampling"]
    return traced(idata, None) | {_chains.KEY: chains}, idata


def traced(trace, gradients: int | None) -> dict:
    """Gradients per draw, all gradients (warm-up included, when kept), divergences."""
    stats = trace.sample_stats
    result = {"gradients per draw": float(stats["n_steps"].mean())}
    result |= {"gradients": gradients} if gradients else {}
    return result | {"divergences": int(stats["diverging"].sum())}


#: The ``fit`` kind's routes, their rows' labels (``pm.sample()``'s is the
#: guide's call; the two after it are extra rows).
FITS = {"pm_sample": fit_pm_sample, "ours": fit_nutpie, "processes": fit_processes}


def child_fit(spec: dict) -> dict:
    phases: dict = {}
    result, found = (FITS.get(spec["route"]) or fit_stan)(spec, phases)
    if spec.get("build only"):
        return {"phases": phases}
    _, _, parameters = stan_program(spec["model"])
    if spec["route"] != "stan":  # a trace: its draws by parameter
        found = {p: found.posterior[p].values for p in parameters}
    phases["whole"] = since_start()
    result["phases"] = phases
    columns = ["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]
    result["summary"] = _stan.posterior_summary(found, columns)
    return result


# --------------------------------------------------------------------------
# Where a gradient's time goes, when nutpie's chains are threads
# --------------------------------------------------------------------------
#: Warm-up and draws of each chain in the ``breakdown`` measurement.
BREAKDOWN_LENGTH = 400
#: Its routes: one chain in a process pinned to core 0, one chain on a
#: thread of an ordinary process, two chains on two threads.
BREAKDOWN_ROUTES = ("pinned", "thread", "threads")
#: The parts of a gradient, per log-density call: Python before and after
#: the program, the program on the calling thread's CPU and waiting (for
#: XLA's threads, the GIL, a core), the draws' expansion, nutpie's own work
#: between calls (the thread's CPU) and the thread waiting between calls.
PARTS = ("before", "program", "program waiting", "after", "draws", "nutpie", "waiting")


class CallbackClock:
    """Times nutpie's host callbacks, thread by thread (installed before compiling)."""

    def __init__(self):
        self.totals: dict[int, dict[str, float]] = {}
        self.local = threading.local()
        from pytensor.compile._jax_ofg.samplers import nutpie as callbacks

        flat_function, init = callbacks.flat_function, callbacks.HostCallback.__init__

        def timed_flat_function(function):
            program, slots = flat_function(function)

            def timed(*inputs):
                self.local.started = now()
                outputs = program(*inputs)
                self.local.ended = now()
                return outputs

            return timed, slots

        def timed_init(callback, function, signature):
            logp = signature is callbacks.LOGP_SIGNATURE

            def timed(*arguments):
                start = now()
                status = function(*arguments)
                self.add(logp, start, now())
                return status

            init(callback, timed, signature)

        callbacks.flat_function = timed_flat_function
        callbacks.HostCallback.__init__ = timed_init

    def add(self, logp: bool, start: tuple, end: tuple) -> None:
        totals = self.totals.setdefault(threading.get_native_id(), {"first": start})
        totals["last"] = end
        add = lambda part, seconds: totals.__setitem__(  # noqa: E731
            part, totals.get(part, 0.0) + seconds
        )
        add("callbacks", end[0] - start[0])
        add("callbacks' CPU", end[1] - start[1])
        if not logp:
            return add("draws", end[0] - start[0])
        started, ended = self.local.started, self.local.ended
        add("calls", 1)
        add("before", started[0] - start[0])
        add("program", ended[1] - started[1])
        add("program waiting", ended[0] - started[0] - (ended[1] - started[1]))
        add("after", end[0] - ended[0])

    def per_gradient(self) -> dict[str, float]:
        """Seconds per log-density call of each part, over every thread."""
        sums = dict.fromkeys(PARTS, 0.0)
        for totals in self.totals.values():
            first, last = totals["first"], totals["last"]
            outside = last[0] - first[0] - totals["callbacks"]
            outside_cpu = last[1] - first[1] - totals["callbacks' CPU"]
            totals |= {"nutpie": outside_cpu, "waiting": outside - outside_cpu}
            for part in PARTS:
                sums[part] += totals.get(part, 0.0)
        calls = sum(t["calls"] for t in self.totals.values())
        return {part: seconds / calls for part, seconds in sums.items()}


def now() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def xla_threads_seconds() -> float:
    """CPU seconds of this process's XLA pool threads (named ``tf_XLA...``)."""
    seconds = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # a thread that ended
            continue
        if stat[stat.index("(") + 1 :].startswith("tf_XLA"):
            fields = stat[stat.rindex(")") + 2 :].split()
            seconds += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def child_breakdown(spec: dict) -> dict:
    import nutpie

    from pytensor import config

    if spec["route"] == "pinned":
        os.sched_setaffinity(0, {0})  # before XLA starts its threads
    clock = CallbackClock()
    _, compiled, _ = compile_ours(spec["model"], "ours", {})
    config.jax_ofg__pin_sampler_threads = spec["pin"]
    chains = 2 if spec["route"] == "threads" else 1
    nutpie.sample(
        compiled, chains=chains, tune=20, draws=5, cores=chains, progress_bar=False
    )
    clock.totals.clear()
    xla_seconds, before = xla_threads_seconds(), time.perf_counter()
    trace = sample(compiled, spec, chains=chains, cores=chains, length=BREAKDOWN_LENGTH)
    seconds = time.perf_counter() - before
    return {
        "seconds": seconds,
        "steps": leapfrog_steps(trace),
        "parts": clock.per_gradient(),
        "xla threads": xla_threads_seconds() - xla_seconds,
    }


CHILDREN = {
    "startup": child_startup,
    "per_call": child_per_call,
    "breakdown": child_breakdown,
    "chains": child_chains,
    "fit": child_fit,
}


# --------------------------------------------------------------------------
# The parent: rounds of fresh processes, then the tables
# --------------------------------------------------------------------------
def run_child(spec: dict, caches: Path, timeout: float) -> dict:
    """Run one measurement in a fresh process sharing ``caches``; its JSON result."""
    route = spec.get("route", "ours")
    folder = caches / f"{spec['model']}-{'ours' if route in WARMED_AS_OURS else route}"
    folder.mkdir(parents=True, exist_ok=True)
    env = cache_env(folder, stan=caches / "stan")  # Stan's builds, for both models
    try:
        done = run_python(
            [__file__, "--child", json.dumps(spec)], env=env, timeout=timeout
        )
    except ChildFailed as error:
        return {"error": str(error)}
    return {**done.result, "process": done.seconds}


#: Per kind, the measurements of each model (besides its kind and model).
PLAN = {
    "startup": [{"route": "ours"}, {"route": "cfunc"}],
    "per_call": [{"route": "ours"}],
    "breakdown": [
        {"route": r, "pin": p} for p in (False, True) for r in BREAKDOWN_ROUTES
    ],
    "chains": [{"route": r, "cores": c} for r in ("ours", "processes") for c in (1, 2)],
    "fit": [{"route": route} for route in FITS],
}


#: The kinds of measurement, in the order each round runs them (``--skip``).
KINDS = tuple(PLAN)


def plan(settings) -> list[list[dict]]:
    """The measurements of each round, in the round's rotating order."""
    rounds = []
    for round_ in range(settings.rounds):
        specs = [
            {"kind": kind, "model": name, **spec}
            for name in settings.models
            for kind in settings.kinds
            for spec in PLAN[kind]
            if kind == "startup" or name not in STARTUP_ONLY
        ]
        if "fit" in settings.kinds:  # Stan's fit of each model
            specs += [
                {"kind": "fit", "model": name, "route": "stan"}
                for name in settings.models
                if name not in STARTUP_ONLY
            ]
        for spec in specs:
            spec["seed"] = settings.seed
            spec |= {"quick": True} if settings.quick else {}
        shift = round_ % max(len(specs), 1)
        rounds.append(specs[shift:] + specs[:shift])
    return rounds


def label(spec: dict) -> str:
    if spec["kind"] == "breakdown":
        pin = "pinned threads" if spec["pin"] else "threads as they are"
        return f"breakdown|{spec['model']}|{spec['route']}|{pin}"
    cores = f"|cores={spec['cores']}" if "cores" in spec else ""
    return f"{spec['kind']}|{spec['model']}|{spec['route']}{cores}"


def values(found: list[dict], *path: str) -> list:
    """``run[path[0]][path[1]]...`` of every run found."""
    out = []
    for run in found:
        for key in path:
            run = run[key]
        out.append(run)
    return out


def startup_rows(ok: dict) -> list[list]:
    rows = []
    for name, route in itertools.product(MODELS, ("ours", "cfunc")):
        found = ok.get(f"startup|{name}|{route}", [])
        if found:
            phase = {p: median(values(found, "phases", p)) for p in found[0]["phases"]}
            calls = "host callbacks" if route == "ours" else "nutpie's numba.cfunc"
            rows.append([name, calls, f"{phase['imports+build']:.2f}"])
            rows[-1] += [f"{phase['compile']:.2f}", f"{phase['first call']:.3f}"]
            rows[-1].append(f"{phase['compile'] + phase['first call']:.2f}")
    return rows


def warm_startup_rows(ok: dict) -> list[list]:
    """Per model, a warm process's build and compile before its first gradient."""
    rows = []
    for name in MODELS:
        found = ok.get(f"startup|{name}|ours", [])
        parts = [
            [
                p["imports+build"] - p["imports"],
                p["compile"],
                p["first call"],
                p["imports+build"] - p["imports"] + p["compile"] + p["first call"],
            ]
            for p in values(found, "phases")
            if "imports" in p
        ]
        if parts:
            medians = [median(column) for column in zip(*parts)]
            totals = [row[-1] for row in parts]
            rows.append([name, *(f"{m:.2f}" for m in medians)])
            rows[-1].append(", ".join(f"{t:.2f}" for t in totals))
    return rows


#: The libraries of the start-up's owners table, in its order; the rest: "others".
OWNERS = ("ours", "PyTensor", "JAX", "PyMC", "Numba", "nutpie", "diffrax, equinox")
STARTUP_PHASES = ("imports", "build", "compile", "first call")


def owners_rows(ok: dict) -> list[list]:
    rows = []
    for name in MODELS:
        found = [r for r in ok.get(f"startup|{name}|ours", []) if "owners" in r]
        if not found:
            continue
        walls = {
            "imports": values(found, "phases", "imports"),
            "build": [
                p["imports+build"] - p["imports"] for p in values(found, "phases")
            ],
            "compile": values(found, "phases", "compile"),
            "first call": values(found, "phases", "first call"),
        }
        totals = [0.0] * (len(OWNERS) + 2)
        for phase in STARTUP_PHASES:
            seconds = [r["owners"].get(phase, {}) for r in found]
            cells = [median([s.get(o, 0.0) for s in seconds]) for o in OWNERS]
            rest = median(
                [sum(v for o, v in s.items() if o not in OWNERS) for s in seconds]
            )
            row = [median(walls[phase]), *cells, rest]
            totals = [a + b for a, b in zip(totals, row)]
            rows.append([name, phase, *(f"{v:.2f}" for v in row)])
        rows.append([name, "**total**", *(f"**{v:.2f}**" for v in totals)])
    return rows


def per_call_rows(ok: dict) -> list[list]:
    rows = []
    for name in MODELS:
        if found := ok.get(f"per_call|{name}|ours", []):
            ours, jax_ = median(values(found, "ours")), median(values(found, "jax"))
            rows.append([name, f"{ours * 1e6:.0f}", f"{jax_ * 1e6:.0f}"])
            rows[-1].append(f"{ours / jax_:.2f}")
    return rows


def chains_rows(ok: dict) -> list[list]:
    rows = []
    routes = {"ours": "nutpie, chains on threads", "processes": "chains in processes"}
    for name, (route, what) in itertools.product(MODELS, routes.items()):
        one = ok.get(f"chains|{name}|{route}|cores=1", [])
        two = ok.get(f"chains|{name}|{route}|cores=2", [])
        if not (one and two):
            continue
        speedups = [a["seconds"] / b["seconds"] for a, b in zip(one, two)]
        allowed = [sum(r["steps"]) / max(r["steps"]) for r in two]
        per_gradient = [
            [r["seconds"] / sum(r["steps"]) * 1e6 * cores for r in found]
            for cores, found in ((1, one), (2, two))
        ]
        rows.append(
            [name, what, *(f"{median(values(x, 'seconds')):.2f}" for x in (one, two))]
        )
        rows[-1] += [", ".join(f"{s:.2f}" for s in speedups), f"{median(speedups):.2f}"]
        rows[-1] += [
            f"{median(allowed):.2f}",
            *(f"{median(p):.0f}" for p in per_gradient),
        ]
    return rows


def breakdown_rows(ok: dict) -> list[list]:
    rows = []
    for name, pin in itertools.product(MODELS, (False, True)):
        spec = {"kind": "breakdown", "model": name, "pin": pin}
        found = {
            route: ok.get(label(spec | {"route": route}), [])
            for route in BREAKDOWN_ROUTES
        }
        if not all(found.values()):
            continue
        per_core = {
            route: median(
                [r["seconds"] * len(r["steps"]) / sum(r["steps"]) * 1e6 for r in runs]
            )
            for route, runs in found.items()
        }
        for route, runs in found.items():
            parts = [median(values(runs, "parts", p)) * 1e6 for p in PARTS]
            xla = median([r["xla threads"] / sum(r["steps"]) * 1e6 for r in runs])
            rows.append(
                [name, BREAKDOWN_LABELS[route], "on" if pin else "off"]
                + [f"{per_core[route]:.0f}"]
                + [f"{per_core[route] / per_core['pinned']:.2f}"]
                + [f"{p:.1f}" for p in parts]
                + [f"{xla:.0f}"]
            )
    return rows


BREAKDOWN_LABELS = {
    "pinned": "1, a pinned process",
    "thread": "1, on a thread",
    "threads": "2, on threads",
}


FIT_ROUTES = {
    "pm_sample": "`pm.sample()` as the guide calls it",
    "ours": "extra: `nutpie.sample`, cores=2",
    "processes": "extra: chains in 2 processes",
    "stan": "Stan (PyStan, cached build)",
}


def fit_row(name: str, route: str, found: list[dict], stan_runs: list[dict]) -> list:
    """One row of the whole-fit table: medians over the runs ``found``, and the
    spread of their whole fits."""
    wholes = values(found, "phases", "whole")
    whole = median(wholes)
    ess = median([min(s["ess_bulk"] for s in r["summary"].values()) for r in found])
    stan_whole = median(values(stan_runs, "phases", "whole")) if stan_runs else math.nan
    per_gradient = math.nan
    if all("gradients" in r for r in found):
        per_gradient = median(
            [2 * r["phases"]["sampling"] / r["gradients"] * 1e6 for r in found]
        )
    r_hat = max(max(s["r_hat"] for s in r["summary"].values()) for r in found)
    phases = {
        p: median(values(found, "phases", p))
        for p in ("imports+build", "compile", "sampling")
    }
    return [
        name,
        FIT_ROUTES[route],
        _chains.at_once(found),
        f"{whole:.1f}",
        _report.span(wholes, "{:.1f}"),
        f"{max(wholes) / min(wholes):.2f}",
        f"{whole / stan_whole:.2f}",
        f"{phases['imports+build']:.1f}",
        f"{phases['compile']:.2f}",
        f"{phases['sampling']:.1f}",
        f"{ess:.0f}",
        f"{ess / whole:.1f}",
        f"{r_hat:.3f}",
        f"{median(values(found, 'divergences')):.0f}",
        f"{median(values(found, 'gradients per draw')):.1f}",
        "" if math.isnan(per_gradient) else f"{per_gradient:.0f}",
    ]


def fit_sections(ok: dict, text: dict[str, str], lengths: dict) -> list[str]:
    """The whole-fit table, and each posterior against Stan's."""
    rows, agreement = [], []
    for name, route in itertools.product(MODELS, FIT_ROUTES):
        stan_runs = ok.get(f"fit|{name}|stan", [])
        if not (found := ok.get(f"fit|{name}|{route}", [])):
            continue
        rows.append(fit_row(name, route, found, stan_runs))
        if route != "stan" and stan_runs:
            agreement.append(against_stan(f"{name}, {route}", found, stan_runs))
    sections = [fill(text["fit"], rows, **lengths)] if rows else []
    lines = [fill(text["agreement"], **fields) for fields in agreement]
    return sections + (["\n".join(lines)] if lines else [])


def against_stan(name: str, ours: list[dict], stan_runs: list[dict]) -> dict:
    """The posterior mean farthest from Stan's, in Monte Carlo standard errors."""
    for run in stan_runs:  # runs stored before scalars lost PyStan's [0]
        for scalar in [k for k in run["summary"] if k.endswith("[0]")]:
            if scalar[:-3] in ours[0]["summary"]:
                run["summary"][scalar[:-3]] = run["summary"].pop(scalar)
    worst = []
    for scalar in ours[0]["summary"]:
        ours_mean = median([r["summary"][scalar]["mean"] for r in ours])
        stan_mean = median([r["summary"][scalar]["mean"] for r in stan_runs])
        mcse = [runs[0]["summary"][scalar]["mcse_mean"] for runs in (ours, stan_runs)]
        error = max((mcse[0] ** 2 + mcse[1] ** 2) ** 0.5, 1e-12)
        worst.append(((ours_mean - stan_mean) / error, scalar, ours_mean, stan_mean))
    z, scalar, a, b = max(worst, key=lambda w: abs(w[0]))
    return {"name": name, "z": z, "scalar": scalar, "ours": a, "stan": b}


#: The tables, in order: their blocks in ``texts/small_odes.md``, their rows.
TABLES = {
    "startup": startup_rows,
    "warm_startup": warm_startup_rows,
    "owners": owners_rows,
    "per_call": per_call_rows,
    "chains": chains_rows,
    "breakdown": breakdown_rows,
}


#: What runs stored before their meta was say of themselves.
OLD_META = {
    "machine": "Machine: not recorded",
    "seeds": "seed 1 + the round's index (stored before rounds shared a seed)",
}


def report(runs: dict) -> str:
    """The markdown tables of every stored run (of every model, not only those run)."""
    text = _report.texts("small_odes")
    runs = dict(runs)
    meta = runs.pop("meta", OLD_META)
    spec = {"quick": meta.get("quick", False)}  # the steps of the runs' chains
    lengths = {"length": steps(spec, CHAIN_LENGTH), "fit": steps(spec, FIT_LENGTH)}
    lengths["breakdown"] = steps(spec, BREAKDOWN_LENGTH)
    ok = {k: [r for r in v if "error" not in r] for k, v in runs.items()}
    failed = [
        f"* {key} failed: `{r['error'][-300:]}`"
        for key, found in runs.items()
        for r in found
        if "error" in r
    ]
    sections = [fill(text["intro"], **meta), *(["\n".join(failed)] if failed else [])]
    for key, rows_of in TABLES.items():
        if rows := rows_of(ok):
            sections.append(fill(text[key], rows, **lengths))
    return "\n\n".join(sections + fit_sections(ok, text, lengths)) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--skip", default="", help=f"kinds to leave out, of {KINDS}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: a tenth of the steps, into small_odes_quick.*",
    )
    parser.add_argument(
        "--report", action="store_true", help="only the tables, from the stored runs"
    )
    settings = parser.parse_args(argv)
    settings.name = "small_odes_quick" if settings.quick else "small_odes"
    settings.models = [m for m in settings.models.split(",") if m]
    skipped = {k for k in settings.skip.split(",") if k}
    settings.kinds = [k for k in KINDS if k not in skipped]
    return settings


def warm_caches(rounds: list[list[dict]], caches: Path, timeout: float) -> None:
    """Fill each folder of caches once, untimed."""
    warmed = set()
    for spec in {label(s): s for s in rounds[0]}.values():
        route = spec.get("route", "ours")
        folder = (spec["model"], "ours" if route in WARMED_AS_OURS else route)
        if folder in warmed or route == "jax":
            continue
        warmed.add(folder)
        print("warming", folder, flush=True)
        warm_spec = (
            {**spec, "build only": True}
            if route in ("stan", "pm_sample")
            else {"kind": "startup", "model": spec["model"], "route": folder[1]}
        )
        result = run_child(warm_spec, caches, timeout)
        if "error" in result:
            print(result["error"], flush=True)


def main(argv=None) -> None:
    settings = parse_args(argv)
    if settings.child:
        spec = json.loads(settings.child)
        print(json.dumps(CHILDREN[spec["kind"]](spec)), flush=True)
        return
    # A run of some kinds or models replaces their stored runs, keeps the others.
    runs: dict = _report.load(settings.name, {})
    if not settings.report:
        command = " ".join(["python benchmarks/small_odes.py", *sys.argv[1:]])
        runs["meta"] = _report.meta(command, package_versions(VERSIONS))
        runs["meta"]["seeds"] = f"seed {settings.seed} in every round"
        runs["meta"]["quick"] = settings.quick
        ran: set[str] = set()
        with tempfile.TemporaryDirectory(prefix="small_odes-") as folder:
            rounds = plan(settings)
            warm_caches(rounds, Path(folder), settings.timeout)
            for round_, specs in enumerate(rounds):
                for spec in specs:
                    result = run_child(spec, Path(folder), settings.timeout)
                    if label(spec) not in ran:
                        ran.add(label(spec))
                        runs[label(spec)] = []
                    runs[label(spec)].append(result)
                    shown = {k: v for k, v in result.items() if k != "summary"}
                    print(f"round {round_}: {label(spec)}: {shown}", flush=True)
        _report.save(settings.name, runs)
    _report.write(settings.name, report(runs))


if __name__ == "__main__":
    main()
