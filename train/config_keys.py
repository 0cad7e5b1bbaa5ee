"""`grid-train keys [PREFIX]`: every config key with its type, default and help, read from
the schema that docs/config.md's table is made of (`train.schema.key_docs`, the `doc`
strings of the config dataclasses), so the command line and the page cannot disagree."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap

from .schema import KeyDoc, key_docs


def all_keys() -> list[KeyDoc]:
    """Every key, in docs/config.md's order: the top-level keys, then table by table."""
    from .config import SECTIONS, Config  # imports torch: not before the arguments parse

    keys = key_docs(Config, "", skip=SECTIONS)
    for name, cls in SECTIONS.items():
        keys += key_docs(cls, f"{name}.")
    return keys


def first_sentence(text: str) -> str:
    """`text` up to the end of its first sentence: a '.' outside brackets followed by a
    capital, a digit or a backtick ("e.g. Debian's" does not end one)."""
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        after = text[i + 2 : i + 3]
        if (
            char == "."
            and depth == 0
            and text[i + 1 : i + 2] == " "
            and (after.isupper() or after.isdigit() or after == "`")
            and not text[: i + 1].endswith(("e.g.", "i.e."))
        ):
            return text[: i + 1]
    return text


def describe(key: KeyDoc, *, whole: bool, width: int) -> str:
    """The key's line (`name  type = default`) and its help below it, indented: the first
    sentence, or with `whole` all of it."""
    help_text = key.doc if whole else first_sentence(key.doc)
    if help_text != key.doc:
        help_text += f" (more: keys {key.key})"
    body = textwrap.fill(help_text, width, initial_indent="    ", subsequent_indent="    ")
    return f"{key.key}  {key.type} = {key.default}\n{body}"


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List the config keys (for --set KEY=VALUE and the TOML files) with "
        "their type, default and the first sentence of their help; a whole key name shows "
        "all of its help. docs/config.md holds the same table.",
    )
    parser.add_argument(
        "prefix",
        nargs="?",
        default="",
        metavar="PREFIX",
        help="only the keys that start with this, e.g. 'train.' or 'data.path'",
    )
    args = parser.parse_args(argv)
    every = all_keys()
    keys = [k for k in every if k.key.startswith(args.prefix)]
    if not keys:
        tables = sorted({k.key.split(".")[0] for k in every if "." in k.key})
        top = [k.key for k in every if "." not in k.key]
        print(
            f"{prog}: PREFIX: no key starts with {args.prefix!r}; the tables are "
            f"{', '.join(tables)}, the top-level keys {', '.join(top)}",
            file=sys.stderr,
        )
        return 2
    width = min(shutil.get_terminal_size().columns, 100)
    # one key asked for by its whole name: all of its help
    text = [describe(k, whole=len(keys) == 1 or k.key == args.prefix, width=width) for k in keys]
    try:
        print("\n".join(text))
    except BrokenPipeError:  # `grid-train keys | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
