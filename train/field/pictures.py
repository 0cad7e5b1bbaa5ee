"""The field experiment's pictures: slices through the fit next to the target, and curves.

Uses matplotlib's object API (`Figure`, rendered by Agg): no pyplot, no display.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from matplotlib.figure import Figure

from grid.voxel_grid import VoxelGrid

from ..errors import plural
from ..pictures import mark_upsamples, plot_mse, save_figure
from .targets import Target

if TYPE_CHECKING:
    from ..config import Config

AXES = "xyz"


@torch.no_grad()
def slice_values(
    field,
    axis: int,
    bounds: list[list[float]],
    n: int,
    device: torch.device,
    at: float | None = None,
) -> tuple[np.ndarray, list[float]]:
    """Evaluate `field` on an n x n lattice in the plane normal to `axis` at coordinate
    `at` (default: through the box centre). Returns the image [n (v), n (u)] and its extent
    [u0, u1, v0, v1], where (u, v) are the two other axes in xyz order."""
    lo, hi = bounds
    u, v = [a for a in range(3) if a != axis]
    us = torch.linspace(lo[u], hi[u], n, device=device)
    vs = torch.linspace(lo[v], hi[v], n, device=device)
    vv, uu = torch.meshgrid(vs, us, indexing="ij")
    points = torch.empty(n, n, 3, device=device)
    points[..., axis] = (lo[axis] + hi[axis]) / 2 if at is None else at
    points[..., u], points[..., v] = uu, vv
    values = field(points)
    return values.float().cpu().numpy(), [lo[u], hi[u], lo[v], hi[v]]


def write_slices(
    path: Path, config: Config, model: VoxelGrid, target: Target, summary: dict[str, Any]
) -> None:
    """slices.png: one row per axis (the mid-plane normal to it), columns target | fit | error."""
    n = config.output.slice_resolution
    bounds = config.grid.bounds
    device = model.features.device
    sdf = target.is_sdf
    fig = Figure(figsize=(15, 13.5), layout="constrained")
    axes = fig.subplots(3, 3)
    for axis in range(3):
        truth, extent = slice_values(target, axis, bounds, n, device)
        fit, _ = slice_values(lambda p: model(p)[..., 0], axis, bounds, n, device)
        error = fit - truth
        u, v = [AXES[a] for a in range(3) if a != axis]
        centre = (bounds[0][axis] + bounds[1][axis]) / 2
        if sdf:
            limit = float(np.abs(truth).max())
            shared = dict(cmap="RdBu_r", vmin=-limit, vmax=limit)
        else:
            shared = dict(cmap="magma", vmin=float(truth.min()), vmax=float(truth.max()))
        # Colour scale of the error: its 99.9th percentile, so that a few outliers (box
        # corners, the SDF's kinks) do not wash out the rest; the colorbar shows clipping.
        elimit = float(np.quantile(np.abs(error), 0.999)) or 1e-12
        emax = float(np.abs(error).max())
        panels = [
            (truth, shared, "target"),
            (fit, shared, "fit"),
            (error, dict(cmap="coolwarm", vmin=-elimit, vmax=elimit), "error (fit - target)"),
        ]
        for col, (image, style, title) in enumerate(panels):
            ax = axes[axis, col]
            shown = ax.imshow(
                image, origin="lower", extent=extent, interpolation="nearest", **style
            )
            extend = "both" if col == 2 and emax > elimit else "neither"
            fig.colorbar(shown, ax=ax, shrink=0.85, extend=extend)
            if sdf and col < 2:
                ax.contour(image, levels=[0.0], colors="k", linewidths=1.2, extent=extent)
                if col == 1:  # the target's surface, dashed, over the fit's
                    ax.contour(
                        truth,
                        levels=[0.0],
                        colors="w",
                        linewidths=0.8,
                        linestyles="--",
                        extent=extent,
                    )
            rmse = float(np.sqrt(np.mean(error**2)))
            label = f"{title}, RMSE {rmse:.1e}, max {emax:.1e}" if col == 2 else title
            ax.set_title(f"{label}\n{AXES[axis]} = {centre:.3g}", fontsize=11)
            ax.set_xlabel(u)
            ax.set_ylabel(v)
    res = "x".join(map(str, model.resolution))
    surface = " (black: zero level set; white dashed: target's)" if sdf else ""
    fig.suptitle(
        f"{config.target.kind}: {res} grid after {plural(summary['steps'], 'step')}, held-out PSNR "
        f"{summary['psnr']:.2f} dB{surface}",
        fontsize=14,
    )
    save_figure(fig, path, dpi=90)


def write_curves(
    path: Path, config: Config, records: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """curves.png: training and held-out MSE (log scale) and held-out PSNR against steps."""
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    steps = [r["step"] for r in records]
    plot_mse(left, records, "training batches", "held-out points", "loss (mean squared error)")
    right.plot(steps, [r["psnr"] for r in records], "o-", ms=3, color="C2")
    right.set(xlabel="step", ylabel="PSNR (dB)", title="held-out PSNR")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        mark_upsamples(ax, config)
    left.legend(loc="lower left")
    if records:
        right.annotate(
            f"final {records[-1]['psnr']:.2f} dB",
            (steps[-1], records[-1]["psnr"]),
            xytext=(-10, -45),
            textcoords="offset points",
            ha="right",
            arrowprops=dict(arrowstyle="->", color="gray"),
        )
    res = "x".join(map(str, summary["resolution"]))
    fig.suptitle(
        f"{config.target.kind}: fitting curves ({res} grid, {plural(summary['steps'], 'step')} "
        f"of {plural(config.train.batch_size, 'point')}, "
        f"{summary['points_per_second'] / 1e6:.3g}M points/s on {summary['device']})",
        fontsize=13,
    )
    save_figure(fig, path, dpi=90)


def write_pictures(
    out: Path,
    config: Config,
    model: VoxelGrid,
    target: Target,
    records: list[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    """Write slices.png and curves.png into the run directory."""
    write_slices(out / "slices.png", config, model, target, summary)
    write_curves(out / "curves.png", config, records, summary)
