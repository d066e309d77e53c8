"""Samplers: PyMC's start method, nutpie's host callbacks, chains in worker processes."""
