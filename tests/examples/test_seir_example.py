"""The SEIR example (examples/seir_time_varying.py) works: its default run, and a reduced one."""

import re

import jax
import numpy as np
import pymc as pm
import pytest
from _fresh_process import run_python
from _scripts import EXAMPLES, imported_scripts
from pymc.model.transform.optimization import freeze_dims_and_data
from pymc.sampling.jax import get_jaxified_logp


SCRIPT = EXAMPLES / "seir_time_varying.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seir():
    """The example script, imported as a module (its ``main`` is not run)."""
    with imported_scripts(SCRIPT) as (module,):
        yield module


@pytest.fixture(scope="module")
def observed(seir):
    truth = seir.Truth()
    data = seir.simulate_data(truth, seed=2024)
    return truth, data, pm.observe(seir.build_model(), {"cases": data.cases})


def test_simulated_data(seir, observed):
    truth, data, _ = observed
    assert data.cases.shape == (seir.N_DAYS,)
    assert np.issubdtype(data.cases.dtype, np.integer)
    assert (data.cases >= 0).all() and data.cases.sum() > 1000
    # the true curve is the interpolation of the true knots, through them
    np.testing.assert_allclose(
        data.beta_daily[seir.KNOT_TIMES.astype(int)], truth.beta_knots, rtol=1e-10
    )


@pytest.fixture(scope="module")
def checks(seir, observed):
    truth, _, model = observed
    return seir.check_model(model, truth)


def test_logp_and_gradient_finite_at_initial_point_and_truth(checks):
    assert set(checks) == {"initial point", "truth"}
    for name, (logp, dlogp) in checks.items():
        assert np.isfinite(logp), name
        assert dlogp.shape == (10,), name  # 8 knots, i0, alpha
        assert np.isfinite(dlogp).all() and np.abs(dlogp).max() > 0, name
    assert checks["truth"][0] > checks["initial point"][0]


def test_numpyro_logp_and_gradient_agree_with_numba(seir, observed, checks):
    """numpyro samples jax.grad of the JAX-compiled model: same logp and gradient."""
    truth, _, model = observed
    # exactly what pm.sample(nuts_sampler="numpyro") compiles
    frozen = freeze_dims_and_data(model)
    names = [v.name for v in frozen.value_vars]
    value_and_grad = jax.jit(
        jax.value_and_grad(get_jaxified_logp(frozen, negative_logp=True))
    )
    points = {
        "initial point": model.initial_point(),
        "truth": seir.true_point(model, truth),
    }
    for name, point in points.items():
        value, grads = value_and_grad([point[n] for n in names])
        grad_by_name = dict(zip(names, grads))
        jax_dlogp = np.concatenate(
            [np.ravel(grad_by_name[v.name]) for v in model.value_vars]
        )
        numba_logp, numba_dlogp = checks[name]
        np.testing.assert_allclose(value, numba_logp, rtol=1e-8, err_msg=name)
        np.testing.assert_allclose(jax_dlogp, numba_dlogp, rtol=1e-6, err_msg=name)


def test_quick_run_samples_reports_and_plots(seir, tmp_path, capsys, monkeypatch):
    """``--quick`` with PyMC's NUTS; a second sampler that fails is reported, not fatal."""
    real_sample = seir.sample

    def sample_or_fail(sampler, model, settings):
        if sampler == "nutpie":
            raise ImportError("nutpie is not installed (simulated)")
        return real_sample(sampler, model, settings)

    monkeypatch.setattr(seir, "sample", sample_or_fail)
    figure = tmp_path / "figure" / "seir.png"
    results = seir.main(["--quick", "--samplers", "pymc,nutpie", "--out", str(figure)])

    assert list(results) == ["pymc", "nutpie"]
    result = results["pymc"]
    assert result.ok, result.error
    posterior = result.idata["posterior"]
    assert posterior.sizes["chain"] == 1 and posterior.sizes["draw"] == 30
    assert result.idata["posterior_predictive"]["cases"].shape == (1, 30, seir.N_DAYS)
    assert result.knots_covered.shape == (seir.N_KNOTS,)
    assert result.min_ess_knots > 0
    # even 30 draws after 30 tuning steps find the well-identified middle knots
    middle = posterior["beta_knots"].median(("chain", "draw")).values[2:-2]
    np.testing.assert_allclose(middle, seir.Truth().beta_knots[2:-2], rtol=0.2)

    failed = results["nutpie"]
    assert not failed.ok
    assert "ImportError: nutpie is not installed (simulated)" in failed.error

    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    output = capsys.readouterr()
    assert f"Figure written to {figure.resolve()}" in output.out
    assert "logp at the truth" in output.out
    assert "Time to posterior (1 chain(s) of 30 tuning + 30 draws" in output.out
    assert "true knots inside the 94% interval" in output.out
    assert "nutpie failed" in output.err


def test_unknown_sampler_is_a_usage_error(seir):
    with pytest.raises(SystemExit):
        seir.parse_args(["--samplers", "pymc,stan"])


def test_quick_defaults_and_explicit_flags(seir):
    quick = seir.parse_args(["--quick"])
    assert (quick.samplers, quick.chains, quick.cores) == (["pymc"], 1, 1)
    assert (quick.tune, quick.draws) == (30, 30)
    full = seir.parse_args([])
    assert full.samplers == ["pymc", "nutpie", "numpyro"]
    assert (full.chains, full.cores, full.tune, full.draws) == (4, 2, 500, 500)
    mixed = seir.parse_args(["--quick", "--samplers", "nutpie", "--draws", "10"])
    assert (mixed.samplers, mixed.draws, mixed.tune) == (["nutpie"], 10, 30)


@pytest.mark.main_job
def test_default_run_is_trusted_and_warns_about_nothing(tmp_path):
    """Must hold: ``bash scripts/example`` with no arguments, in a fresh process.

    Every sampler run by default reaches R-hat <= 1.01 and bulk ESS >= 400 on
    every knot, the time-to-posterior table is printed, and nothing warns
    (PyMC's convergence and chain-count advice, numpyro's device warning, a
    progress-bar flood). Only the figure goes elsewhere.
    """
    result = run_python(
        [str(SCRIPT), "--out", str(tmp_path / "figure.png")], tmp_path, timeout=1800
    )
    out = result.stdout
    assert "Time to posterior (4 chain(s) of 500 tuning + 500 draws, cores=2)" in out
    rows = dict(re.findall(r"^(pymc|nutpie|numpyro) +(\d.*)$", out, re.M))
    assert set(rows) == {"pymc", "nutpie", "numpyro"}, out[-3000:]
    for sampler, row in rows.items():
        r_hat, min_ess, trusted = row.split()[3:6]  # after wall, ESS/s, divergent
        assert float(r_hat) <= 1.01 and float(min_ess) >= 400, (sampler, row)
        assert trusted == "yes", (sampler, row)
    assert (
        "Every knot has R-hat <= 1.01 and bulk ESS >= 400 with pymc, nutpie, numpyro."
    ) in out
    everything = out + result.stderr
    for advice in ("Warning", "warning", "recommend", "smaller than", "larger than"):
        assert advice not in everything, (advice, everything[-5000:])
    assert len(everything.splitlines()) < 150  # no progress-bar flood
    assert (tmp_path / "figure.png").read_bytes()[:4] == b"\x89PNG"


def test_a_quick_run_keeps_the_full_runs_figure(seir):
    full, quick = seir.parse_args([]).out, seir.parse_args(["--quick"]).out
    assert full.name == "seir_time_varying.png"
    assert quick.name == "seir_time_varying_quick.png"
    assert full.parent == quick.parent
    assert seir.parse_args(["--quick", "--out", "x.png"]).out.name == "x.png"
