"""JAX's log of a failed callback, dropped when the error comes out of one of our calls.

Changes
-------
Adds one filter (:class:`MuteCallbackLogs`) to JAX's callback logger
(``jax._src.callback``). It drops a record only when the callback failed
under a call of one of this package's compiled programs (a host call, or a
``mode="JAX"`` function holding wrapped functions); every other record, and
every record of other loggers, passes.

Why
---
JAX logs ``jax.pure_callback failed`` with a whole traceback at every
failing call (equinox's checks are callbacks): hundreds of them under
nutpie, which rejects each such proposal. Raised under one of this package's
calls, the error itself names the wrapped function
(:func:`~pytensor.compile._jax_ofg.errors.report`) and the first one warns.
The filter runs only when JAX emits a record: nothing per call.

Upstream
--------
https://github.com/jax-ml/jax/issues/26102 (exceptions from
``jax.pure_callback`` have no ``__cause__``; equinox filters the same record
the same way): it would be unnecessary if JAX raised a callback's exception
with its cause instead of logging it.

Checked with
------------
JAX 0.12.0 and 0.12.1 (the logger ``jax._src.callback``, through
``compat.CALLBACK_LOGGER``).

Off switch
----------
``jax_ofg__mute_callback_logs=False``: JAX logs every failed callback.
"""

from __future__ import annotations

import logging

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.flags import MUTE_CALLBACK_LOGS


__all__ = ["CALLBACK_LOGGER", "MuteCallbackLogs", "install"]

#: The logger JAX reports failed callbacks to.
CALLBACK_LOGGER = compat.CALLBACK_LOGGER


class MuteCallbackLogs(logging.Filter):
    """Drops JAX's log record of a failed callback raised under one of our calls."""

    #: ``(module, function)`` of the frames that call compiled programs.
    CALLERS = frozenset(
        {
            ("pytensor.compile._jax_ofg.host.programs", "__call__"),
            ("pytensor.compile._jax_ofg.patches.jax_linker_check", "__call__"),
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        frame = compat.caller_frame(0)
        while frame is not None:
            if (frame.f_globals.get("__name__"), frame.f_code.co_name) in self.CALLERS:
                return False
            frame = frame.f_back
        return True


def install() -> bool:
    """Add the filter to JAX's callback logger (once); whether it is there."""
    if not MUTE_CALLBACK_LOGS.value:
        return False
    logger = logging.getLogger(CALLBACK_LOGGER)
    if not any(isinstance(f, MuteCallbackLogs) for f in logger.filters):
        logger.addFilter(MuteCallbackLogs())
    return True
