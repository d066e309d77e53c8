"""The linkers every feature is checked in, and a strict compile helper."""

import warnings

import pytensor


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
