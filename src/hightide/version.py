"""hightide's version (its own module: importing it imports nothing else of hightide)."""

__version__ = "0.1.0"
