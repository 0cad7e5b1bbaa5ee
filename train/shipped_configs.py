"""The experiment configs that ship with the command line, and `--config NAME` for them.

In a checkout they are the files of `configs/` beside `train/`; an installed wheel holds the
same files in `grid_train/configs/` (pyproject.toml maps the folder there). `--config` takes
a path, read as given when the file exists; a bare name without a folder (`default.toml` or
`default`) that is no file in the working directory names a shipped config, so
`grid-train --config default.toml` works from any directory.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputFileError

_HERE = Path(__file__).resolve().parent


def shipped_dir() -> Path | None:
    """The folder of shipped configs: inside the installed package, or the checkout's."""
    if (_HERE / "configs").is_dir():  # an installed wheel
        return _HERE / "configs"
    checkout = _HERE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "configs").is_dir():
        return checkout / "configs"
    return None


def shipped_names() -> list[str]:
    """The file names of the shipped configs, sorted."""
    folder = shipped_dir()
    return sorted(p.name for p in folder.glob("*.toml")) if folder else []


def resolve(path: Path) -> Path:
    """The file `--config path` means: `path` itself when it exists, else the shipped config
    that a bare name names. Raises InputFileError (listing the shipped configs) otherwise."""
    if path.exists():
        return path
    if path.parent == Path(".") and shipped_dir() is not None:
        name = path.name if path.suffix == ".toml" else f"{path.name}.toml"
        if name in shipped_names():
            return shipped_dir() / name
    names = ", ".join(shipped_names()) or "none found"
    raise InputFileError(
        path,
        f"no such file; a shipped config is named by its file name alone, from any "
        f"directory (--config default.toml): {names}",
        key="--config",
    )
