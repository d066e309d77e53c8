"""Where host calls run their programs: the device the flag names.

Host calls hand NumPy arrays in and out on every call, so their programs run
on the CPU unless the user names another device with the flag
``jax_ofg__host_device`` (read when a function is compiled: :func:`host_device`).
Registers nothing (the flag is declared in ``flags``). The how-to, "Run on
an accelerator".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from pytensor.compile._jax_ofg.flags import HOST_DEVICE


__all__ = [
    "default_device",
    "host_device",
    "host_device_name",
    "on_device",
    "runs_on_cpu",
]


def host_device_name() -> str:
    """Return the flag's value (read when a function is compiled), as a key:
    programs differ by device."""
    return HOST_DEVICE.value


def host_device(name: str | None = None) -> jax.Device | None:
    """Return the device host calls run their programs on; None: JAX's default.

    From the flag ``jax_ofg__host_device`` (:func:`host_device_name`), or
    ``name`` if given.
    """
    value = host_device_name() if name is None else name
    if value == "default":
        return None
    platform, _, index = value.partition(":")
    try:
        devices = jax.devices(platform)
    except RuntimeError as error:
        platforms = sorted({d.platform for d in jax.devices()} | {"cpu"})
        raise ValueError(
            f"jax_ofg__host_device={value!r}: JAX has no {platform!r} device here "
            f"({error}). Set it to 'cpu', 'default' or a platform JAX has "
            f"({', '.join(platforms)}), with an optional ':index'"
        ) from None
    if not index:
        return devices[0]
    if not index.isdigit() or int(index) >= len(devices):
        raise ValueError(
            f"jax_ofg__host_device={value!r}: JAX has {len(devices)} {platform} "
            f"device(s), numbered 0 to {len(devices) - 1}"
        )
    return devices[int(index)]


def default_device() -> jax.Device:
    """Return JAX's default device (its flag ``jax_default_device``, else the first)."""
    device = jax.config.jax_default_device or jax.devices()[0]
    if isinstance(device, str):  # JAX's flag may name a platform
        device = jax.devices(device)[0]
    return device


def runs_on_cpu(device: jax.Device | None) -> bool:
    """Return whether a program placed on ``device`` (None: JAX's default) runs on a
    CPU: where a sampler thread pinned to a core runs it on that core's runtime.
    """
    return (device or default_device()).platform == "cpu"


def on_device(jitted: Callable, device: jax.Device | None) -> Callable:
    """Return ``jitted`` run on ``device``: as it is on JAX's default device.

    Elsewhere, under ``jax.default_device``: host inputs are uncommitted, so
    the program runs where that says. (Input and output shardings would do
    the same but annotate the program, and XLA then refuses equinox's
    checks, host callbacks inside ``cond``, for inconsistent shardings.)
    """
    if device is None or device == default_device():
        return jitted

    def placed(*inputs: Any) -> Any:
        with jax.default_device(device):
            return jitted(*inputs)

    return placed
