"""bench/bench_scenes.py on the CPU: its scene table, the per-scene config, the means and
the table, and calls that accumulate into one scenes.json (a stand-in trains)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_scenes  # noqa: E402

from train.config import load_config  # noqa: E402


def test_scene_table():
    names = [s[0] for s in bench_scenes.SCENES]
    assert len(names) >= 5 and len(set(names)) == len(names)
    assert "realistic" in names
    sizes = [s[3] for s in bench_scenes.SCENES]
    assert sizes.count(800) == 1 and set(sizes) == {400, 800}
    from train.nerf.scan import LOOKS

    assert all(s[2] in LOOKS for s in bench_scenes.SCENES if s[1])
    assert bench_scenes.pick("cow_mirror,realistic") == [
        s for s in bench_scenes.SCENES if s[0] in ("realistic", "cow_mirror")
    ]
    with pytest.raises(bench_scenes.BenchError, match="unknown teapot"):
        bench_scenes.pick("teapot")


def test_overrides_make_a_valid_config(tmp_path):
    (tmp_path / "cow.off").write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    row = next(s for s in bench_scenes.SCENES if s[1] == "cow.off")
    sets = bench_scenes.scene_overrides(row, str(tmp_path), tmp_path / "data")
    config = load_config(ROOT / "configs" / "nerf_realistic_gpu.toml", sets)
    d = config.data
    assert (d.scene, d.scene_look, d.scene_size) == ("scan", row[2], row[3])
    assert Path(d.scene_mesh) == (tmp_path / "cow.off").resolve()
    assert d.path == str(tmp_path / "data" / f"{row[0]}_{row[3]}")
    realistic = bench_scenes.scene_overrides(bench_scenes.SCENES[0], None, tmp_path)
    assert load_config(ROOT / "configs" / "nerf_realistic_gpu.toml", realistic).data.scene == (
        "realistic"
    )
    with pytest.raises(bench_scenes.BenchError, match="--meshes"):
        bench_scenes.scene_overrides(row, None, tmp_path)
    with pytest.raises(bench_scenes.BenchError, match="no cow.off"):
        bench_scenes.scene_overrides(row, str(tmp_path / "elsewhere"), tmp_path)


def _entry(ours: float, dvgo: float | None) -> dict:
    entry = {"mesh": "m.off", "look": "glossy", "size": 400, "generate_seconds": 10.0}
    entry["ours"] = {"psnr": ours, "ssim": 0.9, "train_seconds": 100.0, "peak_allocated": 2**30}
    if dvgo is not None:
        entry["dvgo"] = {"psnr": dvgo, "ssim": 0.8, "train_seconds": 200.0, "peak_allocated": None}
    return entry


def test_means_and_table():
    results = {"a": _entry(30.0, 29.0), "b": _entry(34.0, None), "c": _entry(26.0, 27.0)}
    ours, dvgo = bench_scenes.means(results, "ours"), bench_scenes.means(results, "dvgo")
    assert ours["psnr"] == pytest.approx(30.0) and ours["scenes"] == 3
    assert dvgo["psnr"] == pytest.approx(28.0) and dvgo["peak_allocated"] is None
    assert dvgo["scenes"] == 2
    assert bench_scenes.difference(results) == (pytest.approx(0.0), 2)
    meta = {"device_name": "CPU", "torch": "x", "date": "now", "config": "c.toml"}
    table = bench_scenes.markdown(results, meta)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3 + 1  # header and its rule, scenes, mean
    assert rows[3].startswith("| b |") and "34.00" in rows[3] and "| - |" in rows[3]
    assert rows[-1].startswith("| mean") and "30.00" in rows[-1] and "28.00" in rows[-1]
    assert "+0.00 dB" in table


def test_main_accumulates_over_calls(tmp_path):
    calls = []

    def fake(row, args, device, entry, dvgo_dir):
        calls.append((row[0], args.ours_only, dvgo_dir))
        entry["generate_seconds"] = 1.5
        if not args.generate_only:
            entry["ours"] = {"psnr": 30.0 + len(calls), "ssim": 0.9, "train_seconds": 60.0}
            entry["ours"]["peak_allocated"] = 2**31

    out = tmp_path / "out"
    common = [
        "--out",
        str(out),
        "--ours-only",
        "--config",
        str(ROOT / "configs/nerf_realistic.toml"),
    ]
    assert bench_scenes.main(["--scenes", "realistic", *common], train=fake) == 0
    assert bench_scenes.main(["--scenes", "cow_mirror,bull_rough", *common], train=fake) == 0
    assert [c[0] for c in calls] == ["realistic", "cow_mirror", "bull_rough"]
    assert all(c[1] and c[2] is None for c in calls)  # no DirectVoxGO asked for or found
    saved = json.loads((out / "scenes.json").read_text())
    assert set(saved["scenes"]) == {"realistic", "cow_mirror", "bull_rough"}
    assert saved["means"]["ours"]["psnr"] == pytest.approx(32.0)
    assert saved["scenes"]["cow_mirror"]["look"] == "mirror"
    table = (out / "scenes.md").read_text()
    assert table.index("| realistic") < table.index("| cow_mirror") < table.index("| bull_rough")
    assert "2.00" in table  # GiB
    # DirectVoxGO asked for but not given: one line, exit 2
    code = bench_scenes.main(["--scenes", "realistic", "--out", str(out)], train=fake)
    assert code == 2 and len(calls) == 3
