"""The errors that stop `python -m train` before any work: one line, exit code 2.

`train/__main__.py` catches `ConfigError` (and so its subclasses) once and prints
`grid-train: <label>: <message>`. Every message starts with what the user named:
the dotted config key or the command-line option (then, for a file, the file), or
the file itself (a run directory's checkpoint).

- `ConfigError`: a key or option with a wrong value.
- `InputFileError`: a file the command reads (config, checkpoint, `.npy` volume,
  datasets) is missing, unreadable or not what it should be. Read such files
  through `read_input`, which turns every failure into one of these.
- `MissingDependencyError`: the config turns on a feature whose optional package
  is not importable (see `train/dependencies.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""

    label = "config error"


class InputFileError(ConfigError):
    """A file the command reads is missing, unreadable or malformed; the message names it.

    Message: `<key>: <path>: <problem>`, or `<path>: <problem>` without a key (the key
    is the config key or option that named the file, when there is one).
    """

    label = "file error"

    def __init__(self, path: str | Path, problem: str, *, key: str | None = None) -> None:
        self.path, self.problem, self.key = Path(path), problem, key
        super().__init__(f"{key}: {path}: {problem}" if key else f"{path}: {problem}")


class MissingDependencyError(ConfigError):
    """The config needs an optional package that cannot be imported."""

    label = "missing dependency"


def _detail(error: BaseException) -> str:
    """`Type: first sentence of the message`, at most 200 characters."""
    message = re.split(r"\n|\.\s+(?=[A-Z])", str(error).strip(), maxsplit=1)[0]
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def read_input(
    path: str | Path,
    read: Callable[[Path], T],
    what: str,
    *,
    key: str | None = None,
    invalid: str | None = None,
    hint: str = "",
) -> T:
    """`read(path)`, with every failure turned into an `InputFileError` naming the file.

    Args:
        path: the file.
        read: parses it (e.g. `tomllib.load` on the opened file, `torch.load`, `np.load`).
        what: what the file should be, for the message ("checkpoint", ".npy array").
        key: the config key or option that named the file, if any.
        invalid: the problem stated when `read` raises (default: "not a valid <what>");
            the exception's type and first sentence follow it in parentheses.
        hint: what the user can do about unreadable contents, appended after "; ".

    A missing file, a directory or a permission problem gets its own wording; any
    other exception `read` raises (truncated archive, bad syntax, wrong encoding, an
    I/O error, ...) becomes `invalid`. KeyboardInterrupt is not caught.
    """
    file = Path(path)
    if not file.exists():
        raise InputFileError(file, "no such file", key=key)
    if file.is_dir():
        raise InputFileError(file, f"is a directory, expected a {what} file", key=key)
    try:
        return read(file)
    except PermissionError:
        raise InputFileError(file, "permission denied", key=key) from None
    except Exception as error:  # the parser's complaint about the contents, whatever its
        # type: damaged files also raise OSError (torch.load of a cut archive: EINVAL)
        problem = f"{invalid or f'not a valid {what}'} ({_detail(error)})"
        raise InputFileError(file, f"{problem}; {hint}" if hint else problem, key=key) from None
