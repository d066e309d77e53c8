"""JAX linker: an :class:`OpFromJax` is its own inner function.

No host callback and no nested ``jit``: the inner function is traced into the
graph's single XLA computation, nested wrapped functions included.
"""

from pytensor.compile.jax_ofg import OpFromJax
from pytensor.link.jax.dispatch.basic import jax_funcify


@jax_funcify.register(OpFromJax)
def jax_funcify_OpFromJax(op: OpFromJax, node=None, **kwargs):
    traced_fn = op.traced_fn

    if len(op.output_types) == 1:

        def opfromjax(*inputs):
            return traced_fn(*inputs)[0]

    else:

        def opfromjax(*inputs):
            return traced_fn(*inputs)

    return opfromjax
