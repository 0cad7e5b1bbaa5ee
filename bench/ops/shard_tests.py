"""Splits test files into shards of about equal size, one line of paths per shard, for
bench/ops/modes.sh's TEST_SHARDS (the test suite as several pytest processes at once on a
GPU host).

    python bench/ops/shard_tests.py K PATH [PATH ...]   # PATH: a test file or a folder of them
"""

from __future__ import annotations

import sys
from pathlib import Path


def shards(count: int, paths: list[str]) -> list[list[str]]:
    """The test files under `paths` (test_*.py in folders; files as given), largest first,
    each into the shard with the fewest bytes so far; empty shards dropped."""
    if count < 1:
        raise ValueError(f"K: expected at least 1, got {count}")
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.rglob("test_*.py"))
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"PATH: no test file or folder at {path}")
    loads: list[tuple[int, list[str]]] = [(0, []) for _ in range(count)]
    for f in sorted(files, key=lambda f: (-f.stat().st_size, str(f))):
        i = min(range(count), key=lambda k: loads[k][0])
        loads[i] = (loads[i][0] + f.stat().st_size, [*loads[i][1], str(f)])
    return [names for _, names in loads if names]


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 2:
            raise ValueError("expected K and at least one PATH")
        if not argv[0].isdigit():
            raise ValueError(f"K: expected an integer, got {argv[0]!r}")
        for shard in shards(int(argv[0]), argv[1:]):
            print(" ".join(shard))
    except ValueError as error:
        print(f"shard_tests: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
