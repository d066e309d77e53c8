"""Forward-mode cost against the length of a data input, at a fixed parameter count.

A 3-parameter model ``theta[0] * sqrt(y) + theta[1] * sin(y) + theta[2]`` of
data ``y`` (lengths 10, 1000, 10000), its squared error to observations
computed by PyTensor; value and gradient in ``theta`` per call, default
(Numba) linker: ``as_jax_op`` in forward and in reverse mode, against
``jax.jit(jax.value_and_grad)`` of the same cost. Forward mode differentiates
only ``theta`` (the data is held constant), so its time should follow
reverse mode's as the data grows, not grow with its square. Medians of
interleaved rounds; every call ends with ``jax.block_until_ready``. Every
gradient is first checked against JAX's.

Run (under a minute)::

    .venv/bin/python benchmarks/forward_scaling.py

Writes ``benchmarks/results/forward_scaling.md``. Inside the checkout, the
checkout's modules are used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import _report  # noqa: E402
from _report import fill  # noqa: E402


LENGTHS = (10, 1000, 10000)
THETA = (0.5, 1.5, -0.2)


def model(theta, y):
    import jax.numpy as jnp

    return theta[0] * jnp.sqrt(y) + theta[1] * jnp.sin(y) + theta[2]


def timed_calls(length: int) -> dict:
    """Per route, a call computing value and gradient at data of ``length``."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _timing import Call

    import conftest  # noqa: F401  (the checkout's modules)
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.jax_ofg import as_jax_op

    data = np.linspace(0.0, 3.0, length)  # sqrt's derivative is infinite at 0
    observed = np.asarray(model(np.array(THETA), data)) + 0.1
    theta_value = np.array(THETA) * 1.1

    def cost(theta, y):
        return jnp.sum((model(theta, y) - observed) ** 2)

    direct = jax.jit(jax.value_and_grad(cost))
    expected = direct(theta_value, data)[1]
    calls = {
        "direct JAX": Call(lambda: jax.block_until_ready(direct(theta_value, data)))
    }
    for gradient in ("forward", "reverse"):
        theta = pt.vector("theta", shape=(3,))
        y = pt.vector("y", shape=(length,))
        fitted = as_jax_op(model, name="model", gradient=gradient)(theta, y)
        loss = pt.sum((fitted - observed) ** 2)
        f = pytensor.function([theta, y], [loss, pt.grad(loss, theta)])
        np.testing.assert_allclose(f(theta_value, data)[1], expected, rtol=1e-9)
        calls[gradient] = Call(lambda f=f: jax.block_until_ready(f(theta_value, data)))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--report", action="store_true", help="only the table")
    args = parser.parse_args()

    if not args.report:
        import jax
        from _timing import interleaved_medians

        import pytensor

        rows = []
        for length in args.lengths:
            stats = interleaved_medians(
                timed_calls(length), repeats=args.repeats, batch_seconds=0.1
            )
            keys = ("forward", "reverse", "direct JAX")
            rows.append([length, *(stats[k].median for k in keys)])
            print(rows[-1], flush=True)
        command = "python benchmarks/forward_scaling.py " + " ".join(sys.argv[1:])
        versions = {"JAX": jax.__version__, "PyTensor": pytensor.__version__}
        data = {"meta": _report.meta(command.strip(), versions), "rows": rows}
        _report.save("forward_scaling", data)
    data = _report.load("forward_scaling")
    rows = [
        [n, *(f"{s * 1e3:.3f}" for s in (f, r, d)), f"{f / r:.2f}"]
        for n, f, r, d in data["rows"]
    ]
    text = _report.texts("forward_scaling")["report"]
    _report.write(
        "forward_scaling", fill(text, rows, **data["meta"]) + "\n", args.output
    )


if __name__ == "__main__":
    main()
