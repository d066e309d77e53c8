"""How long a fingerprint takes: the SIR benchmark's diffrax solve op, at every compile.

Run: ``python benchmarks/fingerprints.py`` in the project's environment.
Prints the first call in this process (module classification, distribution
metadata, code objects), then the best of 5 runs of 200 calls each, for
``fingerprint(op)``, ``environment_fingerprint()`` and a
solve function holding diffrax objects and an array in its closure.
"""

import time

import diffrax
import jax.numpy as jnp
from _models import SIR_DAYS, SIR_KNOTS, SIR_Y0, sir_rate, sir_solve
from _timing import best_ms

import pytensor.tensor as pt
from pytensor.compile._jax_ofg.cache.environment import environment_fingerprint
from pytensor.compile._jax_ofg.cache.fingerprints import describe, fingerprint


def closure_solve():
    """A solve holding diffrax objects and an array in its closure."""
    solver = diffrax.Tsit5()
    controller = diffrax.PIDController(rtol=1e-6, atol=1e-8)
    saveat = diffrax.SaveAt(ts=jnp.asarray(SIR_DAYS))

    def rhs(t, y, args):
        return -args * y

    term = diffrax.ODETerm(rhs)

    def solve(y0, rate):
        return diffrax.diffeqsolve(
            term,
            solver,
            0.0,
            50.0,
            0.1,
            y0,
            args=rate,
            saveat=saveat,
            stepsize_controller=controller,
        ).ys

    return solve


def main() -> None:
    knots, gamma = pt.vector("knots", shape=(8,)), pt.scalar("gamma")
    op = sir_solve(sir_rate(SIR_KNOTS, knots), SIR_Y0, SIR_DAYS, gamma).owner.op
    start = time.perf_counter()
    fingerprint(op)
    first = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    environment_fingerprint()
    first_environment = (time.perf_counter() - start) * 1e3
    print(f"op: {op}; description: {len(describe(op))} characters")
    print(f"first fingerprint(op) in this process: {first:.2f} ms")
    print(
        f"first environment_fingerprint() (starts the backend): {first_environment:.2f} ms"
    )
    print(f"fingerprint(op):          {best_ms(lambda: fingerprint(op)):.3f} ms")
    print(f"environment_fingerprint(): {best_ms(environment_fingerprint):.3f} ms")
    solve = closure_solve()
    print(
        f"fingerprint(solve with diffrax objects in its closure): "
        f"{best_ms(lambda: fingerprint(solve)):.3f} ms"
    )


if __name__ == "__main__":
    main()
