"""benchmarks/vs_stan.py fits one model along every route, and reports what it measured.

The benchmark itself never runs in the test suite (it takes an hour); these
tests check its models against the example's and its tables on stored runs.
"""

import json
import warnings

import numpy as np
import pytest
from _scripts import BENCHMARKS, EXAMPLES, guide_block, imported_scripts


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def modules():
    """The example, the benchmark's models and the benchmark script, as modules."""
    with imported_scripts(
        EXAMPLES / "boarding_school_sir.py",
        BENCHMARKS / "_vs_stan_models.py",
        BENCHMARKS / "vs_stan.py",
    ) as modules:
        yield modules


@pytest.fixture(scope="module")
def example(modules):
    return modules[0]


@pytest.fixture(scope="module")
def benchmark_models(modules):
    return modules[1]


@pytest.fixture(scope="module")
def vs_stan(modules):
    return modules[2]


def test_data_are_the_examples(example, benchmark_models):
    for name in ("N", "T0", "Y0", "DAYS", "CASES", "RTOL", "ATOL", "MAX_STEPS"):
        np.testing.assert_array_equal(
            getattr(benchmark_models, name), getattr(example, name), err_msg=name
        )
    # The benchmark's Stan program solves with the same settings.
    assert "ode_rk45_tol(sir, y0, t0, ts, 1e-6, 1e-6, 1000000," in (
        benchmark_models.STAN_PROGRAM
    )


@pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")
@pytest.mark.filterwarnings(
    "ignore:DifferentialEquation should implement:FutureWarning"
)
def test_every_route_has_the_same_log_density(example, benchmark_models):
    """The benchmark's routes fit one model: equal logp and gradient at a point.

    as_jax_op (both step budgets), pytensor.wrap_jax and pm.ode (LSODA at
    SciPy's tolerances: equal to the ODE's accuracy).
    """
    models = {
        "as_jax_op": example.build_model(),
        "as_jax_op, max_steps=1e6": example.build_model(max_steps=10**6),
        "wrap_jax": benchmark_models.build_model(
            benchmark_models.wrap_jax_solver(4096)
        ),
        "pm.ode": benchmark_models.build_model(benchmark_models.pm_ode_solver()),
    }
    point = {"beta_interval__": 0.5, "gamma_interval__": -0.6, "phi_inv_log__": -2.0}
    values = {}
    for name, model in models.items():
        assert [v.name for v in model.value_vars] == list(point), name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            logp, dlogp = model.compile_logp(), model.compile_dlogp()
        values[name] = (float(logp(point)), dlogp(point))
    ours_logp, ours_dlogp = values["as_jax_op"]
    assert np.isfinite(ours_logp) and np.isfinite(ours_dlogp).all()
    for name, (logp, dlogp) in values.items():
        rtol = 1e-5 if name == "pm.ode" else 1e-9
        np.testing.assert_allclose(logp, ours_logp, rtol=rtol, err_msg=name)
        np.testing.assert_allclose(dlogp, ours_dlogp, rtol=100 * rtol, err_msg=name)


def test_guide_stan_program_is_the_benchmarks(benchmark_models):
    """The benchmark's program is the guide's, with ode_rk45's defaults spelled out."""
    guide = [line.strip() for line in guide_block("stan").splitlines()]
    benchmark = [line.strip() for line in benchmark_models.STAN_PROGRAM.splitlines()]
    start = benchmark.index(
        "array[n_days] vector[3] y = ode_rk45_tol(sir, y0, t0, ts, 1e-6, 1e-6, 1000000,"
    )
    assert benchmark[start + 1] == "beta, gamma, N);"
    benchmark[start : start + 2] = [
        "array[n_days] vector[3] y = ode_rk45(sir, y0, t0, ts, beta, gamma, N);"
    ]
    assert guide == [line for line in benchmark if line]


def fake_run(route, means, *, whole=10.0, mcse=0.001):
    """A stored run as _vs_stan_child.py prints it (and vs_stan.run_child completes it)."""
    return {
        "route": route,
        "library": route,
        "chains": 4,
        "tune": 1000,
        "draws": 1000,
        "divergences": 0,
        "phases": {"whole": whole, "compile": 1.0, "sampling": whole - 2.0},
        "summary": {
            name: {
                "mean": mean,
                "sd": 0.1,
                "mcse_mean": mcse,
                "ess_bulk": 2000.0 + i,
                "ess_tail": 2000.0,
                "r_hat": 1.001,
            }
            for i, (name, mean) in enumerate(means.items())
        },
    }


def test_report_checks_every_run_against_stan(vs_stan):
    stan = dict(zip(vs_stan.PARAMETERS, [1.735, 0.543, 0.14, 3.22, 1.85]))
    off = {**stan, "gamma": 0.6}  # 10% and many MCSE away
    store = {
        "stan|1000000|cold": fake_run("stan", stan, whole=50.0),
        "stan|1000000|second#1": fake_run("stan", stan, whole=25.0),
        "stan|1000000|reference": fake_run("stan", stan, whole=99.0, mcse=1e-4),
        "ours_nutpie|4096|cold": fake_run("ours_nutpie", stan, whole=20.0),
        "ours_nutpie|4096|second#1": fake_run("ours_nutpie", off, whole=12.5),
        "pm_ode|0|cold": {"error": "Traceback ...\nValueError: it broke\n"},
    }
    text = vs_stan.report(store, vs_stan.parse_args([]))
    rows = {
        tuple(cell.strip() for cell in line.split("|")[1:4]): line.rstrip()
        for line in text.splitlines()
        if line.startswith("| ") and line.count("|") > 10
    }
    ours, theirs = "`as_jax_op`, `pm.sample()` (nutpie)", "Stan (`ode_rk45`), PyStan 3"
    # x Stan: over Stan's whole fit in the same kind of process
    assert "| 20.0 | 0.40 |" in rows[(ours, "4096", "cold")]
    assert "| 12.5 | 0.50 |" in rows[(ours, "4096", "second")]
    assert rows[(ours, "4096", "cold")].endswith("| yes |")
    assert rows[(ours, "4096", "second")].endswith("| NO: gamma |")
    assert rows[(theirs, "1e6", "second")].endswith("| yes |")
    failed = next(line for key, line in rows.items() if "pm.ode" in key[0])
    assert "failed: ValueError: it broke" in failed
    assert "Reference: `stan|1000000|reference`: 4 chains" in text
    assert "| Stan, reference: 4 x (1000 + 1000) |" in text


def test_command_line(vs_stan):
    settings = vs_stan.parse_args([])
    assert settings.routes == list(vs_stan.ROUTES)
    assert (settings.chains, settings.tune, settings.draws) == (4, 1000, 1000)
    quick = vs_stan.parse_args(["--quick", "--routes", "ours_nutpie,stan"])
    assert quick.routes == ["ours_nutpie", "stan"]
    assert (quick.chains, quick.tune, quick.draws) == (2, 200, 200)
    assert vs_stan.parse_args(["--max-steps", "4096,1e6"]).budgets == [4096, 10**6]
    with pytest.raises(SystemExit):
        vs_stan.parse_args(["--routes", "cmdstan"])
    # every diffrax route runs both step budgets; Stan runs its own
    for name, route in vs_stan.ROUTES.items():
        expected = {"stan": (10**6,), "pm_ode": (0,)}.get(name, (4096, 10**6))
        assert route.budgets == expected, name


def test_example_cites_the_recorded_stan_posterior(example, vs_stan):
    """The example's (and its test's) Stan posterior is the benchmark's reference run.

    A re-run on another machine draws other chains: equal within 4 MCSE.
    """
    stored = json.loads((BENCHMARKS / "results" / "vs_stan.json").read_text())
    reference = stored[vs_stan.REFERENCE]
    assert (reference["chains"], reference["draws"]) == (4, 10_000)
    for name, cited in example.STAN_POSTERIOR.items():
        recorded = reference["summary"][name]
        assert abs(cited.mean - recorded["mean"]) <= 4 * recorded["mcse_mean"], name
        assert abs(cited.sd / recorded["sd"] - 1) < 0.02, name
        assert cited.mcse == pytest.approx(recorded["mcse_mean"], rel=0.1), name
