"""Memory while building and compiling many wrapped calls with changing statics.

Every iteration calls one wrapped function with a new static argument (a new
op), compiles a ``pytensor.function`` holding it and its gradient, runs it
once and drops it. The op cache of the wrapper is bounded, and nothing else
may keep ops, jitted functions or compiled executables alive: the resident
memory must level off, not grow with the number of iterations.

Prints a markdown table (resident memory every ``--every`` iterations) and
writes it to ``benchmarks/results/memory.md``.

Run: ``.venv/bin/python benchmarks/memory.py [--iterations 1000] [--mode CVM]``.
"""

from __future__ import annotations

import argparse
import gc
import platform
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


def resident_mib() -> float:
    """Current resident set size of this process, in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@as_jax_op
def damped(x, *, rate):
    return jnp.sum(jnp.exp(-rate * x) * jnp.sin(x))


def one_iteration(x: pt.TensorVariable, rate: float, mode: str | None) -> float:
    cost = damped(x, rate=rate)
    f = pytensor.function([x], [cost, pt.grad(cost, x)], mode=mode)
    value, _ = f(np.linspace(0.0, 1.0, 8))
    return float(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--mode", default="CVM", help="PyTensor mode (default CVM)")
    args = parser.parse_args(argv)

    x = pt.vector("x", shape=(8,))
    rows = []
    start = time.perf_counter()
    for i in range(args.iterations + 1):
        if i % args.every == 0:
            gc.collect()
            rows.append((i, resident_mib(), len(damped._ops)))
            print(f"{i:6d} iterations: {rows[-1][1]:8.1f} MiB", flush=True)
        if i < args.iterations:
            one_iteration(x, rate=1.0 + i * 1e-3, mode=args.mode)
    seconds = time.perf_counter() - start

    header = (
        f"Build + compile + run {args.iterations} wrapped calls, each with a new "
        f"static argument (mode {args.mode}); {platform.machine()}, Python "
        f"{platform.python_version()}, PyTensor {pytensor.__version__}, "
        f"JAX {jax.__version__}; {seconds:.0f} s"
    )
    lines = [
        header,
        "",
        "| iterations | resident MiB | growth since first 100 (MiB) | ops cached |",
        "|---:|---:|---:|---:|",
    ]
    baseline = rows[1][1] if len(rows) > 1 else rows[0][1]
    for i, mib, cached in rows:
        lines.append(f"| {i} | {mib:.1f} | {mib - baseline:+.1f} | {cached} |")
    table = "\n".join(lines)
    print()
    print(table)
    out = ROOT / "benchmarks" / "results" / "memory.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(table + "\n")
    print(f"\nwritten to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
