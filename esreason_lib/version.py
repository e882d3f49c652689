"""The package version (a module of its own, so that the run store can record it without importing the API)."""

__version__ = "0.1.0"
