"""bench/ops/shard_tests.py: the test files split into shards of about equal bytes, each file in
exactly one shard, bad arguments refused in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.ops import shard_tests  # noqa: E402


def test_every_file_once_and_the_shards_balanced(tmp_path):
    sizes = [900, 500, 400, 300, 200, 100, 100]
    for i, size in enumerate(sizes):
        (tmp_path / f"test_{i}.py").write_text("#" * size)
    (tmp_path / "helper.py").write_text("# not a test file")
    shards = shard_tests.shards(3, [str(tmp_path)])
    names = sorted(Path(f).name for shard in shards for f in shard)
    assert names == sorted(f"test_{i}.py" for i in range(len(sizes)))
    loads = [sum(Path(f).stat().st_size for f in shard) for shard in shards]
    assert max(loads) - min(loads) <= max(sizes[1:])  # greedy, largest first
    assert shard_tests.shards(20, [str(tmp_path)]) == [
        [str(tmp_path / f"test_{i}.py")] for i in range(7)
    ]


def test_files_are_taken_as_given_and_bad_arguments_refused(tmp_path, capsys):
    one = tmp_path / "test_one.py"
    one.write_text("")
    assert shard_tests.shards(2, [str(one)]) == [[str(one)]]
    assert shard_tests.main(["2", str(tmp_path / "missing.py")]) == 2
    assert "PATH: no test file or folder at" in capsys.readouterr().err
    assert shard_tests.main(["0", str(one)]) == 2
    assert "K: expected at least 1, got 0" in capsys.readouterr().err
    assert shard_tests.main(["two", str(one)]) == 2
    assert "K: expected an integer, got 'two'" in capsys.readouterr().err
    assert shard_tests.main(["2"]) == 2
    assert "expected K and at least one PATH" in capsys.readouterr().err
    with pytest.raises(ValueError):
        shard_tests.shards(0, [str(one)])
