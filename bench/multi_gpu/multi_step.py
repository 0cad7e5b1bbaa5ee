"""One training step, timed piece by piece, on 1 process or under torchrun.

    python bench/multi_gpu/multi_step.py --resolution 256                # 1 process
    torchrun --standalone --nproc_per_node=2 bench/multi_gpu/multi_step.py --resolution 256
    torchrun --standalone --nproc_per_node=2 bench/multi_gpu/multi_step.py \
        --config configs/nerf_multires_gpu.toml --resolution 176 --warm-steps 2000

Builds the experiment of `--config` (default configs/density_256.toml) at one fixed
resolution and runs the loop's step (`train/step_graph.py`: draw the share, loss, backward,
average the gradients, Adam) `--steps` times after a warm-up, in variants that isolate the
costs. `--warm-steps K` first trains K steps (a NeRF's occupancy grid then skips empty
space as it does late in a run) and numbers the timed steps on from K, so the experiment's
periodic work (the occupancy grid's updates) falls in them as in training; without it every
step is step 10. The variants:

* `loop`: the step op by op, as the loop runs it with `train.cuda_graph = "off"`;
* `no_average`: without the gradient averaging (what the step costs without communication);
* `keep_grad`: `zero_grad(set_to_none=False)`, the gradient buffer reused;
* `sync_each`: a device synchronise after every step (host time + device time, serial);
* `graph` (with `--cuda-graph auto`, the default): the step captured as a CUDA graph, as
  the loop runs it by default on CUDA (the averaging eager between two graphs); its row
  also counts the timed steps that were no replay (`captures`, `capture_seconds`,
  `eager_steps`: a NeRF's steps that measure their buffers run op by op).

Per variant: wall ms per step (synchronised at the end) and host ms per step (the time to
enqueue the steps, before that synchronise): host ~ wall means the host is the bound. And
where the host's time goes, to tell CPU contention from slower execution: `cpu_ms`, the
main thread's CPU time per step (`time.thread_time`: host_ms well above cpu_ms = the thread
waited for a core); `switches`, its involuntary context switches per step (preempted);
`threads`, every thread of the process with its CPU ms per step (from /proc/self/task:
autograd's device thread, NCCL's and gloo's helpers); `process_cpu_ms` (all threads). Each
rank reports its CPU affinity, thread counts and the cgroup's CPU quota; every rank's result
is printed (one JSON line per rank), so the ranks can be compared.

`--pin` gives each rank its own disjoint share of the allowed CPUs (`os.sched_setaffinity`)
before anything starts: if the two-process slowdown is CPU contention, pinned ranks lose it.
`--formula-target` computes the density by tensor ops (the ~25 kernels of the step before
issue 21) instead of the fused kernel. With `--profile`, rank 0 prints the profiler's top CPU
and CUDA rows of 10 loop steps and, where steps are captured, the host-side rows of `--steps`
captured steps (what runs outside the graphs: the host time of a replayed step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import tomllib
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench, grid, train

from train.config import load_config  # noqa: E402
from train.distributed import start, stop  # noqa: E402
from train.loop import make_experiment, select_device  # noqa: E402
from train.step_graph import GraphedStep, eager_step, forward_backward  # noqa: E402

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")  # /proc's CPU time unit


def thread_cpu_ms() -> dict[str, float]:
    """CPU ms (user + system) of every thread of this process, by 'name/tid'."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) * TICK_MS  # utime, stime
    return out


def cpu_quota() -> str:
    """The cgroup's CPU limit (cgroup v2 cpu.max, e.g. 'max 100000' = none)."""
    try:
        return Path("/sys/fs/cgroup/cpu.max").read_text().strip()
    except OSError:
        return "unknown"


def graph_counts(runner: GraphedStep) -> dict[str, float]:
    """The captured step's counters: graphs captured, host seconds capturing, eager steps."""
    return {
        "captures": runner.captures,
        "capture_seconds": runner.capture_seconds,
        "eager_steps": runner.eager_steps,
    }


def pin(rank: int, size: int) -> None:
    """Restrict this rank to every `size`-th allowed CPU starting at its rank."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[rank::size] or allowed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/density_256.toml")
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the config's")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--cuda-graph", default="auto", choices=("auto", "off"))
    parser.add_argument("--warm-steps", type=int, default=0)
    parser.add_argument("--formula-target", action="store_true", help="the field experiment")
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.pin and "WORLD_SIZE" in os.environ:
        pin(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ["WORLD_SIZE"]))
    world = start()
    try:
        sets = [
            f"grid.resolution={args.resolution}",
            "train.upsample_steps=[]",
            "train.upsample_resolutions=[]",
            f"train.cuda_graph={args.cuda_graph}",
        ]
        if tomllib.loads(Path(args.config).read_text()).get("experiment") == "nerf":
            sets.append("nerf.fit_box=false")  # it acts at the first upsample: none here
        if args.batch_size:
            sets.append(f"train.batch_size={args.batch_size}")
        config = load_config(Path(args.config), sets)
        device = world.device(select_device(config.device))
        gen = torch.Generator(device=device).manual_seed(config.seed)
        exp = make_experiment(config, device, gen, None, world)
        if args.formula_target:
            exp.target.fused = exp.target.formula  # the tensor-op density, as before
        counter = iter(range(1 << 62)) if args.warm_steps else None

        def number() -> int:
            """The step number begin_step sees: counting from 0 with --warm-steps, else 10."""
            return next(counter) if counter is not None else 10

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def step(average: bool = True, none: bool = True) -> None:
            exp.begin_step(number())
            if average and none:
                eager_step(exp, world)
                return
            if none:
                forward_backward(exp)
            else:
                loss, _ = exp.loss()
                exp.optimizer.zero_grad(set_to_none=False)
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
        if exp.graphed:
            runner = GraphedStep(exp, world)
            variants["graph"] = lambda: (exp.begin_step(number()), runner.step())
        warm = variants["graph"] if exp.graphed else variants["loop"]
        for _ in range(args.warm_steps):
            warm()
        result = {
            "rank": world.rank,
            "ranks": world.size,
            "config": str(args.config),
            "resolution": args.resolution,
            "warm_steps": args.warm_steps,
            "batch_size": config.train.batch_size,
            "cuda_graph": args.cuda_graph,
            "formula_target": args.formula_target,
            "pinned": args.pin,
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "cpus_allowed": sorted(os.sched_getaffinity(0)),
            "cpu_count": os.cpu_count(),
            "cpu_quota": cpu_quota(),
        }
        for name, fn in variants.items():
            for _ in range(10):
                fn()
            sync()
            world.agree(None)  # start together
            counts = graph_counts(runner) if name == "graph" else {}
            threads, usage = thread_cpu_ms(), resource.getrusage(resource.RUSAGE_THREAD)
            cpu, process_cpu = time.thread_time(), time.process_time()
            begin = time.perf_counter()
            for _ in range(args.steps):
                fn()
            host = time.perf_counter() - begin
            cpu, process_cpu = time.thread_time() - cpu, time.process_time() - process_cpu
            sync()
            wall = time.perf_counter() - begin
            after, usage_after = thread_cpu_ms(), resource.getrusage(resource.RUSAGE_THREAD)
            per = 1e3 / args.steps
            busy = {k: (after[k] - threads.get(k, 0.0)) / args.steps for k in after}
            result[name] = {
                "wall_ms": wall * per,
                "host_ms": host * per,
                "cpu_ms": cpu * per,
                "process_cpu_ms": process_cpu * per,
                "switches": (usage_after.ru_nivcsw - usage.ru_nivcsw) / args.steps,
                "voluntary_switches": (usage_after.ru_nvcsw - usage.ru_nvcsw) / args.steps,
                "threads": {
                    k: round(v, 3)
                    for k, v in sorted(busy.items(), key=lambda kv: -kv[1])[:8]
                    if v > 0
                },
            }
            if counts:  # what of the timed steps was not a replay
                after_counts = graph_counts(runner)
                result[name].update({k: after_counts[k] - v for k, v in counts.items()})
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
            if exp.graphed:  # the host's share of a captured step: what runs outside the graphs
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(args.steps):
                        variants["graph"]()
                    sync()
                if world.is_main:
                    print(f"captured steps ({args.steps}), host side:")
                    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=24))
        results = [result]
        if world.size > 1:
            results = [None] * world.size
            dist.all_gather_object(results, result)  # CPU objects: gloo
        if world.is_main:
            for r in results:
                print(json.dumps(r))
            if args.json:
                args.json.write_text(
                    json.dumps(results[0] if world.size == 1 else results, indent=2) + "\n"
                )
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
