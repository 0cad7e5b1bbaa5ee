"""One field training step, timed piece by piece, on 1 process or under torchrun.

    python bench/multi_step.py --resolution 256                # 1 process
    torchrun --standalone --nproc_per_node=2 bench/multi_step.py --resolution 256

Builds the field experiment of configs/density_256.toml at one fixed resolution and runs
the loop's step (`train/loop.py`: draw the share, loss, backward, average the gradients,
Adam) `--steps` times after a warm-up, in variants that isolate the costs:

* `loop`: the step as the loop runs it;
* `no_average`: without the gradient averaging (what the step costs without communication);
* `keep_grad`: `zero_grad(set_to_none=False)`, the gradient buffer reused;
* `sync_each`: a device synchronise after every step (host time + device time, serial).

Per variant: wall ms per step (synchronised at the end) and host ms per step (the time to
enqueue the steps, before that synchronise): host ~ wall means the host is the bound.
With `--profile`, rank 0 prints the profiler's top CPU and CUDA rows of 10 loop steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train.config import load_config  # noqa: E402
from train.distributed import start, stop  # noqa: E402
from train.field.experiment import FieldExperiment  # noqa: E402
from train.loop import select_device  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/density_256.toml")
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the config's")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    world = start()
    try:
        sets = [
            f"grid.resolution={args.resolution}",
            "train.upsample_steps=[]",
            "train.upsample_resolutions=[]",
        ]
        if args.batch_size:
            sets.append(f"train.batch_size={args.batch_size}")
        config = load_config(Path(args.config), sets)
        device = world.device(select_device(config.device))
        gen = torch.Generator(device=device).manual_seed(config.seed)
        exp = FieldExperiment(config, device, gen, None, world)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def step(average: bool = True, none: bool = True) -> None:
            exp.begin_step(10)
            loss, _ = exp.loss()
            exp.optimizer.zero_grad(set_to_none=none)
            loss.backward()
            if average and world.size > 1:
                world.average_gradients(
                    [p for g in exp.optimizer.param_groups for p in g["params"]]
                )
            exp.optimizer.step()

        variants = {
            "loop": lambda: step(),
            "no_average": lambda: step(average=False),
            "keep_grad": lambda: step(none=False),
            "sync_each": lambda: (step(), sync()),
        }
        result = {"ranks": world.size, "resolution": args.resolution}
        result["batch_size"] = config.train.batch_size
        result["threads"] = torch.get_num_threads()
        for name, fn in variants.items():
            for _ in range(10):
                fn()
            sync()
            world.agree(None)  # start together
            begin = time.perf_counter()
            for _ in range(args.steps):
                fn()
            host = time.perf_counter() - begin
            sync()
            wall = time.perf_counter() - begin
            result[name] = {"wall_ms": wall / args.steps * 1e3, "host_ms": host / args.steps * 1e3}
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    step()
                sync()
            if world.is_main:
                averages = prof.key_averages()
                print(averages.table(sort_by="self_cpu_time_total", row_limit=18))
                print(averages.table(sort_by="self_cuda_time_total", row_limit=14))
        if world.is_main:
            print(json.dumps(result))
            if args.json:
                args.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
