"""Writes a shipped scene in the Blender (NeRF-synthetic) layout: the procedural one
(`train.nerf.scenes.procedural`, analytic solids), the realistic one
(`train.nerf.scenes.realistic`: fine detail, thin parts, glass, mirror reflections; several
times slower to render) or the unbounded one (`train.nerf.scenes.outdoor`: an object on
ground that runs to the horizon, a sky; its own cameras, on full orbits at varying height
and radius) or the forward-facing one (`train.nerf.scenes.forward`: the unbounded world seen
by LLFF-style cameras on a small patch) or a scanned mesh in one of several looks
(`train.nerf.scenes.scan`: --mesh FILE --look LOOK).

    python -m train.nerf.scenes.generate --out data/nerf_scene --size 64 \
        [--train N --val N --test N]
    python -m train.nerf.scenes.generate --scene realistic --out data/nerf_realistic --size 64
    python -m train.nerf.scenes.generate --scene unbounded --out data/nerf_unbounded --size 64
    python -m train.nerf.scenes.generate --scene forward --out data/nerf_forward --size 64
    python -m train.nerf.scenes.generate --scene unbounded --variant 1 --out DIR --size 64
    python -m train.nerf.scenes.generate --scene scan --mesh bunny.off --look glossy --out DIR

Cameras sit on a sphere of radius 4 looking at the origin (z is up, as in the original
scenes): train and val on Fibonacci spirals over elevations -20..75 degrees (different
azimuth offsets drawn from the seed), test on a turntable at 30 degrees elevation.
`scene.json` records what was generated, so a loader regenerates an outdated scene.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...lazy import lazy_getattr
from ...progress_bar import progress_lines
from .folder import (
    GENERATOR,
    LOOKED_FOR,
    holds_capture,
    read_scene_metadata,
    same_scene,
    scene_label,
)

# torch and the scene modules are imported where they are used: `--help` and a bad option
# answer without importing torch (0.1 s instead of 1.5 s on 2 cores)
if TYPE_CHECKING:
    from torch import Tensor

VERSION = 1  # the procedural scene's; bump whenever its images would change
SCENES = {
    "procedural": VERSION,
    "realistic": 1,
    "unbounded": 1,
    "forward": 1,
    "scan": 1,
}  # scene -> version (loaders regenerate older)
CAMERA_RADIUS = 4.0
TEST_ELEVATION = math.radians(30.0)
ELEVATIONS = (math.radians(-20.0), math.radians(75.0))  # train / val band


# the names this module offered when it imported them at the top
__getattr__ = lazy_getattr(
    __name__,
    __package__,
    {
        "CAMERA_ANGLE_X": "..data.cameras",
        "look_at_origin": "..data.cameras",
        "SCENE_BOUNDS": ".procedural",
    },
)


def _spherical(azimuth: Tensor, elevation: Tensor) -> Tensor:
    import torch

    return CAMERA_RADIUS * torch.stack(
        [
            torch.cos(elevation) * torch.cos(azimuth),
            torch.cos(elevation) * torch.sin(azimuth),
            torch.sin(elevation),
        ],
        dim=-1,
    )


def camera_poses(n_train: int, n_val: int, n_test: int, seed: int) -> dict[str, Tensor]:
    """c2w [V, 4, 4] float64 per split: Fibonacci spirals (train, val) and a turntable (test).

    A spiral spreads views evenly over the band of elevations ELEVATIONS (uniform in
    sin(elevation), i.e. per unit area of the sphere, azimuth advancing by the golden
    angle); the seed draws each split's azimuth offset, so the splits share no pose.
    """
    import torch

    from ..data.cameras import look_at_origin

    gen = torch.Generator().manual_seed(seed)
    offsets = torch.rand(3, generator=gen, dtype=torch.float64) * 2 * math.pi
    golden = math.pi * (3.0 - math.sqrt(5.0))
    lo, hi = (math.sin(e) for e in ELEVATIONS)

    def spiral(n: int, offset: Tensor) -> Tensor:
        i = torch.arange(n, dtype=torch.float64)
        elevation = torch.asin(hi - (hi - lo) * (i + 0.5) / n)
        return look_at_origin(_spherical(offset + golden * i, elevation))

    turn = offsets[2] + 2 * math.pi * torch.arange(n_test, dtype=torch.float64) / max(n_test, 1)
    test = look_at_origin(_spherical(turn, torch.full_like(turn, TEST_ELEVATION)))
    return {"train": spiral(n_train, offsets[0]), "val": spiral(n_val, offsets[1]), "test": test}


# ---- writing the dataset -------------------------------------------------------------------


VARIANT_SCENES = ("unbounded", "forward")  # the scenes that have variants (`variant` > 0)


def scene_module(scene: str, scan: dict | None = None, variant: int = 0):
    """The module that defines `scene`: its STEP, render_rays, (but procedural)
    SUPERSAMPLE and, where it has its own cameras, camera_poses and CAMERA_ANGLE_X.
    `scan` (scene "scan"): `train.nerf.scenes.scan.ScanScene`'s arguments (mesh, look, up).
    `variant` (scenes VARIANT_SCENES): another world (`outdoor.world`); 0 is the module."""
    if isinstance(variant, bool) or not isinstance(variant, int) or variant < 0:
        raise ValueError(f"variant must be an integer >= 0; got {variant!r}")
    if variant and scene not in VARIANT_SCENES:
        raise ValueError(
            f"variant {variant}: only the {' and '.join(VARIANT_SCENES)} scenes have variants, "
            f"not {scene!r}"
        )
    if variant:
        from .forward import ForwardScene
        from .outdoor import OutdoorScene

        return (OutdoorScene if scene == "unbounded" else ForwardScene)(variant)
    if scene == "scan":
        from .scan import ScanScene

        if not scan or not scan.get("mesh"):
            raise ValueError("the scan scene needs a mesh file (scan={'mesh': PATH, ...})")
        return ScanScene(**scan)
    if scene == "realistic":
        from . import realistic

        return realistic
    if scene == "unbounded":
        from . import outdoor

        return outdoor
    if scene == "forward":
        from . import forward

        return forward
    from . import procedural as procedural

    return procedural


def render_views(
    c2w: Tensor,
    size: int,
    *,
    device: str = "cpu",
    chunk: int | None = None,
    scene: str = "procedural",
    scan: dict | None = None,
    variant: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Tensor:
    """c2w [V, 4, 4] -> straight (not premultiplied) RGBA [V, size, size, 4] float32 in [0, 1].

    A scene with SUPERSAMPLE = k renders k x k rays per pixel on a regular grid (the pixels
    of a k times larger image) and averages their premultiplied colour and alpha.
    chunk: rays marched together, whole views at a time (default on the CPU 2^19, about
    0.5 GB at the peak; on a GPU, where each marching step is a few dozen small kernels
    whatever the number of rays, 2^21 for the procedural scene and 2^23 for the realistic
    one, whose rays take hundreds of steps).
    progress: called with (views rendered, all views) after each group of views.
    """
    import torch

    from ..data.blender import Views, camera_rays
    from ..data.cameras import CAMERA_ANGLE_X

    module = scene_module(scene, scan, variant)
    k = getattr(module, "SUPERSAMPLE", 1)
    if chunk is None:
        on_gpu = torch.device(device).type == "cuda"
        chunk = (1 << 23 if k > 1 else 1 << 21) if on_gpu else 1 << 19
    fine = size * k
    focal = 0.5 * fine / math.tan(0.5 * getattr(module, "CAMERA_ANGLE_X", CAMERA_ANGLE_X))
    group = max(1, chunk // (fine * fine))  # views rendered together
    out = []
    for first in range(0, len(c2w), group):
        poses = c2w[first : first + group].to(device, torch.float32)
        views = Views(torch.empty(0), poses, focal, fine, fine, [""] * len(poses))
        origins, directions = (x.reshape(-1, 3) for x in camera_rays(views))
        rgba = []
        for start in range(0, origins.shape[0], chunk):
            rgb, alpha = module.render_rays(
                origins[start : start + chunk], directions[start : start + chunk]
            )
            rgba.append(torch.cat([rgb, alpha[:, None]], dim=-1))
        rgba = torch.cat(rgba).reshape(len(poses), size, k, size, k, 4)
        out.append(rgba.mean(dim=(2, 4)).cpu())  # premultiplied colour, alpha
        if progress is not None:
            progress(first + len(poses), len(c2w))
    premultiplied = torch.cat(out)
    straight = premultiplied[..., :3] / premultiplied[..., 3:].clamp_min(1e-12)
    return torch.cat([straight, premultiplied[..., 3:]], dim=-1).clamp(0.0, 1.0)


def _to_png_bytes(rgba: Tensor) -> np.ndarray:
    """[H, W, 4] float in [0, 1] -> uint8, colour zeroed where alpha rounds to 0."""
    pixels = (rgba.numpy() * 255.0 + 0.5).astype(np.uint8)
    pixels[pixels[..., 3] == 0] = 0
    return pixels


def _check_arguments(size: int, counts: dict[str, int], seed: int) -> None:
    for name, value, least in [("size", size, 1), ("seed", seed, 0)] + [
        (f"n_{split}", n, 1) for split, n in counts.items()
    ]:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}; got {value!r}")


def scene_metadata(
    size: int,
    n_train: int,
    n_val: int,
    n_test: int,
    seed: int,
    scene: str = "procedural",
    scan: dict | None = None,
    variant: int = 0,
) -> dict:
    """What `scene.json` holds: enough to tell whether a generated scene is current (the
    procedural scene's has no "scene" key, as before there were two; a scan scene's names
    its mesh file, the file's hash and the look; a variant's, its number: variant 0 has no
    "variant" key, as before variants existed)."""
    if scene not in SCENES:
        raise ValueError(f"scene must be one of {', '.join(map(repr, SCENES))}; got {scene!r}")
    from ..data.cameras import CAMERA_ANGLE_X
    from .procedural import SCENE_BOUNDS

    module = scene_module(scene, scan, variant)
    metadata = {
        "generator": GENERATOR,
        "version": SCENES[scene],
        "seed": seed,
        "size": size,
        "n_train": n_train,
        "n_val": n_val,
        "n_test": n_test,
        "bounds": [list(SCENE_BOUNDS[0]), list(SCENE_BOUNDS[1])],
        "camera_radius": CAMERA_RADIUS,
        "camera_angle_x": CAMERA_ANGLE_X,
        "step": module.STEP,
    }
    if scene != "procedural":
        metadata.update(scene=scene, supersample=module.SUPERSAMPLE)
    metadata.update(getattr(module, "METADATA", {}))
    return metadata


def generate_scene(
    out_dir: str | Path,
    *,
    size: int = 64,
    n_train: int = 100,
    n_val: int = 8,
    n_test: int = 8,
    seed: int = 0,
    device: str = "cpu",
    scene: str = "procedural",
    scan: dict | None = None,
    variant: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Renders `scene` (its `variant`) into `out_dir` in the Blender layout and returns `out_dir`
    (`progress`: as `render_views`').

    Writes transforms_{train,val,test}.json, {train,val,test}/r_{i}.png (size x size RGBA)
    and scene.json. The files are assembled in a sibling directory and moved into place
    at the end, so an interrupted run never leaves a scene that looks complete, and a
    failure (a full disk) leaves neither that directory nor a half-deleted old scene. An
    existing `out_dir` is replaced only if it holds a scene this generator wrote.
    """
    counts = {"train": n_train, "val": n_val, "test": n_test}
    _check_arguments(size, counts, seed)
    metadata = scene_metadata(size, n_train, n_val, n_test, seed, scene, scan, variant)
    out_dir = Path(out_dir)
    # Any folder it did not write is refused, an empty one too (a typo's, or a capture not
    # copied yet): a generated scene never stands in for data silently.
    if out_dir.exists() and read_scene_metadata(out_dir) is None:
        held = "a capture" if holds_capture(out_dir) else f"no capture ({LOOKED_FOR})"
        raise FileExistsError(
            f"{out_dir}: exists and is not a scene written by {GENERATOR} (no scene.json; it "
            f"holds {held}); refusing to write into it"
        )
    staging = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    old = out_dir.with_name(f".{out_dir.name}.old{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        module = scene_module(scene, scan, variant)
        poses = getattr(module, "camera_poses", camera_poses)(n_train, n_val, n_test, seed)
        _write_splits(staging, poses, size, device, scene, scan, variant, progress)
        (staging / "scene.json").write_text(json.dumps(metadata, indent=2) + "\n")
        if out_dir.exists():  # moved aside whole, then deleted: never half a scene there
            out_dir.rename(old)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if old.exists() and not out_dir.exists():
            old.rename(out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


def _write_splits(
    root: Path,
    poses: dict[str, Tensor],
    size: int,
    device: str,
    scene: str,
    scan: dict | None,
    variant: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Renders every split in one pass (fewer, fuller ray batches) and writes PNGs and json."""
    import torch
    from PIL import Image  # Pillow is a dependency of matplotlib (the `train` extra)

    from ..data.cameras import CAMERA_ANGLE_X

    views = torch.cat(list(poses.values()))
    rgba = render_views(
        views, size, device=device, scene=scene, scan=scan, variant=variant, progress=progress
    )
    first = 0
    for split, c2w in poses.items():
        (root / split).mkdir()
        frames = []
        for k in range(len(c2w)):
            pixels = _to_png_bytes(rgba[first + k])
            Image.fromarray(pixels).save(root / split / f"r_{k}.png")
            frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": c2w[k].tolist()})
        first += len(c2w)
        angle = getattr(scene_module(scene, scan, variant), "CAMERA_ANGLE_X", CAMERA_ANGLE_X)
        meta = {"camera_angle_x": angle, "frames": frames}
        (root / f"transforms_{split}.json").write_text(json.dumps(meta, indent=2) + "\n")


def ensure_scene(
    out_dir: str | Path,
    *,
    size: int = 64,
    n_train: int = 100,
    n_val: int = 8,
    n_test: int = 8,
    seed: int = 0,
    device: str = "cpu",
    scene: str = "procedural",
    scan: dict | None = None,
    variant: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """`out_dir` holding the current `scene` at these settings, generating it if needed
    (`progress`: as `render_views`').

    Regenerates when scene.json is absent or differs in its settings (older version, size,
    counts or seed); returns at once when it matches. Another scene there (`folder.IDENTITY`) is
    never replaced: generating it may have taken minutes, and a path that names it is more
    likely a slip than a wish to lose it.
    """
    wanted = scene_metadata(size, n_train, n_val, n_test, seed, scene, scan, variant)
    found = read_scene_metadata(out_dir)
    if found == wanted:
        return Path(out_dir)
    if found is not None and not same_scene(found, wanted):
        raise FileExistsError(
            f"{out_dir}: holds the generated scene {scene_label(found)!r}, not "
            f"{scene_label(wanted)!r}; refusing to replace it"
        )
    return generate_scene(
        out_dir,
        size=size,
        n_train=n_train,
        n_val=n_val,
        n_test=n_test,
        seed=seed,
        device=device,
        scene=scene,
        scan=scan,
        variant=variant,
        progress=progress,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.nerf.scenes.generate",
        description="Render a shipped radiance-field scene into the Blender layout.",
    )
    parser.add_argument(
        "--scene", default="procedural", choices=list(SCENES), help="which scene to render"
    )
    parser.add_argument(
        "--out", help="output directory (default data/nerf_scene or data/nerf_realistic)"
    )
    parser.add_argument("--size", type=int, default=64, help="image width and height (pixels)")
    parser.add_argument("--train", type=int, default=100, help="number of training views")
    parser.add_argument("--val", type=int, default=8, help="number of validation views")
    parser.add_argument("--test", type=int, default=8, help="number of test views (turntable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the camera placement")
    parser.add_argument("--device", default="cpu", help="torch device to render on")
    parser.add_argument("--mesh", help="scan scene: the .off or .ply mesh")
    parser.add_argument("--look", default="glossy", help="scan scene: glossy, mirror, rough, ...")
    parser.add_argument("--up", default="+y", help="scan scene: the mesh's up axis (+y, +z, ...)")
    parser.add_argument(
        "--variant", type=int, default=0, help="unbounded and forward scenes: another world (k > 0)"
    )
    args = parser.parse_args(argv)
    scan = {"mesh": args.mesh, "look": args.look, "up": args.up} if args.scene == "scan" else None
    if args.out is None:
        args.out = {
            "realistic": "data/nerf_realistic",
            "unbounded": "data/nerf_unbounded",
            "forward": "data/nerf_forward",
            "scan": "data/nerf_scan",
        }.get(args.scene, "data/nerf_scene")
    start = time.perf_counter()
    try:
        out = generate_scene(
            args.out,
            size=args.size,
            n_train=args.train,
            n_val=args.val,
            n_test=args.test,
            seed=args.seed,
            device=args.device,
            scene=args.scene,
            scan=scan,
            variant=args.variant,
            progress=progress_lines("rendered", "views"),
        )
    except (ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    views = args.train + args.val + args.test
    print(
        f"wrote {out}: {views} views of {args.size}x{args.size} ({args.scene}) in {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
