"""mesh.png: the side views draw no axis they look along (its tick labels would all fall on
one point, over each other) and few enough ticks that their labels stay apart."""

import numpy as np
import torch

from grid import marching_cubes
from train.config import load_config
from train.mesh.triangles import Mesh
from train.sdf import pictures


def _torus() -> Mesh:
    x = torch.linspace(-1, 1, 24)
    X, Y, Z = torch.meshgrid(x, x, x, indexing="ij")
    f = torch.sqrt((torch.sqrt(X**2 + Y**2) - 0.55) ** 2 + Z**2) - 0.2
    vertices, faces = marching_cubes(f, 0.0, "linear", bounds=torch.tensor([[-1.0] * 3, [1.0] * 3]))
    vertices = vertices.double().numpy()
    return Mesh(vertices, faces.numpy(), np.zeros_like(vertices))


def test_side_views_hide_the_axis_they_look_along(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(pictures, "save_figure", lambda fig, path, dpi: figures.append(fig))
    summary = {
        "resolution": [24] * 3,
        "interpolation": "linear",
        "point_count": 100,
        "points": "torus",
        "mesh_faces": 1,
        "surface_f": 1e-3,
        "normal_error": 1.0,
        "reference": "the points",
    }
    config = load_config(None, ["experiment=sdf"])
    pictures.write_mesh_picture(tmp_path / "mesh.png", config, _torus(), summary)
    oblique, top, side = figures[0].axes
    assert len(oblique.get_zticks()) > 0
    assert list(top.get_zticks()) == [] and top.get_zlabel() == ""
    assert list(side.get_yticks()) == [] and side.get_ylabel() == ""
    for ax in (oblique, top, side):
        for ticks in (ax.get_xticks(), ax.get_yticks(), ax.get_zticks()):
            inside = [t for t in ticks if -0.8 <= t <= 0.8]  # within the drawn range
            assert len(inside) <= pictures.TICKS + 1
