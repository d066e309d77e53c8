"""Forward against reverse mode on a stiff PK model (:mod:`_pk_model`), per call.

* **value+grad per call**: the model's log-density and gradient compiled by
  PyTensor (default linker) with the solve wrapped by ``as_jax_op`` in reverse
  mode and in forward mode (``adjoint=diffrax.ForwardMode()``), against the
  best pure-JAX programs (``jax.value_and_grad``; ``jax.linearize`` and a
  ``vmap`` of the JVP), every gradient checked against pure JAX's;
* **by the number of parameters n**: pure JAX forward against reverse mode.

The whole fit of the forward-mode model against Stan is ``small_odes.py``'s
``pk`` (``pm.sample()`` as the guide calls it).

Run (with the machine to itself)::

    .venv/bin/python benchmarks/forward_mode.py                 # ~5 minutes
    .venv/bin/python benchmarks/forward_mode.py --repeats 3 --sizes 4 8

Writes ``benchmarks/results/forward_mode.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

import _report
import _room  # noqa: F401  (the checkout's modules)
from _report import fill, package_versions


os.environ.setdefault("EQX_ON_ERROR", "nan")  # exportable programs, as the examples

ROUTES = {
    "ours_forward": "ours, forward mode (ForwardMode adjoint)",
    "ours_reverse": "ours, reverse mode (default adjoint)",
}


def our_model(route: str):
    import _pk_model as pk

    from pytensor.compile.jax_ofg import as_jax_op

    if route == "ours_forward":
        return pk.build_model(as_jax_op(pk.solve_forward_mode, name="pk_solve"))
    return pk.build_model(as_jax_op(pk.solve, name="pk_solve", gradient="reverse"))


# ---------------------------------------------------------- per call
def per_call(args: argparse.Namespace) -> dict:
    import _pk_model as pk
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _timing import Call, interleaved_medians

    import pytensor
    import pytensor.tensor as pt

    point = (jnp.asarray(pk.PRIOR_MEANS + 0.1), jnp.asarray(np.log(0.7)))

    def forward_value_and_grad(logp):
        def value_and_grad(*x):
            value, linear = jax.linearize(logp, *x)
            basis = (jnp.eye(5)[:, :4], jnp.eye(5)[:, 4])
            return value, jax.vmap(linear)(*basis)

        return jax.jit(value_and_grad)

    reverse = jax.jit(jax.value_and_grad(pk.logp, argnums=(0, 1)))
    forward = forward_value_and_grad(
        lambda lt, ls: pk.logp(lt, ls, pk.solve_forward_mode)
    )
    expected = np.concatenate([np.ravel(g) for g in reverse(*point)[1]])
    np.testing.assert_allclose(forward(*point)[1], expected, rtol=1e-6)
    calls = {
        "pure JAX, reverse (value_and_grad)": Call(
            lambda: jax.block_until_ready(reverse(*point))
        ),
        "pure JAX, forward (linearize + vmap)": Call(
            lambda: jax.block_until_ready(forward(*point))
        ),
    }
    for route in ("ours_reverse", "ours_forward"):
        model = our_model(route)
        logp = model.logp()
        inputs = model.value_vars
        f = pytensor.function(inputs, [logp, *pt.grad(logp, inputs)])
        values = [np.asarray(point[0]), np.asarray(point[1])]
        got = np.concatenate([np.ravel(g) for g in f(*values)[1:]])
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        calls[f"{ROUTES[route]}, as_jax_op"] = Call(f, tuple(values))
    stats = interleaved_medians(calls, repeats=args.repeats, batch_seconds=0.3)
    return {
        "calls": {name: [s.median, s.spread] for name, s in stats.items()},
        "sweep": sweep(args),
    }


def sweep(args: argparse.Namespace) -> list[list[float]]:
    """Where forward mode stops winning, by the number of inputs ``n``: n, and
    seconds per call of reverse and forward mode in pure JAX."""
    import _pk_model as pk
    import jax
    import jax.numpy as jnp
    from _timing import Call, interleaved_medians

    def scaled_logp(solver):
        def logp(log_theta, extra):
            scale = jnp.prod(1 + 0.01 * jnp.tanh(extra))
            return pk.logp(log_theta, jnp.log(0.7), lambda t: solver(t * scale))

        return logp

    sweep = []
    for n in args.sizes:
        x = (jnp.asarray(pk.PRIOR_MEANS), jnp.zeros(n - 4))
        rev = jax.jit(jax.value_and_grad(scaled_logp(pk.solve), argnums=(0, 1)))
        fwd_logp = scaled_logp(pk.solve_forward_mode)

        def fwd(lt, extra, fwd_logp=fwd_logp, n=n):
            value, linear = jax.linearize(fwd_logp, lt, extra)
            return value, jax.vmap(linear)(jnp.eye(n)[:, :4], jnp.eye(n)[:, 4:])

        fwd = jax.jit(fwd)
        s = interleaved_medians(
            {
                "r": Call(lambda rev=rev, x=x: jax.block_until_ready(rev(*x))),
                "f": Call(lambda fwd=fwd, x=x: jax.block_until_ready(fwd(*x))),
            },
            repeats=max(3, args.repeats // 2),
            batch_seconds=0.2,
        )
        sweep.append([n, s["r"].median, s["f"].median])
        print(sweep[-1], flush=True)
    return sweep


def report(data: dict) -> str:
    text = _report.texts("forward_mode")
    sections = [fill(text["intro"], **data["meta"])]
    if "per_call" in data:
        calls = data["per_call"]["calls"]
        best = min(m for k, (m, _) in calls.items() if k.startswith("pure JAX"))
        rows = [
            [name, f"{m * 1e3:.2f}", f"{spread:.0%}", f"{m / best:.2f}"]
            for name, (m, spread) in calls.items()
        ]
        sections.append(fill(text["per_call"], rows))
        rows = [
            [n, f"{r * 1e3:.2f}", f"{f * 1e3:.2f}", f"{f / r:.2f}"]
            for n, r, f in data["per_call"]["sweep"]
        ]
        sections.append(fill(text["sweep"], rows))
    return "\n\n".join(sections) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", type=int, nargs="*", default=[4, 8, 16, 32, 64])
    parser.add_argument("--report", action="store_true", help="only the tables")
    args = parser.parse_args()
    if not args.report:
        command = "python benchmarks/forward_mode.py " + " ".join(sys.argv[1:])
        versions = {"JAX": "jax", "diffrax": "diffrax", "PyTensor": "pytensor"}
        meta = _report.meta(command.strip(), package_versions(versions))
        _report.save("forward_mode", {"meta": meta, "per_call": per_call(args)})
    _report.write("forward_mode", report(_report.load("forward_mode")))


if __name__ == "__main__":
    main()
