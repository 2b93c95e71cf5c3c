"""The library's version (``tdmpc2core.__version__``), in a module of its own so that any layer
reads it without importing the package's ``__init__`` (which imports the agents)."""

__version__ = "0.1.0"
