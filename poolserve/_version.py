"""The package's version (one place: pyproject.toml's `version` must match it)."""

__version__ = "0.1.0"
