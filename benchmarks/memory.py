"""Memory while building and compiling many models: ours against pure PyTensor.

Every iteration builds a new model (a new static argument: a new op), compiles
a ``pytensor.function`` of its value and gradient, runs it once and drops it.
The same models written in PyTensor alone (the rate a constant of the graph)
run in a second process, side by side: this package's caches and registries
(ops, programs, traces, the Numba registry) must grow memory no faster than
PyTensor's own caches do.

Prints a markdown table (resident memory every ``--every`` iterations, per
variant) and writes it to ``benchmarks/results/memory.md`` (the runs: ``.json``).

Run: ``.venv/bin/python benchmarks/memory.py [--iterations 1000] [--mode NUMBA]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path

import _report
import _room  # noqa: F401  (the checkout's modules)
import jax
import jax.numpy as jnp
import numpy as np
from _processes import run_python
from _report import fill

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


def resident_mib() -> float:
    """Current resident set size of this process, in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@as_jax_op
def damped(x, *, rate):
    return jnp.sum(jnp.exp(-rate * x) * jnp.sin(x))


def one_iteration(
    x: pt.TensorVariable, rate: float, mode: str | None, variant: str
) -> float:
    if variant == "ours":
        cost = damped(x, rate=rate)
    else:
        cost = pt.sum(pt.exp(-rate * x) * pt.sin(x))
    f = pytensor.function([x], [cost, pt.grad(cost, x)], mode=mode)
    value, _ = f(np.linspace(0.0, 1.0, 8))
    return float(value)


def measure(iterations: int, every: int, mode: str, variant: str) -> list[tuple]:
    """Resident MiB every ``every`` iterations of one variant, in this process."""
    x = pt.vector("x", shape=(8,))
    rows = []
    for i in range(iterations + 1):
        if i % every == 0:
            gc.collect()
            rows.append((i, resident_mib()))
            print(f"{variant}: {i:6d} iterations: {rows[-1][1]:8.1f} MiB", flush=True)
        if i < iterations:
            one_iteration(x, rate=1.0 + i * 1e-3, mode=mode, variant=variant)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--mode", default="NUMBA", help="PyTensor mode (default NUMBA)")
    parser.add_argument(
        "--variant", choices=("ours", "pytensor"), help=argparse.SUPPRESS
    )
    parser.add_argument("--report", action="store_true", help="only the table")
    args = parser.parse_args(argv)

    if args.variant:  # a child: one variant, its rows as JSON on the last line
        rows = measure(args.iterations, args.every, args.mode, args.variant)
        print(json.dumps({"rows": rows}))
        return

    if not args.report:
        start = time.perf_counter()
        results = {}
        for variant in ("ours", "pytensor"):
            child = run_python(
                [__file__, *(argv or sys.argv[1:]), "--variant", variant]
            )
            results[variant] = child.result["rows"]
        versions = {"PyTensor": pytensor.__version__, "JAX": jax.__version__}
        meta = {"command": " ".join(sys.argv), "seconds": time.perf_counter() - start}
        meta |= {"iterations": args.iterations, "mode": args.mode}
        meta["machine"] = ", ".join(
            [f"{platform.machine()}", f"Python {platform.python_version()}"]
            + [f"{name} {version}" for name, version in versions.items()]
        )
        _report.save("memory", {"meta": meta, "results": results})
    _report.write("memory", report(_report.load("memory")))


def report(data: dict) -> str:
    ours, theirs = data["results"]["ours"], data["results"]["pytensor"]
    base_ours = ours[1][1] if len(ours) > 1 else ours[0][1]
    base_theirs = theirs[1][1] if len(theirs) > 1 else theirs[0][1]
    rows = [
        [
            i,
            f"{mib:.1f}",
            f"{mib - base_ours:+.1f}",
            f"{pt_mib:.1f}",
            f"{pt_mib - base_theirs:+.1f}",
        ]
        for (i, mib), (_, pt_mib) in zip(ours, theirs)
    ]
    text = fill(_report.texts("memory")["report"], rows, **data["meta"]) + "\n"
    return text + _report.transcribed(data["meta"])


if __name__ == "__main__":
    main()
