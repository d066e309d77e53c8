"""Per-call cost of a cheap wrapped function, side by side in one run.

Compares, for the same function and inputs:

* the direct jitted JAX call (``jax.jit(f)`` / ``jax.jit(jax.value_and_grad(f))``),
  the physical limit;
* ``as_jax_op`` compiled by PyTensor in the default (Numba), C VM and JAX linkers;
* ``pytensor.wrap_jax`` in the same linkers.

Prints a markdown table of medians (microseconds per call) and ratios to the
direct JAX call, and writes it to ``benchmarks/results/call_overhead.md``.

Run: ``.venv/bin/python benchmarks/call_overhead.py`` (after ``bash scripts/test``
or ``bash scripts/example`` created ``.venv``). Inside the checkout, the
checkout's modules are used.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import conftest  # noqa: E402, F401 - puts this checkout's modules first
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.compile.jax_ofg import as_jax_op  # noqa: E402


def cheap(x):
    return jnp.sum(jnp.sin(x) ** 2 + jnp.log1p(x**2))


def median_micros(fn, *args, repeats: int = 15, number: int = 200) -> float:
    """Median over ``repeats`` batches of ``number`` calls, in microseconds."""
    for _ in range(20):
        fn(*args)
    batches = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn(*args)
        batches.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(batches)


def block(fn):
    """A direct JAX call that waits for its result, like PyTensor does."""

    def call(*args):
        return jax.block_until_ready(fn(*args))

    return call


def main() -> None:
    xv = np.linspace(0.1, 1.0, 10)
    x = pt.vector("x", shape=(10,))
    direct = {
        "value": block(jax.jit(cheap)),
        "value+grad": block(jax.jit(jax.value_and_grad(cheap))),
    }
    rows = []
    for task, reference in direct.items():
        base = median_micros(reference, xv)
        rows.append((task, "direct jax.jit", "-", base, 1.0))
        for wrapper_name, wrap in [
            ("as_jax_op", as_jax_op),
            ("wrap_jax", pytensor.wrap_jax),
        ]:
            out = wrap(cheap)(x)
            outputs = [out] if task == "value" else [out, pt.grad(out, x)]
            for linker, mode in [
                ("numba (default)", None),
                ("cvm", "CVM"),
                ("jax", "JAX"),
            ]:
                f = pytensor.function([x], outputs, mode=mode, trust_input=True)
                got = f(xv)
                np.testing.assert_allclose(got[0], cheap(xv))
                micros = median_micros(f, xv)
                rows.append((task, wrapper_name, linker, micros, micros / base))

    lines = [
        f"Cheap function (10-vector -> scalar), median us per call; {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, PyTensor {pytensor.__version__}, JAX {jax.__version__}",
        "",
        "| task | wrapper | linker | us/call | x direct |",
        "|---|---|---|---:|---:|",
    ]
    lines += [
        f"| {task} | {wrapper} | {linker} | {micros:.1f} | {ratio:.2f} |"
        for task, wrapper, linker, micros, ratio in rows
    ]
    table = "\n".join(lines)
    print(table)
    out = ROOT / "benchmarks" / "results" / "call_overhead.md"
    out.write_text(table + "\n")
    print(f"\nwritten to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
