"""The package version (one place; pyproject.toml and the Termux recipe repeat it)."""

__version__ = "0.1.0"
