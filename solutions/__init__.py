"""Reference solutions: same names, signatures and docstrings as ``exercises/``."""
