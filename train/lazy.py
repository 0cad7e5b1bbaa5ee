"""Names a module offers but imports on first use, so that the commands that import it
answer `--help` without importing torch (`tests/train/test_cli.py` checks each)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(module: str, package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `module`: name -> `where[name]`'s attribute of that
    name, its module imported on first use (relative names resolve against `package`)."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name], package), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
