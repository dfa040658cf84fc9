"""recordsync: an exact, gap-free copy of a game platform's records in your SQL warehouse."""

__version__ = "0.1.0"

__all__ = ["__version__"]
