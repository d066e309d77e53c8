"""Process-wide hooks, one module each: what each adds to the process, why, its switch."""
