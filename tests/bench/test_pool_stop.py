"""bench/gpu.sh's scenes-stop and scenes-pool's refusal while a pool runs, on a copy of the two
scripts (their pool folder is relative to the checkout) and a stand-in pool: a process group
of sleeps started as scenes-pool starts its pool."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")


def _checkout(tmp_path: Path) -> Path:
    for script in ("bench/gpu.sh", "bench/training/modes.sh"):
        (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / script, tmp_path / script)
    return tmp_path


def _gpu_sh(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OUT=str(root / "out"))
    command = ["bash", str(root / "bench" / "gpu.sh"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_scenes_stop_stops_the_pool_and_its_jobs(tmp_path):
    root = _checkout(tmp_path)
    assert _gpu_sh(root, "scenes-stop").returncode == 2  # no pool yet
    pool = root / "bench" / "results" / "scenes_pool"
    pool.mkdir(parents=True)
    (pool / "pool.log").write_text("[00:00:00] scenes_pool: gen_x on GPU 0 exited 0 after 1 s\n")
    # a pool and a job of it in one new process group, started as scenes-pool starts them
    # (detached: the shell that started it exits, so the pool is nobody's child here)
    job = "sleep 300 & echo $! > job.pid; wait"
    start = f"setsid sh -c '{job}' </dev/null >/dev/null 2>&1 & echo $! > pool.pid"
    subprocess.run(["sh", "-c", start], cwd=pool, check=True)
    leader = int((pool / "pool.pid").read_text())
    try:
        for _ in range(100):
            if (pool / "job.pid").is_file() and (pool / "job.pid").read_text().strip():
                break
            time.sleep(0.05)
        job = int((pool / "job.pid").read_text())
        refused = _gpu_sh(root, "scenes-pool", "--run", "fast")
        assert refused.returncode == 2 and "a pool is running" in refused.stdout
        stopped = _gpu_sh(root, "scenes-stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "gen_x on GPU 0 exited 0" in stopped.stdout  # what finished, kept
        assert not _alive(job) and not _alive(leader)  # the job went with the pool
        assert (pool / "pool.rc").read_text().strip() == "143"
        assert _gpu_sh(root, "scenes-stop").returncode == 2
    finally:
        if _alive(leader):
            os.killpg(leader, signal.SIGKILL)
