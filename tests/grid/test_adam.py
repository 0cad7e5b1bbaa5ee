"""grid.Adam: torch.optim.Adam's updates and state bit for bit, under torch.compile too, and
no import of torch._dynamo by it, MaskedAdam or a training run that never compiles."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import grid
from tests._helpers import DEVICES

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = [  # torch.optim.Adam's kernels and options
    dict(fused=True),
    dict(foreach=True),
    dict(foreach=False, weight_decay=0.1),
    dict(fused=True, capturable=True, lr=torch.tensor(0.05)),
    dict(foreach=False, amsgrad=True, betas=(0.8, 0.99)),
]


def run(opt_class, device, steps=4, **options):
    """Parameters [7, 5] and [3] after `steps` updates from seeded random gradients."""
    gen = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(7, 5, generator=gen).to(device)),
        torch.nn.Parameter(torch.randn(3, generator=gen).to(device)),
    ]
    if isinstance(options.get("lr"), torch.Tensor):
        options["lr"] = options["lr"].to(device)
    opt = opt_class(params, **{"lr": 0.05, **options})
    for _ in range(steps):
        opt.zero_grad()
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        opt.step()
    return params, opt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: ",".join(o))
def test_matches_torch_adam_bitwise(device, options):
    if options.get("capturable") and device == "cpu":
        options = {k: v for k, v in options.items() if k != "capturable"}
    ours, opt = run(grid.Adam, device, **copy.deepcopy(options))
    theirs, ref = run(torch.optim.Adam, device, **copy.deepcopy(options))
    assert isinstance(opt, torch.optim.Adam)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(opt.state.values(), ref.state.values(), strict=True):
        for key in b:
            assert torch.equal(a[key], b[key]), key


def test_state_dict_interchanges_with_torch_adam():
    """A grid.Adam's state_dict continues in torch.optim.Adam, and the reverse, with the
    same next update as the optimiser that saved it."""
    for save, load in ((grid.Adam, torch.optim.Adam), (torch.optim.Adam, grid.Adam)):
        params, opt = run(save, "cpu", fused=True)
        state = copy.deepcopy(opt.state_dict())
        twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
        other = load(twin, lr=0.05, fused=True)
        other.load_state_dict(state)
        for p, q in zip(params, twin, strict=True):
            g = torch.full_like(p, 0.3)
            p.grad, q.grad = g, g.clone()
        opt.step()
        other.step()
        for p, q in zip(params, twin, strict=True):
            assert torch.equal(p, q)


def test_closure_loss_and_gradients():
    """step(closure) returns the closure's loss, computed with gradients enabled, and the
    update itself runs without autograd recording it."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = grid.Adam([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 5.0
    assert p.grad_fn is None and torch.allclose(p, torch.tensor([0.9, -1.9]))


def test_torch_compile_of_a_step_matches_eager():
    """Under torch.compile the wrapped torch methods run (the graph breaks torch places):
    the compiled training step gives torch.optim.Adam's compiled parameters bit for bit,
    and the eager ones' to rounding; a step pre-hook runs once a step."""
    torch._dynamo.reset()

    calls = []

    def train(opt_class, compiled):
        p = torch.nn.Parameter(torch.linspace(-1, 1, 6))
        opt = opt_class([p], lr=0.1, foreach=False)
        opt.register_step_pre_hook(lambda *args: calls.append(compiled))

        def step(target):
            opt.zero_grad()
            ((p - target) ** 2).sum().backward()
            opt.step()

        fn = torch.compile(step, backend="eager") if compiled else step
        for i in range(3):
            fn(torch.full((6,), float(i)))
        return p.detach()

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # torch hooks Adam.step now
    compiled = train(grid.Adam, True)
    assert torch.equal(compiled, train(torch.optim.Adam, True))
    torch.testing.assert_close(compiled, train(grid.Adam, False))
    assert calls == [True] * 6 + [False] * 3  # a step's hooks run once, compiled or not


def test_no_dynamo_import(tmp_path):
    """grid.Adam's and grid.MaskedAdam's methods, and a short sdf and nerf run on the CPU,
    leave torch._dynamo unimported (importing it is ~1 s of a run's set-up); torch.optim.Adam
    is shown to import it, so the check can fail."""
    code = (
        "import sys, runpy, torch, grid\n"
        "tmp = sys.argv[1]\n"
        "def used(cls, **kw):\n"
        "    p = torch.nn.Parameter(torch.randn(4, 3))\n"
        "    o = cls([p], lr=0.1, **kw)\n"
        "    p.grad = torch.randn(4, 3)\n"
        "    o.step(); o.zero_grad(); o.load_state_dict(o.state_dict())\n"
        "    return 'torch._dynamo' in sys.modules\n"
        "print(used(grid.Adam, fused=True), used(grid.MaskedAdam))\n"
        "for config in ('configs/sdf_points_sphere.toml', 'configs/nerf_multires.toml'):\n"
        "    sys.argv = ['train', '--config', config, '--out', tmp + config[8:11],\n"
        "        '--set', 'train.steps=3', '--set', 'output.pictures=false',\n"
        "        '--set', 'data.path=' + tmp + 'scene', '--set', 'data.generate=true']\n"
        "    if 'sdf' in config:\n"
        "        sys.argv = sys.argv[:-4]\n"
        "    try:\n"
        "        runpy.run_module('train', run_name='__main__')\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        "    print('torch._dynamo' in sys.modules)\n"
        "print(used(torch.optim.Adam))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, f"{tmp_path}/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line in ("True", "False", "False False")]
    assert lines == ["False False", "False", "False", "True"], out.stdout[-2000:]
