"""The NeRF model: a DirectVoxGO-style radiance field built from two `VoxelGrid`s.

An ordinary `nn.Module` you can copy into your own code (it needs only torch and grid):

    model = VoxelNeRF(bounds, resolution=160, final_resolution=160)
    rgb, depth, acc = model.render(origins, directions, background)  # [R, 3], [R], [R]

* density: a `[X, Y, Z, 1]` grid, post-activation: interpolate the raw value, then
  `sigma = softplus(raw + shift)` (or instant-ngp's `trunc_exp(raw + shift)` with
  `density_activation="exp"`), `alpha = 1 - exp(-sigma * interval)`;
* colour: a `[X, Y, Z, k]` feature grid (k about 12) and a small MLP that also reads the
  positionally encoded view direction, `rgb = sigmoid(mlp([features, PE(d)]))`;
* rendering: samples at a fixed step (`step_ratio` voxels, default half a voxel) along each
  ray inside the box only (a ray that misses the box gets no samples), composited front to
  back. The samples are *packed*: one flat list `[S]` sorted by ray, with `ray_id [S]`, not a
  padded `[rays, max samples]` tensor, so rays that cross little of the box cost little;
* empty-space skipping: `occupancy` is a boolean grid refreshed from the density grid
  during training (`update_occupancy`); samples in unoccupied cells never reach the grids or
  the MLP, and samples whose compositing weight is below `weight_threshold` never reach the
  colour grid or the MLP (DirectVoxGO's `fast_color_thres`).

`density_encoding="multires"` replaces the density grid by instant-ngp's density network
(`multires_fields.MultiresDensity`: an MLP of one hidden layer over a `grid.MultiresGrid`,
channel 0 the raw density, the others geometry features); `color_encoding="multires"` makes
the colour MLP read those geometry features (or, with a dense density, the features of a
`MultiresGrid` of its own) instead of the colour grid's. The resolution schedule then sets
only the sample step and the occupancy grid (a virtual resolution), and `fit_box` only the box
where rays are marched: a multires table never changes shape or box.

`backend="grid_sample"` swaps both grids for `ChannelsFirstGrid`, the same parameters stored
`[1, F, Z, Y, X]` and sampled with `F.grid_sample` as DirectVoxGO does; everything else is
identical, so the two can be compared step for step.

`renderer` picks how rays are sampled and composited: "torch" (plain PyTorch ops over packed
samples: `grid.march_rays`, `grid.composite_weights`, `grid.composite`; the sample counts are
read back every step) or "fused" (the native marcher and compositor with buffers of planned
size, so a CUDA step never waits for the GPU): `render.render_torch` and `render.render_fused`,
which take the model's `sigma_fn` and `rgb_fn` and read no model. "auto" is "fused" on the
native backend and "torch" on grid_sample, which stays the plain-PyTorch baseline. Both give
the same renders up to float rounding (the fused weights are a float32 product, the torch ones
a float64 sum of logarithms).

`contraction` ("sphere" or "cube", `grid.contract`) makes the model unbounded: `bounds` is then
the inner region, both grids cover the contracted cube [-2, 2]^3 that holds the whole world,
rays are sampled out to `far` by `grid.sample_contracted` (evenly in the inner region, then
evenly in the contracted space) and there is no background: what lies beyond everything (the
sky) is content at the far end (`train/nerf/model/render_contracted.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from grid import MultiresGrid, OccupancyGrid, VoxelGrid
from grid.contraction import CONTRACTED_BOUNDS

from ..choices import ACTIVATIONS, CONTRACTIONS, ENCODINGS, MLP_DTYPES, RENDERERS, VIEW_ENCODINGS
from .capacity import SampleCapacity, capacity_key
from .color_mlp import color_mlp
from .density_activation import activate, density_shift, raw_density
from .encoding import ViewInput
from .grids import make_grid, mean_spacing, triple
from .image import FIRST_CHUNK
from .multires_fields import MultiresDensity, shared_fields
from .render import RgbFn, SigmaFn, render_fused, render_torch
from .render_contracted import render_contracted


class VoxelNeRF(nn.Module):
    """DirectVoxGO-style radiance field over the box `bounds`.

    Args:
        bounds: ((xmin, ymin, zmin), (xmax, ymax, zmax)) world box holding the scene.
        resolution: starting voxels per axis (int or (X, Y, Z)), both grids.
        final_resolution: voxels per axis at the end of coarse-to-fine; the density's
            `interval` is measured in its voxels, so the density scale does not change
            when the grid is upsampled.
        color_features: channels of the colour grid.
        hidden: width of the colour MLP (two hidden layers).
        view_frequencies: positional-encoding frequencies of the view direction.
        view_encoding: "frequencies" (positional, `view_frequencies`) or "sh" (spherical
            harmonics of degree 4, instant-ngp's): what the colour MLP reads of the view
            direction (`encode_views`).
        step_ratio: sample spacing along rays, in voxels of the current grid.
        alpha_init: alpha of an untrained voxel (sets the density shift).
        density_activation: "softplus" (DirectVoxGO's) or "exp" (instant-ngp's truncated
            exponential): raw density -> density (`model.density_activation`).
        occupancy_threshold: cells whose alpha (and whose neighbours') is below it are
            skipped once `update_occupancy` has run.
        weight_threshold: samples with compositing weight below it skip the colour.
        mlp_dtype: "float32", or "bfloat16": the colour MLP's matrix products under
            autocast (half the activation memory, tensor cores), its output and everything
            else in float32.
        backend: "native" (VoxelGrid, grid.sample) or "grid_sample" (F.grid_sample).
        renderer: "auto", "fused" or "torch" (see the module docstring).
        contraction: "none" (the grids cover `bounds`, nothing outside), or "sphere" / "cube"
            (unbounded: `bounds` is the inner region of `grid.contract`).
        far: with a contraction, where rays end (world units).
        outer_samples: with a contraction, samples per ray beyond the inner region (0: as
            many as steps of `step_ratio` voxels across the contracted shell).
        density_encoding: "dense" (a one-channel grid) or "multires" (`MultiresDensity`).
        color_encoding: "dense" (a grid of `color_features` channels) or "multires" (the
            multires density's geometry features, or a `MultiresGrid` of its own).
        multires: with a "multires" encoding, `grid.MultiresGrid`'s keyword arguments
            (levels, features, table_size, base_resolution, growth_factor); its box is the
            grids' (`bounds`, or the contracted cube).
        density_hidden: with a multires density, its MLP's hidden width.
        geometry_features: with both encodings "multires", the geometry features the
            density MLP gives the colour MLP.
        reflected_views: the colour MLP also reads the view mirrored about the density's
            normal, and the cosine (`encoding.ViewInput`, `reflection.py`; not with a
            contraction).

    Attributes:
        capacity: the fused renderer's buffer sizes (`train.nerf.model.capacity.SampleCapacity`);
            `capacity.dropped` counts, on the device, the samples that did not fit.
        sizing: "auto" (exact buffers on the CPU, planned ones on CUDA), "exact" or
            "planned": how the fused renderer sizes its buffers in `render`.
    """

    def __init__(
        self,
        bounds: Sequence[Sequence[float]],
        resolution: int | Sequence[int],
        final_resolution: int | Sequence[int],
        *,
        color_features: int = 12,
        hidden: int = 128,
        view_frequencies: int = 4,
        view_encoding: str = "frequencies",
        step_ratio: float = 0.5,
        alpha_init: float = 1e-2,
        density_activation: str = "softplus",
        occupancy_threshold: float = 1e-4,
        weight_threshold: float = 1e-4,
        mlp_dtype: str = "float32",
        backend: str = "native",
        renderer: str = "auto",
        contraction: str = "none",
        far: float = 1000.0,
        outer_samples: int = 0,
        density_encoding: str = "dense",
        color_encoding: str = "dense",
        multires: dict | None = None,
        density_hidden: int = 64,
        geometry_features: int = 15,
        reflected_views: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("density_encoding", density_encoding),
            ("color_encoding", color_encoding),
        ):
            if value not in ENCODINGS:
                raise ValueError(f"{name}: expected one of {', '.join(ENCODINGS)}, got {value!r}")
        if "multires" in (density_encoding, color_encoding) and multires is None:
            raise ValueError(
                "multires: required with a 'multires' encoding (MultiresGrid's arguments)"
            )
        if view_encoding not in VIEW_ENCODINGS:
            expected = ", ".join(VIEW_ENCODINGS)
            raise ValueError(f"view_encoding: expected one of {expected}, got {view_encoding!r}")
        if density_activation not in ACTIVATIONS:
            expected = ", ".join(ACTIVATIONS)
            raise ValueError(
                f"density_activation: expected one of {expected}, got {density_activation!r}"
            )
        if contraction not in CONTRACTIONS:
            expected = ", ".join(CONTRACTIONS)
            raise ValueError(f"contraction: expected one of {expected}, got {contraction!r}")
        if not far > 0 or not outer_samples >= 0:
            raise ValueError(f"far, outer_samples: expected > 0, >= 0, got {far}, {outer_samples}")
        self.contraction, self.far, self.outer_samples = contraction, float(far), outer_samples
        self.inner_bounds = [list(map(float, b)) for b in bounds]
        if contraction != "none":
            bounds = CONTRACTED_BOUNDS
        if renderer not in RENDERERS:
            raise ValueError(f"renderer: expected one of {', '.join(RENDERERS)}, got {renderer!r}")
        if mlp_dtype not in MLP_DTYPES:
            expected = ", ".join(MLP_DTYPES)
            raise ValueError(f"mlp_dtype: expected one of {expected}, got {mlp_dtype!r}")
        self.mlp_dtype = getattr(torch, mlp_dtype)
        if renderer == "auto":
            renderer = "fused" if backend == "native" else "torch"
        self.renderer = renderer
        self.sizing = "auto"
        self.capacity = SampleCapacity()
        self.image_rays = FIRST_CHUNK  # an image's first chunk (`image.render_image`)
        size = triple(resolution)
        final = triple(final_resolution)
        self.bounds_list = [list(map(float, b)) for b in bounds]
        self.home_bounds = [list(b) for b in self.bounds_list]  # the grids' box at the start
        self.backend = backend
        self.density_encoding, self.color_encoding = density_encoding, color_encoding
        shared = density_encoding == color_encoding == "multires"  # geometry features
        if density_encoding == "dense":
            self.density = make_grid(backend, size, 1, bounds, device)
        else:
            encoding = MultiresGrid(bounds=bounds, device=device, **multires)
            geometry = geometry_features if shared else 0
            self.density = MultiresDensity(encoding, density_hidden, geometry, size, device)
        # The colour MLP's input: a dense grid's channels, the density's geometry features
        # (`color` None), or a multires grid's L F features.
        self.color: nn.Module | None = None
        if color_encoding == "dense":
            self.color = make_grid(backend, size, color_features, bounds, device)
        elif not shared:
            self.color = MultiresGrid(bounds=bounds, device=device, **multires)
        color_in = geometry_features if shared else color_features
        if isinstance(self.color, MultiresGrid):
            color_in = self.color.get_out_dim()
        if reflected_views and contraction != "none":
            raise ValueError(
                "reflected_views: not with a contraction (its normals would be the "
                "contracted space's)"
            )
        autocast = None if self.mlp_dtype == torch.float32 else self.mlp_dtype
        self.views = ViewInput(
            view_encoding, view_frequencies, reflected_views, backend, device, autocast
        )
        self.mlp = color_mlp(color_in, self.views.width, hidden, device)
        self.step_ratio = step_ratio
        self.density_activation = density_activation
        self.shift = density_shift(density_activation, alpha_init)
        self.final_voxel = mean_spacing(self.bounds_list, final)
        self.occupancy_threshold = occupancy_threshold
        self.weight_threshold = weight_threshold
        self.occupancy_grid = OccupancyGrid(size, bounds, device=device)
        self.register_load_state_dict_post_hook(self._sync_box)
        self.refresh_normals()

    @property
    def occupancy(self) -> Tensor:
        """[X, Y, Z] bool: the occupancy grid's flags (`occupancy_grid.flags`)."""
        return self.occupancy_grid.flags

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        # Checkpoints written before the occupancy grid moved into the library kept its
        # flags as a buffer named "occupancy".
        old = prefix + "occupancy"
        if old in state_dict:
            state_dict[prefix + "occupancy_grid.flags"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args)

    # ---- geometry -------------------------------------------------------------------------

    @property
    def resolution(self) -> tuple[int, int, int]:
        return self.density.resolution

    def voxel_size(self) -> float:
        """Geometric mean of the current voxel spacings (world units)."""
        return mean_spacing(self.bounds_list, self.resolution)

    def step_size(self) -> float:
        """World distance between consecutive samples along a ray (with a contraction: in
        the inner region, the step of the contracted grid on the inner box's shortest axis)."""
        step = self.step_ratio * self.voxel_size()
        if self.contraction == "none":
            return step
        lo, hi = self.inner_bounds
        return step * min(b - a for a, b in zip(lo, hi, strict=True)) / 2

    def outer_count(self) -> int:
        """With a contraction, the samples of a ray beyond the inner region."""
        return self.outer_samples or math.ceil(1.0 / (self.step_ratio * self.voxel_size()))

    def max_steps(self) -> int:
        """Step positions that cover the box's diagonal (unit directions): the fused
        marcher's bound per ray."""
        return math.ceil(math.dist(*self.bounds_list) / self.step_size()) + 2

    def interval(self) -> float:
        """The sample step in voxels of the final grid: alpha = 1 - exp(-sigma * interval)
        (with a contraction, that of the steps in the inner region)."""
        return self.step_ratio * self.voxel_size() / self.final_voxel

    # ---- fields ---------------------------------------------------------------------------

    def activate(self, raw: Tensor) -> Tensor:
        """Raw density [...] -> density [...] (`density_activation.activate`)."""
        return activate(raw, self.shift, self.density_activation)

    def raw_for(self, sigma: float) -> float:
        """The raw density whose density is `sigma` > 0 (`activate`'s inverse)."""
        return raw_density(sigma, self.shift, self.density_activation)

    def sigma(self, points: Tensor) -> Tensor:
        """points: [S, 3] -> density [S] (post-activation: `activate(raw)`); the renderers'
        `sigma_fn`."""
        return self.activate(self.density(points)[..., 0])

    def alpha(self, points: Tensor, interval: float) -> Tensor:
        """points: [S, 3] -> alpha [S] over a step of `interval` (voxels of the final grid)."""
        return -torch.expm1(-self.sigma(points) * interval)

    def encode_views(self, directions: Tensor) -> Tensor:
        """directions: [..., 3] unit -> [..., E]: their encoding alone (`ViewInput.encode`;
        with reflected views the colour MLP reads more, `views`)."""
        return self.views.encode(directions)

    def fields(self, directions: Tensor) -> tuple[SigmaFn, RgbFn]:
        """The renderers' `sigma_fn` and `rgb_fn` for rays along `directions` [R, 3].

        sigma_fn: points [S, 3] -> density [S] (`sigma`). rgb_fn: (points [V, 3], rays [V]
        in [0, R], index [V] into sigma_fn's points) -> (rgb [V, 3], the colour MLP's input
        features [V, F]); ray R is the fused renderer's padding (a zero view encoding). With
        a multires density read by the colour MLP, sigma_fn keeps the density MLP's geometry
        features of its points and rgb_fn takes its samples' rows of them: one density pass
        per render, not a second one over the coloured samples."""
        view_of = self.views.reader(directions)
        if self.color is not None:

            def rgb_fn(points: Tensor, rays: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
                features = self.color(points)  # [V, F]
                return self.shade(features, view_of(points, rays)), features

            return self.sigma, rgb_fn
        return shared_fields(self.density, self.activate, self.shade, view_of, directions.shape[0])

    def rgb(self, points: Tensor, view_encoding: Tensor) -> Tensor:
        """points: [S, 3], view_encoding: [S, E] -> [S, 3] in (0, 1)."""
        return self.shade(self.color_input(points), view_encoding)

    def color_input(self, points: Tensor) -> Tensor:
        """points: [S, 3] -> [S, F], what the colour MLP reads besides the view: the colour
        grid's features, or a multires density's geometry features (its MLP evaluated on
        these points; a render takes them from its density pass instead: `fields`)."""
        if self.color is None:
            return self.density(points)[..., 1:]
        return self.color(points)

    def shade(self, features: Tensor, view_encoding: Tensor) -> Tensor:
        """The colour MLP: features [S, F] (`color_input`), view_encoding [S, E] ->
        [S, 3] in (0, 1)."""
        if self.mlp_dtype == torch.float32:  # no autocast: the model's own dtype
            x = torch.cat([features, view_encoding.to(features.dtype)], -1)
            return torch.sigmoid(self.mlp(x))
        # the input in the autocast dtype, as the first layer reads it (`ViewInput` builds
        # the view's part in it): one cast of the features, none of the whole input
        dtype = self.mlp_dtype
        x = torch.cat([features.to(dtype), view_encoding.to(dtype)], -1)
        with torch.autocast(x.device.type, dtype=dtype):
            logits = self.mlp(x)
        return torch.sigmoid(logits.float())

    @torch.no_grad()
    def update_occupancy(self, shrink_only: bool = False) -> float:
        """Recompute the occupancy grid from the density grid: a voxel is occupied when it
        or a neighbour has alpha >= occupancy_threshold (and, with `shrink_only`, it was
        occupied before; see `OccupancyGrid.update`). Returns the occupied fraction."""
        raw = self.density_values()  # [X, Y, Z]
        self.views.refresh(lambda: raw, self.occupancy_grid.bounds)
        alpha = -torch.expm1(-self.activate(raw) * self.interval())
        return self.occupancy_grid.update(alpha, self.occupancy_threshold, shrink_only=shrink_only)

    @torch.no_grad()
    def refresh_normals(self) -> None:
        """The reflected views' normals from the density as it is now (after a change of
        the grids' shape or box, or a load; `update_occupancy` refreshes them too)."""
        self.views.refresh(self.density_values, self.occupancy_grid.bounds)

    def density_values(self) -> Tensor:
        """The raw density grid as [X, Y, Z] (a multires density: evaluated at the vertices
        of its virtual grid, the occupancy grid's cells, in chunks without gradient)."""
        if isinstance(self.density, MultiresDensity):
            return self.density.values()
        f = self.density.features
        if isinstance(self.density, VoxelGrid):
            return f[..., 0]
        return f[0, 0].permute(2, 1, 0)

    def occupied(self, points: Tensor) -> Tensor:
        """points: [S, 3] inside the box -> [S] bool, the nearest voxel's occupancy."""
        return self.occupancy_grid.query(points)

    @torch.no_grad()
    def upsample(self, resolution: int | Sequence[int], optimizer=None) -> None:
        """Both grids to `resolution`, carrying the optimiser's moments; occupancy
        resampled (dilated, then nearest) so skipping stays conservative. A multires
        density takes it as its virtual resolution; a multires table is left as it is."""
        size = triple(resolution)
        self.occupancy_grid.upsample(size)  # first: it refuses shrinking before any change
        self.density.upsample(size, optimizer)
        if self.color_encoding == "dense":
            self.color.upsample(size, optimizer)
        self.refresh_normals()

    @torch.no_grad()
    def fit_box(self, bounds: Sequence[Sequence[float]], resolution, optimizer=None) -> None:
        """Both grids and the occupancy grid resampled onto the sub-box `bounds` at
        `resolution` (`VoxelGrid.crop`), carrying the optimiser's moments. The density
        keeps its scale: `interval` stays measured in voxels of the configured final grid.
        A multires density moves only the box rays are marched in; no table is resampled."""
        if self.contraction != "none":
            raise ValueError("fit_box: not with a contraction (the grids hold the whole world)")
        size = triple(resolution)
        self.occupancy_grid.crop(bounds, size)  # first: it checks the box before any change
        self.density.crop(bounds, size, optimizer)
        if self.color_encoding == "dense":
            self.color.crop(bounds, size, optimizer)
        self._sync_box(self, None)  # as a reload will read them: the grids' float32 box

    def _sync_box(self, module, incompatible_keys) -> None:
        # load_state_dict hook: a fitted box comes back in the grids' saved bounds.
        box = self.density.bounds
        self.bounds_list = box.tolist()
        self.occupancy_grid.bounds = box.to(torch.float32).clone()
        self.refresh_normals()

    def total_variation(self) -> Tensor:
        """Total variation of the density grid (a multires density has none: it raises)."""
        return self.density.total_variation()

    # ---- rendering ------------------------------------------------------------------------

    def render(
        self,
        origins: Tensor,
        directions: Tensor,
        background: Tensor,
        *,
        near: float = 0.0,
        exact: bool | None = None,
        jitter: Tensor | None = None,
        max_samples: int | None = None,
    ) -> dict[str, Tensor | int]:
        """Volume-render rays.

        Args:
            origins, directions: [R, 3] world rays (directions of unit length).
            background: [3] colour behind the scene (not used with a contraction: the far
                end of every ray is part of the field).
            near: no samples before this distance.
            exact: fused renderer: size the buffers exactly (reads the sample counts back)
                rather than as planned; None: as `sizing` says.
            jitter: [R] in [0, 1), where in its step each ray's samples sit (stratified
                sampling for training rays: `torch.rand(R)`); None: the steps' centres.
            max_samples: with a render whose samples are counted (not the fused
                renderer's planned buffers), raise `render.TooManySamples` when the rays
                march more than this, before the fields run on them (`image.render_image`
                then takes fewer rays); None: no limit.

        Returns:
            dict with rgb [R, 3], depth [R] (expected distance, 0 where empty),
            acc [R] (opacity), samples (number of samples that reached the density grid:
            an int, or a [] tensor on the device when the fused renderer planned its
            buffers; read it when logging); the coloured samples: sample_features [V, F]
            (`color_input`'s), sample_rgb [V, 3], sample_weight [V] (compositing weights,
            no gradient), sample_ray [V] (their ray, in [0, R]: the fused renderer's
            padding rows have weight 0 and ray R) and sample_points [V, 3].
        """
        if self.contraction != "none" and jitter is not None:
            raise ValueError("jitter: not with a contraction (grid.sample_contracted has none)")
        sigma_fn, rgb_fn = self.fields(directions)
        if self.contraction != "none":
            return render_contracted(
                origins,
                directions,
                sigma_fn=sigma_fn,
                rgb_fn=rgb_fn,
                inner_bounds=self.inner_bounds,
                kind=self.contraction,
                step=self.step_size(),
                far=self.far,
                outer_samples=self.outer_count(),
                occupancy=self.occupancy_grid,
                voxel=self.final_voxel,
                weight_threshold=self.weight_threshold,
                fused=self.renderer == "fused",
                near=near,
                max_samples=max_samples,
            )
        common = dict(
            sigma_fn=sigma_fn,
            rgb_fn=rgb_fn,
            occupancy=self.occupancy_grid,
            step=self.step_size(),
            interval=self.interval(),
            weight_threshold=self.weight_threshold,
            near=near,
            jitter=jitter,
            max_samples=max_samples,
        )
        if self.renderer == "torch":
            return render_torch(origins, directions, background, **common)
        if exact is None:
            planned = self.sizing == "planned" or (
                self.sizing == "auto" and origins.device.type == "cuda"
            )
            exact = not planned
        return render_fused(
            origins,
            directions,
            background,
            max_steps=self.max_steps(),
            capacity=self.capacity,
            capacity_key=capacity_key(self, origins.dtype),
            exact=exact,
            **common,
        )
