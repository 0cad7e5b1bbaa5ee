"""Gaussian splatting on one of the project's scenes (Blender layout): issue 33's upper
anchor, trained by gsplat (a bench-only dependency, never imported by `grid` or `train`) in
a program of its own.

    python bench/compare/gsplat/gsplat_scene.py SCENE_DIR --out DIR [--steps 30000]
        [--eval-every 1000] [--points 100000] [--box 1.5] [--seed 0]

The recipe is 3D Gaussian splatting's for synthetic (Blender) scenes with gsplat's
rasterizer and densification (`gsplat.strategy.DefaultStrategy`, its defaults: split and
clone from step 500 to 15000 every 100 steps, opacities reset every 3000): `--points`
Gaussians at random in the box [-box, box]^3 with random colours, their scales the RMS
distance to their 3 nearest neighbours; spherical harmonics up to degree 3 (one more
degree every 1000 steps); one training image a step; loss 0.8 L1 + 0.2 (1 - SSIM); the
learning rates of gsplat's `simple_trainer.py` (positions 1.6e-4 x the scene's scale,
decaying to 1% over the run); a white background, as the scenes'. Test views are scored
with the project's PSNR and SSIM (`train.metrics`, as bench_scenes.py scores ours and
DirectVoxGO's renders) every `--eval-every` steps, the clock stopped while scoring.

Writes DIR/gsplat.json: psnr, ssim (the last evaluation), train_seconds, steps, gaussians,
peak_allocated / peak_reserved (bytes), curve [[train seconds, PSNR], ...].
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: grid, train
from train.metrics import gaussian_window, psnr, ssim  # noqa: E402
from train.nerf.data.blender import Views, load_blender  # noqa: E402
from train.sdf.neighbours import nearest_points  # noqa: E402

SH_C0 = 0.28209479177387814  # the degree-0 spherical harmonic, 1 / (2 sqrt(pi))
OPENGL_TO_OPENCV = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0]))  # camera axes y, z flipped


def cameras(views: Views, device: torch.device) -> tuple[Tensor, Tensor]:
    """The views' world-to-camera matrices [V, 4, 4] in OpenCV axes (x right, y down,
    looking down +z, as gsplat takes them) and intrinsics [V, 3, 3] (pixel centres at
    +0.5, the principal point at the image's centre, as the project's camera rays)."""
    c2w = views.c2w.double().cpu() @ OPENGL_TO_OPENCV.double()  # views may be on the GPU
    viewmats = torch.linalg.inv(c2w).float()
    k = torch.tensor(
        [[views.focal, 0.0, views.width / 2], [0.0, views.focal, views.height / 2], [0, 0, 1]]
    )
    return viewmats.to(device), k.expand(len(views), 3, 3).to(device)


def scene_scale(views: Views) -> float:
    """gsplat's scene scale: 1.1 x the largest distance of a camera from their mean."""
    centres = views.c2w[:, :3, 3].double()
    return 1.1 * (centres - centres.mean(0)).norm(dim=1).max().item()


def initial_gaussians(count: int, box: float, gen: torch.Generator, device) -> dict:
    """3DGS's start for synthetic scenes: [count] Gaussians uniform in [-box, box]^3,
    random colours (degree 0, higher degrees zero), isotropic scales of the RMS distance
    to 3 neighbours (log), random rotations, opacity 0.1 (logit)."""
    means = (torch.rand(count, 3, generator=gen) * 2 - 1) * box
    colours = torch.rand(count, 3, generator=gen)
    on = means.to(device)
    near = nearest_points(on, on, 4)[0][:, 1:]  # [N, 3] without itself (first, at 0)
    scale = near.square().mean(1).sqrt().clamp_min(1e-7).log().cpu()
    return {
        "means": means,
        "scales": scale[:, None].repeat(1, 3),
        "quats": torch.rand(count, 4, generator=gen),
        "opacities": torch.full((count,), math.log(0.1 / 0.9)),
        "sh0": ((colours - 0.5) / SH_C0)[:, None],  # [N, 1, 3]
        "shN": torch.zeros(count, 15, 3),  # degrees 1-3
    }


def ssim_loss(a: Tensor, b: Tensor) -> Tensor:
    """1 - SSIM of images [H, W, 3] in float32, with the scoring's Gaussian window (11, 1.5)
    and zero padding ("same" size, as 3DGS's training loss), differentiable."""
    g = gaussian_window().to(a)
    window = (g[:, None] * g[None, :]).expand(3, 1, 11, 11)
    x, y = a.permute(2, 0, 1)[None], b.permute(2, 0, 1)[None]  # [1, 3, H, W]

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(t, window, padding=5, groups=3)

    mu_x, mu_y = blur(x), blur(y)
    var_x, var_y = blur(x * x) - mu_x**2, blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    value = (
        (2 * mu_x * mu_y + c1) * (2 * cov + c2) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    )
    return 1 - value.mean()


def render(gsplat, splats, viewmats: Tensor, ks: Tensor, views: Views, degree: int):
    """The splats seen by the cameras [C, 4, 4], [C, 3, 3]: (images [C, H, W, 3], info)."""
    colours = torch.cat([splats["sh0"], splats["shN"]], 1)
    images, _, info = gsplat.rasterization(
        splats["means"],
        F.normalize(splats["quats"], dim=-1),
        splats["scales"].exp(),
        splats["opacities"].sigmoid(),
        colours,
        viewmats,
        ks,
        views.width,
        views.height,
        sh_degree=degree,
        packed=False,
        backgrounds=torch.ones(viewmats.shape[0], 3, device=viewmats.device),
    )
    return images, info


@torch.no_grad()
def evaluate(gsplat, splats, test: Views, viewmats: Tensor, ks: Tensor) -> tuple[float, float]:
    """Mean PSNR and SSIM over the test views."""
    psnrs, ssims = [], []
    for v in range(len(test)):
        image, _ = render(gsplat, splats, viewmats[v : v + 1], ks[v : v + 1], test, 3)
        image = image[0].clamp(0, 1)
        truth = test.images[v]
        psnrs.append(psnr((image - truth).square().mean().item(), 1.0))
        ssims.append(ssim(image, truth).item())
    return sum(psnrs) / len(psnrs), sum(ssims) / len(ssims)


def train(args) -> dict:
    import gsplat
    from gsplat.strategy import DefaultStrategy

    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(args.seed)
    train_views = load_blender(args.scene, "train").to(device)
    test_views = load_blender(args.scene, "test").to(device)
    viewmats, ks = cameras(train_views, device)
    test_viewmats, test_ks = cameras(test_views, device)
    scale = scene_scale(train_views)
    start = initial_gaussians(args.points, args.box, gen, device)
    splats = torch.nn.ParameterDict({k: torch.nn.Parameter(v.to(device)) for k, v in start.items()})
    rates = {"means": 1.6e-4 * scale, "scales": 5e-3, "quats": 1e-3, "opacities": 5e-2}
    rates.update(sh0=2.5e-3, shN=2.5e-3 / 20)
    optimizers = {k: torch.optim.Adam([splats[k]], lr=lr, eps=1e-15) for k, lr in rates.items()}
    decay = torch.optim.lr_scheduler.ExponentialLR(optimizers["means"], 0.01 ** (1 / args.steps))
    strategy = DefaultStrategy(verbose=False)
    strategy.check_sanity(splats, optimizers)
    state = strategy.initialize_state(scene_scale=scale)
    torch.cuda.reset_peak_memory_stats(device)
    curve, seconds, quality = [], 0.0, (float("nan"), float("nan"))
    torch.cuda.synchronize(device)
    clock = time.perf_counter()
    for step in range(args.steps):
        v = int(torch.randint(len(train_views), (1,), generator=gen))
        degree = min(step // 1000, 3)
        image, info = render(
            gsplat, splats, viewmats[v : v + 1], ks[v : v + 1], train_views, degree
        )
        strategy.step_pre_backward(splats, optimizers, state, step, info)
        truth = train_views.images[v]
        loss = 0.8 * (image[0] - truth).abs().mean() + 0.2 * ssim_loss(image[0], truth)
        loss.backward()
        for optimizer in optimizers.values():
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        decay.step()
        strategy.step_post_backward(splats, optimizers, state, step, info, packed=False)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            torch.cuda.synchronize(device)
            seconds += time.perf_counter() - clock
            quality = evaluate(gsplat, splats, test_views, test_viewmats, test_ks)
            curve.append([seconds, quality[0]])
            print(
                f"gsplat: step {step + 1}, {seconds:.1f} s, {len(splats['means'])} Gaussians, "
                f"PSNR {quality[0]:.2f} SSIM {quality[1]:.4f}",
                flush=True,
            )
            clock = time.perf_counter()
    return {
        "psnr": quality[0],
        "ssim": quality[1],
        "train_seconds": seconds,
        "steps": args.steps,
        "gaussians": len(splats["means"]),
        "peak_allocated": torch.cuda.max_memory_allocated(device),
        "peak_reserved": torch.cuda.max_memory_reserved(device),
        "curve": curve,
        "gsplat": gsplat.__version__,
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scene", type=Path, help="a scene folder in the Blender layout")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=30000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--points", type=int, default=100_000, help="Gaussians at the start")
    parser.add_argument("--box", type=float, default=1.5, help="they start in [-box, box]^3")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key in ("steps", "eval_every", "points"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')}: expected an integer >= 1")
    if not args.box > 0:
        parser.error("--box: expected a number > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gsplat_scene: gsplat needs a CUDA GPU; none here", file=sys.stderr)
        return 2
    try:
        import gsplat  # noqa: F401
    except ImportError:
        print("gsplat_scene: gsplat is not installed (pip install gsplat)", file=sys.stderr)
        return 2
    result = train(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gsplat.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"gsplat_scene: wrote {args.out / 'gsplat.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
