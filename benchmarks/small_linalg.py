"""Small dense linear algebra: LAPACK's calls against the unrolled XLA lowering.

:mod:`pytensor.compile._jax_ofg.small_linalg` lowers ``lu``,
``triangular_solve``, ``cholesky`` (and ``lu_pivots_to_permutation``) of small
square matrices as unrolled XLA operations instead of jaxlib's LAPACK calls.
Medians of interleaved rounds in one process, every program compiled ahead
of time with LAPACK (``max_size_set_to(0)``) and unrolled (``--skip`` parts):

* ``sizes``: µs per solve in a loop of dependent solves, LU and Cholesky, n = 2 ... 24;
* ``time``: the stiff PK model (:mod:`_pk_model`) in pure JAX, reverse and
  forward mode, with LAPACK, only the permutation unrolled, only the LAPACK
  calls replaced, both;
* ``op``: the PK model's log-density and gradient through ``as_jax_op``;
* ``threads``: calls per second of it from two threads over one.

Run (about 3 minutes, with the machine to itself)::

    .venv/bin/python benchmarks/small_linalg.py

Writes ``benchmarks/results/small_linalg.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

import _report
import _room  # noqa: F401  (the checkout's modules)
import jax
import jax.numpy as jnp
import numpy as np
from _report import fill
from _timing import Call, calls_per_second, interleaved_medians, median

import pytensor
from pytensor.compile._jax_ofg import small_linalg
from pytensor.compile._jax_ofg.patches import linalg_lowering
from pytensor.compile.jax_ofg import as_jax_op


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
    saved = linalg_lowering._small, linalg_lowering._small_permutation
    if part == "permutation":
        linalg_lowering._small = lambda aval: False
    elif part == "lapack calls":
        linalg_lowering._small_permutation = lambda aval, size: False
    try:
        yield
    finally:
        linalg_lowering._small, linalg_lowering._small_permutation = saved


def timed(fn, *args) -> Call:
    return Call(lambda: jax.block_until_ready(fn(*args)))


def sizes_table(repeats: int) -> list[list[float]]:
    """Per size n: µs per solve, LU with LAPACK and unrolled, Cholesky with both."""
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
        rows.append([n, *(stats[k].median / LOOP * 1e6 for k in calls)])
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


def where_the_time_goes(repeats: int) -> list[list]:
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
        rows += [[mode, name, s.median] for name, s in stats.items()]
        print(rows[-len(stats) :], flush=True)
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


def through_the_op(repeats: int) -> list[list]:
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
    return [[name, s.median] for name, s in stats.items()]


def two_threads(make: Callable, rounds: int) -> list[float]:
    """Calls per second of ``make()``'s function from one thread, then from two at
    once (each its own copy), and their ratio: medians over ``rounds``."""
    copies = [Call(fn, start) for fn, start in (make() for _ in range(2))]
    singles, pairs = [], []
    for _ in range(rounds):
        singles.append(calls_per_second(copies[:1]))
        pairs.append(calls_per_second(copies))
    ratios = [two / one for one, two in zip(singles, pairs)]
    return [median(singles), median(pairs), median(ratios)]


def report(data: dict) -> str:
    text, meta = _report.texts("small_linalg"), data["meta"]
    sections = [fill(text["intro"], **meta)]
    if "sizes" in data:
        rows = [
            [
                n,
                f"{a:.2f}",
                f"{b:.2f}",
                f"{b / a:.2f}",
                f"{c:.2f}",
                f"{d:.2f}",
                f"{d / c:.2f}",
            ]
            for n, a, b, c, d in data["sizes"]
        ]
        sections.append(fill(text["sizes"], rows, loop=LOOP))
    if "time" in data:
        base = {
            mode: s for mode, name, s in data["time"] if name == "LAPACK everywhere"
        }
        rows = [
            [mode, name, f"{s * 1e3:.2f}", f"{s / base[mode]:.2f}"]
            for mode, name, s in data["time"]
        ]
        sections.append(fill(text["time"], rows))
    if "op" in data:
        base = dict(data["op"])["pure JAX, LAPACK"]
        rows = [[name, f"{s * 1e3:.2f}", f"{s / base:.2f}"] for name, s in data["op"]]
        sections.append(fill(text["op"], rows))
    if "threads" in data:
        one, two, ratio = data["threads"]
        row = ["PK log-density + gradient, default linker", f"{one:.0f}", f"{two:.0f}"]
        sections.append(fill(text["threads"], [[*row, f"{ratio:.2f}"]], **meta))
        sections += [meta["threads_note"]] if "threads_note" in meta else []
    return "\n\n".join(sections) + "\n" + _report.transcribed(meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--skip", default="", help="comma-separated: sizes,time,op,threads"
    )
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if not args.report:
        command = "python benchmarks/small_linalg.py " + " ".join(sys.argv[1:])
        versions = {"JAX": jax.__version__, "PyTensor": pytensor.__version__}
        meta = _report.meta(command.strip(), versions) | {"repeats": args.repeats}
        data = {"meta": meta | {"max_size": small_linalg.DEFAULT_MAX_SIZE}}
        measures = {
            "sizes": sizes_table,
            "time": where_the_time_goes,
            "op": through_the_op,
            "threads": lambda repeats: two_threads(compiled_model_logp, repeats),
        }
        for part, measure in measures.items():
            if part not in skip:
                data[part] = measure(args.repeats)
        _report.save("small_linalg", data)
    _report.write("small_linalg", report(_report.load("small_linalg")))


if __name__ == "__main__":
    main()
