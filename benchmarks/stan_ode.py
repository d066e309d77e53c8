"""Coming from Stan, measured: step budgets, starting points, samplers and numpyro's chains.

Every measurement runs in a fresh process (``--run NAME``) and appends one JSON
line to ``benchmarks/results/stan_ode.jsonl``; ``--report`` writes the tables of
``benchmarks/results/stan_ode.md`` from it (the latest run of each name).

    .venv/bin/python benchmarks/stan_ode.py            # every run, then the report
    .venv/bin/python benchmarks/stan_ode.py --run cost # one of them
    .venv/bin/python benchmarks/stan_ode.py --report

Runs (:data:`RUNS`): ``cost`` (a stiff solve's value and gradient per call
with ``max_steps`` from 4096 to 8e9 and
:func:`pytensor.compile.jax_ofg.diffrax_settings`' settings); ``gradient``
(the lynx-hare log-density and gradient at the case study's tolerances
against 1e-12); ``fit:<sampler>:<start>[:<chain_method>]`` (the lynx-hare
model of ``examples/stan_ode.py``, 4 chains of 1000 + 1000, seed 1, started
at PyMC's initial point, the priors' locations or
:func:`pytensor.compile.jax_ofg.stan_initvals`' points; ``tight``: the solve
at rtol = atol = 1e-8). What each table shows: ``texts/stan_ode.md``.
"""

import argparse
import json
import os
import time

import _report
import _room  # noqa: F401  (the checkout's modules; the examples')
from _processes import ChildFailed, run_python
from _report import fill


STORE = _report.RESULTS / "stan_ode.jsonl"
REPORT = _report.RESULTS / "stan_ode.md"
COMMAND = ".venv/bin/python benchmarks/stan_ode.py"

FITS = [
    "fit:nutpie:default",
    "fit:nutpie:prior",
    "fit:nutpie:default:tight",
    "fit:pymc:default",
    "fit:pymc:prior",
    "fit:pymc:stan",
    "fit:numpyro:default:sequential",
    "fit:numpyro:prior:sequential",
    "fit:numpyro:prior:vectorized",
    "fit:numpyro:prior:parallel",
    "fit:numpyro:stan:sequential",
]
RUNS = ["cost", "gradient", *FITS]
PARAMETERS = ["theta", "z_init", "sigma"]


def run_cost() -> dict:
    import diffrax
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pytensor.compile.jax_ofg import diffrax_settings

    jax.config.update("jax_enable_x64", True)
    ts = jnp.logspace(-5, 5, 40)

    def robertson(t, y, k):
        a, b, c = y
        return jnp.stack(
            [
                -k[0] * a + k[2] * b * c,
                k[0] * a - k[1] * b**2 - k[2] * b * c,
                k[1] * b**2,
            ]
        )

    def settings_of(label):
        controller = diffrax.PIDController(rtol=1e-6, atol=1e-8)
        base = {"solver": diffrax.Kvaerno5(), "stepsize_controller": controller}
        if label == "helper":
            return diffrax_settings("integrate_ode_bdf", 1e-6, 1e-8, n_outputs=len(ts))
        if label == "8e9":  # the helper's budget, diffrax's default checkpoints
            return {**base, "max_steps": 2 * 10**8 * len(ts)}
        if label == "1e8, 1000 checkpoints":
            adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=1000)
            return {**base, "max_steps": 10**8, "adjoint": adjoint}
        return {**base, "max_steps": int(float(label))}

    labels = ["4096", "1e5", "1e8", "8e9", "1e8, 1000 checkpoints", "helper"]
    calls = {}
    for label in labels:
        settings = {**settings_of(label), "dt0": 1e-6}  # the same first step

        def loss(k, settings=settings):
            solution = diffrax.diffeqsolve(
                diffrax.ODETerm(robertson),
                t0=0.0,
                t1=ts[-1],
                y0=jnp.array([1.0, 0.0, 0.0]),
                args=k,
                saveat=diffrax.SaveAt(ts=ts),
                **settings,
            )
            return jnp.sum(jnp.log(solution.ys[:, [0, 2]] + 1e-12))

        calls[label] = jax.jit(jax.value_and_grad(loss))
    k = jnp.array([0.04, 3e7, 1e4])
    results = {label: calls[label](k) for label in labels}  # compile
    reference = results["1e5"]
    for value, grad in results.values():
        np.testing.assert_allclose(value, reference[0], rtol=1e-12)
        np.testing.assert_allclose(grad, reference[1], rtol=1e-10)
    times = {label: [] for label in labels}
    for _ in range(15):  # interleaved batches of 3 calls
        for label in labels:
            start = time.perf_counter()
            for _ in range(3):
                jax.block_until_ready(calls[label](k))
            times[label].append((time.perf_counter() - start) / 3)
    return {label: 1e3 * float(np.median(t)) for label, t in times.items()}


def run_gradient() -> dict:
    """The sampler's log-density and gradient at the case study's tolerances, against 1e-12.

    Points on the unconstrained scale: the priors' locations, a posterior
    point (the means of the fit), and 6 of the starts nutpie and PyMC draw by
    default (PyMC's initial point jittered by U(-1, 1)).
    """
    import numpy as np

    # the example (examples/stan_ode.py), not this script
    import stan_ode

    def functions(solver):
        model = stan_ode.build_model(solver)
        return model, model.compile_logp(), model.compile_dlogp()

    model, logp, dlogp = functions(stan_ode.CASE_STUDY_SOLVER)
    _, logp_ref, dlogp_ref = functions(("ode_rk45_tol", 1e-12, 1e-12, 10**6))
    _, logp_8, dlogp_8 = functions(("ode_rk45_tol", 1e-8, 1e-8, 10**6))

    def unconstrained(values):
        point = {}
        for rv in model.free_RVs:
            forward = model.rvs_to_transforms[rv].forward
            value = forward(np.asarray(values[rv.name]), *rv.owner.inputs).eval()
            point[model.rvs_to_values[rv].name] = np.asarray(value)
        return point

    posterior = {
        "theta": [0.548, 0.0278, 0.799, 0.0240],
        "z_init": [34.0, 5.93],
        "sigma": [0.246, 0.251],
    }
    points = {
        "priors' locations": unconstrained(stan_ode.PRIOR_LOCATIONS),
        "posterior means": unconstrained(posterior),
    }
    rng = np.random.default_rng(0)
    start = model.initial_point()
    for i in range(6):
        points[f"default start {i + 1}"] = {
            name: value + rng.uniform(-1, 1, np.shape(value))
            for name, value in start.items()
        }
    rows = {}
    for label, point in points.items():
        reference = dlogp_ref(point)

        def error(gradient, reference=reference):
            return float(
                np.linalg.norm(gradient - reference) / np.linalg.norm(reference)
            )

        rows[label] = {
            "logp": float(logp(point)),
            "logp_1e-8": float(logp_8(point)),
            "logp_1e-12": float(logp_ref(point)),
            "grad_error": error(dlogp(point)),
            "grad_error_1e-8": error(dlogp_8(point)),
        }
    return rows


def run_fit(name: str) -> dict:
    _, sampler, start, *rest = name.split(":")
    chain_method = rest[0] if rest and rest[0] != "tight" else None
    if chain_method == "parallel":
        # numpyro maps chains over devices only with a device per chain (else
        # it falls back to sequence): 4 CPU devices, sharing the 2 cores
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ.setdefault("EQX_ON_ERROR", "nan")
    begin = time.perf_counter()
    import arviz as az
    import pymc as pm

    # the example (examples/stan_ode.py), not this script
    import stan_ode

    from pytensor.compile.jax_ofg import stan_initvals

    tight = ("ode_rk45_tol", 1e-8, 1e-8, 10**6)
    model = stan_ode.build_model(
        tight if rest == ["tight"] else stan_ode.CASE_STUDY_SOLVER
    )
    kwargs = {}
    if start == "prior":
        kwargs["initvals"] = stan_ode.PRIOR_LOCATIONS
    elif start == "stan":
        kwargs["initvals"] = stan_initvals(model, chains=4, seed=1)
    if sampler == "pymc":
        kwargs.update(nuts_sampler="pymc", cores=2)
    else:
        kwargs["nuts_sampler"] = sampler
    if chain_method:
        kwargs["nuts_sampler_kwargs"] = {"chain_method": chain_method}
    with model:
        sample_start = time.perf_counter()
        idata = pm.sample(
            draws=1000, tune=1000, chains=4, random_seed=1, progressbar=False, **kwargs
        )
        sample_wall = time.perf_counter() - sample_start
    summary = az.summary(idata, var_names=PARAMETERS, round_to="none")
    return {
        "wall": time.perf_counter() - begin,
        "sample": sample_wall,
        "divergences": int(idata["sample_stats"]["diverging"].sum()),
        "r_hat": float(summary["r_hat"].max()),
        "ess_bulk": float(summary["ess_bulk"].min()),
        "means": {k: float(v) for k, v in summary["mean"].items()},
    }


def child(name: str) -> None:
    if name in ("cost", "gradient"):
        result = run_cost() if name == "cost" else run_gradient()
    else:
        result = run_fit(name)
    record = {"name": name, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    record["result"] = result
    with STORE.open("a") as file:
        file.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def latest() -> dict:
    records = {}
    if STORE.exists():
        for line in STORE.read_text().splitlines():
            record = json.loads(line)
            records[record["name"]] = record
    return records


#: How the ``cost`` run's settings are shown.
SHOWN = {
    "helper": "`diffrax_settings('integrate_ode_bdf', 1e-6, 1e-8, n_outputs=40)`: "
    "8e9, 1000 checkpoints"
}


def fit_row(name: str, r: dict) -> list:
    _, sampler, start, *rest = name.split(":")
    if rest == ["tight"]:
        start, rest = f"{start}, rtol = atol = 1e-8", []
    row = [sampler, start, rest[0] if rest else ""]
    if "error" in r:
        return [*row, f"failed: {r['error']}", "", "", "", ""]
    row += [f"{r['wall']:.0f}", f"{r['sample']:.0f}", r["divergences"]]
    return [*row, f"{r['r_hat']:.3f}", f"{r['ess_bulk']:.0f}"]


def report() -> str:
    records = latest()
    text = _report.texts("stan_ode")
    sections = [text["intro"]]
    if "cost" in records:
        cost = records["cost"]["result"]
        rows = [
            [SHOWN.get(label, label), f"{ms:.1f}", f"{ms / cost['1e5']:.2f}"]
            for label, ms in cost.items()
        ]
        sections.append(fill(text["cost"], rows, when=records["cost"]["when"]))
    if "gradient" in records:
        rows = [
            [label, *(f"{row[k]:.6g}" for k in ("logp", "logp_1e-8", "logp_1e-12"))]
            + [f"{row[k]:.2g}" for k in ("grad_error", "grad_error_1e-8")]
            for label, row in records["gradient"]["result"].items()
        ]
        sections.append(fill(text["gradient"], rows, when=records["gradient"]["when"]))
    rows = [fit_row(name, records[name]["result"]) for name in FITS if name in records]
    if rows:
        sections.append(fill(text["fits"], rows))
    return "\n\n".join(sections) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", choices=RUNS, help="one run, in this process")
    parser.add_argument("--report", action="store_true", help="only write the report")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args(argv)
    if args.run:
        child(args.run)
        return
    if not args.report:
        for name in RUNS:
            try:  # its output shows here; it stores its own record
                run_python(
                    [__file__, "--run", name], timeout=args.timeout, capture=False
                )
            except (ChildFailed, OSError) as error:
                record = {"name": name, "when": time.strftime("%Y-%m-%d %H:%M UTC")}
                record["result"] = {"error": str(error).splitlines()[-1]}
                with STORE.open("a") as file:
                    file.write(json.dumps(record) + "\n")
    REPORT.write_text(report())
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
