"""Where the time of a data-parallel step goes: averaging the grid gradient over the ranks.

Run under torchrun (one process per GPU):

    torchrun --standalone --nproc_per_node=2 bench/multi_gpu/bench_multi.py --json allreduce.json

A1: the loop's own gradient averaging (`train.distributed.World.average_gradients`: one
`all_reduce` per parameter, NCCL AVG) on gradients of the training configs' grid sizes.
A2: a training step's backward plus the averaging for one grid-sized parameter, three
ways: a plain all_reduce on `.grad` after backward (what the loop does), and
`DistributedDataParallel` with its default buckets and with `gradient_as_bucket_view`;
the backward alone is the baseline (what no communication costs).
A3: the averaging in bfloat16 (cast, all_reduce, cast back): what a bf16 gradient
compression hook would cost in place of A1's float32.
A4: the work of a step that does not shrink with a rank's share: Adam's update of one
grid-sized parameter (foreach, as the field experiment's optimiser; fused, as the NeRF's).
A5: the NeRF's colour grid (160^3 x 12) averaged whole against packed to the rows near
occupied voxels (`average_gradients` with a support, `NerfExperiment.gradient_support`), for
supports of several fractions of the grid: the pack and unpack included, and each timed
alone by the PyTorch calls that could do it.
A6: averaging plus Adam whole on every rank against sharded (reduce_scatter, Adam over a
rank's share, all_gather).

Times are medians of CUDA-event timings (`--repeat` after `--warmup`), taken on every rank
and reported from rank 0; "GB/s" is NCCL's bus bandwidth, `bytes * 2 (n - 1) / n / time`.
`--device cpu` runs the same over gloo (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from bench.harness import host_times  # noqa: E402
from train.distributed import World, start, stop  # noqa: E402

# (name, element counts of the parameters whose gradients a step averages)
GRADIENTS = [
    ("field 64^3 (density_256 steps 0-499)", [64**3]),
    ("field 128^3 (density_256 steps 500-1499)", [128**3]),
    ("field 256^3 (density_256 steps 1500-5999)", [256**3]),
    ("field 384^3", [384**3]),
    ("field 512^3", [512**3]),
    ("nerf 160^3: density F=1 + colour F=12 + MLP", [160**3, 12 * 160**3, 38_400]),
]


def timer(device: torch.device, fn, warmup: int, repeat: int) -> float:
    """Median milliseconds of fn() (CUDA events around each call on an idle GPU; on the CPU
    the harness's host clock)."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        return statistics.median(host_times(fn, device, repeat))
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def bus_gbps(numel: int, bytes_per: int, ms: float, ranks: int) -> float:
    return numel * bytes_per * 2 * (ranks - 1) / ranks / (ms * 1e-3) / 1e9


def time_gradients(world: World, device, sizes: list[int], args) -> tuple[float, float]:
    """(fp32 ms, bf16 ms) to average gradients of these sizes over the ranks."""
    params = [nn.Parameter(torch.zeros(n, device=device)) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    ms = timer(device, lambda: world.average_gradients(params), args.warmup, args.repeat)
    grads = [p.grad for p in params]

    def bf16() -> None:
        for g in grads:
            half = g.to(torch.bfloat16)
            dist.all_reduce(half)
            g.copy_(half).div_(world.size)

    return ms, timer(device, bf16, args.warmup, args.repeat)


def averaging(world: World, device, args) -> list[dict]:
    """A1 and A3 for every size in GRADIENTS."""
    rows = []
    for name, sizes in GRADIENTS:
        numel = sum(sizes)
        if args.max_numel and numel > args.max_numel:
            continue
        ms, ms16 = time_gradients(world, device, sizes, args)
        rows.append(
            {
                "name": name,
                "numel": numel,
                "mb": numel * 4 / 2**20,
                "fp32_ms": ms,
                "fp32_bus_gbps": bus_gbps(numel, 4, ms, world.size),
                "bf16_ms": ms16,
            }
        )
    return rows


def packed_averaging(world: World, device, args) -> list[dict]:
    """A5: one [160^3, 12] gradient averaged whole and over a random support of rows; the
    pack and the unpack also timed alone, as the loop does them (`index_select` /
    `index_copy_`) and by advanced indexing (`grad[rows]` / `index_put_`), and the pack by
    `gather` (an expanded index), by `index_select` of the rows seen as 6 float64 and by
    `index_select` into a kept buffer."""
    grad = torch.randn(160**3, 12, device=device)
    param = nn.Parameter(torch.zeros_like(grad))
    param.grad = grad
    dense = timer(device, lambda: world.average_gradients([param]), args.warmup, args.repeat)
    rows = []
    gen = torch.Generator(device=device).manual_seed(0)  # the same rows on every rank
    for fraction in (1.0, 0.5, 0.4, 0.25, 0.1):
        keep = torch.rand(grad.shape[0], device=device, generator=gen) < fraction
        index = keep.nonzero().squeeze(1)
        support = {param: index}
        packed = grad.index_select(0, index)
        expanded = index[:, None].expand(-1, 12)
        row = {"fraction": fraction, "dense_ms": dense}
        for key, fn in [
            ("packed_ms", lambda s=support: world.average_gradients([param], s)),
            ("index_select_ms", lambda i=index: grad.index_select(0, i)),
            ("index_copy_ms", lambda i=index, v=packed: grad.index_copy_(0, i, v)),
            ("index_ms", lambda i=index: grad[i]),
            ("index_put_ms", lambda i=index, v=packed: grad.index_put_((i,), v)),
            ("gather_ms", lambda i=expanded: grad.gather(0, i)),
            ("select_f64_ms", lambda i=index: grad.view(torch.float64).index_select(0, i)),
            ("select_out_ms", lambda i=index, v=packed: torch.index_select(grad, 0, i, out=v)),
        ]:
            row[key] = timer(device, fn, args.warmup, args.repeat)
        rows.append(row)
    return rows


def sharded_update(world: World, device, numel: int, args) -> dict:
    """A6: averaging plus Adam for one `numel` parameter, whole on every rank (all_reduce,
    then fused Adam over the whole parameter: what the loop does) against sharded
    (reduce_scatter of the gradient, fused Adam over this rank's 1/n, all_gather of the
    parameter): the same bytes over the link, 1/n of Adam's work per rank."""
    numel -= numel % world.size
    whole = nn.Parameter(torch.randn(numel, device=device))
    whole.grad = torch.randn_like(whole)
    opt = torch.optim.Adam([whole], lr=1e-3, eps=1e-15, fused=device.type == "cuda")
    shard = nn.Parameter(whole.detach()[world.share(numel)].clone())
    shard.grad = torch.empty_like(shard)
    opt_shard = torch.optim.Adam([shard], lr=1e-3, eps=1e-15, fused=device.type == "cuda")

    def all_reduce_then_adam() -> None:
        world.average_gradients([whole])
        opt.step()

    def sharded() -> None:
        dist.reduce_scatter_tensor(shard.grad, whole.grad, op=dist.ReduceOp.AVG)
        opt_shard.step()
        dist.all_gather_into_tensor(whole.data, shard.data)

    result = {"numel": numel}
    if device.type != "cuda":  # gloo has no reduce_scatter_tensor with AVG
        return result
    result["whole_ms"] = timer(device, all_reduce_then_adam, args.warmup, args.repeat)
    result["sharded_ms"] = timer(device, sharded, args.warmup, args.repeat)
    return result


class Grid(nn.Module):
    """One grid-sized parameter; the loss's gradient is one elementwise pass (a stand-in
    for the sampling backward, whose cost does not depend on the communication)."""

    def __init__(self, numel: int, device) -> None:
        super().__init__()
        self.features = nn.Parameter(torch.zeros(numel, device=device))
        self.register_buffer("weight", torch.randn(numel, device=device))

    def forward(self, scale: torch.Tensor) -> torch.Tensor:
        return (self.features * self.weight).sum() * scale


def ddp_versus_all_reduce(world: World, device, numel: int, args) -> dict:
    """A2: backward + gradient averaging of one `numel` parameter, four ways."""
    model = Grid(numel, device)
    one = torch.ones((), device=device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(Grid(numel, device), device_ids=ids)
    view = nn.parallel.DistributedDataParallel(
        Grid(numel, device), device_ids=ids, gradient_as_bucket_view=True
    )

    def plain(average: bool):
        def step() -> None:
            model.features.grad = None
            model(one).backward()
            if average:
                world.average_gradients([model.features])

        return step

    def wrapped(module):
        def step() -> None:
            module.zero_grad(set_to_none=True)
            module(one).backward()

        return step

    result = {"numel": numel}
    for key, fn in [
        ("backward_only_ms", plain(False)),
        ("all_reduce_ms", plain(True)),
        ("ddp_ms", wrapped(ddp)),
        ("ddp_bucket_view_ms", wrapped(view)),
    ]:
        result[key] = timer(device, fn, args.warmup, args.repeat)
    return result


def adam_ms(device, numel: int, args) -> dict:
    """A4: one Adam step on a `numel` parameter, foreach and fused (fused: CUDA only)."""
    result = {"numel": numel}
    for key, options in [
        ("adam_foreach_ms", {"foreach": True}),
        ("adam_fused_ms", {"fused": True}),
    ]:
        if device.type != "cuda" and "fused" in options:
            continue
        p = nn.Parameter(torch.zeros(numel, device=device))
        p.grad = torch.randn_like(p)
        opt = torch.optim.Adam([p], lr=1e-3, eps=1e-15, **options)
        result[key] = timer(device, opt.step, args.warmup, args.repeat)
    return result


def table(rows: list[dict], compare: dict, world: World, device_name: str) -> str:
    lines = [
        f"Gradient averaging over {world.size} ranks ({device_name}), median ms",
        "",
        "| A1 gradients | MB (fp32) | all_reduce fp32 ms | bus GB/s | A3 bf16 ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['mb']:.1f} | {r['fp32_ms']:.3f} | "
            f"{r['fp32_bus_gbps']:.0f} | {r['bf16_ms']:.3f} |"
        )
    c = compare
    if "error" in c:
        lines += ["", f"A2 failed: {c['error']}"]
    else:
        lines += [
            "",
            f"A2 one parameter of {c['numel']} floats: backward alone "
            f"{c['backward_only_ms']:.3f} ms, + all_reduce on .grad {c['all_reduce_ms']:.3f} ms, "
            f"DDP {c['ddp_ms']:.3f} ms, DDP gradient_as_bucket_view "
            f"{c['ddp_bucket_view_ms']:.3f} ms",
        ]
    a = c.get("adam", {})
    lines.append(
        f"A4 Adam step on {a.get('numel')} floats: foreach {a.get('adam_foreach_ms', 0):.3f} ms, "
        f"fused {a.get('adam_fused_ms', 0):.3f} ms"
    )
    for r in c.get("packed", []):
        lines.append(
            f"A5 colour grid 160^3 x 12, support {100 * r['fraction']:.0f}%: whole "
            f"{r['dense_ms']:.3f} ms, packed {r['packed_ms']:.3f} ms; pack / unpack by "
            f"index_select / index_copy_ {r['index_select_ms']:.3f} / {r['index_copy_ms']:.3f} "
            f"ms, by indexing / index_put_ {r['index_ms']:.3f} / {r['index_put_ms']:.3f} ms; pack "
            f"by gather {r['gather_ms']:.3f} ms, by index_select of float64 rows "
            f"{r['select_f64_ms']:.3f} ms, into a kept buffer {r['select_out_ms']:.3f} ms"
        )
    s = c.get("sharded", {})
    if "sharded_ms" in s:
        lines.append(
            f"A6 averaging + fused Adam on {s['numel']} floats: all_reduce then Adam over the "
            f"whole {s['whole_ms']:.3f} ms, reduce_scatter + Adam over 1/{world.size} + "
            f"all_gather {s['sharded_ms']:.3f} ms"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--ddp-numel", type=int, default=256**3)
    parser.add_argument(
        "--max-numel", type=int, default=0, help="skip gradients larger than this (0: none)"
    )
    parser.add_argument("--json", type=Path, help="write the results here (rank 0)")
    args = parser.parse_args()
    if "WORLD_SIZE" not in os.environ:
        parser.error("run it under torchrun, e.g. torchrun --standalone --nproc_per_node=2 ...")
    world = start()
    try:
        if args.device == "cuda":
            device = torch.device("cuda", world.local_rank)
            device_name = torch.cuda.get_device_name(device)
        else:
            device, device_name = torch.device("cpu"), "cpu, gloo"
        rows = averaging(world, device, args)
        try:
            compare = ddp_versus_all_reduce(world, device, args.ddp_numel, args)
        except Exception as error:  # report A1 all the same
            compare = {"numel": args.ddp_numel, "error": f"{type(error).__name__}: {error}"}
        compare["adam"] = adam_ms(device, args.ddp_numel, args)
        compare["packed"] = packed_averaging(world, device, args)
        compare["sharded"] = sharded_update(world, device, args.ddp_numel, args)
        if world.is_main:
            text = table(rows, compare, world, device_name)
            print(text)
            if args.json:
                result = {
                    "ranks": world.size,
                    "device": device_name,
                    "torch": torch.__version__,
                    "nccl": str(torch.cuda.nccl.version()) if device.type == "cuda" else None,
                    "averaging": rows,
                    "ddp_versus_all_reduce": compare,
                }
                args.json.write_text(json.dumps(result, indent=2) + "\n")
                args.json.with_suffix(".md").write_text(text + "\n")
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
