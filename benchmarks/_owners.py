"""Whose code a process runs: the main thread's stack sampled, each sample given to a library.

:class:`Owners` samples the main thread's stack about every millisecond from
a thread of its own and gives the time since the last sample to the
innermost frame's library (:func:`owner`), skipping the standard library's
frames: time in ``importlib``, ``pathlib`` or ``json`` counts for whoever
called them, so that importing a module counts for the module's library and
reading files to fingerprint a function counts for this package. Time in C
code counts for the Python frame that called it (XLA compiling a program,
for JAX). Samples wait for the GIL, so a long stretch of C code that holds it
is seen once, at its end, and counted whole for the frame then running.
"""

from __future__ import annotations

import sys
import sysconfig
import threading
import time
from collections import Counter


#: Libraries by a folder in their files' paths, the first that matches.
LIBRARIES = (
    ("/_jax_ofg/", "ours"),
    ("/compile/jax_ofg.py", "ours"),
    ("/dispatch/jax_ofg.py", "ours"),
    ("/pytensor/", "PyTensor"),
    ("/jax/", "JAX"),
    ("/jaxlib/", "JAX"),
    ("/pymc/", "PyMC"),
    ("/numba/", "Numba"),
    ("/llvmlite/", "Numba"),
    ("/nutpie/", "nutpie"),
    ("/equinox/", "diffrax, equinox"),
    ("/diffrax/", "diffrax, equinox"),
    ("/lineax/", "diffrax, equinox"),
    ("/optimistix/", "diffrax, equinox"),
    ("/site-packages/", "others"),
)
_STDLIB = sysconfig.get_paths()["stdlib"]


def owner(frame) -> str:
    """The library of the innermost frame not in the standard library."""
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith(("<frozen", _STDLIB)) and "site-packages" not in path):
            return next((name for part, name in LIBRARIES if part in path), "user")
        frame = frame.f_back
    return "the interpreter"


class Owners:
    """Seconds of the main thread by phase and library, while sampling.

    >>> with Owners() as owners:
    ...     owners.phase = "sleep"
    ...     time.sleep(0.2)
    >>> 0.15 < owners.seconds["sleep"]["user"] < 0.3
    True
    """

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.phase = "start"
        self.seconds: dict[str, Counter] = {}
        self._main = threading.main_thread().ident
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Owners:
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(self.interval / 2)  # the sampler gets the GIL soon
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._sampler.join()
        sys.setswitchinterval(self._switch)

    def _sample(self) -> None:
        last = time.perf_counter()
        while not self._done.wait(self.interval):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            counter = self.seconds.setdefault(self.phase, Counter())
            counter[owner(frame)] += now - last
            last = now
