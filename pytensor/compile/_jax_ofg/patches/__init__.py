"""Changes to other libraries' callables and settings, one module each: what, why, when to delete."""
