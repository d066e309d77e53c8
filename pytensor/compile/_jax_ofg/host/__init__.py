"""Host calls: a jitted JAX program on host arrays (:class:`~pytensor.compile._jax_ofg.host.op.JaxHostOp`)."""
