"""The version of grid: the one place it is written.

pyproject.toml reads it (`[tool.setuptools.dynamic]`) for the distribution's metadata, and
`grid.__version__` is this value; a release is tagged `v` + this value.
"""

__version__ = "0.1.0"
