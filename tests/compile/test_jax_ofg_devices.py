"""Where programs run: host calls on the CPU unless told, ``mode="JAX"`` on
JAX's default device.

CI has no accelerator: a fresh process gets two CPU devices
(``--xla_force_host_platform_device_count=2``) and makes the second JAX's
default device, standing in for a GPU.
"""

import json

import numpy as np
import pytest
from _fresh_process import SERVE_HITS, run_script

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np
import pytensor, pytensor.tensor as pt
from pytensor.compile.jax_ofg import JaxHostOp, as_jax_op

jax.config.update("jax_default_device", jax.devices("cpu")[1])

@as_jax_op
def f(x):
    return jnp.sin(x) * 2

x = pt.vector("x", shape=(3,))
value = np.arange(3.0)
expected = [np.sin(value) * 2, np.cos(value) * 2]
report = {}


def spy(program, seen):
    serving = program.through_trace_cache

    def serve(*inputs):
        outputs = serving(*inputs)
        seen.update(str(d) for o in outputs for d in o.devices())
        return outputs

    program.through_trace_cache = serve


for flag in ("cpu", "cpu:1", "default"):
    with pytensor.config.change_flags(jax_ofg__host_device=flag):
        for mode in ("FAST_RUN", "CVM", "FAST_COMPILE", "JAX"):
            y = f(x)
            fn = pytensor.function([x], [y, pt.grad(pt.sum(y), x)], mode=mode)
            seen = set()
            if mode != "JAX":
                ops = [n.op for n in fn.maker.fgraph.toposort()]
                for op in ops:
                    if isinstance(op, JaxHostOp):
                        spy(op.program, seen)
            outputs = fn(value)
            for got, want in zip(outputs, expected):
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
            if mode == "JAX":
                seen = {str(d) for o in outputs for d in o.devices()}
            report[f"{flag} {mode}"] = sorted(seen)

# A diffrax solve with equinox's checks (throw=True: host callbacks inside
# cond), value and gradient, wherever the flag puts it.
import diffrax


@as_jax_op
def decay(k):
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, k: -k * y), diffrax.Tsit5(), 0.0, 1.0, 0.1,
        jnp.ones(2), args=k, saveat=diffrax.SaveAt(ts=jnp.linspace(0.5, 1.0, 3)),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
    )
    return solution.ys[-1]


k = pt.vector("k", shape=(2,))
rates = np.array([1.0, 2.0])
for flag in ("cpu", "cpu:1", "default"):
    with pytensor.config.change_flags(jax_ofg__host_device=flag):
        y = decay(k)
        fn = pytensor.function([k], [y, pt.grad(pt.sum(y), k)])
        value, gradient = fn(rates)
        np.testing.assert_allclose(value, np.exp(-rates), rtol=1e-6)
        np.testing.assert_allclose(gradient, -np.exp(-rates), rtol=1e-6)
        report[f"{flag} checks"] = "solved"
print(json.dumps(report))
"""


@pytest.mark.slow
@pytest.mark.one_python
@pytest.mark.parametrize("process", ["first", "second"])
def test_host_calls_run_on_the_cpu_unless_the_flag_names_a_device(
    process, tmp_path_factory
):
    # The second process is served by the first one's trace cache (a loaded
    # export whose equinox checks raise through a callback in a cond).
    folder = tmp_path_factory.getbasetemp() / "devices"
    folder.mkdir(exist_ok=True)
    done = run_script(
        SCRIPT,
        folder,
        env={
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
            "PYTENSOR_FLAGS": f"base_compiledir={folder / 'compiledir'},{SERVE_HITS}",
        },
        timeout=180,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    host_modes = ("FAST_RUN", "CVM", "FAST_COMPILE")
    for mode in host_modes:
        # By default on the CPU's first device, not JAX's default (cpu:1) ...
        assert report[f"cpu {mode}"] == ["cpu:0"], report
        # ... on the device the flag names, or JAX's default when it says so.
        assert report[f"cpu:1 {mode}"] == ["cpu:1"], report
        assert report[f"default {mode}"] == ["cpu:1"], report
    for flag in ("cpu", "cpu:1", "default"):  # mode="JAX" follows JAX's default
        assert report[f"{flag} JAX"] == ["cpu:1"], report
        assert report[f"{flag} checks"] == "solved", report


@pytest.mark.parametrize(
    "flag, says",
    [
        ("tpu", "JAX has no 'tpu' device here"),
        ("cpu:1000", "numbered 0 to"),  # PyMC may make 100 CPU devices
        ("cpu:one", "numbered 0 to"),
    ],
)
def test_a_device_jax_does_not_have_is_refused_when_compiling(flag, says):
    x = pt.vector("x", shape=(3,))
    y = as_jax_op(lambda v: v * 3.0)(x)
    with (
        pytensor.config.change_flags(jax_ofg__host_device=flag),
        pytest.raises(ValueError, match="jax_ofg__host_device") as error,
    ):
        pytensor.function([x], y, mode="CVM")(np.ones(3))
    assert says in str(error.value)
