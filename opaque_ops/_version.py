"""The package version, at the bottom of the layers: anything may import it (``model.cache`` keys on it)."""

__version__ = "0.1.0"
