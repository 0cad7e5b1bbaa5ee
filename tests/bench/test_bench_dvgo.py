"""bench/compare/dvgo/bench_dvgo.py on the CPU: its parsing and table, and a whole run against a
stand-in for DirectVoxGO (a script that prints what DirectVoxGO prints and writes 8-bit renders)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ is a package of the checkout

from bench.compare.dvgo import bench_dvgo, dvgo_table  # noqa: E402

LOG = """\
Loaded blender (111, 400, 400, 4) ...
train: start
scene_rep_reconstruction (coarse): iter   2500 / Loss: 0.002 / PSNR: 27.1 / Eps: 00:00:27
train: coarse geometry searching in 00:00:55
scene_rep_reconstruction (fine): iter   2500 / Loss: 0.001 / PSNR: 30.2 / Eps: 00:00:22
train: fine detail reconstruction in 00:02:53
train: finish (eps time 00:03:48 )
All results are dumped into work/dvgo_logs/bench/render_test_fine_last
Testing (400, 400, 3)
Testing psnr 36.30123 (avg)
Testing ssim 0.98123 (avg)
HARNESS total wall 301.5 s
CUDA_PEAK allocated 5368709120 reserved 6442450944
"""

FAKE_DVGO = """\
import json, os, sys
import numpy as np
from PIL import Image

args = sys.argv[1:]
for flag in ("--render_test", "--dump_images", "--eval_ssim"):
    assert flag in args, flag
ns = {}
exec(open(args[args.index("--config") + 1]).read(), ns)
assert os.path.isfile(ns["_base_"]) and ns["data"]["dataset_type"] == "blender"
scene = ns["data"]["datadir"]
out = os.path.join(ns["basedir"], ns["expname"], "render_test_fine_last")
os.makedirs(out, exist_ok=True)
frames = json.load(open(os.path.join(scene, "transforms_test.json")))["frames"]
for i, frame in enumerate(frames):
    rgba = np.asarray(Image.open(os.path.join(scene, frame["file_path"] + ".png"))) / 255.0
    rgb = rgba[..., :3] * rgba[..., 3:] + 1 - rgba[..., 3:]  # on white
    rgb = np.clip(rgb * 0.9 + 0.05, 0, 1)  # a render that is not quite right
    Image.fromarray((rgb * 255 + 0.5).astype(np.uint8)).save(os.path.join(out, f"{i:03d}.png"))
if "lib.grid" in sys.modules:  # run through bench/compare/dvgo/dvgo_grid.py
    print("grid class:", sys.modules["lib.grid"].DenseGrid.__name__)
    print("optimizer:", sys.modules["lib.utils"].MaskedAdam.__name__)
print("train: coarse geometry searching in 00:00:01")
print("train: fine detail reconstruction in 00:00:02")
print("All results are dumped into", out)
print("Testing psnr 21.5 (avg)")
print("Testing ssim 0.8 (avg)")
"""


def test_parse_dvgo_log():
    parsed = bench_dvgo.parse_dvgo_log(LOG)
    assert parsed["coarse_seconds"] == 55 and parsed["fine_seconds"] == 173
    assert parsed["train_seconds"] == 228 and parsed["process_seconds"] == 301.5
    assert parsed["psnr"] == pytest.approx(36.30123) and parsed["ssim"] == pytest.approx(0.98123)
    assert parsed["peak_allocated"] == 5 * 2**30 and parsed["peak_reserved"] == 6 * 2**30
    assert parsed["render_dir"].endswith("render_test_fine_last")
    assert bench_dvgo.hms("00:01:60") == 120  # it rounds the seconds, not the minutes
    with pytest.raises(bench_dvgo.BenchError, match="did not finish"):
        bench_dvgo.parse_dvgo_log(LOG.split("train: fine")[0])


def test_rows_pick_the_evaluations_at_the_times():
    records = [
        {"step": s, "train_seconds": t, "psnr": p, "ssim": 0.9, "background_opacity": 0.002}
        for s, t, p in [
            (100, 10.0, 20.0),
            (250, 76.2, 30.0),
            (500, 152.1, 31.0),
            (700, 228.4, 32.0),
        ]
    ]
    ours = {"records": records, "peak_allocated": 2**30, "peak_reserved": 2**31}
    dvgo = bench_dvgo.parse_dvgo_log(LOG)
    scored = {"psnr": 36.2, "ssim": 0.98, "views": 25, "background_mse": 1.5e-4}
    rows = dvgo_table.table_rows(dvgo, scored, ours)
    assert rows[1]["background_mse"] == 1.5e-4
    assert [r["train_seconds"] for r in rows] == [228, 228, 76.2, 152.1, 228.4]
    assert rows[4]["moment"] == "at T (equal time), step 700"
    short = {**ours, "records": records[:2]}  # ended at 76.2 s
    rows = dvgo_table.table_rows(dvgo, None, short)
    assert rows[2]["moment"] == "2T/3 not reached: its end, step 250"
    meta = {
        "device_name": "H100",
        "torch": "2.11",
        "date": "today",
        "config": "c.toml",
        "scene": "realistic",
        "size": 400,
        "train_views": 100,
        "test_views": 25,
    }
    table = dvgo_table.markdown(rows, meta)
    dvgo_row = "| DirectVoxGO | end (coarse + fine), its float renders | 228.0 | 36.30 | 0.9812 |"
    assert f"{dvgo_row} - | - | 5.00 / 6.00 |" in table  # no background numbers of its own
    assert (
        "| ours | at T/3, step 250 | 76.2 | 30.00 | 0.9000 | - | 2.00e-03 | 1.00 / 2.00 |" in table
    )


def test_missing_dvgo_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("DVGO_DIR", raising=False)
    assert bench_dvgo.main(["--out", str(tmp_path)]) == 2
    assert "DirectVoxGO not given: pass --dvgo DIR or set DVGO_DIR" in capsys.readouterr().err
    assert bench_dvgo.main(["--dvgo", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "not a DirectVoxGO copy" in capsys.readouterr().err
    assert bench_dvgo.main(["--dvgo", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err


def test_whole_run_against_a_stand_in(tmp_path, capsys):
    fake = tmp_path / "dvgo"
    (fake / "configs").mkdir(parents=True)
    (fake / "configs" / "default.py").write_text("coarse_train = dict(N_iters=5000)\n")
    (fake / "run_dvgo.py").write_text(FAKE_DVGO)
    out, work = tmp_path / "out", tmp_path / "work"
    sets = [
        f"data.path={tmp_path / 'scene'}",
        "data.generate=true",
        "data.scene_size=24",
        "data.scene_train_views=4",
        "data.scene_test_views=2",
        "grid.resolution=12",
        "train.upsample_steps=[]",
        "train.upsample_resolutions=[]",
        "train.batch_size=256",
        "train.steps=3",  # the config's own schedule, for --shipped
        "device=cpu",
    ]
    argv = ["--dvgo", str(fake), "--out", str(out), "--work", str(work), "--ours-steps", "6"]
    argv += ["--shipped"]
    argv += ["--config", str(ROOT / "configs" / "nerf_scene.toml")]
    argv += [x for s in sets for x in ("--set", s)]
    assert bench_dvgo.main(argv) == 0
    result = json.loads((out / "dvgo.json").read_text())
    assert result["dvgo"]["train_seconds"] == 3 and result["dvgo"]["peak_allocated"] is None
    scored = result["dvgo_scored"]
    assert scored["views"] == 2 and 15 < scored["psnr"] < 40 and 0 < scored["ssim"] < 1
    ours = result["ours"]["records"]
    assert ours[-1]["step"] == 6 and "ssim" in ours[-1]
    systems = [r["system"] for r in result["rows"]]
    assert systems[:2] == ["DirectVoxGO", "DirectVoxGO"] and set(systems[2:]) == {"ours"}
    assert len(systems) in (6, 7)  # at T/3, 2T/3, T (or the end, if before), end, --shipped
    assert result["rows"][-1]["moment"] == "the config's own schedule, its end, step 3"
    assert (out / "dvgo_test_000.png").is_file() and (out / "ours" / "summary.json").is_file()
    assert "| ours |" in (out / "dvgo.md").read_text()
    assert "CUDA_PEAK none" in (out / "dvgo.log").read_text()
    assert (work / "dvgo.log").read_text() == (out / "dvgo.log").read_text()
    # in two calls: DirectVoxGO alone, then ours reading its output
    first, again = tmp_path / "first", tmp_path / "again"
    argv1 = [*argv, "--dvgo-only"]
    argv1[argv1.index(str(out))] = str(first)
    assert bench_dvgo.main(argv1) == 0
    assert not (first / "ours").exists()
    assert json.loads((first / "dvgo.json").read_text())["dvgo_scored"] == scored
    argv2 = [a for a in argv if a not in ("--dvgo", str(fake))]
    argv2[argv2.index(str(out))] = str(again)
    assert bench_dvgo.main([*argv2, "--dvgo-log", str(work / "dvgo.log")]) == 0
    assert json.loads((again / "dvgo.json").read_text())["dvgo_scored"] == scored
    assert (again / "ours" / "summary.json").is_file()


FAKE_LIB = {
    "__init__.py": "",
    "grid.py": "class DenseGrid:\n    pass\n",
    "masked_adam.py": "class MaskedAdam:\n    pass\n\nadam_upd_cuda = None\n",
    "utils.py": "from .masked_adam import MaskedAdam\n",
}


def test_grid_swap_against_a_stand_in(tmp_path, capsys):
    """--grid ours runs the stand-in through bench/compare/dvgo/dvgo_grid.py (its lib.grid.DenseGrid
    and lib.utils.MaskedAdam swapped) and tabulates it beside --against's output."""
    fake = tmp_path / "dvgo"
    (fake / "configs").mkdir(parents=True)
    (fake / "lib").mkdir()
    (fake / "configs" / "default.py").write_text("coarse_train = dict(N_iters=5000)\n")
    (fake / "run_dvgo.py").write_text(FAKE_DVGO)
    for name, text in FAKE_LIB.items():
        (fake / "lib" / name).write_text(text)
    own = tmp_path / "own.log"
    own.write_text(LOG.replace("work/dvgo_logs", str(tmp_path / "gone")))
    out, work = tmp_path / "out", tmp_path / "work"
    sets = [f"data.path={tmp_path / 'scene'}", "data.generate=true", "data.scene_size=24"]
    sets += ["device=cpu"]
    sets += ["data.scene_train_views=4", "data.scene_test_views=2"]
    argv = ["--dvgo", str(fake), "--out", str(out), "--work", str(work), "--grid", "ours"]
    argv += ["--against", str(own), "--config", str(ROOT / "configs" / "nerf_scene.toml")]
    argv += [x for s in sets for x in ("--set", s)]
    assert bench_dvgo.main(argv) == 0  # the stand-in runs in a subprocess, as DirectVoxGO
    log = (out / "dvgo_grid.log").read_text()
    assert "grid class: VoxelDenseGrid" in log and "optimizer: MemoryOrderAdam" in log
    table = (out / "dvgo_grid.md").read_text()
    assert "| DirectVoxGO (its grid) | 55 | 173 | 228 | 1.00 | 36.301 |" in table
    assert "| DirectVoxGO on grid.sample | 1 | 2 | 3 | 0.01 | 21.500 |" in table
    rows = json.loads((out / "dvgo_grid.json").read_text())
    assert rows["DirectVoxGO on grid.sample"]["scored"]["views"] == 2
    assert rows["DirectVoxGO (its grid)"]["scored"] is None  # its renders are gone


def test_dvgo_iters_shorten_both_stages(tmp_path):
    """--dvgo-iters C,F: the config's coarse and fine iterations, its fine stage's
    progressive scaling at the default's fractions (1000..4000 of 20000)."""
    path = bench_dvgo.write_dvgo_config(tmp_path, tmp_path / "dvgo", tmp_path / "scene", "300,600")
    ns: dict = {}
    exec(path.read_text(), ns)
    assert ns["coarse_train"] == {"N_iters": 300}
    assert ns["fine_train"] == {"N_iters": 600, "pg_scale": [30, 60, 90, 120]}
    plain = bench_dvgo.write_dvgo_config(tmp_path, tmp_path / "dvgo", tmp_path / "scene")
    assert "N_iters" not in plain.read_text()
