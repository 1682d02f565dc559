"""The ``opaque-ops`` command line; each command has the name of its Python function."""

from .commands import main

__all__ = ["main"]
