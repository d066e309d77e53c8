"""Tracing: a pytree function over flat arrays, what PyTensor knows of input dims, output types."""
