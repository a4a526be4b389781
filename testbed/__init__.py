"""The AI-cluster fabric testbed (see README.md); ``__version__`` is the package's version, read by pyproject.toml."""

__version__ = "0.1.0"
