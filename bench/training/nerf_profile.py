"""Where a NeRF's time goes, for bench/training/bench_nerf.py's `--profile`, `--profile-loop`
and `--profile-eval` (see its docstring): torch.profiler tables of the N1 step per backend,
of the training loop's own step, and of one evaluation of the test views, the evaluation
also timed, its renders counted and its peak memory read."""

from __future__ import annotations

import copy
import time

import torch

from bench.training.bench_nerf import has_twin, loop_step, step_fn, to_channels_first
from train.nerf.experiment import NerfExperiment
from train.nerf.model.capacity import SampleCapacity


def profile(exp: NerfExperiment, index: torch.Tensor, steps: int = 5) -> None:
    """Print where the time of the trained-state step goes, per backend (device time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU]
    if exp.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    key = "cuda_time_total" if exp.device.type == "cuda" else "cpu_time_total"
    native_torch = copy.deepcopy(exp.model)
    native_torch.renderer = "torch"
    models = [("native", exp.model), ("native_torch", native_torch)]
    if has_twin(exp.model):
        models.append(("grid_sample", to_channels_first(exp.model, exp.config)))
    for name, model in models:
        step, _ = step_fn(model, exp, index, exp.config.train.tv_weight)
        for _ in range(3):
            step()
        with torch_profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            if exp.device.type == "cuda":
                torch.cuda.synchronize()
        print(f"profile, {name}, {steps} steps, trained state:")
        print(prof.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=40))


def profile_loop(args, checkpoint: dict | None, device: torch.device, steps: int = 20) -> None:
    """Print where the training loop's own step spends its time (captured as CUDA graphs
    where the config says so), from the checkpoint's step on: device time per step by
    kernel on CUDA, CPU time by op elsewhere."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step, _, runner = loop_step(args, checkpoint, device)
    cuda = device.type == "cuda"
    warm = args.warmup if args.warmup is not None else 2 * SampleCapacity.every
    for _ in range(warm):
        step()  # past the first captures and exact renders
    start = (0 if checkpoint is None else checkpoint["step"]) + warm
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    mode = "captured" if runner is not None else "op by op"
    what = f"the loop's step ({mode}), {steps} steps from step {start}"
    print_profile(prof, cuda, steps, what, "a step")


def profile_eval(args, checkpoint: dict | None, device: torch.device, repeats: int = 3) -> None:
    """Print what one evaluation of the test views costs on the checkpoint's model (wall
    seconds, synchronised, the median of `repeats` after one warm-up; the rays and the
    microseconds a ray; the renders an evaluation made, its chunks and their retries, and
    the largest; on CUDA the peak memory the evaluations allocated above the model's) and
    where one evaluation's time goes: device time by kernel on CUDA, CPU time by op
    elsewhere."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    _, exp, _ = loop_step(args, checkpoint, device)
    cuda = device.type == "cuda"
    origins = exp.test_rays[0]
    rays = origins.shape[0] * origins.shape[1] * origins.shape[2]

    def evaluate() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        exp.evaluate(0.0)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    evaluate()  # the first chunk sizes, the kernels' first launches
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device) if cuda else 0
    renders = count_renders(exp.model)
    seconds = sorted(evaluate() for _ in range(repeats))[repeats // 2]
    print(
        f"evaluation: test views {origins.shape[0]} of {origins.shape[2]}x{origins.shape[1]}, "
        f"{rays} rays in {seconds:.3f} s: {1e6 * seconds / rays:.3f} us a ray "
        f"(median of {repeats}, synchronised); {len(renders) / repeats:.0f} renders "
        f"(chunks and retries), at most {max(renders, default=0)} rays"
    )
    del exp.model.render  # the class's method again
    if cuda:
        peak = (torch.cuda.max_memory_allocated(device) - before) / 2**30
        print(f"evaluation memory: {peak:.2f} GiB at most above the model's")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        exp.evaluate(0.0)
        if cuda:
            torch.cuda.synchronize(device)
    print_profile(prof, cuda, 1, "one evaluation", "in all")


def count_renders(model) -> list[int]:
    """The rays of every `model.render` call from now on (appended to the list returned),
    until `del model.render`."""
    calls, render = [], model.render

    def counted(origins, *args, **kwargs):
        calls.append(origins.shape[0])
        return render(origins, *args, **kwargs)

    model.render = counted
    return calls


def print_profile(prof, cuda: bool, per: int, what: str, unit: str) -> None:
    """A profile's events by their own time over `per` repetitions (`unit`: what the total
    is of, "a step"), largest first: device time by kernel on CUDA, CPU time by op
    elsewhere."""
    if cuda:
        events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        spent = [e.self_device_time_total for e in events]
    else:
        events = list(prof.key_averages())
        spent = [e.self_cpu_time_total for e in events]
    order = sorted(range(len(events)), key=lambda i: -spent[i])
    total = sum(spent) / per / 1e3
    print(f"profile, {what}: {total:.3f} ms of {'device' if cuda else 'CPU'} time {unit}")
    for i in order[:30]:
        ms = spent[i] / per / 1e3
        calls = events[i].count / per
        print(f"  {ms:9.4f} ms {100 * ms / total:5.1f}%  {calls:5.1f}x  {events[i].key[:90]}")
