"""What a scene folder holds: a capture's camera file (either layout the loader reads), or the
scene.json of a scene `train.nerf.scenes.generate` wrote, and which scene that names. Read by
the config check and the loader without generating anything."""

from __future__ import annotations

import json
from pathlib import Path

# The label scene.json records (unchanged since the scene lived in train/nerf_scene.py, so
# scenes generated before still load without being regenerated).
GENERATOR = "train.nerf_scene"
#: What a folder of one's own is searched for (data.path, data.generate = false).
CAPTURE_FILES = ("transforms_train.json", "transforms.json")
LOOKED_FOR = "looked for transforms_train.json (Blender layout) or transforms.json (instant-ngp)"


def holds_capture(path: str | Path) -> bool:
    """Whether `path` holds a scene's camera file in either layout (`CAPTURE_FILES`)."""
    return any((Path(path) / name).is_file() for name in CAPTURE_FILES)


def read_scene_metadata(out_dir: str | Path) -> dict | None:
    """The scene.json of a scene this generator wrote, or None."""
    try:
        metadata = json.loads((Path(out_dir) / "scene.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict) or metadata.get("generator") != GENERATOR:
        return None
    return metadata


#: What names a generated scene (scene.json's keys); the rest are its settings (size, views,
#: seed, the generator's version), which a regeneration may change.
IDENTITY = ("scene", "mesh", "look", "up", "variant")


def same_scene(found: dict, wanted: dict) -> bool:
    """Whether two scene.json dicts name the same scene (maybe at other settings)."""
    return all(found.get(key) == wanted.get(key) for key in IDENTITY)


def scene_label(metadata: dict) -> str:
    """A scene.json's scene in words: "realistic", "scan cow.off (mirror), variant 2"."""
    label = metadata.get("scene", "procedural")
    if "mesh" in metadata:
        label += f" {metadata['mesh']} ({metadata.get('look')})"
    if metadata.get("variant"):
        label += f", variant {metadata['variant']}"
    return label
