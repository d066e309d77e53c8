"""The trace cache: content keys, what a trace may run, traces and XLA programs kept on disk."""
