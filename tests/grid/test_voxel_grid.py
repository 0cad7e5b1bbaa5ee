"""VoxelGrid: shapes, world-to-grid mapping, state, coarse-to-fine, regulariser, compile."""

from __future__ import annotations

import copy

import pytest
import torch

import grid
from grid.voxel_grid import VoxelGrid
from tests._helpers import Record

# An off-centre, non-cubic box and a non-cubic resolution.
LO = (-0.3, 1.0, 2.0)
HI = (0.9, 1.5, 4.0)
RES = (5, 7, 9)
# Two linear functions of world coordinates: f_c(p) = A[c] . p + B[c].
A = torch.tensor([[1.5, -2.0, 0.5], [-0.25, 3.0, 1.0]], dtype=torch.float64)
B = torch.tensor([0.1, -0.7], dtype=torch.float64)


def voxel_positions(g: VoxelGrid) -> torch.Tensor:
    """World coordinates of every voxel: [X, Y, Z, 3]."""
    lo, hi = g.bounds.double()
    sizes = enumerate(g.resolution)
    axes = [torch.linspace(lo[a], hi[a], n, dtype=torch.float64) for a, n in sizes]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def linear_grid(dtype=torch.float64, resolution=RES) -> VoxelGrid:
    g = VoxelGrid(resolution, 2, (LO, HI), init="zeros", dtype=dtype)
    with torch.no_grad():
        g.features.copy_(voxel_positions(g) @ A.T + B)
    return g


def random_inside(n: int, generator: torch.Generator) -> torch.Tensor:
    lo, hi = torch.tensor(LO, dtype=torch.float64), torch.tensor(HI, dtype=torch.float64)
    return lo + (hi - lo) * torch.rand(n, 3, generator=generator, dtype=torch.float64)


@pytest.mark.parametrize("batch", [(), (0,), (1,), (17,), (2, 3, 4), (0, 5), (3, 0, 2)])
def test_forward_shapes(batch):
    g = VoxelGrid(6, 4)
    out = g(torch.rand(*batch, 3) * 2 - 1)
    assert out.shape == (*batch, 4)
    assert out.dtype == torch.float32
    assert g.get_out_dim() == 4


def test_forward_rejects_bad_point_shape():
    with pytest.raises(ValueError, match=r"xyz: expected shape \[\.\.\., 3\]"):
        VoxelGrid(4, 1)(torch.zeros(5, 2))


def test_bounds_mapping_reproduces_linear_field():
    g = linear_grid()
    gen = torch.Generator().manual_seed(0)
    pts = random_inside(1000, gen)
    torch.testing.assert_close(g(pts), pts @ A.T + B, rtol=0, atol=1e-10)
    # Box corners land exactly on the corner voxels.
    corners = torch.tensor([LO, HI], dtype=torch.float64)
    torch.testing.assert_close(g(corners), corners @ A.T + B)
    assert torch.equal(g(corners), g.features[[0, -1], [0, -1], [0, -1]])


def test_bounds_mapping_float32_points_and_grid():
    g = linear_grid(torch.float32)
    pts = random_inside(1000, torch.Generator().manual_seed(1)).float()
    expected = (pts.double() @ A.T + B).float()
    torch.testing.assert_close(g(pts), expected, rtol=0, atol=2e-5)


def test_padding_outside_the_box():
    pts = torch.tensor([[HI[0] + 0.5, 1.2, 3.0], [LO[0], LO[1] - 1.0, LO[2]]], dtype=torch.float64)
    assert torch.equal(linear_grid()(pts), torch.zeros(2, 2, dtype=torch.float64))
    border = linear_grid()
    border.padding = "border"
    lo, hi = torch.tensor(LO, dtype=torch.float64), torch.tensor(HI, dtype=torch.float64)
    clamped = pts.clamp(lo, hi)
    torch.testing.assert_close(border(pts), clamped @ A.T + B)


def test_constructor_padding_border():
    g = VoxelGrid(3, 1, padding="border", init="normal", init_scale=1.0)
    far = torch.tensor([[5.0, 5.0, 5.0]])
    assert torch.equal(g(far), g.features[-1, -1, -1][None])


def test_gradients_reach_features_and_points():
    g = linear_grid()
    pts = random_inside(10, torch.Generator().manual_seed(2)).requires_grad_()
    g(pts).sum().backward()
    assert g.features.grad is not None and g.features.grad.abs().sum() > 0
    # d/dp sum_c f_c(p) = sum_c A[c]
    torch.testing.assert_close(pts.grad, A.sum(0).expand(10, 3))


def test_state_dict_round_trip():
    src = VoxelGrid((4, 5, 6), 3, (LO, HI), init="normal", init_scale=0.5)
    state = src.state_dict()
    assert set(state) == {"features", "bounds"}
    dst = VoxelGrid((4, 5, 6), 3)  # default bounds: the buffer carries the box
    dst.load_state_dict(state)
    assert torch.equal(dst.features, src.features)
    assert torch.equal(dst.bounds, src.bounds)
    pts = random_inside(50, torch.Generator().manual_seed(3)).float()
    assert torch.equal(dst(pts), src(pts))


def test_to_dtype_keeps_bounds_precise():
    g = VoxelGrid(4, 2, (LO, HI))
    g.to(torch.bfloat16)
    assert g.features.dtype == torch.bfloat16
    assert g.bounds.dtype == torch.float32
    assert torch.equal(g.bounds, torch.tensor([LO, HI], dtype=torch.float32))
    g.double()
    assert g.features.dtype == g.bounds.dtype == torch.float64


def test_extra_repr():
    text = repr(VoxelGrid((4, 5, 6), 3, (LO, HI), dtype=torch.float64))
    for part in ["resolution=(4, 5, 6)", "features=3", "bounds=((-0.3, 1, 2), (0.9, 1.5, 4))"]:
        assert part in text
    assert "float64" in text and "padding='zeros'" in text


def test_upsample_is_exact_for_a_linear_field():
    g = linear_grid()
    param = g.features
    g.upsample((9, 13, 17))
    assert g.features is param and g.resolution == (9, 13, 17)
    torch.testing.assert_close(g.features, voxel_positions(g) @ A.T + B, rtol=0, atol=1e-12)
    pts = random_inside(1000, torch.Generator().manual_seed(4))
    torch.testing.assert_close(g(pts), pts @ A.T + B, rtol=0, atol=1e-12)


def test_upsample_interpolates_the_old_grid():
    g = VoxelGrid((4, 5, 6), 2, (LO, HI), init="normal", init_scale=1.0, dtype=torch.float64)
    old = VoxelGrid((4, 5, 6), 2, (LO, HI), dtype=torch.float64)
    old.load_state_dict(g.state_dict())
    g.upsample((7, 13, 8))  # non-uniform factors, not all integer
    torch.testing.assert_close(g.features, old(voxel_positions(g)))


def test_upsample_while_an_old_graph_is_alive():
    g = VoxelGrid(4, 2, init="normal", init_scale=1.0)
    pts = torch.rand(64, 3) * 2 - 1
    old_loss = g(pts).square().mean() + g.total_variation()
    old_loss.backward()  # `old_loss` keeps its graph, and autograd's view of the parameter
    g.upsample(7)
    loss = g(pts).square().mean() + g.total_variation()
    loss.backward()
    assert g.features.grad.shape == (7, 7, 7, 2)


def test_upsample_rejects_shrinking():
    g = VoxelGrid(8, 1)
    with pytest.raises(ValueError, match=r"resolution: expected no axis smaller"):
        g.upsample((16, 4, 16))


def fit_steps(g: VoxelGrid, opt: torch.optim.Optimizer, steps: int, seed: int) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        pts = random_inside(256, gen).float()
        target = (pts.double() @ A.T + B).float()
        loss = (g(pts) - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("amsgrad", [False, True])
def test_upsample_carries_adam_state(amsgrad):
    g = VoxelGrid((4, 4, 4), 2, (LO, HI), init="zeros")
    opt = torch.optim.Adam(g.parameters(), lr=0.05, amsgrad=amsgrad)
    fit_steps(g, opt, 20, seed=5)
    before = {k: v.clone() for k, v in opt.state[g.features].items()}
    g.upsample((7, 8, 9), optimizer=opt)

    assert opt.param_groups[0]["params"][0] is g.features
    state = opt.state[g.features]
    keys = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if amsgrad else [])
    for key in keys:
        assert state[key].shape == (7, 8, 9, 2)
    for key in keys[1:]:
        assert (state[key] >= 0).all()
    assert torch.equal(state["step"], before["step"])
    # Moments are resampled like the grid: corner voxels are copied exactly.
    for key in keys:
        assert torch.equal(state[key][0, 0, 0], before[key][0, 0, 0])
        assert torch.equal(state[key][-1, -1, -1], before[key][-1, -1, -1])

    losses = fit_steps(g, opt, 60, seed=6)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-10:]) < sum(losses[:10])
    assert opt.state[g.features]["exp_avg"].shape == (7, 8, 9, 2)
    assert int(opt.state[g.features]["step"]) == 80


def test_upsample_rescale_moments():
    g = VoxelGrid(3, 1, init="zeros")
    opt = torch.optim.Adam(g.parameters(), lr=0.01)
    g(torch.rand(64, 3) * 2 - 1).square().sum().backward()
    g.features.grad.add_(1.0)
    opt.step()
    m, v = (opt.state[g.features][k].clone() for k in ("exp_avg", "exp_avg_sq"))
    g.upsample(5, optimizer=opt, rescale_moments=True)
    ratio = 2**3 / 4**3  # cells before / after
    state = opt.state[g.features]
    torch.testing.assert_close(state["exp_avg"][::2, ::2, ::2], m * ratio)
    torch.testing.assert_close(state["exp_avg_sq"][::2, ::2, ::2], v * ratio**2)


def test_upsample_with_a_foreign_optimizer_is_refused():
    g = VoxelGrid(3, 1)
    other = torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match="optimizer: does not hold"):
        g.upsample(5, optimizer=other)


class Field(torch.nn.Module):
    """A model holding a VoxelGrid, built at its coarse starting resolution."""

    def __init__(self) -> None:
        super().__init__()
        self.grid = VoxelGrid((4, 5, 4), 2, init="normal", init_scale=0.1)
        self.head = torch.nn.Linear(2, 1)

    def forward(self, xyz: torch.Tensor) -> torch.Tensor:
        return self.head(self.grid(xyz))[..., 0]


def train_field(model: Field, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pts = random_inside(128, gen).float()
        loss = (model(pts) - pts.sum(-1)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_load_state_dict_adopts_an_upsampled_resolution():
    torch.manual_seed(0)
    trained = Field()
    trained.grid.bounds.copy_(torch.tensor([LO, HI]))
    opt = torch.optim.Adam(trained.parameters(), lr=0.02)
    train_field(trained, opt, 5, seed=1)
    trained.grid.upsample((9, 7, 6), optimizer=opt)
    train_field(trained, opt, 5, seed=2)
    model_state = copy.deepcopy(trained.state_dict())
    opt_state = copy.deepcopy(opt.state_dict())

    rebuilt = Field()  # the constructor's coarse resolution and default bounds
    param = rebuilt.grid.features
    rebuilt_opt = torch.optim.Adam(rebuilt.parameters(), lr=0.02)
    rebuilt.load_state_dict(model_state)
    assert rebuilt.grid.features is param  # the same Parameter, resized in place
    assert rebuilt.grid.resolution == (9, 7, 6)
    assert torch.equal(rebuilt.grid.features, trained.grid.features)
    assert torch.equal(rebuilt.grid.bounds, trained.grid.bounds)  # the box is adopted too
    pts = random_inside(64, torch.Generator().manual_seed(3)).float()
    assert torch.equal(rebuilt(pts), trained(pts))

    # The optimiser state saved with the model goes on exactly where it stopped.
    rebuilt_opt.load_state_dict(opt_state)
    train_field(trained, opt, 1, seed=4)
    train_field(rebuilt, rebuilt_opt, 1, seed=4)
    assert torch.equal(rebuilt.grid.features, trained.grid.features)
    assert torch.equal(
        rebuilt_opt.state[param]["exp_avg"], opt.state[trained.grid.features]["exp_avg"]
    )


def test_load_state_dict_refuses_another_feature_count_or_dtype():
    state = VoxelGrid(6, 3).state_dict()
    with pytest.raises(RuntimeError, match="features: the saved grid has 3 features per voxel"):
        VoxelGrid(4, 2).load_state_dict(state)
    with pytest.raises(RuntimeError, match="features: the saved grid is torch.float64"):
        VoxelGrid(4, 3).load_state_dict(VoxelGrid(6, 3, dtype=torch.float64).state_dict())
    with pytest.raises(RuntimeError, match=r"grid.features: expected a saved grid \[X, Y, Z, F\]"):
        Field().load_state_dict({**Field().state_dict(), "grid.features": torch.zeros(4, 5, 4)})
    g = VoxelGrid(4, 2)
    with pytest.raises(RuntimeError, match="the saved grid has 3 features"):
        torch.nn.Sequential(g).load_state_dict({"0." + k: v for k, v in state.items()})
    assert g.resolution == (4, 4, 4)  # a refused state leaves the module as it was


def test_total_variation():
    g = VoxelGrid((4, 5, 6), 3, init="zeros")
    with torch.no_grad():
        g.features.fill_(2.5)
    assert g.total_variation().item() == 0.0

    g = VoxelGrid((4, 5, 6), 3, init="normal", init_scale=1.0)
    tv = g.total_variation()
    assert tv.ndim == 0 and tv.item() > 0
    tv.backward()
    assert g.features.grad is not None and g.features.grad.abs().sum() > 0

    # Known value: a ramp along x with unit steps gives mean squares (1, 0, 0) / 3.
    ramp = VoxelGrid((4, 2, 2), 1, init="zeros")
    with torch.no_grad():
        ramp.features.copy_(torch.arange(4.0).view(4, 1, 1, 1).expand(4, 2, 2, 1))
    assert ramp.total_variation().item() == pytest.approx(1 / 3)


def test_total_variation_add_grad_matches_the_loss_gradient():
    g = VoxelGrid((4, 5, 6), 3, init="normal", init_scale=1.0)
    (0.3 * g.total_variation()).backward()
    want = g.features.grad.clone()
    g.features.grad = None
    assert g.total_variation_add_grad(0.3) is None  # creates the gradient
    torch.testing.assert_close(g.features.grad, want)
    value = g.total_variation_add_grad(0.3, value=True)  # adds onto it
    torch.testing.assert_close(g.features.grad, 2 * want)
    torch.testing.assert_close(value, g.total_variation().detach())


def test_bounds_changed_in_place_or_replaced_are_seen():
    """normalize caches its box mapping; changing the bounds must invalidate it."""
    g = linear_grid()
    pts = torch.tensor([[0.3, 1.2, 3.0]], dtype=torch.float64)
    before = g.normalize(pts)
    with torch.no_grad():
        g.bounds[1, 0] = 2.1
    moved = g.normalize(pts)
    assert not torch.equal(moved, before)
    torch.testing.assert_close(
        moved[0, 0], torch.tensor((0.3 + 0.3) / (2.1 + 0.3) * 2 - 1).double()
    )
    g.bounds = torch.tensor([LO, HI], dtype=torch.float64)
    torch.testing.assert_close(g.normalize(pts), before)


def test_forward_sees_changed_bounds():
    """forward caches the box it passes to the op; in-place changes, replacement and a
    loaded state must reach it."""
    g = linear_grid()
    pts = torch.tensor([[0.3, 1.2, 3.0]], dtype=torch.float64)
    before = g(pts)
    with torch.no_grad():
        g.bounds[1, 0] = 2.1
    torch.testing.assert_close(g(pts), grid.sample(g.features, g.normalize(pts)))
    assert not torch.equal(g(pts), before)
    g.bounds = torch.tensor([LO, HI], dtype=torch.float64)
    assert torch.equal(g(pts), before)
    other = linear_grid()
    with torch.no_grad():
        other.bounds[0, 2] = 1.5
    g.load_state_dict(other.state_dict())
    assert torch.equal(g(pts), other(pts))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_forward_is_one_op_and_equals_normalize_then_sample(dtype, interpolation):
    """The box is mapped inside grid.sample (bounds=...), bitwise as `normalize` (the fused
    multiply-add) followed by `sample` on the CPU: values, both gradients."""
    gen = torch.Generator().manual_seed(0)
    g = VoxelGrid(RES, 3, (LO, HI), init="normal", dtype=dtype, interpolation=interpolation)
    xyz = random_inside(5000, gen).to(dtype).requires_grad_()
    g(xyz)  # the first call reads the box once
    with Record() as rec:
        out = g(xyz)
    assert rec.ops == ["grid.sample.default"], rec.ops
    old = grid.sample(g.features, g.normalize(xyz), interpolation=interpolation)
    assert torch.equal(out, old)
    w = torch.randn(out.shape, generator=gen, dtype=dtype)
    new_grads = torch.autograd.grad(out, [g.features, xyz], w)
    old_grads = torch.autograd.grad(old, [g.features, xyz], w)
    assert torch.equal(new_grads[0], old_grads[0])
    torch.testing.assert_close(new_grads[1], old_grads[1])  # scale applied before / after


def test_forward_casts_points_to_the_coordinate_dtype():
    g = linear_grid(torch.float32)
    pts = random_inside(10, torch.Generator().manual_seed(1))  # float64
    assert torch.equal(g(pts), g(pts.float()))


BAD_ARGUMENTS = [
    (dict(resolution=0), "resolution"),
    (dict(resolution=-4), "resolution"),
    (dict(resolution=(8, 8)), "resolution"),
    (dict(resolution=(8, 1, 8)), "resolution"),
    (dict(resolution=8.0), "resolution"),
    (dict(features=0), "features"),
    (dict(features=2.5), "features"),
    (dict(bounds=((0, 0, 0), (1, 0, 1))), "bounds"),
    (dict(bounds=((1, 0, 0), (0, 1, 1))), "bounds"),
    (dict(bounds=((0, 0), (1, 1))), "bounds"),
    (dict(bounds=((0, 0, 0), (1, 1, float("inf")))), "bounds"),
    (dict(init="gaussian"), "init"),
    (dict(init_scale=-1.0), "init_scale"),
    (dict(padding="reflection"), "padding"),
    (dict(dtype=torch.int32), "dtype"),
]


@pytest.mark.parametrize("kwargs, name", BAD_ARGUMENTS)
def test_bad_arguments_name_the_argument(kwargs, name):
    args = dict(resolution=8, features=2) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        VoxelGrid(**args)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_torch_compile_fullgraph_matches_eager(device):
    torch._dynamo.reset()
    g = VoxelGrid((5, 6, 7), 3, (LO, HI), init="normal", init_scale=1.0, device=device)
    pts = random_inside(100, torch.Generator().manual_seed(7)).float().view(10, 10, 3)
    pts = pts.to(device)
    compiled = torch.compile(g, fullgraph=True)
    out = compiled(pts)
    torch.testing.assert_close(out, g(pts))
    out.sum().backward()
    assert g.features.grad is not None and g.features.grad.abs().sum() > 0


def test_exported_from_package():
    assert grid.VoxelGrid is VoxelGrid


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_cuda(dtype):
    ref = VoxelGrid((9, 10, 11), 4, (LO, HI), init="normal", init_scale=1.0, device="cuda")
    g = VoxelGrid((9, 10, 11), 4, (LO, HI), dtype=dtype, device="cuda")
    with torch.no_grad():
        g.features.copy_(ref.features)  # round to half
        ref.features.copy_(g.features.float())
    assert g.bounds.dtype == torch.float32
    pts = random_inside(4096, torch.Generator().manual_seed(8)).float().cuda()
    out = g(pts)
    assert out.dtype == dtype and out.shape == (4096, 4)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(out.float(), ref(pts), rtol=tol, atol=tol)
    out.float().sum().backward()
    assert g.features.grad.dtype == dtype

    # .to(dtype) of a float32 grid keeps float32 bounds, and upsample keeps the dtype.
    moved = VoxelGrid(4, 2, (LO, HI)).to("cuda", dtype)
    assert moved.bounds.dtype == torch.float32 and moved.bounds.device.type == "cuda"
    moved.upsample(7)
    assert moved.features.dtype == dtype and moved.resolution == (7, 7, 7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu():
    g = VoxelGrid((9, 10, 11), 4, (LO, HI), init="normal", init_scale=1.0)
    pts = random_inside(1000, torch.Generator().manual_seed(9)).float()
    expected = g(pts)
    g.cuda()
    torch.testing.assert_close(g(pts.cuda()).cpu(), expected)


@pytest.mark.parametrize(
    "make",
    [
        lambda dtype: VoxelGrid(4, 2, dtype=dtype),
        lambda dtype: grid.MultiresGrid(levels=2, features=2, table_size=64, dtype=dtype),
    ],
    ids=["VoxelGrid", "MultiresGrid"],
)
def test_layers_take_a_floating_dtype(make):
    assert make(None).parameters().__next__().dtype == torch.get_default_dtype()
    assert make(torch.float64).parameters().__next__().dtype == torch.float64
    for bad in (torch.int32, "float32"):
        with pytest.raises(ValueError, match=r"dtype: expected a floating-point torch.dtype"):
            make(bad)
