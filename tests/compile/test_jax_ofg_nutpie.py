"""nutpie's Numba backend calls models holding JAX ops through host callbacks.

The callbacks are checked by calling them as nutpie does (a C function pointer,
from several threads at once) against the model's log-density in JAX
(``get_jaxified_logp``) and ``jax.grad``; sampling is checked against the
analytic posterior of :mod:`_conjugate_model`.
"""

import math
import threading
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numba
import numpy as np
import nutpie
import nutpie.compile_pymc
import pymc as pm
import pytest
from _conjugate_model import PRIOR_SD, SIGMA, TIMES, build_model, check_posterior
from _conjugate_model import trajectory as conjugate_trajectory
from pymc.sampling.jax import get_jaxified_logp

import pytensor
import pytensor.tensor as pt
from pytensor.compile._jax_ofg.host.op import one_jax_op
from pytensor.compile._jax_ofg.samplers import nutpie as nutpie_callbacks
from pytensor.compile.jax_ofg import as_jax_op
from pytensor.compile.mode import get_mode


def call_logp(compiled, x: np.ndarray, dim: int | None = None):
    """(status, logp, gradient) of nutpie's log-density function at ``x``."""
    function = nutpie_callbacks.LOGP_SIGNATURE(compiled.compiled_logp_func.address)
    x = np.ascontiguousarray(x, dtype=np.float64)
    gradient, logp = np.full(len(x), np.nan), np.full(1, np.nan)
    status = function(
        len(x) if dim is None else dim,
        x.ctypes.data,
        gradient.ctypes.data,
        logp.ctypes.data,
        compiled.user_data.ctypes.data,
    )
    return status, logp[0], gradient


def jax_value_and_grad(model):
    """The model's log-density in JAX of the flat point (one vector value variable)."""
    logp = get_jaxified_logp(model)
    return jax.jit(jax.value_and_grad(lambda x: logp([x])))


@pytest.fixture(scope="module")
def model():
    return build_model(pool_work=False)


@pytest.fixture(scope="module")
def compiled(model):
    return nutpie.compile_pymc_model(model)


def test_a_model_holding_jax_ops_gets_host_callbacks(compiled):
    assert type(compiled).__name__ == "HostCallbackPyMCModel"
    assert isinstance(compiled, nutpie.compile_pymc.CompiledPyMCModel)
    assert isinstance(compiled.compiled_logp_func, nutpie_callbacks.HostCallback)
    assert isinstance(compiled.compiled_expand_func, nutpie_callbacks.HostCallback)


def test_the_log_density_callback_is_the_model_and_its_gradient(model, compiled):
    reference = jax_value_and_grad(model)
    for x in ([0.3, -0.2], [1.5, 2.0], [-3.0, 0.1]):
        status, logp, gradient = call_logp(compiled, np.array(x))
        value, grad = reference(jnp.array(x))
        assert status == 0
        np.testing.assert_allclose(logp, value, rtol=1e-10)
        np.testing.assert_allclose(gradient, grad, rtol=1e-7, atol=1e-10)


def test_a_point_of_the_wrong_size_is_refused(compiled):
    status, logp, gradient = call_logp(compiled, np.zeros(2), dim=3)
    assert status == -1
    assert np.isnan(logp) and np.isnan(gradient).all()


def test_threads_calling_at_once_each_get_their_own_point(model, compiled):
    """nutpie's chains call one function from their threads: no shared storage."""
    points = [np.array([0.1 * i, -0.2 * i]) for i in range(1, 5)]
    expected = [call_logp(compiled, x) for x in points]
    failures: list[str] = []

    def chain(x, want):
        for _ in range(150):
            status, logp, gradient = call_logp(compiled, x)
            if status != want[0] or logp != want[1] or not (gradient == want[2]).all():
                failures.append(f"{x}: {status} {logp} {gradient}")
                return

    threads = [
        threading.Thread(target=chain, args=(x, want))
        for x, want in zip(points, expected)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:3]


def test_a_point_buffer_and_its_jax_array_share_memory():
    buffer, array = nutpie_callbacks.aliased_buffer((3,), "float64")
    double = jax.jit(lambda x: 2 * jnp.sin(x))
    double(np.zeros(3))  # a first call, as with nutpie's point as NumPy's
    events: list[str] = []

    def listen(event, duration, **_):
        events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        for point in ([1.0, 2.0, 3.0], [-4.0, 0.5, 8.0]):
            buffer[...] = point
            np.testing.assert_array_equal(double(array), 2 * np.sin(point))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    # Uncommitted, as JAX's arrays of NumPy's are: nothing is compiled again.
    assert not [e for e in events if "compile" in e], events


def test_where_jax_copies_host_memory_the_point_is_passed_as_is(model, monkeypatch):
    monkeypatch.setattr(jax, "device_put", lambda x, **_: jnp.array(x))  # a copy
    assert nutpie_callbacks.aliased_buffer((2,), "float64") == (None, None)
    compiled = nutpie.compile_pymc_model(model)
    reference = jax_value_and_grad(model)
    for x in ([0.3, -0.7], [1.5, 0.25]):
        status, logp, gradient = call_logp(compiled, np.array(x))
        value, grad = reference(jnp.array(x))
        assert status == 0
        np.testing.assert_allclose(logp, value, rtol=1e-12)
        np.testing.assert_allclose(gradient, grad, rtol=1e-10)


def test_expanding_a_point_gives_the_draw(compiled):
    function = nutpie_callbacks.EXPAND_SIGNATURE(compiled.compiled_expand_func.address)
    x = np.array([0.25, -1.5])
    out = np.full(compiled.n_expanded, np.nan)
    status = function(2, compiled.n_expanded, x.ctypes.data, out.ctypes.data, 0)
    assert status == 0
    np.testing.assert_array_equal(out, x)  # theta is its own value variable
    assert function(2, compiled.n_expanded + 1, x.ctypes.data, out.ctypes.data, 0) == -1


@as_jax_op
def moments(x):
    return jnp.sum(x**2), jnp.cos(x)


WEIGHTS = np.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize("one_island", [True, False], ids=["one island", "numba"])
def test_a_flat_function_holds_each_output_in_its_slot(one_island):
    """Outputs picked out of order, an island's constant, or PyTensor's function."""
    x = pt.vector("x", shape=(3,))
    total, cosine = moments(x * WEIGHTS)
    mode = get_mode("NUMBA")
    function = pytensor.function(
        [x],
        [cosine, total + 1.0],
        mode=mode if one_island else mode.excluding("jax_islands"),
    )
    assert (one_jax_op(function.maker.fgraph) is not None) == one_island
    call, slots = nutpie_callbacks.flat_function(function)
    point = np.array([0.1, -0.2, 0.3])
    buffers = call(point)
    got = [buffers[b][start:stop] for b, start, stop in slots]
    scaled = jnp.asarray(point * WEIGHTS)
    np.testing.assert_allclose(got[0], jnp.cos(scaled), rtol=1e-14)
    np.testing.assert_allclose(got[1], [jnp.sum(scaled**2) + 1.0], rtol=1e-14)


@as_jax_op
def checked_scale(theta):
    """``2 theta``; equinox's check raises when ``theta[0] > 5``."""
    return 2 * eqx.error_if(theta, theta[0] > 5, "theta[0] is too large")


def test_a_raising_log_density_is_a_rejected_proposal():
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        pm.Normal("y", checked_scale(theta), 1.0, observed=np.array([0.5, 1.0]))
    with pytest.warns(UserWarning, match="theta.0. is too large"):
        compiled = nutpie.compile_pymc_model(model)
        assert call_logp(compiled, np.array([6.0, 0.0]))[0] == 1
    status, logp, _ = call_logp(compiled, np.array([1.0, 0.0]))
    reference, _ = jax_value_and_grad(model)(jnp.array([1.0, 0.0]))
    assert status == 0
    np.testing.assert_allclose(logp, reference, rtol=1e-12)


@as_jax_op
def steep_at_zero(theta):
    """A log-density term: ``-inf`` where ``theta[1] > 5``, finite elsewhere; its
    gradient infinite where ``theta[0] == 0``, about ``1e308`` in both
    coordinates elsewhere (their sum overflows).
    """
    return (
        jnp.cbrt(theta[0])
        + jnp.where(theta[1] > 5, -jnp.inf, 0.0)
        + 1e308 * (theta[0] + theta[1])
    )


@pytest.mark.parametrize(
    ("point", "status"),
    [
        pytest.param([0.0, 1.0], 3, id="infinite gradient, finite value"),
        pytest.param([1.0, 6.0], 4, id="finite gradient, infinite value"),
        pytest.param([1.0, -1.0], 0, id="finite, but the gradient sums to inf"),
    ],
)
def test_a_nonfinite_log_density_or_gradient_gets_nutpies_status(point, status):
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        pm.Potential("steep", steep_at_zero(theta))
    compiled = nutpie.compile_pymc_model(model)
    point = np.array(point)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nutpie's threads would print them
        got, logp, gradient = call_logp(compiled, point)
    reference, reference_gradient = jax_value_and_grad(model)(jnp.array(point))
    assert got == status
    np.testing.assert_array_equal(logp, reference)
    np.testing.assert_array_equal(gradient, reference_gradient)
    if status == 0:  # a test by the gradient's sum would call it infinite
        assert math.isinf(sum(gradient.tolist())) and np.isfinite(gradient).all()


def test_a_model_without_jax_ops_keeps_nutpies_cfunc():
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        pm.Normal("y", 2 * theta, 1.0, observed=np.array([0.5, 1.0]))
    compiled = nutpie.compile_pymc_model(model)
    assert type(compiled) is nutpie.compile_pymc.CompiledPyMCModel
    assert isinstance(compiled.compiled_logp_func, numba.core.ccallback.CFunc)


def data_model(observed: np.ndarray):
    with pm.Model() as model:
        data = pm.Data("data", observed)
        theta = pm.Normal("theta", 0.0, PRIOR_SD, shape=2)
        mean = conjugate_trajectory(theta, times=TIMES, pool_work=False)
        pm.Normal("y", mean, SIGMA, observed=data)
    return model


def test_with_data_gives_new_data_to_the_host_callbacks():
    rng = np.random.default_rng(3)
    first, second = rng.normal(size=(2, len(TIMES), 2))
    compiled = nutpie.compile_pymc_model(data_model(first))
    updated = compiled.with_data(data=second)
    assert type(updated) is type(compiled)
    x = np.array([0.4, -0.7])
    for model, data in ((compiled, first), (updated, second)):
        status, logp, gradient = call_logp(model, x)
        value, grad = jax_value_and_grad(data_model(data))(jnp.asarray(x))
        assert status == 0
        np.testing.assert_allclose(logp, value, rtol=1e-10)
        np.testing.assert_allclose(gradient, grad, rtol=1e-7, atol=1e-10)


@pytest.mark.slow
def test_pm_sample_compiles_no_cfunc(model, monkeypatch):
    """``pm.sample()`` through nutpie, with ``numba.cfunc`` made to fail."""

    def no_cfunc(*args, **kwargs):
        raise AssertionError("numba.cfunc was called")

    monkeypatch.setattr(numba, "cfunc", no_cfunc)
    idata = pm.sample(
        draws=300, tune=300, chains=2, random_seed=1, progressbar=False, model=model
    )
    assert idata["posterior"].attrs["inference_library"] == "nutpie"
    check_posterior(idata["posterior"]["theta"].values)


def test_nutpie_cfunc_options_keep_nutpies_path(model):
    """``numba.cfunc`` options (nutpie passes them on) ask for nutpie's own function."""
    compiled = nutpie.compile_pymc_model(model, backend="numba", cache=False)
    assert type(compiled) is nutpie.compile_pymc.CompiledPyMCModel
    x = np.array([0.3, -0.2])
    status, logp, gradient = call_logp(compiled, x)
    value, grad = jax_value_and_grad(model)(jnp.asarray(x))
    assert status == 0
    np.testing.assert_allclose(logp, value, rtol=1e-10)
    np.testing.assert_allclose(gradient, grad, rtol=1e-7, atol=1e-10)


def _mass_matrix_from_gradients(idata) -> bool:
    """Whether nutpie's recorded settings adapted the mass matrix with gradients."""
    import json

    settings = json.loads(idata.sample_stats.attrs["inference_library_settings"])
    return settings["settings"]["adapt_options"]["mass_matrix_options"][
        "use_grad_based_estimate"
    ]


@pytest.mark.slow
@pytest.mark.one_python
@pytest.mark.parametrize("holds_jax_ops", [True, False])
def test_models_holding_jax_ops_adapt_from_the_draws_unless_told(holds_jax_ops):
    shift = as_jax_op(lambda x: jnp.sin(x) + x, name="shift")
    with pm.Model():
        x = pm.Normal("x", shape=2)
        mu = shift(x) if holds_jax_ops else pt.sin(x) + x
        pm.Normal("y", mu, 1.0, observed=np.zeros(2))
        kwargs = {"draws": 20, "tune": 20, "chains": 1, "progressbar": False}
        default = pm.sample(random_seed=1, **kwargs)
        chosen = pm.sample(random_seed=1, nuts={"adaptation": "diag"}, **kwargs)
    # draw_diag: Stan's rule, the draws' variances alone (DEFAULT_ADAPTATION)
    assert _mass_matrix_from_gradients(default) is not holds_jax_ops
    # the caller's choice wins
    assert _mass_matrix_from_gradients(chosen) is True
