"""Where a NeRF run's peak GPU memory comes from (CUDA only).

Trains a NeRF config (default configs/nerf_realistic_gpu.toml with `nerf.fit_box = true`)
through `train.loop.run` and prints torch's allocated memory after the experiment is built
(the scene's rays and images, the model, the optimiser) and the peak of each stretch of
training steps and of each evaluation, so the largest can be read off.

    python bench/probes/nerf_memory_probe.py [--config PATH] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from train.config import load_config  # noqa: E402
from train.loop import run  # noqa: E402
from train.nerf import experiment  # noqa: E402

GIB = 2**30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/nerf_realistic_gpu.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("nerf_memory_probe: needs CUDA", file=sys.stderr)
        return 2
    sets = ["nerf.fit_box=true", "train.steps=3000", "eval.every=1000", "output.progress=false"]
    config = load_config(args.config, [*sets, "output.pictures=false", *args.set])
    rows: list[tuple[str, float]] = []
    built, evaluate = experiment.NerfExperiment.__init__, experiment.NerfExperiment.evaluate

    def mark(label: str, peak: bool) -> None:
        torch.cuda.synchronize()
        value = torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()
        rows.append((label, value / GIB))
        torch.cuda.reset_peak_memory_stats()

    def init(self, *a, **k) -> None:
        built(self, *a, **k)
        mark("after building the experiment (allocated)", False)

    def timed(self, seconds):
        mark(
            f"training steps before this evaluation (peak), resolution {self.model.resolution}",
            True,
        )
        out = evaluate(self, seconds)
        mark("evaluation (peak)", True)
        return out

    experiment.NerfExperiment.__init__ = init
    experiment.NerfExperiment.evaluate = timed
    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        run(config, Path(out) / "run", overwrite=True)
    for label, gib in rows:
        print(f"{gib:7.2f} GiB  {label}")
    print(f"reserved at the end: {torch.cuda.memory_reserved() / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
