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

Two more stop a run that has started, with the same one line and exit code 2:

- `OutputFileError`: a file of the run directory (checkpoint, metrics, summary,
  pictures, mesh, a generated scene) cannot be written (a full disk, a permission).
  Write such files inside `writing`, which turns every OSError into one of these.
- `OutOfMemory`: the device ran out of memory during training (`train/memory.py`).
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, with an s unless `count` is 1: "1 point", "3 points"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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


class OutputFileError(ConfigError):
    """A file of the run cannot be written; the message names it and the cause.

    Message: `<key>: <path>: <problem>`, or `<path>: <problem>` without a key.
    """

    label = "write error"

    def __init__(
        self, path: str | Path, problem: str, *, key: str | None = None, errno: int | None = None
    ) -> None:
        self.path, self.problem, self.key, self.errno = Path(path), problem, key, errno
        super().__init__(f"{key}: {path}: {problem}" if key else f"{path}: {problem}")

    @property
    def fix(self) -> str:
        """What to do before trying again: free space (a full disk or quota), else
        remove the cause."""
        full = self.errno in (errno.ENOSPC, errno.EDQUOT)
        return "free space" if full else "fix that"

    def add_hint(self, hint: str) -> None:
        """Append what the user can do, after "; " (the run adds what is left of it)."""
        self.args = (f"{self.args[0]}; {hint}",)


class OutOfMemory(ConfigError):
    """The device ran out of memory while training; the message says what to lower."""

    label = "out of memory"


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


def os_error_in(error: BaseException) -> OSError | None:
    """`error` if it is an OSError, else the first OSError among the exceptions that led
    to it (as a traceback shows them): PyTorch's zip writer reports a failed write as
    `RuntimeError: unexpected pos ...` raised while handling the OSError (ENOSPC)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        seen.add(id(error))
        if error.__cause__ is not None or error.__suppress_context__:
            error = error.__cause__
        else:
            error = error.__context__
    return None


def describe_os_error(error: OSError) -> str:
    """`No space left on device (ENOSPC)`: the system's words and the errno name."""
    name = errno.errorcode.get(error.errno) if error.errno is not None else None
    text = error.strerror or str(error) or type(error).__name__
    return f"{text} ({name})" if name else text


@contextmanager
def writing(
    path: str | Path, *, remove: Path | None = None, key: str | None = None
) -> Iterator[None]:
    """Turn an OSError raised inside (or one that caused another exception there, see
    `os_error_in`) into an `OutputFileError` naming `path` and the cause.

    remove: a partly written file to delete first (a temporary file, a picture cut
        short), so a failed write leaves nothing behind; a failure to delete it is
        ignored (the disk that refused the write may refuse more).
    key: the config key that named `path`, if any.
    What is left of the run and what to do `train.loop.run` adds (`add_hint`).
    Other exceptions, ConfigErrors among them, pass through unchanged.
    """
    try:
        yield
    except ConfigError:
        raise
    except Exception as error:
        cause = os_error_in(error)
        if cause is None:
            raise
        if remove is not None:
            try:
                remove.unlink(missing_ok=True)
            except OSError:
                pass
        problem = f"cannot write it: {describe_os_error(cause)}"
        raise OutputFileError(path, problem, key=key, errno=cause.errno) from None
