"""Cores for sampler threads: the machine, machine-wide leases, runtimes, pinning."""
