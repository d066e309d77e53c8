"""Processes forked after JAX started: a clear error instead of a deadlock.

Every host call checks :data:`forked_after_jax_started` and raises
:class:`ForkedAfterJaxError`. Registers nothing itself:
:func:`pytensor.compile.jax_ofg.install` registers :func:`before_fork` and
:func:`after_fork_in_child` (``hooks/at_fork``).
"""

from __future__ import annotations

import jax

from pytensor.compile._jax_ofg.compat import jax_started


__all__ = ["ForkedAfterJaxError", "jax_started", "refuse_call_after_fork"]

#: True in a process forked after JAX had started in its parent (or in an
#: ancestor): JAX cannot run here. Read by every host call, so kept a plain
#: module global.
forked_after_jax_started = False

_jax_started_before_fork = False


class ForkedAfterJaxError(jax.errors.JaxRuntimeError):
    """A wrapped JAX function was called in a process forked after JAX started.

    A :class:`jax.errors.JaxRuntimeError` (and so a :class:`RuntimeError`):
    JAX cannot run here. JAX islands pass it on as the program's own error
    instead of falling back to PyTensor, which would fail the same way.
    """


def before_fork() -> None:
    """At-fork handler, in the parent, where JAX's lock may be taken safely."""
    global _jax_started_before_fork
    _jax_started_before_fork = jax_started()


def after_fork_in_child() -> None:
    """At-fork handler, in the child."""
    global forked_after_jax_started
    forked_after_jax_started = forked_after_jax_started or _jax_started_before_fork


def refuse_call_after_fork(what: str) -> None:
    """Raise :class:`ForkedAfterJaxError` for ``what`` (the op or function called).

    Called by host calls and JAX-linker functions when
    :data:`forked_after_jax_started` is set.
    """
    raise ForkedAfterJaxError(
        f"{what} cannot run in this process: it was forked (os.fork, e.g. "
        "multiprocessing's 'fork' start method) after JAX had started in its "
        "parent, and JAX deadlocks in such a process (XLA's threads do not "
        "survive a fork). Start worker processes with 'forkserver' or 'spawn' "
        "instead: with PyMC, leave `mp_ctx` unset (models holding JAX ops get "
        "'forkserver') or pass mp_ctx='forkserver'; with multiprocessing, use "
        "multiprocessing.get_context('forkserver'). Either one re-imports the "
        "main script in the workers: guard its entry point with "
        '`if __name__ == "__main__":`.'
    )
