"""The client's version: the one place it is written. ``pyproject.toml``
reads it from here (``[tool.setuptools.dynamic]``), ``policyrouter.__version__``
and the ``User-Agent`` header import it."""

__version__ = "0.3.0"
