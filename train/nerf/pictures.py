"""Pictures of a NeRF run: test views side by side, training curves, a turntable animation.

test_views.png  one row per test view: ground truth | render | error | depth
curves.png      training and test MSE against steps; test PSNR against training seconds
turntable.gif   novel views on a circle around the scene (Pillow, which matplotlib needs)
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from matplotlib.figure import Figure

from ..errors import writing
from ..pictures import plot_mse, save_figure
from .model.image import render_image

if TYPE_CHECKING:
    from ..config import Config
    from .data.blender import Views
    from .model.voxel_nerf import VoxelNeRF


class NerfRun(Protocol):
    """What the pictures read of a run (`NerfExperiment` has it; named here, not imported,
    so that the experiment, which calls `write_pictures`, is not imported back)."""

    config: Config
    device: torch.device
    background: torch.Tensor  # [3]
    model: VoxelNeRF
    test_views: Views
    renders: list[tuple[torch.Tensor, torch.Tensor]]  # the last evaluation's rgb, depth

    def truth(self, i: int) -> torch.Tensor: ...


def write_pictures(
    out: Path, exp: NerfRun, records: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    write_test_views(out / "test_views.png", exp, summary)
    write_curves(out / "curves.png", exp, records, summary)
    if exp.config.output.turntable_frames:
        write_turntable(out / "turntable.gif", exp, exp.config.output.turntable_frames)


def _title(exp: NerfRun, summary: dict[str, Any]) -> str:
    res = "x".join(map(str, summary["resolution"]))
    return (
        f"VoxelNeRF ({exp.config.grid.backend}), {res} grids, {summary['steps']} steps, "
        f"{summary['train_seconds']:.1f} s training on {summary['device']}"
    )


def write_test_views(path: Path, exp: NerfRun, summary: dict[str, Any]) -> None:
    """One row per rendered test view: ground truth, render, |error|, expected depth."""
    rows = len(exp.renders)
    fig = Figure(figsize=(13, 3.4 * rows + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, 4))
    depths = [d for _, d in exp.renders]
    hit = torch.cat([d[d > 0] for d in depths])
    lo, hi = (hit.min().item(), hit.max().item()) if hit.numel() else (0.0, 1.0)
    for i, (rgb, depth) in enumerate(exp.renders):
        truth = exp.truth(i)
        render = rgb.clamp(0, 1)
        error = (render - truth).abs().mean(-1)
        view_psnr = summary["view_psnr"][i]
        name = Path(exp.test_views.names[i]).name
        panels = [
            (truth.numpy(), {}, f"ground truth ({name})"),
            (render.numpy(), {}, f"render, PSNR {view_psnr:.2f} dB"),
            (error.numpy(), dict(cmap="inferno", vmin=0, vmax=0.25), "|error|, mean over RGB"),
            (
                np.ma.masked_where(depth.numpy() <= 0, depth.numpy()),
                dict(cmap="viridis_r", vmin=lo, vmax=hi),
                "depth (where opacity > 0.5)",
            ),
        ]
        for col, (image, style, title) in enumerate(panels):
            ax = axes[i, col]
            shown = ax.imshow(image, interpolation="nearest", **style)
            if col >= 2:
                fig.colorbar(shown, ax=ax, shrink=0.8)
            ax.set_title(title, fontsize=10)
            ax.set_axis_off()
    fig.suptitle(f"{_title(exp, summary)}: test PSNR {summary['psnr']:.2f} dB", fontsize=12)
    save_figure(fig, path, dpi=90)


def write_curves(
    path: Path, exp: NerfRun, records: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """MSE (training batches, test views) against steps; test PSNR against training time."""
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    plot_mse(left, records, "training rays", "test views", "loss (mean squared error of colours)")
    for step in exp.config.train.upsample_steps:
        left.axvline(step, color="gray", linestyle=":", linewidth=1)
    left.legend(loc="upper right")
    right.plot(
        [r["train_seconds"] for r in records], [r["psnr"] for r in records], "o-", ms=3, color="C2"
    )
    right.set(xlabel="training seconds", ylabel="PSNR (dB)", title="test-view PSNR")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    if records:
        right.annotate(
            f"final {summary['psnr']:.2f} dB",
            (records[-1]["train_seconds"], records[-1]["psnr"]),
            xytext=(-10, -45),
            textcoords="offset points",
            ha="right",
            arrowprops=dict(arrowstyle="->", color="gray"),
        )
    fig.suptitle(
        f"{_title(exp, summary)}, {exp.config.train.batch_size} rays per step, "
        f"{summary['rays_per_second'] / 1e6:.3g}M rays/s",
        fontsize=12,
    )
    save_figure(fig, path, dpi=90)


def turntable_poses(c2w: torch.Tensor, frames: int) -> torch.Tensor:
    """c2w: [V, 4, 4] cameras looking at the origin -> [frames, 4, 4]: the first camera
    rotated about the world's up axis (the coordinate axis closest to the cameras' mean
    up vector) in `frames` equal steps."""
    up_mean = c2w[:, :3, 1].mean(0)
    axis = int(up_mean.abs().argmax())
    sign = 1.0 if up_mean[axis] >= 0 else -1.0
    a, b = [k for k in range(3) if k != axis]
    poses = []
    for k in range(frames):
        angle = sign * 2 * math.pi * k / frames
        rot = torch.eye(4, dtype=c2w.dtype)
        rot[a, a], rot[a, b] = math.cos(angle), -math.sin(angle)
        rot[b, a], rot[b, b] = math.sin(angle), math.cos(angle)
        poses.append(rot @ c2w[0])
    return torch.stack(poses)


@torch.no_grad()
def write_turntable(path: Path, exp: NerfRun, frames: int) -> None:
    """turntable.gif: `frames` novel views around the scene, 12 frames per second."""
    try:
        from PIL import Image
    except ImportError as error:  # matplotlib depends on Pillow, so this is unusual
        raise RuntimeError(
            "writing turntable.gif needs Pillow (pip install pillow), or set "
            "output.turntable_frames = 0"
        ) from error
    from .data.blender import camera_rays

    views = exp.test_views
    c2w = torch.as_tensor(views.c2w)
    poses = turntable_poses(c2w, frames)
    novel = dataclasses.replace(
        views,
        c2w=poses,
        images=torch.zeros(frames, 1, 1, 3),
        names=[f"turntable_{k}" for k in range(frames)],
        # the first view's camera for every frame (per-view intrinsics: transforms.json)
        intrinsics=None if views.intrinsics is None else views.intrinsics[:1].expand(frames, 4),
        distortion=None if views.distortion is None else views.distortion[:1].expand(frames, 5),
        height=views.height if views.sizes is None else int(views.sizes[0, 0]),
        width=views.width if views.sizes is None else int(views.sizes[0, 1]),
        sizes=None,
    )
    origins, directions = camera_rays(novel)  # [frames, H, W, 3]
    images = []
    for k in range(frames):
        rgb, _, _ = render_image(
            exp.model, origins[k].to(exp.device), directions[k].to(exp.device), exp.background
        )
        array = (rgb.clamp(0, 1) * 255 + 0.5).byte().cpu().numpy()
        images.append(Image.fromarray(array))
    with writing(path, remove=path):
        images[0].save(path, save_all=True, append_images=images[1:], duration=83, loop=0)
