"""The nerf experiment's `[nerf]` table (the model) and the checks of a whole nerf config (its
`[data]` table: `data_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..multires_config import validate_multires
from ..schema import doc, positive
from .choices import ACTIVATIONS, CONTRACTIONS, ENCODINGS, MLP_DTYPES, RENDERERS, VIEW_ENCODINGS
from .data_config import validate_data

if TYPE_CHECKING:
    from ..config import Config


#: Values of `nerf.optimizer`.
OPTIMIZERS = ("adam", "masked_adam")
#: Values of `nerf.appearance` (train/nerf/model/appearance.py).
APPEARANCES = ("off", "affine")


@dataclass
class NerfConfig:
    STEP_KEYS = (  # train.config
        "occupancy_start",
        "occupancy_every",
        "occupancy_grow_until",
        "priors_until",
    )
    density_encoding: str = doc(
        "nerf: `dense` (a one-channel VoxelGrid, DirectVoxGO's) or `multires` (instant-ngp's: "
        "an MLP of one hidden layer of `density_hidden` over a grid.MultiresGrid shaped by "
        "`[multires]`, giving the raw density and `geometry_features` features for the "
        "colour MLP); with `multires` there is no total variation (train.tv_weight must be 0), "
        "`lr_density` is unused (`multires.lr`), and upsampling and fit_box change only the "
        "sample step, the occupancy grid and the box rays are marched in, never the table "
        "(docs/nerf.md, Encodings).",
        "dense",
    )
    color_encoding: str = doc(
        "nerf: what the colour MLP reads besides the view direction: `dense` (a VoxelGrid of "
        "`color_features` channels) or `multires` (the density's geometry features when "
        "density_encoding is `multires`, else a grid.MultiresGrid of its own shaped by "
        "`[multires]`; `color_features` and `lr_color` are then unused).",
        "dense",
    )
    density_hidden: int = doc(
        "nerf, density_encoding `multires`: width of the density MLP's hidden layer.", 64
    )
    geometry_features: int = doc(
        "nerf, density_encoding and color_encoding `multires`: features the density MLP "
        "outputs besides the raw density, which the colour MLP reads.",
        15,
    )
    color_features: int = doc("nerf: channels of the colour feature grid.", 12)
    hidden: int = doc("nerf: width of the colour MLP's two hidden layers.", 128)
    view_frequencies: int = doc("nerf: positional-encoding frequencies of the view direction.", 4)
    view_encoding: str = doc(
        "nerf: what the colour MLP reads of the view direction: `frequencies` (the direction "
        "and its sines and cosines at `view_frequencies` octaves) or `sh` (real spherical "
        "harmonics of degree 4, 16 values: instant-ngp's; `view_frequencies` is then unused).",
        "frequencies",
    )
    reflected_views: bool = doc(
        "nerf: besides the view direction, the colour MLP reads each sample's view direction "
        "mirrored about the density's normal there (encoded as `view_encoding` says) and the "
        "cosine between them (after Ref-NeRF: a mirror's colour becomes one function of the "
        "reflected direction). Normals: the raw density's central differences, refreshed "
        "with the occupancy grid, without gradient. Not with a contraction.",
        False,
    )
    step_ratio: float = doc("nerf: sample spacing along rays, in voxels of the current grid.", 0.5)
    jitter: bool = doc(
        "nerf: stratified samples in training: each training ray's samples shift by its own "
        "random fraction of a step (as DirectVoxGO's training rays), so a ray is not sampled "
        "at the same depths every time it is drawn; renders of test views keep the steps' "
        "centres. Not with a contraction.",
        False,
    )
    alpha_init: float = doc("nerf: alpha of an untrained voxel (sets the density shift).", 0.01)
    density_activation: str = doc(
        "nerf: raw density -> density: `softplus` (DirectVoxGO's, softplus(raw + shift)) or "
        "`exp` (instant-ngp's truncated exponential, exp(raw + shift) with its gradient's "
        "exponent capped at 15); either gives alpha_init at raw = 0.",
        "softplus",
    )
    occupancy_threshold: float = doc(
        "nerf: empty-space skipping, voxels whose alpha (and neighbours') is below this are "
        "skipped.",
        1e-4,
    )
    occupancy_start: int = doc("nerf: first step at which the occupancy grid is refreshed.", 100)
    occupancy_every: int = doc("nerf: refresh the occupancy grid every this many steps.", 100)
    occupancy_grow_until: int = doc(
        "nerf: 0, or the step from which a refresh of the occupancy grid only removes voxels "
        "(DirectVoxGO's fine-stage mask): space found empty stays empty, so the density cannot "
        "grow floaters there that fit the training views alone.",
        0,
    )
    shift_decay: float = doc(
        "nerf: at each of `train.upsample_steps` the raw density grid is lowered by this, "
        "i.e. the density shift (DirectVoxGO's `decay_after_scale`, 1 in its fine stage): "
        "thin density fades and must be fitted again, solid density stays.",
        0.0,
    )
    weight_threshold: float = doc(
        "nerf: samples whose compositing weight is below this skip the colour grid and MLP.",
        1e-4,
    )
    sparse_average: float = doc(
        "nerf, under torchrun: average the colour grid's gradient over the voxels near occupied "
        "cells alone (the others are zero on every rank) while they are at most this fraction "
        "of the grid; above it, and at 0, average it whole (packing the rows costs more than "
        "it saves above about 0.15 on 2x H100: bench/bench_multi.py A5).",
        0.1,
    )
    mlp_dtype: str = doc(
        "nerf: `float32`, or `bfloat16`: the colour MLP's matrix products under autocast "
        "(half its activation memory; tensor cores on the GPU), its output in float32.",
        "float32",
    )
    renderer: str = doc(
        "nerf: how rays are sampled and composited: `fused` (the library's native ray marcher "
        "and compositor, buffers of planned size: a CUDA step never waits for the GPU), "
        "`torch` (plain PyTorch ops, the sample counts read back every step) or `auto` "
        "(`fused` with grid.backend = native, `torch` with grid_sample, the baseline).",
        "auto",
    )
    lr_density: float = doc("nerf: Adam learning rate of the density grid.", 0.1)
    lr_color: float = doc("nerf: Adam learning rate of the colour grid.", 0.1)
    lr_mlp: float = doc("nerf: Adam learning rate of the colour MLP.", 0.001)
    mlp_weight_decay: float = doc(
        "nerf: L2 weight decay of the MLPs (the colour MLP and a multires density's; "
        "instant-ngp: 1e-6), added to their gradients as torch.optim.Adam's weight_decay.",
        0.0,
    )
    lr_decay: float = doc(
        "nerf: every learning rate is multiplied by this at the last step (exponential; "
        "or at nerf.lr_decay_steps, if that is earlier).",
        0.1,
    )
    lr_decay_steps: int = doc(
        "nerf: the latest step at which the learning rates reach `lr_decay` times their "
        "start, decaying on at the same rate after it; a run with fewer steps reaches it at "
        "its last step (0: always the run's last step, so the schedule stretches with "
        "train.steps). Set, a longer run is the shorter one continued at ever smaller rates.",
        0,
    )
    sample_color_weight: float = doc(
        "nerf: weight of the per-sample colour loss, sum over a ray's coloured samples of "
        "weight x |sample colour - pixel colour|^2 (weights without gradient; DirectVoxGO's "
        "rgbper, 0.01 in its fine stage): each sample's colour is pulled to its pixel's, so "
        "colour is not blended from several surfaces.",
        0.0,
    )
    entropy_weight: float = doc(
        "nerf: weight of the binary entropy of each ray's remaining transmittance (DirectVoxGO's "
        "entropy_last, 0.001 in its fine stage): rays end either empty or opaque.",
        0.0,
    )
    priors_until: int = doc(
        "nerf: the step from which nerf.sample_color_weight and nerf.entropy_weight are off "
        "(0: the whole run). Both assume a pixel is one opaque surface's colour: true of "
        "matte and mirror looks, false of see-through ones, whose pixels blend a faint wall "
        "and what lies behind it.",
        0,
    )
    view_consistency_weight: float = doc(
        "nerf: weight of the view-consistency penalty: each coloured training sample's colour "
        "against its colour along another ray's direction of the batch, compositing weight x "
        "squared difference, summed per ray (0: off). View-dependent colour that fits single "
        "training views pays it, effects the views agree on (highlights) outweigh it.",
        0.0,
    )
    view_consistency_stride: int = doc(
        "nerf: the view-consistency penalty on every this-many-th coloured sample of the "
        "batch only, that many times over (an estimate of the whole penalty): its second "
        "colour MLP pass costs 1/stride of the time and memory.",
        1,
    )
    appearance: str = doc(
        "nerf: `off`, or `affine`: each training image gets its own colour transform of the "
        "render (a 3x3 matrix and an offset, learnt), for captures whose exposure or white "
        "balance changes from image to image; test views are then scored after a per-image "
        "least-squares affine colour correction (`train/nerf/model/appearance.py`).",
        "off",
    )
    appearance_weight: float = doc(
        "nerf, appearance: weight of the mean square of the per-image codes (keeps the field "
        "at the images' mean appearance).",
        0.001,
    )
    lr_appearance: float = doc("nerf, appearance: Adam learning rate of the codes.", 0.01)
    fit_box: bool = doc(
        "nerf: at the first `train.upsample_steps`, move both grids onto the box around where "
        "the rays of object pixels end (pixels not of the background colour; up to 65536 rays, "
        "extremes trimmed, plus `fit_box_margin` voxels), with as many cubic voxels as the "
        "schedule's resolution has cells, and draw later batches from the rays that cross it: "
        "the fine voxels land on the object (as DirectVoxGO's coarse-stage box).",
        False,
    )
    fit_box_margin: float = doc("nerf, fit_box: voxels (of the coarse grid) added around.", 2.0)
    contraction: str = doc(
        "nerf: `none` (the grids cover grid.bounds; rays leaving it see data.background) or, "
        "for unbounded scenes, `sphere` (mip-NeRF 360's contraction) or `cube` (DirectVoxGO "
        "v2's, with the max-norm): grid.bounds is then the inner region, mapped onto the unit "
        "ball (cube), the rest of the world is contracted into the shell out to radius 2, the "
        "grids cover the cube [-2, 2]^3, and there is no background colour (the sky is content "
        "at `far`). See docs/unbounded.md.",
        "none",
    )
    far: float = doc(
        "nerf, contraction: where rays end, in world units (beyond the scene's furthest content).",
        1000.0,
    )
    outer_samples: int = doc(
        "nerf, contraction: samples per ray beyond the inner region, evenly spaced in the "
        "contracted space (0: as many as steps of `step_ratio` voxels across the shell).",
        0,
    )
    optimizer: str = doc(
        "nerf: `adam` (torch.optim.Adam: every voxel of both grids moves every step) or "
        "`masked_adam` (grid.MaskedAdam, as DirectVoxGO: only the grid voxels whose gradient "
        "is non-zero this step are updated, the others keep their value and moments; the MLP "
        "keeps Adam's update).",
        "adam",
    )


def validate(c: Config, explicit: dict[str, set[str]]) -> None:
    """Check [data], [nerf] and the nerf experiment's use of the shared tables."""
    n = c.nerf
    validate_data(c.data, explicit)
    validate_encodings(c)
    for key in ("color_features", "hidden", "occupancy_every", "view_consistency_stride"):
        if getattr(n, key) < 1:
            raise ConfigError(f"nerf.{key}: expected an integer >= 1, got {getattr(n, key)}")
    for key in (
        "view_frequencies",
        "occupancy_start",
        "occupancy_grow_until",
        "lr_decay_steps",
        "priors_until",
    ):
        if getattr(n, key) < 0:
            raise ConfigError(f"nerf.{key}: expected an integer >= 0, got {getattr(n, key)}")
    if n.optimizer not in OPTIMIZERS:
        raise ConfigError(
            f"nerf.optimizer: expected one of {', '.join(OPTIMIZERS)}, got {n.optimizer!r}"
        )
    for key in ("step_ratio", "lr_density", "lr_color", "lr_mlp", "lr_decay"):
        positive(getattr(n, key), f"nerf.{key}")
    positive(n.shift_decay, "nerf.shift_decay", zero=True)
    positive(n.mlp_weight_decay, "nerf.mlp_weight_decay", zero=True)
    if n.view_encoding not in VIEW_ENCODINGS:
        expected = ", ".join(VIEW_ENCODINGS)
        raise ConfigError(
            f"nerf.view_encoding: expected one of {expected}, got {n.view_encoding!r}"
        )
    if n.density_activation not in ACTIVATIONS:
        expected = ", ".join(ACTIVATIONS)
        raise ConfigError(
            f"nerf.density_activation: expected one of {expected}, got {n.density_activation!r}"
        )
    if n.mlp_dtype not in MLP_DTYPES:
        raise ConfigError(
            f"nerf.mlp_dtype: expected one of {', '.join(MLP_DTYPES)}, got {n.mlp_dtype!r}"
        )
    if n.renderer not in RENDERERS:
        raise ConfigError(f"nerf.renderer: expected auto, fused or torch, got {n.renderer!r}")
    for key in ("alpha_init", "occupancy_threshold", "weight_threshold"):
        value = getattr(n, key)
        if not 0 <= value < 1:
            raise ConfigError(f"nerf.{key}: expected a number in [0, 1), got {value}")
    if not 0 <= n.sparse_average <= 1:
        raise ConfigError(
            f"nerf.sparse_average: expected a number in [0, 1], got {n.sparse_average}"
        )
    if n.alpha_init == 0:
        raise ConfigError("nerf.alpha_init: expected a number in (0, 1), got 0.0")
    if n.appearance not in APPEARANCES:
        raise ConfigError(
            f"nerf.appearance: expected one of {', '.join(APPEARANCES)}, got {n.appearance!r}"
        )
    positive(n.lr_appearance, "nerf.lr_appearance")
    for key in (
        "sample_color_weight",
        "entropy_weight",
        "view_consistency_weight",
        "appearance_weight",
    ):
        if not getattr(n, key) >= 0:
            raise ConfigError(f"nerf.{key}: expected a number >= 0, got {getattr(n, key)}")
    if n.priors_until and not (n.sample_color_weight or n.entropy_weight):
        raise ConfigError(
            f"nerf.priors_until: turns off nerf.sample_color_weight and nerf.entropy_weight "
            f"from step {n.priors_until}, but both are 0; set one, or leave priors_until 0"
        )
    validate_contraction(c)
    if n.fit_box and not c.train.upsample_steps:
        raise ConfigError("nerf.fit_box: needs train.upsample_steps (it acts at the first)")
    if not n.fit_box_margin >= 0:
        raise ConfigError(f"nerf.fit_box_margin: expected a number >= 0, got {n.fit_box_margin}")
    if c.train.upsample_moments == "rescale":
        raise ConfigError(
            "train.upsample_moments: the nerf experiment supports 'resample' and 'reset'"
        )
    problem = graph_problem(c)
    if c.train.cuda_graph == "on" and problem:
        raise ConfigError(
            f"train.cuda_graph: 'on', but this nerf config's steps cannot be captured as CUDA "
            f"graphs: {problem}; use 'auto' (op by op here) or 'off'"
        )
    if c.output.picture_views < 1:
        raise ConfigError(
            f"output.picture_views: expected an integer >= 1, got {c.output.picture_views}"
        )
    if c.output.turntable_frames < 0:
        raise ConfigError(
            f"output.turntable_frames: expected an integer >= 0, got {c.output.turntable_frames}"
        )
    if c.grid.init == "points":
        raise ConfigError("grid.init: 'points' is for the sdf experiment only")
    if c.grid.interpolation == "smoothstep":
        raise ConfigError("grid.interpolation: the nerf experiment uses 'linear' only")


def validate_encodings(c: Config) -> None:
    """`nerf.density_encoding`, `nerf.color_encoding`, their MLP's keys, `[multires]` and
    what a multires density rules out."""
    n = c.nerf
    for key in ("density_encoding", "color_encoding"):
        value = getattr(n, key)
        if value not in ENCODINGS:
            raise ConfigError(f"nerf.{key}: expected one of {', '.join(ENCODINGS)}, got {value!r}")
    for key in ("density_hidden", "geometry_features"):
        if getattr(n, key) < 1:
            raise ConfigError(f"nerf.{key}: expected an integer >= 1, got {getattr(n, key)}")
    validate_multires(c.multires)
    if n.density_encoding == "multires" and c.train.tv_weight:
        raise ConfigError(
            f"train.tv_weight: a total variation needs a dense density grid, got "
            f"{c.train.tv_weight:g} with nerf.density_encoding = 'multires': set it to 0"
        )


def validate_contraction(c: Config) -> None:
    """`nerf.contraction`, `nerf.far`, `nerf.outer_samples` and what they rule out."""
    n = c.nerf
    if n.contraction not in CONTRACTIONS:
        raise ConfigError(
            f"nerf.contraction: expected one of {', '.join(CONTRACTIONS)}, got {n.contraction!r}"
        )
    positive(n.far, "nerf.far")
    if n.outer_samples < 0:
        raise ConfigError(f"nerf.outer_samples: expected an integer >= 0, got {n.outer_samples}")
    if n.contraction == "none":
        return
    if n.reflected_views:
        raise ConfigError(
            f"nerf.reflected_views: not with nerf.contraction = '{n.contraction}' (the normals "
            f"would be the contracted space's): set one of them off"
        )
    if n.jitter:
        raise ConfigError(
            f"nerf.jitter: not with nerf.contraction = '{n.contraction}' (its samples are "
            f"spaced by grid.sample_contracted, which has no jitter yet): set one of them off"
        )
    lo, hi = c.grid.bounds
    reach = max(max(abs(v) for v in lo), max(abs(v) for v in hi))
    if n.far <= 2 * reach:
        raise ConfigError(
            f"nerf.far: expected a distance well beyond the inner region grid.bounds "
            f"(more than {2 * reach:g}, twice its furthest coordinate), got {n.far:g}"
        )
    if n.fit_box:
        raise ConfigError(
            f"nerf.fit_box: not with nerf.contraction = '{n.contraction}' (the grids hold the "
            f"whole world; fit_box would crop them to the object's box): set one of them off"
        )


def graph_problem(c: Config) -> str | None:
    """Why the steps of this nerf config cannot be captured as CUDA graphs, or None: the
    fused renderer plans its buffers (fixed shapes between measurements), the torch one
    reads the sample counts back every step."""
    n = c.nerf
    renderer = n.renderer
    if renderer == "auto":
        renderer = "fused" if c.grid.backend == "native" else "torch"
    if n.contraction != "none":
        return (
            f"nerf.contraction = '{n.contraction}' samples rays with PyTorch ops that read the "
            f"sample counts back every step"
        )
    if renderer != "fused":
        return (
            f"the {renderer} renderer reads the sample counts back every step (the fused "
            f"one, grid.backend = 'native', does not)"
        )
    return None
