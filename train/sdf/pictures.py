"""Pictures of an sdf run: the zero level set from three sides, and the training curves.

Uses matplotlib's object API (`Figure`, rendered by Agg): no pyplot, no display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from mpl_toolkits.mplot3d.art3d import Poly3DCollection

from ..config import Config
from ..errors import plural
from ..mesh.triangles import Mesh
from ..pictures import mark_upsamples, save_figure

#: (elevation, azimuth) in degrees of the three views, their titles, and the axis a side
#: view looks along (its ticks would all fall on one point: not drawn).
VIEWS = (
    (30.0, -60.0, "oblique", ""),
    (90.0, -90.0, "from +z", "z"),
    (0.0, -90.0, "from -y", "y"),
)
TICKS = 5  # at most, per axis: more run into each other on a 5-inch-wide view
LIGHT = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
BACK_FACE_MARGIN = 0.3  # cosine: triangles turned further from the camera are not drawn


def face_normals(mesh: Mesh) -> np.ndarray:
    """[T, 3] unit normal of each triangle."""
    corners = mesh.vertices[mesh.faces]  # [T, 3, 3]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return normal / np.linalg.norm(normal, axis=1, keepdims=True).clip(1e-30)


def toward_eye(elev: float, azim: float) -> np.ndarray:
    """[3] unit vector from the scene toward matplotlib's camera at (elev, azim) degrees."""
    e, a = np.radians(elev), np.radians(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def face_colors(mesh: Mesh, normal: np.ndarray | None = None) -> np.ndarray:
    """[T, 3] RGB per triangle: its normal n as colour (0.5 + 0.5 n, as a normal map: +x
    red, +y green, +z blue) times a diffuse shade from a fixed light."""
    normal = face_normals(mesh) if normal is None else normal
    shade = 0.45 + 0.55 * np.clip(normal @ LIGHT, 0, 1)
    return np.clip((0.5 + 0.5 * normal) * shade[:, None], 0, 1)


def write_mesh_picture(path: Path, config: Config, mesh: Mesh | None, summary: dict) -> None:
    """mesh.png: the mesh from three sides, coloured by its normals, with the numbers."""
    fig = Figure(figsize=(15, 5.6), layout="constrained")
    if mesh is None or len(mesh.faces) == 0:
        fig.text(0.5, 0.5, "no zero level set: the field does not change sign", ha="center")
        save_figure(fig, path, dpi=80)
        return
    corners = mesh.vertices[mesh.faces]
    normals = face_normals(mesh)
    colors = face_colors(mesh, normals)
    lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    centre, half = (lo + hi) / 2, (hi - lo).max() / 2 * 1.05
    for i, (elev, azim, title, along) in enumerate(VIEWS):
        ax = fig.add_subplot(1, 3, i + 1, projection="3d")
        # Triangles facing away from the camera are hidden behind the front of a closed
        # surface: not drawn (a third of the drawing time). The margin keeps those that the
        # perspective turns toward the camera near the silhouette. Without antialiasing the
        # seams between the small triangles stay closed (with it, the front alone shows
        # the background through them).
        front = normals @ toward_eye(elev, azim) > -BACK_FACE_MARGIN
        collection = Poly3DCollection(
            corners[front], facecolors=colors[front], edgecolors="none", antialiased=False
        )
        ax.add_collection3d(collection)
        ax.set(xlim=centre[0] + [-half, half], ylim=centre[1] + [-half, half])
        ax.set(zlim=centre[2] + [-half, half], xlabel="x", ylabel="y", zlabel="z")
        ax.set_box_aspect((1, 1, 1))
        ax.view_init(elev, azim)
        ax.locator_params(nbins=TICKS)
        if along:  # a side view: flat, without the axis it looks along
            ax.set_proj_type("ortho")
            getattr(ax, f"set_{along}ticks")([])
            getattr(ax, f"set_{along}label")("")
            for axis in (ax.xaxis, ax.yaxis, ax.zaxis):  # clear of the tick labels
                axis.labelpad = 10
        ax.set_title(title)
    fig.suptitle(f"{describe(config, summary)}\n{numbers(summary)}", fontsize=12)
    save_figure(fig, path, dpi=80)


def describe(config: Config, summary: dict[str, Any]) -> str:
    res = "x".join(map(str, summary["resolution"]))
    faces = summary.get("mesh_faces") or 0
    return (
        f"zero level set of a {res} grid ({summary['interpolation']}), fitted to "
        f"{plural(summary['point_count'], 'point')} of {summary['points']}: "
        f"{plural(faces, 'triangle')}"
    )


def numbers(summary: dict[str, Any]) -> str:
    """The run's headline numbers, one line."""
    parts = []
    if summary.get("sdf_error") is not None:
        parts.append(
            f"mean |f - sdf| {summary['sdf_error']:.2e} ({100 * summary['sdf_error_box']:.3f}% "
            f"of the box)"
        )
    else:
        parts.append(f"mean |f| at the points {summary['surface_f']:.2e}")
    parts.append(f"normal error {summary['normal_error']:.2f} deg")
    if summary.get("chamfer") is not None:
        parts.append(f"Chamfer {summary['chamfer']:.2e}")
    return ", ".join(parts) + f" (against {summary['reference']})"


def write_curves(path: Path, config: Config, records: list[dict], summary: dict) -> None:
    """curves.png: training loss, distance errors (log scale) and normal error against steps."""
    fig = Figure(figsize=(16, 4.8), layout="constrained")
    loss_ax, distance_ax, normal_ax = fig.subplots(1, 3)
    steps = [r["step"] for r in records]
    starts = [0, *steps[:-1]]
    loss_ax.semilogy(
        [x for a, b in zip(starts, steps, strict=True) for x in (a, b)],
        [r["train_loss"] for r in records for _ in range(2)],
        "-",
        label="training batches (mean over each interval)",
    )
    loss_ax.set(xlabel="step", ylabel="loss", title="loss (surface + normal + eikonal terms)")
    curves = [
        ("sdf_error", "mean |f - sdf| near the surface"),
        ("surface_f", "mean |f| on the surface points"),
        ("chamfer", "Chamfer distance of the mesh"),
    ]
    for key, label in curves:
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if points:
            distance_ax.semilogy(*zip(*points, strict=True), "o-", ms=3, label=label)
    distance_ax.set(xlabel="step", ylabel="world units", title="distances")
    normal_ax.plot(steps, [r["normal_error"] for r in records], "o-", ms=3, color="C3")
    normal_ax.set(xlabel="step", ylabel="degrees", title="mean normal error")
    for ax in (loss_ax, distance_ax, normal_ax):
        ax.grid(True, which="both", alpha=0.3)
        mark_upsamples(ax, config)
    for ax in (loss_ax, distance_ax):
        if ax.lines:
            ax.legend(loc="upper right", fontsize=9)
    fig.suptitle(
        f"{describe(config, summary)}\n{numbers(summary)}; "
        f"{summary['points_per_second'] / 1e6:.3g}M points/s on {summary['device']}",
        fontsize=12,
    )
    save_figure(fig, path, dpi=90)


def write_pictures(
    out: Path, config: Config, mesh: Mesh | None, records: list[dict], summary: dict
) -> None:
    """curves.png, and mesh.png with output.mesh."""
    write_curves(out / "curves.png", config, records, summary)
    if config.output.mesh:
        write_mesh_picture(out / "mesh.png", config, mesh, summary)
