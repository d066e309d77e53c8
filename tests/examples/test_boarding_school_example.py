"""Stan's SIR case study (examples/boarding_school_sir.py): the model, a smoke run, and
a posterior that agrees with Stan's."""

import math

import arviz as az
import numpy as np
import pytest
from _fresh_process import run_python
from _scripts import EXAMPLES, guide_block, imported_scripts
from scipy.integrate import solve_ivp


SCRIPT = EXAMPLES / "boarding_school_sir.py"
PARAMETERS = ["beta", "gamma", "phi_inv", "R0", "recovery_time"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def example():
    """The example script, imported as a module (its ``main`` is not run)."""
    with imported_scripts(SCRIPT) as (module,):
        yield module


def test_data_are_the_case_studys(example):
    assert example.N == 763 and example.T0 == 0.0
    np.testing.assert_array_equal(example.Y0, [762, 1, 0])
    np.testing.assert_array_equal(example.DAYS, np.arange(1, 15))
    assert example.CASES.tolist() == [
        3, 8, 26, 76, 225, 298, 258, 233, 189, 128, 68, 29, 14, 4,
    ]  # fmt: skip
    assert (example.RTOL, example.ATOL, example.STAN_MAX_NUM_STEPS) == (
        1e-6,
        1e-6,
        10**6,
    )


def test_solve_matches_scipy(example):
    """The wrapped diffrax solve against SciPy's DOP853 at tight tolerances."""
    import pytensor.tensor as pt

    beta, gamma = pt.dscalar("beta"), pt.dscalar("gamma")
    states = example.solve_sir(
        example.Y0, example.T0, example.DAYS, beta, gamma, example.N
    )
    ours = states.eval({beta: 1.7, gamma: 0.55})

    def sir(t, y):
        return np.asarray(example.sir(t, y, 1.7, 0.55, example.N))

    reference = solve_ivp(
        sir,
        (0.0, 14.0),
        example.Y0,
        method="DOP853",
        t_eval=example.DAYS,
        rtol=1e-12,
        atol=1e-10,
    )
    assert ours.shape == (14, 3)
    np.testing.assert_allclose(ours, reference.y.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ours.sum(axis=1), example.N, rtol=1e-9)


def test_failed_solve_is_nan_not_an_error(example):
    """Out of steps (a budget of 2), the solution is NaN: the sampler rejects it."""
    import pytensor.tensor as pt

    beta = pt.dscalar("beta")
    states = example.solve_sir(
        example.Y0, example.T0, example.DAYS, beta, 0.5, example.N, max_steps=2
    )
    assert np.isnan(states.eval({beta: 1.7})).all()


def test_quick_run_as_a_script(tmp_path):
    """``--quick`` (what CI runs): the tables, the comparison with Stan, the figure."""
    figure = tmp_path / "figure.png"
    result = run_python(
        [str(SCRIPT), "--quick", "--out", str(figure)], tmp_path, timeout=600
    )
    out = result.stdout
    assert "2 chains of 100 tuning + 100 draws" in out
    assert "Posterior (nutpie, " in out
    for name in PARAMETERS:
        assert f"\n{name} " in out, name
    assert "Next to Stan's posterior of the same model" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Figure written to {figure.resolve()}" in out
    assert "Traceback" not in result.stderr


def test_quick_defaults_and_explicit_flags(example):
    full = example.parse_args([])
    assert (full.sampler, full.chains, full.tune, full.draws) == (None, 4, 1000, 1000)
    quick = example.parse_args(["--quick", "--draws", "10"])
    assert (quick.chains, quick.tune, quick.draws) == (2, 100, 10)
    with pytest.raises(SystemExit):
        example.parse_args(["--sampler", "stan"])


def test_agreement_rule(example):
    from _boarding_school_report import Reference, agrees

    reference = Reference(mean=1.0, sd=0.1, mcse=0.003)
    assert agrees(1.029, 0.001, reference)  # within 3%
    assert agrees(0.99, 0.004, reference)  # within 2 MCSE (0.01)
    assert not agrees(1.031, 0.001, reference)  # 3.1%, 2 MCSE = 0.0063
    # 2 MCSE of the difference of two estimates: 2 * hypot(0.03, 0.04) = 0.1
    assert agrees(1.099, 0.03, Reference(mean=1.0, sd=1.0, mcse=0.04))
    assert not agrees(1.101, 0.03, Reference(mean=1.0, sd=1.0, mcse=0.04))


@pytest.mark.case_study
def test_default_run_agrees_with_stan(example, tmp_path):
    """The default run (4 chains of 1000 + 1000, ``pm.sample()``) against Stan's posterior.

    Stan's posterior is the PyStan 3 fit of the same model recorded in
    ``benchmarks/results/vs_stan.md`` (``example.STAN_POSTERIOR``). Each mean
    must be within 2 Monte Carlo standard errors of the difference, or 3%, of
    Stan's; the chains must have mixed (R-hat <= 1.01, bulk ESS >= 400).
    """
    idata = example.main(["--out", str(tmp_path / "figure.png")])
    posterior = idata["posterior"]
    assert posterior.attrs["inference_library"] == "nutpie"
    assert (posterior.sizes["chain"], posterior.sizes["draw"]) == (4, 1000)
    summary = az.summary(idata, var_names=PARAMETERS, round_to="none")
    assert (summary["r_hat"] <= 1.01).all(), summary
    assert (summary["ess_bulk"] >= 400).all(), summary
    assert int(idata["sample_stats"]["diverging"].sum()) <= 4  # of 4000 draws
    for name in PARAMETERS:
        stan = example.STAN_POSTERIOR[name]
        mean, mcse = summary.loc[name, "mean"], summary.loc[name, "mcse_mean"]
        difference = abs(mean - stan.mean)
        allowed = max(2 * math.hypot(mcse, stan.mcse), 0.03 * abs(stan.mean))
        assert difference <= allowed, (name, mean, stan)
        # the spread too: posterior sd within 10% of Stan's
        assert abs(summary.loc[name, "sd"] / stan.sd - 1) < 0.1, (name, summary)
    predicted = idata["posterior_predictive"]["cases"]
    assert predicted.shape == (4, 1000, 14)
    # the data sit inside the 99% predictive intervals
    low, high = predicted.quantile([0.005, 0.995], dim=("chain", "draw")).values
    assert ((low <= example.CASES) & (high >= example.CASES)).all()


def test_guide_pymc_model_is_the_examples(example):
    """The guide's PyMC model has the example's log-density (its sampling is guarded)."""
    namespace = {"__name__": "guide"}
    exec(guide_block("python"), namespace)
    guide, ours = namespace["model"], example.build_model()
    point = {"beta_interval__": 0.3, "gamma_interval__": -0.5, "phi_inv_log__": -1.5}
    assert [v.name for v in guide.value_vars] == list(point)
    np.testing.assert_allclose(
        guide.compile_logp()(point), ours.compile_logp()(point), rtol=1e-10
    )
    assert {v.name for v in guide.deterministics} == {"R0", "recovery_time"}
