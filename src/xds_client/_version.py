"""The package version, in one place (read by the build backend, see pyproject.toml)."""

__version__ = "0.1.0"
