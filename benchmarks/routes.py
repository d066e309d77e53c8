"""Every route but nutpie's, before and after a change: two checkouts, alternated.

The same measurements in fresh processes of two checkouts of this project
(``--before PATH``, ``--after PATH``: this one by default), alternating
round by round, each process importing its own checkout's modules (worker
processes too). Routes (``--routes``): ``import`` and ``startup``, seconds to import the
package (and nutpie) and from a second process's start to its first
log-density value;
``call``, the value and gradient of a
small ODE model's log-density through ``pytensor.function`` in the default
linker, µs per call; ``large``, a chain of four 500 x 500 matrix products
through ``pytensor.function``, ms per call; ``pymc``, ``numpyro`` and
``smc``, seconds of ``pm.sample(nuts_sampler="pymc", cores=2)``,
``pm.sample(nuts_sampler="numpyro")`` and ``pm.sample_smc(cores=2)`` on that
model, after one untimed sample in the same process.

Run (with the machine to itself)::

    .venv/bin/python benchmarks/routes.py --before ../base --rounds 3

Writes ``benchmarks/results/routes.json`` and ``.md``.
"""

from __future__ import annotations

import time


STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import _report  # noqa: E402
from _processes import run_python  # noqa: E402
from _timing import median  # noqa: E402


HERE = Path(__file__).resolve().parent


ROUTES = ("import", "startup", "call", "large", "pymc", "numpyro", "smc")
UNITS = {"call": ("µs per call", 1e6), "large": ("ms per call", 1e3)}
#: Routes whose first process fills the caches the others read: run once first.
WARMED = ("startup",)


def model():
    """y' = -k y from y(0) = 1, k ~ LogNormal, 20 noisy observations (diffrax)."""
    import diffrax
    import jax.numpy as jnp
    import numpy as np
    import pymc as pm

    from pytensor.compile.jax_ofg import as_jax_op

    times = np.linspace(0.5, 10.0, 20)

    @as_jax_op
    def decay(k):
        term = diffrax.ODETerm(lambda t, y, args: -k * y)
        saveat = diffrax.SaveAt(ts=jnp.asarray(times))
        solution = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, 10.0, 0.1, jnp.ones(()), saveat=saveat
        )
        return solution.ys

    observed = np.exp(-0.4 * times) + np.random.default_rng(0).normal(0, 0.02, 20)
    with pm.Model() as built:
        k = pm.LogNormal("k", 0.0, 1.0)
        pm.Normal("y", decay(k), 0.02, observed=observed)
    return built


def per_call(function, *inputs, seconds: float = 2.0) -> float:
    """Median seconds per call over 10 batches."""
    function(*inputs)
    batches = []
    for _ in range(10):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 10:
            function(*inputs)
            calls += 1
        batches.append((time.perf_counter() - start) / calls)
    return median(batches)


def child(route: str) -> float:
    """Seconds of one measurement of ``route`` in this process."""
    if route in ("import", "startup"):
        return startup(route)
    import numpy as np
    import pymc as pm

    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.jax_ofg import as_jax_op

    if route == "large":
        a = pt.matrix("a", shape=(500, 500))
        function = pytensor.function([a], as_jax_op(lambda m: m @ m @ m @ m)(a))
        return per_call(function, np.eye(500) / 2)
    built = model()
    if route == "call":
        values = built.value_vars
        logp = pytensor.function(values, [built.logp(), built.dlogp()])
        return per_call(logp, *built.initial_point().values())
    sample = {
        "pymc": lambda n: pm.sample(n, tune=n, chains=2, cores=2, nuts_sampler="pymc"),
        "numpyro": lambda n: pm.sample(n, tune=n, chains=2, nuts_sampler="numpyro"),
        "smc": lambda n: pm.sample_smc(n, chains=2, cores=2),
    }[route]
    with built:
        sample(50)  # compiles, starts workers once
        start = time.perf_counter()
        sample(500)
    return time.perf_counter() - start


def startup(route: str) -> float:
    """``import``: importing nutpie and the package after NumPy, JAX, PyTensor and PyMC;
    ``startup``: the process to the first log-density value of the model
    through nutpie's compiled function (imports, build, compile, first call)."""
    import jax  # noqa: F401
    import numpy as np
    import pymc  # noqa: F401
    from small_odes import logp_call

    import pytensor

    start = time.perf_counter()
    import nutpie

    import pytensor.compile.jax_ofg  # noqa: F401

    if route == "import":
        return time.perf_counter() - start
    compiled = nutpie.compile_pymc_model(model())
    x = np.asarray(compiled.initial_point_func(1), dtype=np.float64)
    status, _, _ = logp_call(compiled, x)()
    assert status == 0, status
    return time.perf_counter() - STARTED


def run(checkout: Path, route: str, folder: Path) -> float:
    """``route`` in a fresh process importing ``checkout``'s modules; its seconds."""
    startup = folder / checkout.name
    startup.mkdir(exist_ok=True)
    (startup / "sitecustomize.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('c', {str(checkout / 'conftest.py')!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
    )
    # Not this checkout's start-up (run_python's): the other checkout's modules.
    env = {"PYTHONPATH": os.pathsep.join([str(startup), str(HERE)])}
    done = run_python([__file__, "--child", route], env=env, timeout=1800)
    return done.result["seconds"]


def report(runs: dict) -> str:
    text = _report.texts("routes")
    rows = []
    for route in ROUTES:
        found = runs.get(route)
        if not found:
            continue
        unit, scale = UNITS.get(route, ("s", 1.0))
        before, after = (median(found[side]) * scale for side in ("before", "after"))
        ratios = [a / b for a, b in zip(found["after"], found["before"])]
        rows.append([route, unit, f"{before:.3g}", f"{after:.3g}"])
        rows[-1] += [", ".join(f"{r:.2f}" for r in ratios), f"{median(ratios):.2f}"]
    return _report.fill(text["table"], rows, **runs["meta"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path, default=HERE.parent)
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--report", action="store_true")
    settings = parser.parse_args()
    if settings.child:
        print(json.dumps({"seconds": child(settings.child)}))
        return
    runs = _report.load("routes", {})
    if not settings.report:
        sides = {"before": settings.before.resolve(), "after": settings.after.resolve()}
        runs = {"meta": {side: str(path) for side, path in sides.items()}}
        runs["meta"]["command"] = " ".join(["benchmarks/routes.py", *sys.argv[1:]])
        with tempfile.TemporaryDirectory(prefix="routes-") as folder:
            for route in set(WARMED) & set(settings.routes.split(",")):
                for path in sides.values():
                    run(path, route, Path(folder))
            for round_ in range(settings.rounds):
                order = list(sides.items())[:: 1 if round_ % 2 == 0 else -1]
                for route in settings.routes.split(","):
                    for side, path in order:
                        seconds = run(path, route, Path(folder))
                        runs.setdefault(route, {}).setdefault(side, []).append(seconds)
                        print(
                            f"round {round_}: {route} {side}: {seconds:.6g}", flush=True
                        )
        _report.save("routes", runs)
    _report.write("routes", report(runs))


if __name__ == "__main__":
    main()
