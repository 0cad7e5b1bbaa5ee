"""Command line: `python -m train.export --out RUN [options]`, files made from a trained run.

Reads RUN/checkpoint.pt (the model and the config it was trained with) and hands it to
the export of the run's experiment (`ExperimentSpec.export`, a module of its package, whose
options appear under the experiment's name in --help); experiments without one have
nothing to export. Errors print one line and exit with code 2, as `python -m train` does.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from .errors import ConfigError
from .experiments import FORMAT_1_KIND, REGISTRY, specs


def _module(name: str) -> ModuleType:
    """The export module of experiment `name`."""
    return importlib.import_module(f".{REGISTRY[name]}.{specs()[name].export}", __package__)


def _exporters() -> list[str]:
    return [name for name, spec in specs().items() if spec.export]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m train.export",
        description="Write files made from a trained run, from the run directory's "
        "checkpoint.pt, by the export of its experiment (options below, by experiment).",
        epilog="A missing or unusable checkpoint, a run of an experiment with nothing to "
        "export or a bad option stop the command with one line and exit code 2.",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="the run directory (python -m train's --out)"
    )
    for name in _exporters():
        _module(name).add_arguments(parser.add_argument_group(f"{name} runs"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        message = export(args.out, args)
    except ConfigError as error:
        print(f"grid-train export: {error.label}: {error}", file=sys.stderr)
        return 2
    print(message)
    return 0


def export(out: Path, args: argparse.Namespace) -> str:
    """Run the export of the run in `out`; returns its one-line report. Raises ConfigError
    (or a subclass) naming the option or the file."""
    from .config import load_config
    from .loop import CHECKPOINT, load_checkpoint  # imports grid

    if not out.is_dir():
        raise ConfigError(f"--out: {out} is not a directory")
    if not (out / CHECKPOINT).is_file():
        raise ConfigError(f"--out: no {CHECKPOINT} in {out} (train it first: python -m train)")
    checkpoint = load_checkpoint(out)
    kind = checkpoint.get("kind", FORMAT_1_KIND)
    if not specs()[kind].export:
        raise ConfigError(
            f"--out: {out} holds a {kind!r} run, which has nothing to export "
            f"(exports exist for: {', '.join(_exporters())})"
        )
    # the export runs on the CPU, whatever device the run trained on
    config = load_config(base=checkpoint["config"], overrides=["device=cpu"])
    return _module(kind).export(out, config, checkpoint, args)


if __name__ == "__main__":
    sys.exit(main())
