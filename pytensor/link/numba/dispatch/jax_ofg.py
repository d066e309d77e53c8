"""Numba linker: ops holding a JAX computation call their jitted function in object mode.

:class:`~pytensor.compile.jax_ofg.OpFromJax` and
:class:`~pytensor.compile.jax_ofg_island.JaxIsland` enter object mode once per
call and go straight to the op's
:meth:`~pytensor.compile.jax_ofg_host.JaxHostOp.host_function`, looked up once
when compiling. PyTensor's generic fallback would do the same through
``perform`` and warn at every compile. The result cannot be cached on disk by
Numba (it holds a Python callable), hence the ``None`` cache key.
"""

import numba

from pytensor.compile.jax_ofg_host import JaxHostOp, writable_outputs
from pytensor.link.numba.dispatch.basic import (
    get_numba_type,
    numba_njit,
    register_funcify_and_cache_key,
)


# JaxHostOp is a mixin: this covers OpFromJax and JaxIsland, and wins over
# OpFromGraph's dispatch, which comes later in JaxIsland's MRO.
@register_funcify_and_cache_key(JaxHostOp)
def numba_funcify_JaxHostOp(op: JaxHostOp, node=None, **kwargs):
    writable = writable_outputs(node)
    output_types = [
        get_numba_type(out.type) if w else get_numba_type(out.type).copy(readonly=True)
        for out, w in zip(node.outputs, writable)
    ]
    host_call = op.host_function(writable)

    if len(output_types) == 1:
        return_type = output_types[0]

        def call(inputs):
            return host_call(*inputs)[0]

    else:
        return_type = numba.types.Tuple(output_types)

        def call(inputs):
            return tuple(host_call(*inputs))

    @numba_njit
    def opfromjax(*inputs):
        with numba.objmode(outputs=return_type):
            outputs = call(inputs)
        return outputs

    return opfromjax, None
