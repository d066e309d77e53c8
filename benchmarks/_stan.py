"""Stan's side of the benchmarks that compare against Stan: PyStan 3 builds and fits.

:func:`build` builds a program (stanc and the C++ compiler, or httpstan's
cached build), :func:`sample` samples it and returns the draws by chain, the
divergences and the leapfrog steps (:class:`StanDraws`);
:func:`posterior_summary` summarizes any route's draws the same way, with
ArviZ. This module imports neither this package nor PyTensor (routes that
must not import them use it).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class StanDraws:
    """One fit: every array has the chains first, then the draws."""

    #: Per parameter: ``(chains, draws, *shape)``.
    draws: dict[str, np.ndarray]
    #: ``(chains, draws)``: whether the draw's trajectory diverged.
    diverging: np.ndarray
    #: ``(chains, draws)``: leapfrog steps (gradient evaluations) per draw.
    leapfrog: np.ndarray


def library() -> str:
    """``"PyStan <version>"``."""
    import stan

    return f"PyStan {stan.__version__}"


def build(program: str, data: dict, seed: int):
    """``stan.build(program, data, random_seed=seed)``, httpstan's stored fits dropped.

    httpstan keeps every fit of a seeded run (under ``XDG_CACHE_HOME``) and
    would serve a later process from it without sampling: the compiled model
    is kept, the fits are dropped.
    """
    import stan

    cache = Path(os.environ.get("XDG_CACHE_HOME", "/nonexistent"))
    for fits in cache.rglob("fits"):
        shutil.rmtree(fits)
    return stan.build(program, data=data, random_seed=seed)


def sample(
    posterior, parameters: list[str], *, chains: int, draws: int, tune: int
) -> StanDraws:
    """Sample a built program; the draws of ``parameters`` by chain."""
    fit = posterior.sample(num_chains=chains, num_samples=draws, num_warmup=tune)

    def by_chain(name: str) -> np.ndarray:
        # fit[name] is (*shape, draws * chains), the chain index running
        # fastest; a scalar's shape is (1,), which fit.dims gives as ().
        shape = fit.dims[fit.param_names.index(name)] if name in fit.param_names else []
        values = np.asarray(fit[name]).reshape(*shape, draws, chains)
        return np.moveaxis(values, (-1, -2), (0, 1))

    return StanDraws(
        draws={name: by_chain(name) for name in parameters},
        diverging=by_chain("divergent__").astype(bool),
        leapfrog=by_chain("n_leapfrog__"),
    )


def posterior_summary(draws: dict[str, np.ndarray], columns: list[str]) -> dict:
    """ArviZ's summary of draws by chain: per scalar (``"theta[0]"``), ``columns``."""
    import arviz as az

    summary = az.summary(az.from_dict({"posterior": draws}), round_to="none")
    return {
        str(index): {column: float(summary.loc[index, column]) for column in columns}
        for index in summary.index
    }
