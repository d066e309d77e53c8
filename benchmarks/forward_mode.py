"""Forward against reverse mode on a stiff PK model (:mod:`_pk_model`), and against Stan.

* **value+grad per call**: the model's log-density and gradient compiled by
  PyTensor (default linker) with the solve wrapped by ``as_jax_op`` in reverse
  mode and in forward mode (``adjoint=diffrax.ForwardMode()``), against the
  best pure-JAX programs (``jax.value_and_grad``; ``jax.linearize`` and a
  ``vmap`` of the JVP), every gradient checked against pure JAX's;
* **by the number of parameters n**: pure JAX forward against reverse mode;
* **the whole fit** (``pm.sample()`` with nutpie; Stan's ``ode_bdf_tol``
  through PyStan 3): each route in a first and a second fresh process sharing
  fresh caches, the second reported, from its first line to the posterior.

Run (with the machine to itself)::

    .venv/bin/python benchmarks/forward_mode.py                 # ~10 minutes
    .venv/bin/python benchmarks/forward_mode.py --draws 500     # shorter fits

Writes ``benchmarks/results/forward_mode.json`` and ``.md``. ``--child ROUTE``
is one fit (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


START = time.perf_counter()
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import _report  # noqa: E402
from _report import fill, package_versions  # noqa: E402


os.environ.setdefault("EQX_ON_ERROR", "nan")  # exportable programs, as the examples

ROUTES = {
    "ours_forward": "ours, forward mode (ForwardMode adjoint)",
    "ours_reverse": "ours, reverse mode (default adjoint)",
    "stan": "Stan (PyStan, ode_bdf_tol)",
}
#: Command-line options of a fit's size, and their defaults.
FIT_SIZE = {"draws": 1000, "tune": 1000, "chains": 4}


def our_model(route: str):
    import _pk_model as pk

    import conftest  # noqa: F401  (the checkout's modules)
    from pytensor.compile.jax_ofg import as_jax_op

    if route == "ours_forward":
        return pk.build_model(as_jax_op(pk.solve_forward_mode, name="pk_solve"))
    return pk.build_model(as_jax_op(pk.solve, name="pk_solve", gradient="reverse"))


# --------------------------------------------------------------- one fit
def child(route: str, draws: int, tune: int, chains: int, seed: int) -> None:
    """Fit once; print the phases as JSON on the last line."""
    import _pk_model as pk

    if route == "stan":
        import _stan

        posterior = _stan.build(pk.STAN_PROGRAM, pk.stan_data(), seed)
        before = time.perf_counter()
        fit = _stan.sample(
            posterior, ["log_theta"], chains=chains, draws=draws, tune=tune
        )
        sampling = time.perf_counter() - before
        log_theta = fit.draws["log_theta"]
        divergences = int(fit.diverging.sum())
    else:
        import pymc as pm

        with our_model(route):
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
            )
        sampling = float(idata["posterior"].attrs["sampling_time"])
        log_theta = idata["posterior"]["log_theta"].values
        divergences = int(idata["sample_stats"]["diverging"].values.sum())
    whole = time.perf_counter() - START
    result = {
        "whole": whole,
        "sampling": sampling,
        "means": log_theta.reshape(-1, 4).mean(axis=0).tolist(),
        "divergences": divergences,
    }
    print(json.dumps(result), flush=True)


def fit_twice(route: str, args: argparse.Namespace) -> dict:
    """The route in a first and a second fresh process sharing fresh caches."""
    from _processes import cache_env, run_python

    with tempfile.TemporaryDirectory(prefix=f"forward_mode-{route}-") as folder:
        cache = Path(folder)
        command = [__file__, "--child", route]
        command += [f"--{k}={getattr(args, k)}" for k in FIT_SIZE]
        results = []
        for _ in range(2):
            done = run_python(command, env=cache_env(cache), cwd=cache)
            result = {**done.result, "process": done.seconds}
            results.append(result)
            print(route, result, flush=True)
        return {"first": results[0], "second": results[1]}


# ---------------------------------------------------------- per call
def per_call(args: argparse.Namespace) -> dict:
    import _pk_model as pk
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _timing import Call, interleaved_medians

    import conftest  # noqa: F401
    import pytensor
    import pytensor.tensor as pt

    point = (jnp.asarray(pk.PRIOR_MEANS + 0.1), jnp.asarray(np.log(0.7)))

    def forward_value_and_grad(logp):
        def value_and_grad(*x):
            value, linear = jax.linearize(logp, *x)
            basis = (jnp.eye(5)[:, :4], jnp.eye(5)[:, 4])
            return value, jax.vmap(linear)(*basis)

        return jax.jit(value_and_grad)

    reverse = jax.jit(jax.value_and_grad(pk.logp, argnums=(0, 1)))
    forward = forward_value_and_grad(
        lambda lt, ls: pk.logp(lt, ls, pk.solve_forward_mode)
    )
    expected = np.concatenate([np.ravel(g) for g in reverse(*point)[1]])
    np.testing.assert_allclose(forward(*point)[1], expected, rtol=1e-6)
    calls = {
        "pure JAX, reverse (value_and_grad)": Call(
            lambda: jax.block_until_ready(reverse(*point))
        ),
        "pure JAX, forward (linearize + vmap)": Call(
            lambda: jax.block_until_ready(forward(*point))
        ),
    }
    for route in ("ours_reverse", "ours_forward"):
        model = our_model(route)
        logp = model.logp()
        inputs = model.value_vars
        f = pytensor.function(inputs, [logp, *pt.grad(logp, inputs)])
        values = [np.asarray(point[0]), np.asarray(point[1])]
        got = np.concatenate([np.ravel(g) for g in f(*values)[1:]])
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        calls[f"{ROUTES[route]}, as_jax_op"] = Call(f, tuple(values))
    stats = interleaved_medians(calls, repeats=args.repeats, batch_seconds=0.3)
    return {
        "calls": {name: [s.median, s.spread] for name, s in stats.items()},
        "sweep": sweep(args),
    }


def sweep(args: argparse.Namespace) -> list[list[float]]:
    """Where forward mode stops winning, by the number of inputs ``n``: n, and
    seconds per call of reverse and forward mode in pure JAX."""
    import _pk_model as pk
    import jax
    import jax.numpy as jnp
    from _timing import Call, interleaved_medians

    def scaled_logp(solver):
        def logp(log_theta, extra):
            scale = jnp.prod(1 + 0.01 * jnp.tanh(extra))
            return pk.logp(log_theta, jnp.log(0.7), lambda t: solver(t * scale))

        return logp

    sweep = []
    for n in args.sizes:
        x = (jnp.asarray(pk.PRIOR_MEANS), jnp.zeros(n - 4))
        rev = jax.jit(jax.value_and_grad(scaled_logp(pk.solve), argnums=(0, 1)))
        fwd_logp = scaled_logp(pk.solve_forward_mode)

        def fwd(lt, extra, fwd_logp=fwd_logp, n=n):
            value, linear = jax.linearize(fwd_logp, lt, extra)
            return value, jax.vmap(linear)(jnp.eye(n)[:, :4], jnp.eye(n)[:, 4:])

        fwd = jax.jit(fwd)
        s = interleaved_medians(
            {
                "r": Call(lambda rev=rev, x=x: jax.block_until_ready(rev(*x))),
                "f": Call(lambda fwd=fwd, x=x: jax.block_until_ready(fwd(*x))),
            },
            repeats=max(3, args.repeats // 2),
            batch_seconds=0.2,
        )
        sweep.append([n, s["r"].median, s["f"].median])
        print(sweep[-1], flush=True)
    return sweep


def report(data: dict) -> str:
    text = _report.texts("forward_mode")
    sections = [fill(text["intro"], **data["meta"])]
    if "per_call" in data:
        calls = data["per_call"]["calls"]
        best = min(m for k, (m, _) in calls.items() if k.startswith("pure JAX"))
        rows = [
            [name, f"{m * 1e3:.2f}", f"{spread:.0%}", f"{m / best:.2f}"]
            for name, (m, spread) in calls.items()
        ]
        sections.append(fill(text["per_call"], rows))
        rows = [
            [n, f"{r * 1e3:.2f}", f"{f * 1e3:.2f}", f"{f / r:.2f}"]
            for n, r, f in data["per_call"]["sweep"]
        ]
        sections.append(fill(text["sweep"], rows))
    if data.get("fits"):
        sections.append(fill(text["fits"], fit_rows(data["fits"]), **data["meta"]))
    return "\n\n".join(sections) + "\n"


def fit_rows(fits: dict[str, dict]) -> list[list]:
    reference = fits.get("stan", {}).get("second", {}).get("process")
    rows = []
    for route, result in fits.items():
        first, second = result["first"], result["second"]
        rows.append([ROUTES[route], f"{first['process']:.1f}"])
        rows[-1] += [f"{second['process']:.1f}", f"{second['sampling']:.1f}"]
        rows[-1].append(f"{second['process'] / reference:.2f}" if reference else "")
        rows[-1] += [
            second["divergences"],
            " ".join(f"{m:.2f}" for m in second["means"]),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=ROUTES)
    for name, default in FIT_SIZE.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", type=int, nargs="*", default=[4, 8, 16, 32, 64])
    parser.add_argument("--routes", nargs="*", default=list(ROUTES))
    parser.add_argument("--no-per-call", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.draws, args.tune, args.chains, seed=1)
        return
    if not args.report:
        _report.save("forward_mode", measure(args))
    _report.write("forward_mode", report(_report.load("forward_mode")), args.output)


def measure(args: argparse.Namespace) -> dict:
    command = "python benchmarks/forward_mode.py " + " ".join(sys.argv[1:])
    versions = package_versions(
        {"JAX": "jax", "diffrax": "diffrax", "PyTensor": "pytensor", "PyMC": "pymc"}
    )
    meta = _report.meta(command.strip(), versions)
    data = {"meta": meta | {k: getattr(args, k) for k in FIT_SIZE}}
    if not args.no_per_call:
        data["per_call"] = per_call(args)
    data["fits"] = {route: fit_twice(route, args) for route in args.routes}
    return data


if __name__ == "__main__":
    main()
