"""The implementation behind :mod:`pytensor.compile.jax_ofg` (private: import from there).

One folder per subsystem, in layers (a module imports only from its own layer
and the layers above): ``compat``, ``errors`` and ``small_linalg``
(foundations); ``cache/`` (the trace cache); ``tracing/`` (from a pytree
function to flat arrays and output types); ``host/`` (jitted programs on host
arrays); ``op/`` (:class:`OpFromJax`, its derivatives and ``vmap``, the
decorator); ``islands/`` (graphs as XLA programs); ``samplers/`` (PyMC and
nutpie); ``stan`` (coming from Stan). The map: the developer notes
(``doc/developer.rst``). Importing a module here acts on nothing: the
facade's ``install()`` does.
"""
