"""nutpie adapts the mass matrix of a model holding JAX ops from the draws' variances.

Changes
-------
Wraps ``nutpie.sample`` when ``nutpie`` is imported: a model compiled with
host callbacks (``patches/nutpie_host_callbacks``: it holds JAX ops), sampled
without an adaptation argument, gets ``adaptation="draw_diag"``
(:data:`DEFAULT_ADAPTATION`: the draws' variances alone, as Stan adapts)
instead of nutpie's default from draws and gradients. Every other call is
nutpie's own.

Why
---
On the predator-prey model of ``examples/stan_ode.py``, ``pm.sample()`` with
nutpie's default (``"diag"``) converged in 6 of 10 seeds (stuck chains,
divergences), with ``"draw_diag"`` in 10 of 10, at about twice the ESS for
1.6 times the gradients; on the stiff PK model 10 and 9 of 10, with more ESS
(``benchmarks/default_route.py``).

Upstream
--------
No upstream issue: nutpie's default suits most models. It would be
unnecessary if PyMC's ``pm.sample`` let a model (or its ops) suggest the
sampler's adaptation, or if nutpie's default converged on these ODE models.

Checked with
------------
nutpie 0.16.11 (``nutpie.sample``'s ``adaptation`` and the switches it maps
onto it), PyMC 6.4.0.

Off switch
----------
``jax_ofg__nutpie_draw_diag=False``: nutpie's default adaptation (or pass
``nuts={"adaptation": ...}`` to ``pm.sample``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import NUTPIE_DRAW_DIAG
from pytensor.compile._jax_ofg.hooks.import_finder import after_import


__all__ = [
    "ADAPTATION_ARGUMENTS",
    "DEFAULT_ADAPTATION",
    "install",
    "patch_nutpie_sample",
]

_log = logging.getLogger(__name__)


#: nutpie's mass-matrix adaptation for models holding JAX ops, unless the caller
#: chooses one: the draws' variances alone, as Stan adapts. On the predator-prey
#: model of ``examples/stan_ode.py``, ``pm.sample()`` with nutpie's default
#: (``"diag"``: draws and gradients) converged in 6 of 10 seeds (stuck chains,
#: divergences), with ``"draw_diag"`` in 10 of 10, at about twice the ESS for
#: 1.6 times the gradients; on the stiff PK model 10 and 9 of 10 (R-hat 1.014),
#: with more ESS (``benchmarks/default_route.py``).
DEFAULT_ADAPTATION = "draw_diag"

#: ``nutpie.sample`` arguments that choose the adaptation (``adaptation``, and
#: the older switches nutpie still maps onto it).
ADAPTATION_ARGUMENTS = frozenset(
    {
        "adaptation",
        "use_grad_based_mass_matrix",
        "low_rank_modified_mass_matrix",
        "transform_adapt",
    }
)


def _sampling_with_default_adaptation(sample: Callable) -> Callable:
    """Wrap ``nutpie.sample``: models holding JAX ops adapt as :data:`DEFAULT_ADAPTATION`."""

    @functools.wraps(sample)
    def sample_with_default_adaptation(compiled_model, *args, **kwargs):
        if getattr(compiled_model, "holds_jax_ops", False) and not (
            kwargs.keys() & ADAPTATION_ARGUMENTS
        ):
            _log.debug("nutpie adapts its mass matrix with %r", DEFAULT_ADAPTATION)
            kwargs["adaptation"] = DEFAULT_ADAPTATION
        return sample(compiled_model, *args, **kwargs)

    return sample_with_default_adaptation


def patch_nutpie_sample(module: ModuleType) -> bool:
    """Make ``nutpie.sample`` (``module`` is ``nutpie``) adapt models holding JAX ops
    as :data:`DEFAULT_ADAPTATION` unless told otherwise.
    """
    return compat.patch_method(
        module, "sample", "adapts_jax_models", _sampling_with_default_adaptation
    )


def install() -> None:
    """Patch ``nutpie.sample`` now, or when nutpie is imported, unless switched off."""
    if NUTPIE_DRAW_DIAG.value:
        after_import("nutpie", patch_nutpie_sample)
