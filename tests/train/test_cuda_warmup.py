"""train/cuda_warmup.py: which runs start CUDA while torch imports, and that the warm-up
never fails a run (no driver, a CPU run)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from train import cuda_warmup


def _args(config=None, sets=(), resume=False, out=None) -> argparse.Namespace:
    return argparse.Namespace(config=config, set=list(sets), resume=resume, out=out)


def test_the_device_comes_from_set_then_the_config_then_the_default(tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('experiment = "sdf"\ndevice = "cpu"\n')
    assert cuda_warmup.config_device(_args()) == "auto"
    assert cuda_warmup.config_device(_args(cfg)) == "cpu"
    assert cuda_warmup.config_device(_args(cfg, ["device=cuda"])) == "cuda"
    assert cuda_warmup.config_device(_args(cfg, ["device = 'cuda'", "device=cpu"])) == "cpu"
    assert cuda_warmup.config_device(_args(Path("sdf_scan_gpu.toml"))) == "auto"  # shipped
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('device = "auto"\n')
    assert cuda_warmup.config_device(_args(resume=True, out=run)) == "auto"
    # what the run itself reports as an error gets no warm-up
    assert cuda_warmup.config_device(_args(tmp_path / "missing.toml")) == "cpu"
    (tmp_path / "bad.toml").write_text("device = [")
    assert cuda_warmup.config_device(_args(tmp_path / "bad.toml")) == "cpu"


def test_cpu_runs_and_torchrun_ranks_start_nothing(tmp_path: Path, monkeypatch):
    assert cuda_warmup.start(_args(sets=["device=cpu"])) is None
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cuda_warmup.start(_args(sets=["device=cuda"])) is None
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_warmup.start(_args(sets=["device=auto"])) is None


def test_a_cpu_build_of_torch_starts_nothing():
    assert cuda_warmup.torch_has_cuda() == (torch.version.cuda is not None)
    if torch.version.cuda is None:
        assert cuda_warmup.start(_args(sets=["device=auto"])) is None


def test_a_missing_driver_ends_the_thread_quietly(monkeypatch):
    monkeypatch.setattr(cuda_warmup, "torch_has_cuda", lambda: True)
    thread = cuda_warmup.start(_args(sets=["device=auto"]), library="libno_such_driver.so.1")
    assert thread is not None
    thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torch_uses_the_context_the_warm_up_made():
    """In a fresh process: the warm-up before `import torch`, then a CUDA tensor works."""
    import subprocess
    import sys

    code = (
        "import argparse, sys; from train import cuda_warmup; "
        "t = cuda_warmup.start(argparse.Namespace(config=None, set=['device=cuda'], "
        "resume=False, out=None)); import torch; t.join(); "
        "x = torch.ones(4, device='cuda'); print(float((x * 2).sum()))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "8.0"
