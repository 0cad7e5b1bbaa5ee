"""The README's quick start is the contract with users: two commands, and CI runs the second;
the command line's options are documented in docs/fitting.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.+?)\n```", section)


def test_quick_start_has_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert "python -m train --config configs/default.toml" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quick_start_commands()[1] in ci


def test_docs_document_every_command_line_option():
    from train.__main__ import _parser

    table = (ROOT / "docs" / "fitting.md").read_text().split("\n## ", 1)[0]
    options = [o for a in _parser()._actions for o in a.option_strings if o.startswith("--")]
    assert "--overwrite" in options
    for option in options:
        if option != "--help":
            assert f"| `{option}" in table, option
