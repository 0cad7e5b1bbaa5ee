"""COLMAP through pycolmap (its own Python bindings): structure from motion on a folder of
images, existing COLMAP models, undistortion to pinhole cameras, and COLMAP's poses as
OpenGL camera-to-world matrices.

pycolmap is optional (the `capture` extra); only `train.nerf.capture.poses` imports this
module, after checking that pycolmap imports (`train.dependencies.require`).

COLMAP's conventions: an image's pose is `cam_from_world` (world -> camera, OpenCV camera
axes: x right, y down, z forward); pixel (0, 0) is the top-left corner of the top-left pixel,
as `train.nerf.data.cameras` has it. OpenGL's camera axes are (x, -y, -z) of OpenCV's.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Pillow (and numpy) before pycolmap, whose module exports a zlib of its own (deflate,
# inflate, ...): a process whose first import was pycolmap aborted on the first PNG Pillow
# wrote (glibc: "corrupted size vs. prev_size", then a hang in glog's crash handler;
# pycolmap 4.2.1, Pillow 13, numpy 2). Imported in this order it never did.
import PIL.Image  # noqa: F401
import pycolmap

from ...errors import ConfigError, InputFileError
from .orient import View

MATCHERS = ("exhaustive", "sequential")
#: Files of a COLMAP model folder, in either format.
MODEL_FILES = ("cameras", "images", "points3D")
OPENCV_TO_OPENGL = np.diag([1.0, -1.0, -1.0, 1.0])


@dataclass
class SfmOptions:
    """How `reconstruct` runs COLMAP.

    matcher: "exhaustive" (every pair: photos, up to a few hundred) or "sequential" (each
        image with the next `overlap`: video frames in file-name order).
    camera_model: COLMAP's model of the input images (SIMPLE_RADIAL: one focal length and
        one radial coefficient, COLMAP's default; OPENCV for wide lenses).
    max_error: None (COLMAP's thresholds: 4 px for keeping a 3D point, 12 px for the
        inliers that register an image), or pixels: points kept within it, images
        registered within twice it (renders and sharp photos: 2 px halved the realistic
        scene's rotation errors).
    threads: -1 for every core. seed: COLMAP's random seed (repeatable runs).
    """

    matcher: str = "exhaustive"
    overlap: int = 10
    camera_model: str = "SIMPLE_RADIAL"
    max_error: float | None = None
    threads: int = -1
    seed: int = 0


def quiet(verbose: bool) -> None:
    """COLMAP logs every step to stderr; unless verbose, only its fatal errors (the command
    says in one line what went wrong)."""
    pycolmap.logging.minloglevel = 0 if verbose else 3


def check_camera_model(name: str) -> None:
    """ConfigError unless `name` is one of COLMAP's camera models."""
    models = [m for m in pycolmap.CameraModelId.__members__ if m != "INVALID"]
    if name not in models:
        raise ConfigError(f"--camera-model: {name!r} is not a COLMAP model ({', '.join(models)})")


def reconstruct(
    images_dir: Path, groups: list[list[str]], work: Path, options: SfmOptions
) -> tuple[pycolmap.Reconstruction | None, int]:
    """Features, matching and incremental mapping of the files in `images_dir` named in
    `groups`: each group's images share one camera (intrinsics), e.g. one group per image
    size (a photographer's one camera, no zoom: the focal length is estimated from all its
    images together, far better than per image).

    Writes COLMAP's database and models under `work`. Returns (the largest reconstruction,
    or None when COLMAP could not start one; the most verified matches of any image pair).
    """
    pycolmap.set_random_seed(options.seed)
    database = work / "database.db"
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = options.camera_model
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = options.threads
    cpu = pycolmap.Device.cpu  # the same result on every machine; SIFT on the CPU is fast enough
    for names in groups:  # SINGLE: one new camera for the images of one call
        pycolmap.extract_features(
            database,
            images_dir,
            image_names=names,
            camera_mode=pycolmap.CameraMode.SINGLE,
            reader_options=reader,
            extraction_options=extraction,
            device=cpu,
        )
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = options.threads
    if options.matcher == "sequential":
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = options.overlap
        pycolmap.match_sequential(database, matching, pairing, device=cpu)
    else:
        pycolmap.match_exhaustive(database, matching, device=cpu)
    best = best_pair(database)
    mapping = pycolmap.IncrementalPipelineOptions()
    mapping.num_threads = options.threads
    mapping.random_seed = options.seed
    mapping.min_model_size = 3  # COLMAP's 10 would drop whole small captures
    if options.max_error is not None:
        mapping.mapper.filter_max_reproj_error = options.max_error
        mapping.mapper.abs_pose_max_error = 2 * options.max_error
    models = pycolmap.incremental_mapping(database, images_dir, work / "sparse", mapping)
    if not models:
        return None, best
    return max(models.values(), key=lambda m: m.num_reg_images()), best


def best_pair(database: Path) -> int:
    """The most geometrically verified matches between any two images (0 without any)."""
    db = pycolmap.Database.open(str(database))
    try:
        _, inliers = db.read_two_view_geometry_num_inliers()
    finally:
        db.close()
    return int(max(inliers, default=0))


def read_model(path: Path, key: str) -> pycolmap.Reconstruction:
    """A COLMAP model folder (cameras, images, points3D as .bin or .txt), or an
    InputFileError naming it and what is missing."""
    if not path.is_dir():
        raise InputFileError(path, "no such folder (expected a COLMAP model: sparse/0)", key=key)
    for stem in MODEL_FILES:
        if not any((path / f"{stem}{ext}").is_file() for ext in (".bin", ".txt")):
            raise InputFileError(
                path,
                f"not a COLMAP model: no {stem}.bin or {stem}.txt (expected cameras, images "
                "and points3D, as COLMAP's mapper writes into sparse/0)",
                key=key,
            )
    try:
        return pycolmap.Reconstruction(path)
    except Exception as error:  # pycolmap raises its own types for damaged files
        raise InputFileError(path, f"cannot read the COLMAP model ({error})", key=key) from None


def registered_names(model: pycolmap.Reconstruction) -> list[str]:
    """The names of the model's registered images, sorted."""
    return sorted(model.image(i).name for i in model.reg_image_ids())


def undistort(
    model: pycolmap.Reconstruction, images_dir: Path, work: Path, out: Path
) -> pycolmap.Reconstruction:
    """COLMAP's image undistorter: the registered images re-rendered for pinhole cameras
    into `out/images/`, their model into `out/sparse/0/`; returns that model."""
    source = work / "model"
    source.mkdir(parents=True, exist_ok=True)
    model.write(source)
    undistorted = work / "undistorted"
    pycolmap.undistort_images(undistorted, source, images_dir)
    shutil.move(undistorted / "images", out / "images")
    (out / "sparse").mkdir()
    shutil.move(undistorted / "sparse", out / "sparse" / "0")
    return pycolmap.Reconstruction(out / "sparse" / "0")


def views(model: pycolmap.Reconstruction) -> list[View]:
    """The model's registered images as `View`s (pinhole cameras), sorted by name."""
    out = []
    for image_id in model.reg_image_ids():
        image = model.image(image_id)
        camera = model.camera(image.camera_id)
        if camera.model_name not in ("PINHOLE", "SIMPLE_PINHOLE"):
            raise ValueError(f"{image.name}: camera model {camera.model_name} is not a pinhole")
        cam_from_world = np.eye(4)
        cam_from_world[:3] = image.cam_from_world().matrix()
        c2w = np.linalg.inv(cam_from_world) @ OPENCV_TO_OPENGL
        k = (
            camera.focal_length_x,
            camera.focal_length_y,
            camera.principal_point_x,
            camera.principal_point_y,
        )
        out.append(View(image.name, c2w, tuple(map(float, k)), (camera.width, camera.height)))
    return sorted(out, key=lambda v: v.name)


def statistics(model: pycolmap.Reconstruction) -> dict[str, float]:
    """registered images, points, mean reprojection error (pixels), mean track length
    (images per point), mean observations per image."""
    return {
        "registered": model.num_reg_images(),
        "points": model.num_points3D(),
        "reprojection_error": float(model.compute_mean_reprojection_error()),
        "track_length": float(model.compute_mean_track_length()),
        "observations_per_image": float(model.compute_mean_observations_per_reg_image()),
    }


def points(model: pycolmap.Reconstruction) -> np.ndarray:
    """[P, 3] the model's 3D points."""
    xyz = [p.xyz for p in model.points3D.values()]
    return np.array(xyz, dtype=np.float64).reshape(-1, 3)
