"""Small dense linear algebra: LAPACK's calls against the unrolled XLA lowering.

:mod:`pytensor.compile._jax_ofg.small_linalg` lowers ``lu``, ``triangular_solve``,
``cholesky`` (and ``lu_pivots_to_permutation``) of small square matrices as
unrolled XLA operations instead of jaxlib's LAPACK calls. Four measurements,
each a median of interleaved rounds in one process, every program compiled
ahead of time twice (``max_size_set_to(0)``: LAPACK; the default: unrolled):

* **sizes**: µs per solve of an n x n system inside a ``fori_loop`` of 200
  dependent solves, ``jnp.linalg.solve`` (LU, permutation, two triangular
  solves) and a Cholesky solve, for n = 2 ... 24: where the threshold lies.
* **where the time goes** (the stiff PK model of :mod:`_pk_model`,
  ``diffrax.Kvaerno5()``, value and gradient in pure JAX, reverse and forward
  mode): LAPACK everywhere; only ``lu_solve``'s permutation (a ``while`` loop
  in JAX's CPU lowering) unrolled; only the LAPACK calls replaced; both.
* **through the op**: the PK model's PyMC log-density and gradient compiled by
  PyTensor's default linker (``as_jax_op`` of the solve, reverse mode) against
  ``jax.jit(jax.value_and_grad)`` of the same JAX code with LAPACK.
* **two threads**: calls per second of that compiled log-density (one copy
  per thread) from two threads at once over one thread.

Run (about 3 minutes, with the machine to itself)::

    .venv/bin/python benchmarks/small_linalg.py

Writes ``benchmarks/results/small_linalg.md``. Inside the checkout, the
checkout's modules are used.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _timing import (  # noqa: E402
    Call,
    interleaved_medians,
    machine_header,
    markdown_table,
    median,
)

import conftest  # noqa: E402, F401  (the checkout's modules)
import pytensor  # noqa: E402
from pytensor.compile._jax_ofg import small_linalg  # noqa: E402
from pytensor.compile.jax_ofg import as_jax_op  # noqa: E402


SIZES = (2, 3, 4, 6, 8, 10, 12, 16, 24)
LOOP = 200


def aot(fn: Callable, *args, max_size: int | None = None):
    """``fn`` compiled ahead of time for ``args`` (LAPACK when ``max_size=0``)."""
    size = small_linalg.max_size() if max_size is None else max_size
    with small_linalg.max_size_set_to(size):
        return jax.jit(fn).lower(*args).compile()


@contextlib.contextmanager
def only(part: str) -> Iterator[None]:
    """Lower only ``part`` ("permutation" or "lapack calls") without LAPACK."""
    saved = small_linalg._small, small_linalg._small_permutation
    if part == "permutation":
        small_linalg._small = lambda aval: False
    elif part == "lapack calls":
        small_linalg._small_permutation = lambda aval, size: False
    try:
        yield
    finally:
        small_linalg._small, small_linalg._small_permutation = saved


def timed(fn, *args) -> Call:
    return Call(lambda: jax.block_until_ready(fn(*args)))


def sizes_table(repeats: int) -> list[list[str]]:
    rng = np.random.default_rng(0)
    rows = []
    for n in SIZES:
        a = rng.standard_normal((n, n))
        spd = a @ a.T + n * np.eye(n)
        b = rng.standard_normal(n)

        def lu_loop(a, b, n=n):
            def step(i, x):
                return jnp.linalg.solve(a + 1e-3 * x[0] * jnp.eye(n), x)

            return jax.lax.fori_loop(0, LOOP, step, b)

        def cholesky_loop(a, b, n=n):
            def step(i, x):
                factor = jnp.linalg.cholesky(a + 1e-3 * x[0] ** 2 * jnp.eye(n))
                return jax.scipy.linalg.cho_solve((factor, True), x)

            return jax.lax.fori_loop(0, LOOP, step, b)

        calls = {}
        for name, fn, matrix in (
            ("lu", lu_loop, a + n * np.eye(n)),
            ("chol", cholesky_loop, spd),
        ):
            lapack = aot(fn, matrix, b, max_size=0)
            unrolled = aot(fn, matrix, b, max_size=max(SIZES))
            np.testing.assert_allclose(
                unrolled(matrix, b), lapack(matrix, b), rtol=1e-8
            )
            calls[f"{name} lapack"] = timed(lapack, matrix, b)
            calls[f"{name} unrolled"] = timed(unrolled, matrix, b)
        stats = interleaved_medians(calls, repeats=repeats, batch_seconds=0.05)
        us = {k: v.median / LOOP * 1e6 for k, v in stats.items()}
        rows.append(
            [
                n,
                f"{us['lu lapack']:.2f}",
                f"{us['lu unrolled']:.2f}",
                f"{us['lu unrolled'] / us['lu lapack']:.2f}",
                f"{us['chol lapack']:.2f}",
                f"{us['chol unrolled']:.2f}",
                f"{us['chol unrolled'] / us['chol lapack']:.2f}",
            ]
        )
        print(rows[-1], flush=True)
    return rows


def pk_value_and_grad(mode: str):
    import _pk_model as pk

    if mode == "reverse":
        return jax.value_and_grad(lambda lt, ls: pk.logp(lt, ls), argnums=(0, 1))

    def logp(lt, ls):
        return pk.logp(lt, ls, pk.solve_forward_mode)

    def value_and_jacfwd(lt, ls):
        return logp(lt, ls), jax.jacfwd(logp, argnums=(0, 1))(lt, ls)

    return value_and_jacfwd


def where_the_time_goes(repeats: int) -> list[list[str]]:
    import _pk_model as pk

    x = (jnp.asarray(pk.PRIOR_MEANS), jnp.asarray(np.log(0.5)))
    rows = []
    for mode in ("reverse", "forward"):
        fn = pk_value_and_grad(mode)
        programs = {"LAPACK everywhere": aot(fn, *x, max_size=0)}
        for part in ("permutation", "lapack calls"):
            with only(part):
                programs[f"only {part} unrolled"] = aot(fn, *x)
        programs["both (the default)"] = aot(fn, *x)
        expected = programs["LAPACK everywhere"](*x)
        for program in programs.values():
            np.testing.assert_allclose(program(*x)[0], expected[0], rtol=1e-9)
        stats = interleaved_medians(
            {k: timed(p, *x) for k, p in programs.items()},
            repeats=repeats,
            batch_seconds=0.2,
        )
        base = stats["LAPACK everywhere"].median
        for name, s in stats.items():
            rows.append([mode, name, f"{s.median * 1e3:.2f}", f"{s.median / base:.2f}"])
            print(rows[-1], flush=True)
    return rows


def compiled_model_logp():
    """The PK model's log-density and gradient, PyTensor's default linker.

    Returns the compiled function (of the value variables ``log_theta`` and
    ``sigma_log__``) and a point to call it at.
    """
    import _pk_model as pk

    import pytensor.tensor as pt

    model = pk.build_model(as_jax_op(pk.solve, name="pk_solve"))
    logp = model.logp()
    f = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
    return f, (np.asarray(pk.PRIOR_MEANS), np.asarray(np.log(0.5)))


def through_the_op(repeats: int) -> list[list[str]]:
    ours, start = compiled_model_logp()
    x = tuple(jnp.asarray(v) for v in start)
    fn = pk_value_and_grad("reverse")
    lapack = aot(fn, *x, max_size=0)
    unrolled = aot(fn, *x)
    # the same density up to a constant: the gradients agree
    _, (expected_theta, expected_sigma) = lapack(*x)
    _, grad_theta, grad_sigma = ours(*start)
    np.testing.assert_allclose(grad_theta, expected_theta, rtol=1e-6)
    np.testing.assert_allclose(grad_sigma, expected_sigma, rtol=1e-6)
    stats = interleaved_medians(
        {
            "ours (default linker)": Call(lambda: ours(*start)),
            "pure JAX, LAPACK": timed(lapack, *x),
            "pure JAX, unrolled": timed(unrolled, *x),
        },
        repeats=repeats,
        batch_seconds=0.3,
    )
    base = stats["pure JAX, LAPACK"].median
    return [
        [name, f"{s.median * 1e3:.2f}", f"{s.median / base:.2f}"]
        for name, s in stats.items()
    ]


def two_threads(make: Callable, rounds: int, seconds: float = 1.0) -> list[list[str]]:
    copies = [make() for _ in range(2)]
    ratios, singles, pairs = [], [], []

    def run(fn, start, stop_at, counts, i):
        n = 0
        while time.perf_counter() < stop_at:
            fn(*start)
            n += 1
        counts[i] = n

    for _ in range(rounds):
        counts = [0, 0]
        fn, start = copies[0]
        run(fn, start, time.perf_counter() + seconds, counts, 0)
        one = counts[0] / seconds
        counts = [0, 0]
        stop_at = time.perf_counter() + seconds
        threads = [
            threading.Thread(target=run, args=(fn_, start_, stop_at, counts, i))
            for i, (fn_, start_) in enumerate(copies)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        two = sum(counts) / seconds
        singles.append(one)
        pairs.append(two)
        ratios.append(two / one)
    return [
        [
            "PK log-density + gradient, default linker",
            f"{median(singles):.0f}",
            f"{median(pairs):.0f}",
            f"{median(ratios):.2f}",
        ]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--skip", default="", help="comma-separated: sizes,time,op,threads"
    )
    parser.add_argument(
        "--output", type=Path, default=HERE / "results" / "small_linalg.md"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    command = "python benchmarks/small_linalg.py " + " ".join(sys.argv[1:])
    parts = [
        "# Small dense linear algebra: LAPACK's calls against the unrolled lowering\n",
        f"Command: `{command.strip()}`\n",
        machine_header({"JAX": jax.__version__, "PyTensor": pytensor.__version__})
        + "\n",
        f"Default threshold: matrices of at most {small_linalg.DEFAULT_MAX_SIZE} rows.\n",
    ]
    if "sizes" not in skip:
        parts += [
            "## Per solve, by size\n",
            f"µs per solve inside a `fori_loop` of {LOOP} dependent solves "
            "(medians of interleaved rounds). `jnp.linalg.solve` is LU "
            "(`getrf`), the permutation and two triangular solves (`trsm`); "
            "Cholesky is `potrf` and two `trsm`.\n",
            markdown_table(
                [
                    "n",
                    "LU LAPACK",
                    "LU unrolled",
                    "ratio",
                    "Cholesky LAPACK",
                    "Cholesky unrolled",
                    "ratio",
                ],
                sizes_table(args.repeats),
            )
            + "\n",
        ]
    if "time" not in skip:
        parts += [
            "## Where the time goes: the stiff PK model in pure JAX\n",
            "Value and gradient per call, ms (`_pk_model.logp`, `diffrax.Kvaerno5()`, "
            "its Newton steps solved by lineax's LU).\n",
            markdown_table(
                ["mode", "lowering", "ms per call", "x LAPACK everywhere"],
                where_the_time_goes(args.repeats),
                numeric_from=2,
            )
            + "\n",
        ]
    if "op" not in skip:
        rows = through_the_op(args.repeats)
        parts += [
            "## Through the op\n",
            "The PK model's PyMC log-density and gradient (`logp_dlogp_function`, "
            "PyTensor's default linker, `as_jax_op(pk.solve)` in reverse mode) "
            "against `jax.jit(jax.value_and_grad)` of `_pk_model.logp`.\n",
            markdown_table(["route", "ms per call", "x pure JAX with LAPACK"], rows)
            + "\n",
        ]
    if "threads" not in skip:
        parts += [
            "## Two threads\n",
            "Calls per second from one thread, then from two at once (each "
            f"thread its own compiled copy; {args.repeats} rounds of 1 s, medians).\n",
            markdown_table(
                [
                    "function",
                    "calls/s, 1 thread",
                    "calls/s, 2 threads",
                    "throughput 2 over 1",
                ],
                two_threads(compiled_model_logp, args.repeats),
            )
            + "\n",
        ]
    text = "\n".join(parts)
    print(text)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
