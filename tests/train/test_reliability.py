"""A run that meets the world: signals, periodic checkpoints, a full disk, too little
memory, a scene whose frames point outside it. Each stops with one line and a usable
run directory."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import train.loop
from tests.train.nerf.test_blender import random_rgba, write_scene
from tests.train.test_train import TINY, final_state, one_line_error, sets, without_timing
from train.__main__ import main
from train.config import ConfigError, load_config
from train.distributed import World
from train.errors import OutputFileError
from train.interrupt import AGREE_EVERY, Interrupted, StopCheck, StopSignals
from train.memory import available_bytes, check_memory, is_out_of_memory, needs
from train.nerf.data.blender import DatasetError, load_blender

ROOT = Path(__file__).resolve().parents[2]
NO_SPACE = "No space left on device (ENOSPC)"


def assert_same_run(a: Path, b: Path) -> None:
    """Two run directories hold the same training result (bitwise, on the CPU)."""
    sa, sb = final_state(a), final_state(b)
    assert sa["step"] == sb["step"]
    assert torch.equal(sa["model"]["features"], sb["model"]["features"])
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(sa["optimizer"]["state"][0][key], sb["optimizer"]["state"][0][key])
    assert without_timing(a) == without_timing(b)


def slow_steps(monkeypatch, before_step) -> None:
    """Every experiment made by the loop calls `before_step(n)` before its n-th batch."""
    make = train.loop.make_experiment

    def make_slow(*args, **kwargs):
        exp = make(*args, **kwargs)
        loss, count = exp.loss, [0]

        def counted_loss():
            count[0] += 1
            before_step(count[0])
            return loss()

        exp.loss = counted_loss
        return exp

    monkeypatch.setattr(train.loop, "make_experiment", make_slow)


# ---- signals -------------------------------------------------------------------------------

# `python -m train` whose every step first sleeps argv[1] seconds: long enough to signal.
SLOW_MAIN = """
import sys, time
import train.loop
make = train.loop.make_experiment
def make_slow(*args, **kwargs):
    exp = make(*args, **kwargs)
    loss = exp.loss
    def slow_loss():
        time.sleep(float(sys.argv[1]))
        return loss()
    exp.loss = slow_loss
    return exp
train.loop.make_experiment = make_slow
from train.__main__ import main
sys.exit(main(sys.argv[2:]))
"""
SIGNALLED = sets(*TINY, "train.steps=40", "output.checkpoint_every=0")


def start_slow(out: Path, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SLOW_MAIN, str(seconds), "--out", str(out), *SIGNALLED],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test runner in the background may ignore SIGINT; the command would inherit it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The uninterrupted run the signalled ones are compared with."""
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main(["--out", str(out), *SIGNALLED]) == 0
    return out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_finishes_the_step_writes_a_checkpoint_and_resumes(tmp_path, whole, sig, code):
    out = tmp_path / "run"
    proc = start_slow(out, 0.05)
    metrics = out / "metrics.jsonl"
    wait_for(proc, lambda: metrics.is_file() and metrics.read_text())  # past step 8
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    step = final_state(out)["step"]
    assert 8 <= step < 40
    assert err.strip() == f"interrupted at step {step} of 40; continue with --resume"
    assert not (out / "checkpoint.pt.tmp").exists() and not (out / "summary.json").exists()
    assert main(["--out", str(out), "--resume"]) == 0
    assert_same_run(out, whole)


def test_a_second_signal_exits_at_once(tmp_path):
    out = tmp_path / "run"
    proc = start_slow(out, 60.0)  # the first step takes a minute
    wait_for(proc, (out / "config.toml").is_file)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - start < 30
    assert err.strip() == "grid-train: second SIGINT: quitting without a checkpoint"
    assert not (out / "checkpoint.pt").exists()


def test_a_signal_stops_run_at_that_step_and_the_handlers_come_back(tmp_path, capsys, monkeypatch):
    def mine(signum, frame):
        raise AssertionError("the run's handler should be in place")

    previous = signal.signal(signal.SIGTERM, mine)
    at = [13]  # the step during which the signal comes
    try:
        slow_steps(monkeypatch, lambda n: n == at[0] and os.kill(os.getpid(), signal.SIGTERM))
        out = tmp_path / "run"
        config = load_config(None, TINY)
        with pytest.raises(Interrupted) as stop:
            train.loop.run(config, out)
        assert (stop.value.step, stop.value.steps, stop.value.exit_code) == (13, 24, 143)
        assert str(stop.value) == "interrupted at step 13 of 24; continue with --resume"
        assert final_state(out)["step"] == 13
        assert signal.getsignal(signal.SIGTERM) is mine
        # through the command line: the same line, exit code 143; on an error too, the
        # handlers come back
        at[0] = 2
        assert main(["--out", str(out), "--resume"]) == 143
        assert one_line_error(capsys) == "interrupted at step 15 of 24; continue with --resume"
        assert signal.getsignal(signal.SIGTERM) is mine
        with pytest.raises(ConfigError, match="--overwrite: not used with --resume"):
            train.loop.run(load_config(None, TINY), out, resume=True, overwrite=True)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


class Ranks(World):
    """A rank of two whose peer reports `peer` ([signal, checkpoint due]) at each agreement."""

    def __init__(self, peer: list[int]) -> None:
        super().__init__(rank=0, size=2)
        object.__setattr__(self, "peer", peer)
        object.__setattr__(self, "agreements", [])

    def max_(self, values: list[int]) -> list[int]:
        self.agreements.append(list(values))
        return [max(a, b) for a, b in zip(values, self.peer, strict=True)]


def test_ranks_agree_on_the_stop_every_few_steps():
    signals = StopSignals()
    signals.signum = signal.SIGTERM  # this rank got SIGTERM before step 3 ended
    world = Ranks([0, 0])
    check = StopCheck(signals, 0.0, world)
    assert check.poll(3, 100) == (False, False)  # not an agreement step: go on
    assert world.agreements == []
    assert check.poll(AGREE_EVERY, 100) == (True, False) and check.signum == signal.SIGTERM
    # the other rank got SIGINT, this one nothing: both stop, on the same signal
    world = Ranks([signal.SIGINT, 1])
    check = StopCheck(StopSignals(), 0.0, world)
    assert check.poll(17, 17) == (True, True) and check.signum == signal.SIGINT


# ---- output.checkpoint_minutes ------------------------------------------------------------


@pytest.mark.parametrize("minutes, steps", [(1e-9, list(range(1, 25))), (0, [24]), (10, [24])])
def test_checkpoints_every_few_minutes(tmp_path, monkeypatch, minutes, steps):
    written = []
    monkeypatch.setattr(
        train.loop, "save_checkpoint", lambda path, state: written.append(state["step"])
    )
    extra = ["output.checkpoint_every=0", f"output.checkpoint_minutes={minutes}"]
    train.loop.run(load_config(None, [*TINY, *extra]), tmp_path / "run")
    assert written == steps
    with pytest.raises(ConfigError, match=r"^output.checkpoint_minutes: expected a non-negative"):
        load_config(None, ["output.checkpoint_minutes=-1"])


# ---- a full disk ---------------------------------------------------------------------------


class FullFile:
    """A file on a full disk: each write stores half the data, then raises ENOSPC."""

    def __init__(self, file) -> None:
        self.file = file

    def write(self, data):
        self.file.write(data[: len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def fill_disk(monkeypatch, name: str) -> None:
    """Writing any file called `name` (by open, Path.open, write_text, savefig, PIL)
    fails with ENOSPC after writing half of what was asked."""
    real = builtins.open

    def open_(file, mode="r", *args, **kwargs):
        f = real(file, mode, *args, **kwargs)
        if isinstance(file, str | os.PathLike) and Path(file).name == name and mode[0] in "wax":
            return FullFile(f)
        return f

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)


def test_a_full_disk_while_writing_the_checkpoint_keeps_the_previous_one(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY), "--stop-at", "8"]) == 0
    before = (out / "checkpoint.pt").read_bytes()
    with pytest.MonkeyPatch.context() as patch:
        fill_disk(patch, "checkpoint.pt.tmp")
        capsys.readouterr()
        assert main(["--out", str(out), "--resume"]) == 2
    path = out / "checkpoint.pt"
    assert one_line_error(capsys) == (
        f"grid-train: write error: {path}: cannot write it: {NO_SPACE}; checkpoint.pt of "
        f"step 8 is intact: free space, then continue with --resume"
    )
    assert path.read_bytes() == before and not (out / "checkpoint.pt.tmp").exists()
    assert main(["--out", str(out), "--resume"]) == 0  # space again: it completes
    assert final_state(out)["step"] == 24


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_pytorchs_own_error_on_a_full_device_is_one_line(tmp_path, capsys):
    # PyTorch's zip writer turns ENOSPC into "RuntimeError: unexpected pos ..."
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt.tmp").symlink_to("/dev/full")
    assert main(["--out", str(out), *sets(*TINY)]) == 2
    err = one_line_error(capsys)
    assert f"write error: {out / 'checkpoint.pt'}: cannot write it: {NO_SPACE}" in err
    assert "no checkpoint was written yet: free space, then start again with --overwrite" in err
    assert not os.path.lexists(out / "checkpoint.pt.tmp")


@pytest.mark.parametrize(
    "name, extra, left",
    [
        ("config.toml", [], "no checkpoint was written yet: free space, then start again"),
        ("metrics.jsonl", [], "checkpoint.pt of step 8 is intact: free space, then continue"),
        ("summary.json", [], "checkpoint.pt of step 24 is intact: free space, then continue"),
        ("slices.png", ["output.pictures=true"], "checkpoint.pt of step 24 is intact"),
    ],
)
def test_a_full_disk_while_writing_a_run_file(tmp_path, monkeypatch, capsys, name, extra, left):
    out = tmp_path / "run"
    if name == "metrics.jsonl":  # the first evaluation's line goes in; the second fails
        assert main(["--out", str(out), *sets(*TINY), "--stop-at", "8"]) == 0
        before = (out / name).read_text()
        capsys.readouterr()
    fill_disk(monkeypatch, name)
    args = ["--resume"] if name == "metrics.jsonl" else sets(*TINY, *extra)
    assert main(["--out", str(out), *args]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"grid-train: write error: {out / name}: cannot write it: {NO_SPACE}; ")
    assert left in err
    if name == "metrics.jsonl":  # the half-written line is gone again
        assert (out / name).read_text() == before
    else:
        assert not (out / name).exists()
    monkeypatch.undo()
    if name in ("metrics.jsonl", "summary.json"):
        assert main(["--out", str(out), "--resume"]) == 0
        assert json.loads((out / "summary.json").read_text())["steps"] == 24


def test_a_read_only_run_directory(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    mkdir = Path.mkdir

    def read_only(path, *args, **kwargs):
        if path == out:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["--out", str(out), *sets(*TINY)]) == 2
    assert one_line_error(capsys) == (
        f"grid-train: write error: {out}: cannot write it: Read-only file system (EROFS); "
        "nothing was written: fix that, then run the command again"
    )


def test_a_full_disk_while_writing_the_mesh(tmp_path, monkeypatch, capsys):
    from tests.train.sdf.test_sdf import SHORT

    out = tmp_path / "run"
    fill_disk(monkeypatch, "mesh.ply")
    assert main(["--out", str(out), *sets(*SHORT, "train.steps=40")]) == 2
    err = one_line_error(capsys)
    assert f"write error: {out / 'mesh.ply'}: cannot write it: {NO_SPACE}" in err
    assert not (out / "mesh.ply").exists()


def test_a_full_disk_while_generating_the_scene_leaves_nothing(tmp_path, monkeypatch, capsys):
    from tests.train.nerf.test_nerf import SHORT

    scene = tmp_path / "scene"
    fill_disk(monkeypatch, "r_0.png")
    tiny = ("data.scene_size=8", "data.scene_train_views=2", "data.scene_test_views=1")
    args = sets(*SHORT, f"data.path={scene}", "data.generate=true", *tiny)
    assert main(["--out", str(tmp_path / "run"), *args]) == 2
    generating, err = capsys.readouterr().err.strip().splitlines()  # one line of news first
    assert generating.startswith("generating the procedural scene") and "Traceback" not in err
    assert err.startswith(f"grid-train: write error: data.path: {scene}: cannot write it: ")
    assert "nothing was written: free space, then run the command again" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no scene, no staging, no run


# ---- memory ----------------------------------------------------------------------------------


def test_a_grid_that_cannot_fit_is_refused_before_allocating(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY, "grid.resolution=5000")]) == 2
    err = one_line_error(capsys)
    assert err.startswith("grid-train: config error: grid.resolution: this run needs at least ")
    assert "2000.0 GB for the 5000x5000x5000 grid" in err and "lower grid.resolution" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["grid.resolution=500"], "grid.resolution"),
        (
            ["train.upsample_steps=[10]", "train.upsample_resolutions=[500]"],
            "train.upsample_resolutions",
        ),
        (["train.batch_size=50000000"], "train.batch_size"),
        (["experiment=nerf", "data.scene_size=1200", "grid.resolution=8"], "data.scene_size"),
        (["experiment=sdf", "points.count=100000000", "grid.resolution=8"], "points.count"),
    ],
)
def test_the_refusal_names_the_key_that_needs_the_most(overrides, key):
    config = load_config(None, ["device=cpu", *overrides])
    with pytest.raises(ConfigError) as error:
        check_memory(config, torch.device("cpu"), available=10**9)
    message = str(error.value)
    assert message.startswith(f"{key}: this run needs at least "), message
    assert "the machine has 1.0 GB free" in message and message.endswith(f"lower {key}")


def test_the_shipped_configs_are_never_refused():
    for path in sorted(ROOT.glob("configs/*.toml")):
        config = load_config(path, ["device=cpu"])
        assert sum(n.bytes for n in needs(config)) < 4e9, path
        check_memory(config, torch.device("cpu"), available=4 * 10**9)
        check_memory(config, torch.device("cpu"))  # this machine's free memory


def test_free_memory_is_the_lesser_of_the_machines_and_the_containers(monkeypatch):
    files = {
        "/proc/meminfo": "MemTotal: 100 kB\nMemAvailable:   20000000 kB\n",
        "/sys/fs/cgroup/memory.max": "8000000000\n",
        "/sys/fs/cgroup/memory.current": "7000000000\n",
        "/sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 500000000\n",  # reclaimable
    }
    read = Path.read_text

    def fake(path, *args, **kwargs):
        return files[str(path)] if str(path) in files else read(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", fake)
    assert available_bytes(torch.device("cpu")) == 1_500_000_000
    files["/sys/fs/cgroup/memory.max"] = "max\n"  # no limit: the machine's
    assert available_bytes(torch.device("cpu")) == 20_000_000 * 1024


def test_running_out_of_memory_while_training_is_one_line(tmp_path, monkeypatch, capsys):
    def fail(n: int) -> None:
        if n == 13:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    slow_steps(monkeypatch, fail)
    out = tmp_path / "run"
    assert main(["--out", str(out), *sets(*TINY)]) == 2
    assert one_line_error(capsys) == (
        "grid-train: out of memory: at step 13 of 24 on cpu (grid 8x8x8, train.batch_size = "
        "512, estimated at least 0.00 GB); lower eval.points or train.batch_size (--set "
        "KEY=VALUE); checkpoint.pt of step 8 is intact: continue with --resume"
    )
    assert final_state(out)["step"] == 8 and not (out / "checkpoint.pt.tmp").exists()
    cpu = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"
    )
    assert is_out_of_memory(cpu) and not is_out_of_memory(RuntimeError("shape mismatch"))


# ---- frames outside the scene -------------------------------------------------------------


@pytest.mark.parametrize("where", ["dotdot", "absolute", "symlink"])
def test_a_frame_outside_the_scene_is_refused(tmp_path, where):
    scene = write_scene(tmp_path / "scene", [random_rgba(0), random_rgba(1)])
    outside = tmp_path / "outside.png"
    (scene / "train" / "r_1.png").rename(outside)
    meta = json.loads((scene / "transforms_train.json").read_text())
    file_path = {"dotdot": "./train/../../outside", "absolute": str(outside), "symlink": "./link"}
    if where == "symlink":
        (scene / "link.png").symlink_to(outside)
    meta["frames"][1]["file_path"] = file_path[where]
    (scene / "transforms_train.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError) as error:
        load_blender(scene, "train")
    assert error.value.path == scene / "transforms_train.json"
    assert error.value.problem.startswith(f"frames[1].file_path {file_path[where]!r} leads to ")
    assert f"outside the scene directory {scene.resolve()}" in error.value.problem
    # a symbolic link that stays inside the scene is fine
    (scene / "train" / "r_1.png").symlink_to(scene / "train" / "r_0.png")
    meta["frames"][1]["file_path"] = "./train/r_1"
    (scene / "transforms_train.json").write_text(json.dumps(meta))
    views = load_blender(scene, "train")
    np.testing.assert_array_equal(views.images[0].numpy(), views.images[1].numpy())


def test_output_file_error_names_the_file():
    error = OutputFileError("runs/x/summary.json", "cannot write it: Disk quota exceeded (EDQUOT)")
    error.add_hint("free space")
    assert error.label == "write error"
    assert (
        str(error)
        == "runs/x/summary.json: cannot write it: Disk quota exceeded (EDQUOT); free space"
    )
