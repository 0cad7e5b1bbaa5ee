"""The sdf experiment's grid calls, one by one, at its shapes (CPU): where a training step's
milliseconds go.

    python bench/ops/sdf_kernels.py [POINTS.npy] [--resolution 128] [--reps 40]
        [--surface 32768] [--eikonal 16384] [--threads N]

POINTS.npy: [P, 6] points and normals (bench/training/sdf_inputs.py draws them); without
it, points on a sphere. The grid: one channel, `resolution`^3, a sphere's signed distance,
border padding, world box [-1, 1]^3 (as configs/sdf_scan.toml). One step's calls, as
`train/sdf/experiment.py`'s `sdf_losses` and the loop's `loss.backward()` make them:

  sample            f = sample(grid, x)                                 [S + E, 1]
  bw points         grad f wrt x (create_graph): sample_backward, mask (F, T)
  bw grid           the surface term's gradient to the grid: mask (T, F)
  bw grid+points    the same, when x's gradient is also asked for: mask (T, T)
  2x bw grid        sample_double_backward, outputs (grad_out, grid, points) = (F, T, F)
  2x bw grid+points the same with the point gradient: (F, T, T)
  step              sdf_losses + zero_grad + loss.backward(inputs=[grid])
  step (all leaves) the same with loss.backward() (x's gradient too)

Rows are timed round robin (one call of each per round), so a shared machine's load falls
on all alike; each row's median and quartiles over the rounds, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: grid, train

import grid  # noqa: E402
from train.sdf.experiment import sdf_losses  # noqa: E402

BOX = [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]


def sphere_grid(resolution: int) -> grid.VoxelGrid:
    """A one-channel grid holding a sphere's signed distance (radius 0.6)."""
    model = grid.VoxelGrid(resolution, 1, bounds=((-1.0,) * 3, (1.0,) * 3), padding="border")
    axis = torch.linspace(-1, 1, resolution)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    with torch.no_grad():
        model.features.copy_(((x**2 + y**2 + z**2).sqrt() - 0.6)[..., None])
    return model


def load_points(path: str | None) -> torch.Tensor:
    """[P, 6] points and unit normals: the file's, or 100k on the sphere of radius 0.6."""
    if path:
        data = torch.from_numpy(np.load(path)).float()
        if data.ndim != 2 or data.shape[1] != 6:
            raise SystemExit(f"points: expected a [P, 6] array, got {tuple(data.shape)}")
        return data
    normals = torch.nn.functional.normalize(torch.randn(100_000, 3), dim=1)
    return torch.cat([0.6 * normals, normals], dim=1)


def rows(model: grid.VoxelGrid, cloud: torch.Tensor, surface: int, eikonal: int) -> dict:
    """name -> a function running that call once on a fresh batch."""
    gen = torch.Generator().manual_seed(0)
    features = model.features
    box = BOX
    ops = torch.ops.grid

    def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.randint(len(cloud), (surface,), generator=gen)
        points = cloud.index_select(0, index)
        uniform = torch.rand(eikonal, 3, generator=gen) * 2 - 1
        return points[:, :3], points[:, 3:], uniform

    s, n, u = batch()
    x = torch.cat([s, u]).contiguous()
    g = torch.ones(len(x), 1)
    ggp = torch.randn(len(x), 3)
    f = features.detach()

    def args(mask):
        return (True, "border", "linear", mask, box)

    def backward(mask):
        return lambda: ops.sample_backward(g, f, x, *args(mask))

    def double(mask):
        return lambda: ops.sample_double_backward(None, ggp, g, f, x, *args(mask))

    def step(all_leaves: bool):
        def run():
            s, n, u = batch()
            terms = sdf_losses(model, s, n, u)
            loss = terms[0] * 1e3 + 0.025 * terms[1] + 0.1 * terms[2]
            features.grad = None
            loss.backward(inputs=None if all_leaves else [features])

        return run

    return {
        "sample": lambda: ops.sample(f, x, True, "border", "linear", box),
        "bw points": backward([False, True]),
        "bw grid": backward([True, False]),
        "bw grid+points": backward([True, True]),
        "2x bw grid": double([False, True, False]),
        "2x bw grid+points": double([False, True, True]),
        "step": step(False),
        "step (all leaves)": step(True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="?", help="[P, 6] .npy of points and normals")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--surface", type=int, default=32768)
    parser.add_argument("--eikonal", type=int, default=16384)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.resolution < 2 or args.reps < 1 or args.surface < 1 or args.eikonal < 0:
        raise SystemExit("--resolution >= 2, --reps >= 1, --surface >= 1, --eikonal >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = sphere_grid(args.resolution)
    calls = rows(model, load_points(args.points), args.surface, args.eikonal)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():  # warm up
        fn()
    for _ in range(args.reps):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    print(
        f"{args.resolution}^3 x 1, {args.surface} + {args.eikonal} points, "
        f"{torch.get_num_threads()} threads, {args.reps} rounds; ms"
    )
    print(f"{'call':<20} {'median':>8} {'q1':>8} {'q3':>8}")
    for name, t in times.items():
        q1, _, q3 = statistics.quantiles(t, n=4)
        print(f"{name:<20} {statistics.median(t):8.3f} {q1:8.3f} {q3:8.3f}")


if __name__ == "__main__":
    main()
