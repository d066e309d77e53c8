"""JAX linker: an :class:`OpFromJax` is its own inner function.

No host callback and no nested ``jit``: the inner function is traced into the
graph's single XLA computation, nested wrapped functions included. An error
raised while JAX traces it is noted with the op's name (errors raised later,
by the compiled XLA program, cannot be traced back to one op).
"""

from pytensor.compile.jax_ofg import OpFromJax
from pytensor.compile.jax_ofg_host import TRACED_FUNCTION_NOTE, add_note_once
from pytensor.link.jax.dispatch.basic import jax_funcify


@jax_funcify.register(OpFromJax)
def jax_funcify_OpFromJax(op: OpFromJax, node=None, **kwargs):
    def traced_fn(*inputs):
        try:
            return op.traced_fn(*inputs)
        except Exception as error:
            add_note_once(error, f"{TRACED_FUNCTION_NOTE}{op}.{op.traced_note()}")
            raise

    if len(op.output_types) == 1:

        def opfromjax(*inputs):
            return traced_fn(*inputs)[0]

    else:

        def opfromjax(*inputs):
            return traced_fn(*inputs)

    return opfromjax
