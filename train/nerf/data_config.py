"""The nerf experiment's `[data]` table (the posed images, or the scene generated for them) and
its checks. Imports neither torch nor grid (the scenes' names lazily)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..schema import doc


@dataclass
class DataConfig:
    path: str = doc(
        "nerf: directory of a Blender-format (NeRF-synthetic) scene: "
        "`transforms_{train,val,test}.json` and the images they name, or of an instant-ngp / "
        "nerfstudio capture: one `transforms.json` (relative paths: from the current "
        "directory).",
        "data/nerf_scene",
    )
    generate: bool = doc(
        "nerf: `path` holds one of the project's scenes (`scene`); generate it there when it "
        "is missing or its scene.json has other settings (size, views, seed, version); "
        "another generated scene, a folder it did not write, an empty one too, is an error, "
        "never written into (set false for your own scene).",
        True,
    )
    scene: str = doc(
        "nerf, generated scene: `procedural` (a few analytic solids, easy to fit), "
        "`realistic` (sculpted and thin parts, fine textures, glass, mirror reflections: "
        "train/nerf/scenes/realistic.py), `unbounded` (an object on textured ground that runs to "
        "the horizon, distant buildings, a sky, shadows; cameras on a full orbit: "
        "train/nerf/scenes/outdoor.py), `forward` (the same world seen by forward-facing cameras "
        "on a small patch, LLFF-style: train/nerf/scenes/forward.py) or `scan` (the mesh "
        "`scene_mesh` "
        "in the look `scene_look`, under the realistic scene's light and cameras: "
        "train/nerf/scenes/scan.py).",
        "procedural",
    )
    scene_mesh: str = doc(
        "nerf, scene `scan`: the triangle mesh, an .off or .ply file (e.g. from Debian's "
        "libcgal-demo); scene.json records its file name and hash.",
        "",
    )
    scene_look: str = doc(
        "nerf, scene `scan`: `glossy` (painted glaze, sharp highlights), `mirror` (chrome), "
        "`rough` (diffuse stone), `translucent` (a hollow amber glass figure) or `large` "
        "(painted enamel; the object fills the box, no base).",
        "glossy",
    )
    scene_up: str = doc(
        "nerf, scene `scan`: the mesh's up axis, `+x`, `-x`, `+y`, `-y`, `+z` or `-z` (scans "
        "are mostly +y).",
        "+y",
    )
    scene_size: int = doc("nerf, generated scene: image width and height in pixels.", 64)
    scene_train_views: int = doc("nerf, generated scene: number of training views.", 100)
    scene_test_views: int = doc("nerf, generated scene: number of test views.", 8)
    scene_seed: int = doc("nerf, generated scene: seed of the camera poses.", 0)
    scene_variant: int = doc(
        "nerf, scenes `unbounded` and `forward`: 0 is the scene as shipped; k > 0 another "
        "world drawn from k (other buildings, sun, ground and paint; the forward rig turned): "
        "held-out scenes for verdicts (train/nerf/scenes/outdoor.py).",
        0,
    )
    downscale: int = doc("nerf: divide image width and height by this integer on loading.", 1)
    background: list[float] = doc(
        "nerf: RGB in [0, 1] behind the scene (images composited onto it, and rendered with it).",
        [1.0, 1.0, 1.0],
    )
    test_views: int = doc("nerf: evaluate on the first this many test views (0: all).", 0)
    holdout_every: int = doc(
        "nerf, `transforms.json` without split lists: every this-many-th frame (in file_path "
        "order, from the first) is a test view, the others train.",
        8,
    )


def validate_data(d: DataConfig, explicit: dict[str, set[str]]) -> None:
    """Check `[data]`; `explicit`: the keys the user gave (`check_generated_path`)."""
    if not d.path:
        raise ConfigError("data.path: required (a Blender-format scene directory)")
    from .scenes.generate import SCENES

    if d.scene not in SCENES:
        raise ConfigError(f"data.scene: expected one of {', '.join(SCENES)}, got {d.scene!r}")
    if d.generate and d.scene == "scan":
        validate_scan(d)
    from .scenes.generate import VARIANT_SCENES

    if d.scene_variant < 0:
        raise ConfigError(f"data.scene_variant: expected an integer >= 0, got {d.scene_variant}")
    if d.generate and d.scene_variant and d.scene not in VARIANT_SCENES:
        raise ConfigError(
            f"data.scene_variant: only the {' and '.join(VARIANT_SCENES)} scenes have variants; "
            f"data.scene is {d.scene!r} (set data.scene_variant = 0)"
        )
    check_generated_path(d, explicit)
    for key in ("scene_size", "scene_train_views", "scene_test_views", "downscale"):
        if getattr(d, key) < 1:
            raise ConfigError(f"data.{key}: expected an integer >= 1, got {getattr(d, key)}")
    if d.holdout_every < 2:
        raise ConfigError(f"data.holdout_every: expected an integer >= 2, got {d.holdout_every}")
    if d.test_views < 0:
        raise ConfigError(f"data.test_views: expected an integer >= 0, got {d.test_views}")
    if len(d.background) != 3 or not all(0 <= v <= 1 for v in d.background):
        raise ConfigError(f"data.background: expected 3 numbers in [0, 1], got {d.background!r}")


def check_generated_path(d: DataConfig, explicit: dict[str, set[str]]) -> None:
    """A scene is generated only where the config that says `generate = true` puts it: a
    data.path set on the command line (or in a file that does not write `generate`) that
    holds no capture is an InputFileError naming it and the layouts looked for (a typo's
    folder is never filled with a generated scene), unless data.generate is set there too."""
    from pathlib import Path

    from ..errors import InputFileError
    from .scenes.folder import LOOKED_FOR, holds_capture

    typed = explicit.get("--set", set())
    if "data.path" in typed:
        said = "data.generate" in typed
    else:  # from the file (both keys, as the shipped configs write them) or the default
        data = explicit.get("data", set())
        said = "path" not in data or "generate" in data
    path = Path(d.path).expanduser()
    if not d.generate or said or holds_capture(path):
        return
    problem = "holds no capture" if path.is_dir() else "no such directory"
    raise InputFileError(
        path,
        f"{problem}: {LOOKED_FOR}; a scene is generated only into the config's own data.path, "
        "or with data.generate = true set beside this one",
        key="data.path",
    )


def validate_scan(d: DataConfig) -> None:
    """`data.scene_mesh`, `scene_look`, `scene_up` of a generated scan scene."""
    from pathlib import Path

    from .scenes.scan import LOOKS
    from .scenes.scan_mesh import MESH_SUFFIXES, UP_AXES

    if not d.scene_mesh:
        raise ConfigError("data.scene_mesh: required with data.scene = 'scan' (an .off or .ply)")
    path = Path(d.scene_mesh).expanduser()
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise ConfigError(f"data.scene_mesh: {path}: expected an .off or .ply mesh")
    if not path.is_file():
        raise ConfigError(f"data.scene_mesh: {path}: no such file")
    if d.scene_look not in LOOKS:
        raise ConfigError(
            f"data.scene_look: expected one of {', '.join(LOOKS)}, got {d.scene_look!r}"
        )
    if d.scene_up not in UP_AXES:
        raise ConfigError(
            f"data.scene_up: expected one of {', '.join(UP_AXES)}, got {d.scene_up!r}"
        )


def scene_args(d: DataConfig) -> dict:
    """`train.nerf.scenes.generate`'s scene arguments for `data`: `scene`, `scan` (the mesh,
    look and up axis of a scan scene; None for the others) and `variant`."""
    scan = {"mesh": d.scene_mesh, "look": d.scene_look, "up": d.scene_up}
    scan = scan if d.scene == "scan" else None
    return {"scene": d.scene, "scan": scan, "variant": d.scene_variant}
