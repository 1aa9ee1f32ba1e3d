"""The package version, in one place (read by the build backend and by Node)."""

__version__ = "0.1.0"
