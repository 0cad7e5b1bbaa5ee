"""The loop's training step, eager or captured as CUDA graphs (`train.cuda_graph`).

A step of the field and sdf experiments is a few dozen small kernels whose shapes do not
change while the grid keeps its resolution: launched one by one from Python, the host's
time per step exceeds the GPU's (bench/NOTES.md, "Host-light steps"). Captured once as a
CUDA graph, a step is one launch.

`GraphedStep` runs the same step as `eager_step` (draw the batch, loss, backward, Adam;
under torchrun the gradient averaging between backward and Adam) with identical random
numbers: the batch generator is registered with the graph, so every replay draws what the
eager step would have drawn, and the generator's state advances alike (checkpoints and
resume work unchanged). Per grid resolution (and per optimiser object: `upsample_moments =
"reset"` makes a new one) it runs WARMUP eager steps on its side stream (lazy allocations,
Adam's state), then captures the step once and replays it; an upsample moves the tensors
the graph reads (`_key`), which releases it, and the cycle starts again. Under torchrun the
all-reduce stays outside: one graph for the loss and backward, one for Adam, the averaging
eager in between. The averaging must act on the gradient tensors the graphs captured: an
op-by-op step since the capture (`graph_key` None) gave the parameters new `.grad` tensors,
so every replay points `.grad` back at the captured ones first. (Without that, the replays
after such a step averaged the op-by-op step's stale gradients, each rank's Adam stepped
with its own share's gradient and the ranks drifted apart: -1 dB on the NeRF.)

Both step kinds update the run's `DivergenceWatch` (train/divergence.py) after the backward,
in the graph too: a non-finite loss or gradient is flagged on the device, never read here.

What a captured step needs from an experiment (`graphed = True`, set from `use_graphs`; the
hooks are declared on `train.experiment.Experiment`):
its `loss()` synchronises with the host nowhere (no `.item()`, `.tolist()`, data-dependent
shapes), draws its random numbers from the generator `gen`, and its optimiser is fused Adam
with `capturable=True` and device-tensor learning rates that `begin_step` fills in place
(`grid_schedule.make_optimizer(..., graphed=True)` builds one). The field and sdf
experiments do. An experiment whose steps are capturable only sometimes says so with
`graph_key()`: None runs this step op by op on the current stream (the nerf step whose
render measures its buffer sizes, reading counts back); otherwise a tuple naming what else
the graph depends on (the nerf buffers' sizes, the ray pool), part of `_key`. Its
`replayed()` does after a replay the host bookkeeping the skipped Python did.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Config
    from .distributed import World
    from .divergence import DivergenceWatch
    from .experiment import Experiment

WARMUP = 2  # eager steps at each resolution before the capture
MODE = "thread_local"  # the capture's error mode (torch.cuda.graph)


def use_graphs(config: Config, device: torch.device) -> bool:
    """Whether a graph-capable experiment captures its steps: `auto` on CUDA devices, `on`
    (a ConfigError anywhere else), `off` never."""
    mode = config.train.cuda_graph
    if mode == "on" and device.type != "cuda":
        raise ConfigError(
            f'train.cuda_graph: "on" captures the steps as CUDA graphs and needs a CUDA '
            f'device, but the run is on {device.type}; use "auto" or "off"'
        )
    return mode != "off" and device.type == "cuda"


def parameters(exp: Experiment) -> list[Tensor]:
    """The parameters the experiment's optimiser updates."""
    return [p for group in exp.optimizer.param_groups for p in group["params"]]


def forward_backward(exp: Experiment, watch: DivergenceWatch | None = None) -> Tensor:
    """Loss and backward (the gradients replace the old ones), flagged in `watch` if the
    loss or a gradient is not finite; returns the batch value, detached: a value still
    holding the step's autograd graph would keep the parameters' gradient accumulators
    alive into the next step, whose capture on another stream then fails.

    The backward computes only the optimiser's parameters' gradients: other leaves that
    require one (the sdf experiment's points, whose field gradient the loss takes) would
    cost gradients nobody reads (a 128^3 sdf step on one core 23 -> 15 ms; the sdf command's
    training on 2 cores 8.0 -> 5.8 s: bench/notes/sdf.md, 2026-11-28)."""
    loss, value = exp.loss()
    exp.optimizer.zero_grad(set_to_none=True)
    params = parameters(exp)
    loss.backward(inputs=params)
    if watch is not None:
        grads = [p.grad for p in params]
        watch.observe(loss, value, grads, list(exp.loss_terms().values()))
    return value.detach()


def average_gradients(exp: Experiment, world: World, params: list[Tensor]) -> None:
    """The mean over the ranks' shares (the global batch's gradient), of the rows the
    experiment's `gradient_support()` names where it names some."""
    world.average_gradients(params, exp.gradient_support())


def eager_step(exp: Experiment, world: World, watch: DivergenceWatch | None = None) -> Tensor:
    """One training step, op by op: the batch value (e.g. its MSE), a device tensor."""
    value = forward_backward(exp, watch)
    if world.size > 1:
        average_gradients(exp, world, parameters(exp))
    exp.optimizer.step()
    return value


class GraphedStep:
    """`eager_step` as CUDA graph replays, captured per grid resolution (module docstring).

    `step()` runs one step and returns the batch value: a tensor the next step overwrites
    (read or accumulate it before then, as the loop does).
    """

    def __init__(self, exp: Experiment, world: World, watch: DivergenceWatch | None = None) -> None:
        self.exp, self.world, self.watch = exp, world, watch
        self.stream = torch.cuda.Stream(device=parameters(exp)[0].device)
        self.key: tuple | None = None  # what the graphs read and write (see `_key`)
        self.graphs: list[torch.cuda.CUDAGraph] = []
        self.value: Tensor | None = None  # the captured step's batch value
        self.grads: list[Tensor | None] = []  # the gradients the first graph writes
        self.warmup = 0  # eager steps left before the capture
        self.captures = 0  # graphs captured so far (one per resolution)
        self.capture_seconds = 0.0  # host time recording them (and emptying the cache)
        self.eager_steps = 0  # steps `graph_key` sent op by op
        self.stale_pool = False  # a released graph's memory pool is still cached

    def step(self) -> Tensor:
        extra = self.exp.graph_key()
        if extra is None:  # this step synchronises: op by op (the graph is kept)
            self.eager_steps += 1
            return eager_step(self.exp, self.world, self.watch)
        key = self._key(extra)
        if key != self.key:
            self.release()
            self.key, self.warmup = key, WARMUP
        if self.warmup:
            self.warmup -= 1
            value = self._on_side_stream(lambda: eager_step(self.exp, self.world, self.watch))
            self.key = self._key(extra)  # a first step creates Adam's state
            return value
        if not self.graphs:
            start = time.perf_counter()
            self._capture()
            self.capture_seconds += time.perf_counter() - start
        self.graphs[0].replay()
        if len(self.graphs) == 2:
            params = parameters(self.exp)
            for p, grad in zip(params, self.grads, strict=True):
                p.grad = grad  # what the second graph's Adam reads
            average_gradients(self.exp, self.world, params)
            self.graphs[1].replay()
        self.exp.replayed()
        return self.value

    def _key(self, extra: tuple) -> tuple:
        """The optimiser and the addresses of the tensors a captured step reads and writes
        in place: the parameters, their optimiser state and the learning rate; and what the
        experiment's `graph_key` adds. An upsample (or `upsample_moments = "reset"`, or a
        load) changes them; the graph must follow."""
        optimizer = self.exp.optimizer
        addresses = []
        for group in optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                addresses.append(group["lr"].data_ptr())
            for p in group["params"]:
                state = optimizer.state.get(p, {})
                addresses.append(p.data_ptr())
                addresses += [t.data_ptr() for t in state.values() if isinstance(t, Tensor)]
        return (optimizer, tuple(addresses), extra)

    def release(self) -> None:
        """Drop the graphs. Their private memory pool stays cached until `empty_cache`
        (PyTorch frees a released pool's blocks only then), so `_capture` empties the cache
        first: without that every re-capture (a NeRF's, whenever its planned sample counts
        grow) kept one more pool reserved."""
        self.stale_pool = self.stale_pool or bool(self.graphs)
        self.graphs, self.value, self.grads = [], None, []

    def _on_side_stream(self, fn):
        main = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(main)
        with torch.cuda.stream(self.stream):
            out = fn()
        main.wait_stream(self.stream)
        return out

    def _capture(self) -> None:
        """Record the step (nothing runs: the replay that follows does the step)."""
        exp = self.exp
        exp.optimizer.zero_grad(set_to_none=True)  # backward allocates them in the graph
        if self.stale_pool:  # nothing holds the old pool's tensors any more (see `release`)
            torch.cuda.empty_cache()
            self.stale_pool = False
        together = self.world.size == 1
        try:
            first = torch.cuda.CUDAGraph()
            first.register_generator_state(exp.gen)  # replays draw fresh batches from `gen`
            # thread_local: other threads' CUDA calls (NCCL's watchdog under torchrun) stay
            # legal while this thread captures
            with torch.cuda.graph(first, stream=self.stream, capture_error_mode=MODE):
                self.value = forward_backward(exp, self.watch)
                if together:
                    exp.optimizer.step()
            self.graphs = [first]
            self.grads = [p.grad for p in parameters(exp)]
            if not together:  # the gradient averaging stays eager, between the two graphs
                second = torch.cuda.CUDAGraph()
                with torch.cuda.graph(
                    second, pool=first.pool(), stream=self.stream, capture_error_mode=MODE
                ):
                    exp.optimizer.step()
                self.graphs.append(second)
        except torch.OutOfMemoryError:
            self.release()
            raise  # the loop names the config's sizes (train/memory.py)
        except RuntimeError as error:
            self.release()
            problem = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise RuntimeError(
                f"train.cuda_graph: capturing the training step as a CUDA graph failed "
                f"({problem}); run the steps op by op with --set train.cuda_graph=off"
            ) from error
        self.captures += 1
