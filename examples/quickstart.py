"""A wrapped JAX function, its gradient, and the three linkers.

Run with ``bash scripts/example`` (or ``python examples/quickstart.py`` in an
environment where this project is installed).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.jax_ofg import as_jax_op


@as_jax_op
def model(params, x, *, kind="tanh"):
    """A one-layer network: pytree in, pytree out, a static keyword."""
    h = params["w"] @ x + params["b"]
    h = jnp.tanh(h) if kind == "tanh" else h
    return {"mean": h, "norm": jnp.sum(h**2)}


def main() -> None:
    w = pt.matrix("w", shape=(2, 3))
    b = pt.vector("b", shape=(2,))
    x = pt.vector("x", shape=(3,))
    out = model({"w": w, "b": b}, x, kind="tanh")
    grad_w = pt.grad(out["norm"], w)
    print("output types:", out["mean"].type, out["norm"].type)
    pytensor.dprint([out["mean"], grad_w], print_type=True)

    rng = np.random.default_rng(0)
    wv, bv, xv = rng.normal(size=(2, 3)), rng.normal(size=2), rng.normal(size=3)
    reference = jax.jit(
        jax.value_and_grad(
            lambda w: jnp.sum(jnp.tanh(w @ xv + bv) ** 2),
        )
    )
    norm_ref, grad_ref = reference(wv)

    print(f"\n{'linker':<10}{'norm':>14}{'max |grad - jax.grad|':>26}{'call (us)':>12}")
    for label, mode in [("numba", None), ("c-vm", "CVM"), ("jax", "JAX")]:
        f = pytensor.function([w, b, x], [out["norm"], grad_w], mode=mode)
        norm, grad = f(wv, bv, xv)
        assert np.allclose(norm, norm_ref) and np.allclose(grad, grad_ref)
        start = time.perf_counter()
        for _ in range(200):
            f(wv, bv, xv)
        micros = (time.perf_counter() - start) / 200 * 1e6
        error = np.max(np.abs(grad - grad_ref))
        print(f"{label:<10}{float(norm):>14.6f}{error:>26.2e}{micros:>12.1f}")
    print("\nAll linkers agree with jax.value_and_grad.")


if __name__ == "__main__":
    main()
