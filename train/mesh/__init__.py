"""Triangle meshes, shared by the sdf experiment (its mesh.ply and scores) and the nerf one
(`python -m train.export`'s level set, the scanned meshes of its scenes).

Modules: `triangles` (`Mesh`, `write_ply`, connected components), `level_set` (a grid's
zero level set by marching cubes, relaxed), `distance` (exact distances to points and to
triangles), `scoring` (Chamfer, normal consistency, F-score of a mesh against a true one),
`signed_distance` (a mesh's exact signed distance on a grid's voxels).

Floors: `triangles` -> `distance` -> `scoring` -> `signed_distance`; `level_set` on
`triangles`. Imports `grid`, torch, numpy and scipy (lazily); nothing else of `train`.
The experiment packages import it.
"""

from .distance import distance_to_mesh, distance_to_points, nearest_triangles
from .level_set import zero_level_set
from .scoring import face_normals, sample_mesh, score_mesh
from .signed_distance import grid_sdf
from .triangles import Mesh, face_components, write_ply

__all__ = [
    "Mesh",
    "write_ply",
    "face_components",
    "zero_level_set",
    "distance_to_mesh",
    "distance_to_points",
    "nearest_triangles",
    "face_normals",
    "sample_mesh",
    "score_mesh",
    "grid_sdf",
]
