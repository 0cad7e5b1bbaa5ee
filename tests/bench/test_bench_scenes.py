"""bench/training/bench_scenes.py on the CPU: its scene table, the per-scene config, the means and
the table, and calls that accumulate into one scenes.json (a stand-in trains)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.training import bench_scenes, scene_set, scenes_table  # noqa: E402
from train.config import load_config  # noqa: E402


def test_scene_table():
    names = [s[0] for s in scene_set.SCENES]
    assert len(names) >= 5 and len(set(names)) == len(names)
    assert "realistic" in names
    sizes = [s[3] for s in scene_set.SCENES]
    assert set(sizes) == {400, 800}
    from train.nerf.scenes.scan import LOOKS
    from train.nerf.scenes.scan_mesh import UP_AXES

    assert all(s[2] in LOOKS and s.up in UP_AXES for s in scene_set.SCENES if s[1])
    assert scene_set.pick("cow_mirror,realistic") == [
        s for s in scene_set.SCENES if s[0] in ("realistic", "cow_mirror")
    ]
    with pytest.raises(bench_scenes.BenchError, match="unknown teapot"):
        scene_set.pick("teapot")


def test_the_halves_are_disjoint_and_the_held_out_meshes_are_new():
    tune = scene_set.pick(None, split="tune")
    held = scene_set.pick(None, split="held_out")
    assert [s.name for s in tune] == [
        "realistic",
        "bunny_glossy",
        "cow_mirror",
        "bull_rough",
        "camel_translucent",
        "armadillo_large",
    ]  # the six every config so far was tuned on
    assert len(held) >= 4 and scene_set.pick(None) == tune + held
    assert not {s.mesh for s in tune} & {s.mesh for s in held}
    assert len({s.look for s in held}) >= 3  # mixed looks, not one
    assert sorted(s.look for s in held) != sorted(s.look for s in tune if s.mesh)
    assert all(s.split in scene_set.SPLITS for s in scene_set.SCENES)
    assert scene_set.split_of("cow_mirror") == "tune"
    assert scene_set.split_of(held[0].name) == "held_out"
    assert scene_set.split_of("teapot") is None


def test_split_selection_and_its_errors():
    held = scene_set.pick(None, split="held_out")
    assert scene_set.pick(held[0].name, split="held_out") == [held[0]]
    assert scene_set.pick("cow_mirror", split="all")[0].name == "cow_mirror"
    with pytest.raises(bench_scenes.BenchError, match="--split held_out: cow_mirror not in it"):
        scene_set.pick("cow_mirror", split="held_out")
    with pytest.raises(bench_scenes.BenchError, match="--split: expected tune, held_out or all"):
        scene_set.pick(None, split="test")


def test_held_out_meshes_resolve(tmp_path):
    for row in scene_set.pick(None, split="held_out"):
        (tmp_path / row.mesh).write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    for row in scene_set.pick(None, split="held_out"):
        sets = scene_set.scene_overrides(row, str(tmp_path), tmp_path / "data")
        config = load_config(ROOT / "configs" / "nerf_realistic_gpu.toml", sets)
        d = config.data
        assert (d.scene, d.scene_look, d.scene_up) == ("scan", row.look, row.up)
        assert Path(d.scene_mesh) == (tmp_path / row.mesh).resolve()


@pytest.mark.skipif(
    not (ROOT / ".anchors" / "thin").is_dir(), reason="CGAL's demo meshes are not unpacked here"
)
def test_held_out_meshes_are_in_cgals_demo_data():
    from train.nerf.scenes import read_mesh

    for row in scene_set.pick(None, split="held_out"):
        mesh = read_mesh(scene_set.find_mesh(str(ROOT / ".anchors" / "thin"), row.mesh))
        assert len(mesh.faces) > 1000  # a scan, fine enough for thin parts


def test_overrides_make_a_valid_config(tmp_path):
    (tmp_path / "cow.off").write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    row = next(s for s in scene_set.SCENES if s[1] == "cow.off")
    sets = scene_set.scene_overrides(row, str(tmp_path), tmp_path / "data")
    config = load_config(ROOT / "configs" / "nerf_realistic_gpu.toml", sets)
    d = config.data
    assert (d.scene, d.scene_look, d.scene_size) == ("scan", row[2], row[3])
    assert Path(d.scene_mesh) == (tmp_path / "cow.off").resolve()
    assert d.path == str(tmp_path / "data" / f"{row[0]}_{row[3]}")
    realistic = scene_set.scene_overrides(scene_set.SCENES[0], None, tmp_path)
    assert load_config(ROOT / "configs" / "nerf_realistic_gpu.toml", realistic).data.scene == (
        "realistic"
    )
    with pytest.raises(bench_scenes.BenchError, match="--meshes"):
        scene_set.scene_overrides(row, None, tmp_path)
    with pytest.raises(bench_scenes.BenchError, match="no cow.off"):
        scene_set.scene_overrides(row, str(tmp_path / "elsewhere"), tmp_path)


def _entry(ours: float, dvgo: float | None) -> dict:
    entry = {"mesh": "m.off", "look": "glossy", "size": 400, "generate_seconds": 10.0}
    entry["ours"] = {"psnr": ours, "ssim": 0.9, "train_seconds": 100.0, "peak_allocated": 2**30}
    entry["ours"]["curve"] = [[10.0, ours - 2.0], [50.0, ours - 1.0], [100.0, ours]]
    if dvgo is not None:
        entry["dvgo"] = {"psnr": dvgo, "ssim": 0.8, "train_seconds": 200.0, "peak_allocated": None}
    return entry


def test_means_and_table():
    results = {"a": _entry(30.0, 29.0), "b": _entry(34.0, None), "c": _entry(26.0, 27.0)}
    ours, dvgo = scenes_table.means(results, "ours"), scenes_table.means(results, "dvgo")
    assert ours["psnr"] == pytest.approx(30.0) and ours["scenes"] == 3
    assert dvgo["psnr"] == pytest.approx(28.0) and dvgo["peak_allocated"] is None
    assert dvgo["scenes"] == 2
    assert scenes_table.difference(results) == (pytest.approx(0.0), 2)
    assert scenes_table.systems(results) == ["dvgo", "ours"]
    meta = {"device_name": "CPU", "torch": "x", "date": "now", "config": "c.toml"}
    table = scenes_table.markdown(results, meta)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 2 + 1 + 2  # header and its rule, a and c with both, b ours alone
    assert rows[2].startswith("| a | - | 400x400 | dvgo | 29.00")
    assert rows[3].startswith("| a | - | 400x400 | ours | 30.00") and "| +1.00 |" in rows[3]
    assert rows[4].startswith("| b | - | 400x400 | ours | 34.00") and rows[4].endswith(
        "| - | - | - |"
    )
    assert "| -1.00 |" in rows[6]
    assert "- ours: mean PSNR 30.00 dB over 3 scenes" in table
    # a: ours reaches 29.0 at 50 s of its 200 (0.25); c: never reaches 27.0
    assert "against DirectVoxGO on 2: mean +0.00 dB, 1 below it, its PSNR reached on 1" in table
    assert "(by 0.25 of its time at worst);" in table
    # mean curves over a and c: 26, 27, 28 at 10, 50, 100 s; DirectVoxGO's mean 28 in 200 s
    assert "; the mean curve at its mean PSNR at 100.0 s, 0.50 of its mean time." in table
    assert scenes_table.mean_reach(results, "ours") == (pytest.approx(100.0), pytest.approx(0.5))
    results["a"]["dvgo"]["psnr"] = 31.0  # mean 29: never
    assert scenes_table.mean_reach(results, "ours") is None
    assert "never reached by the mean curve." in scenes_table.markdown(results, meta)
    assert "- dvgo: mean PSNR 28.00 dB over 2 scenes" in table


def test_table_marks_the_split_and_means_per_split(tmp_path):
    tune, held = (scene_set.pick(None, split=s)[:2] for s in ("tune", "held_out"))
    results = {tune[0].name: _entry(30.0, 29.0), tune[1].name: _entry(32.0, 30.0)}
    results |= {held[0].name: _entry(20.0, 22.0), held[1].name: _entry(24.0, 23.0)}
    meta = {"device_name": "CPU", "torch": "x", "date": "now", "config": "c.toml"}
    table = scenes_table.markdown(results, meta)
    assert f"| {tune[0].name} | tune | 400x400 | ours | 30.00" in table
    assert f"| {held[0].name} | held_out |" in table
    assert "Means, tuning half (2 scenes):\n- dvgo: mean PSNR 29.50 dB" in table
    assert "- ours: mean PSNR 31.00 dB over 2 scenes" in table
    assert "Means, held-out half (2 scenes):\n- dvgo: mean PSNR 22.50 dB" in table
    assert "- ours: mean PSNR 22.00 dB over 2 scenes" in table
    assert "against DirectVoxGO on 2: mean -0.50 dB, 1 below it" in table
    assert "Means, all scenes (4 scenes):" in table
    scenes_table.save(tmp_path, results, meta)
    saved = json.loads((tmp_path / "scenes.json").read_text())["means_by_split"]
    assert saved["held-out half"]["ours"]["psnr"] == pytest.approx(22.0)
    only_held = {n: r for n, r in results.items() if n == held[0].name}
    assert "Means, all scenes" not in scenes_table.markdown(only_held, meta)


def test_ours_result_keeps_the_curves_and_the_captures():
    records = [
        {"step": 100, "psnr": 25.0, "train_seconds": 1.0, "train_mse": 1e-2},
        {"step": 150, "lr": 0.1},  # a record without an evaluation
        {"step": 200, "psnr": 27.0, "train_seconds": 2.0, "train_mse": 1e-3},
    ]
    summary = {
        "psnr": 27.0,
        "train_seconds": 2.0,
        "graph_captures": 3,
        "graph_capture_seconds": 0.2,
    }
    run = {"summary": summary, "records": records, "peak_allocated": 1, "peak_reserved": 2}
    result = bench_scenes.ours_result(run)
    assert result["curve"] == [[1.0, 25.0], [2.0, 27.0]]
    assert result["train_psnr"] == pytest.approx([20.0, 30.0])
    assert (result["graph_captures"], result["graph_capture_seconds"]) == (3, 0.2)
    del records[0]["train_mse"], summary["graph_captures"]
    result = bench_scenes.ours_result(run)
    assert result["train_psnr"] is None and "graph_captures" not in result


def test_against_dvgo_reads_the_curve():
    ours = {"psnr": 30.0, "curve": [[10.0, 27.0], [50.0, 29.5], [100.0, 30.0]]}
    dvgo = {"psnr": 29.0, "train_seconds": 40.0}
    # ours passes 29.0 first at 50 s (1.25 of its 40 s); at its 40 s ours is at 29.5 (50 s)
    assert scenes_table.against_dvgo(ours, dvgo) == {
        "delta": pytest.approx(1.0),
        "at_time": 29.5,
        "reach": pytest.approx(1.25),
    }
    longer = {"psnr": 31.0, "train_seconds": 500.0}  # ours ended before; never reached
    assert scenes_table.against_dvgo(ours, longer) == {
        "delta": pytest.approx(-1.0),
        "at_time": None,
        "reach": None,
    }
    assert scenes_table.against_dvgo(ours, None)["delta"] is None


@pytest.mark.parametrize("label", ["dvgo", "size", "a b", "x/y", ""])
def test_label_must_be_a_free_word(label):
    with pytest.raises(bench_scenes.BenchError, match="--label"):
        bench_scenes.check_label(label)
    bench_scenes.check_label("quality_2x")


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


def test_gsplat_runs_as_a_program_of_its_own_and_its_failure_is_one_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("on a GPU it would train")
    with pytest.raises(
        bench_scenes.BenchError, match="gsplat on .*: bench/compare/gsplat/gsplat_scene.py failed"
    ):
        bench_scenes.run_gsplat(tmp_path, tmp_path / "work", 5)


def test_ngp_runs_as_a_program_of_its_own_and_its_failure_is_one_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("on a GPU it would train")
    with pytest.raises(
        bench_scenes.BenchError, match="ngp on .*: bench/compare/nerfacc/bench_nerfacc.py failed"
    ):
        bench_scenes.run_ngp(tmp_path, tmp_path / "work", 5, None)
    with pytest.raises(bench_scenes.BenchError, match="--label"):
        bench_scenes.check_label("ngp")  # the anchor's name in the table


@pytest.mark.parametrize("label", ["ngp", "ngp_rays", "ngp_step-2"])
def test_the_anchor_and_its_variants_are_named_ngp(label):
    bench_scenes.check_ngp_label(label)


@pytest.mark.parametrize("label", ["ours", "ngp_", "ngpx", "ngp_a b", "dvgo"])
def test_other_anchor_names_are_refused(label):
    with pytest.raises(bench_scenes.BenchError, match="--ngp-label: expected ngp or ngp_<"):
        bench_scenes.check_ngp_label(label)
