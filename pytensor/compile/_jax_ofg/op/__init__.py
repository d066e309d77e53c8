"""The op: :class:`~pytensor.compile.jax_ofg.OpFromJax`, its derivatives and ``vmap``, and ``as_jax_op``."""
