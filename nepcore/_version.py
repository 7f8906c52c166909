"""The package version (its own module so that any layer can import it without nepcore/__init__)."""

__version__ = "0.1.0"
