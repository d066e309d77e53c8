"""The linkers every feature is checked in, and a strict compile helper."""

import warnings

import pytensor
from pytensor.compile.mode import get_mode


#: (id, mode) for every linker the op claims: Python perform, the C VM,
#: Numba (explicitly and as PyTensor's default mode) and JAX.
LINKER_MODES = [
    ("py", "FAST_COMPILE"),
    ("cvm", "CVM"),
    ("numba", "NUMBA"),
    ("default", None),
    ("jax", "JAX"),
]


def compile_function(inputs, outputs, mode, **kwargs):
    """``pytensor.function`` that fails on Numba's object-mode fallback warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*object mode.*")
        return pytensor.function(inputs, outputs, mode=mode, **kwargs)


def without_islands(mode):
    """``mode`` with the ``jax_islands`` rewrite excluded (JAX needs none)."""
    if mode in ("JAX", "FAST_COMPILE"):
        return mode
    return get_mode(mode).excluding("jax_islands")


def compiled_nodes(f) -> list:
    """The nodes a compiled function runs, those inside JAX islands included."""
    from pytensor.compile._jax_ofg.islands.op import JaxIsland

    nodes = []
    for node in f.maker.fgraph.toposort():
        if isinstance(node.op, JaxIsland):
            nodes.extend(node.op.fgraph.toposort())
        else:
            nodes.append(node)
    return nodes


def jax_op_nodes(f) -> list:
    """The OpFromJax nodes a compiled function runs, inside islands or not."""
    from pytensor.compile.jax_ofg import OpFromJax

    return [node for node in compiled_nodes(f) if isinstance(node.op, OpFromJax)]
