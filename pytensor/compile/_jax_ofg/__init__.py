"""The implementation behind :mod:`pytensor.compile.jax_ofg` (private: import from there).

One folder per subsystem, in layers (a module imports only from its own layer
and the layers above): ``compat``, ``errors``, ``small_linalg``, ``files`` and
``flags`` (foundations); ``hooks/`` (process-wide hooks, one a module);
``cache/`` (the trace cache, used through ``cache/api`` alone); ``tracing/``
(from a pytree function to flat arrays and output types); ``host/`` (jitted
programs on host arrays); ``op/`` (:class:`OpFromJax`, its derivatives and
``vmap``, the decorator); ``islands/`` (graphs as XLA programs); ``samplers/``
(PyMC and nutpie); ``stan`` (coming from Stan); ``patches/`` (changes to
other libraries, one a module). The map: the developer notes
(``doc/developer.rst``). Importing a module here acts on nothing: the
facade's ``install()`` does.
"""
