"""The capture at `data.path`: read as it is, or with `data.generate` the project scene
`data.scene` (re)generated there first, once for every rank of a run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, InputFileError, writing
from ..progress_bar import progress_lines
from .data_config import scene_args

if TYPE_CHECKING:
    import torch

    from ..config import Config
    from ..distributed import World


def ensure_scene(config: Config, device: torch.device) -> Path:
    """`data.path`; with `data.generate`, first (re)generate the scene `data.scene` there
    when it holds this scene at other settings (`data.scene*`, the generator's version);
    another scene there is an error, never replaced."""
    from .scenes import folder
    from .scenes import generate as nerf_scene

    d = config.data
    path = Path(d.path).expanduser()
    if not d.generate:
        if not folder.holds_capture(path):
            problem = "holds no capture" if path.is_dir() else "no such directory"
            raise InputFileError(path, f"{problem}: {folder.LOOKED_FOR}", key="data.path")
        return path
    wanted = nerf_scene.scene_metadata(
        d.scene_size, d.scene_train_views, 8, d.scene_test_views, d.scene_seed, **scene_args(d)
    )
    found = folder.read_scene_metadata(path)
    fresh = found is None and not path.exists()
    if fresh or (found is not None and found != wanted and folder.same_scene(found, wanted)):
        print(  # (else nothing is written: refused below)
            f"generating the {d.scene} scene"
            + (f" (variant {d.scene_variant})" if d.scene_variant else "")
            + f" in {path} ({d.scene_size}x{d.scene_size}, "
            f"{d.scene_train_views} training views, seed {d.scene_seed}) on {device}",
            file=sys.stderr,
            flush=True,
        )
    with writing(path, key="data.path"):  # a full disk: one line; the generator cleans up
        try:
            return nerf_scene.ensure_scene(
                path,
                size=d.scene_size,
                n_train=d.scene_train_views,
                n_test=d.scene_test_views,
                seed=d.scene_seed,
                device=str(device),
                progress=progress_lines("rendered", "views"),
                **scene_args(d),  # a scan scene's bad mesh: a ConfigError naming the key
            )
        except FileExistsError as error:  # data.path holds something else: never replaced
            raise ConfigError(
                f"data.path: {error}; generate into a new folder, or read it: data.generate = false"
            ) from None


def ensure_scene_once(config: Config, device: torch.device, world: World) -> Path:
    """`ensure_scene` on rank 0 first (it may write the scene), then on the other ranks,
    which then find it in place; an error on rank 0 stops every rank."""
    error, path = None, None
    if world.is_main:
        try:
            path = ensure_scene(config, device)
        except ConfigError as caught:
            error = caught
    world.agree(error)
    return path if path is not None else ensure_scene(config, device)
