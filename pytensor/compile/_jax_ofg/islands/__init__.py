"""Graphs as XLA programs: :class:`~pytensor.compile.jax_ofg.JaxIsland`, island selection, fusion."""
