"""Whether a PyMC model holds JAX ops, and the start method its processes need then.

PyMC is made to pick :data:`SAFE_START_METHOD` for such models by
``patches/pymc_sampling``. Registers nothing.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops


__all__ = ["SAFE_START_METHOD", "model_holds_jax_ops"]

#: The start method PyMC gets for models holding JAX ops.
SAFE_START_METHOD = (
    "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
)


def model_holds_jax_ops(model: Any) -> bool:
    """Return whether a PyMC model's variables or its log-density hold JAX ops.

    The log-density graph is built only when the variables hold none: it is
    where the ``logp=`` function of a ``pm.CustomDist`` first runs.
    """
    variables = [*model.basic_RVs, *model.deterministics, *model.potentials]
    if graph_holds_jax_ops(variables):
        return True
    try:
        return graph_holds_jax_ops([model.logp()])
    except Exception:  # PyMC will report it when it builds the same graph
        return False
