"""`MaskedAdam`: Adam that updates only the elements whose gradient is non-zero this step;
`Adam`: `torch.optim.Adam` whose first call does not import torch._dynamo.

A grid trained from rays or points gets a gradient in the voxels those samples touched and
exact zeros everywhere else. Dense Adam still reads and writes every voxel's parameter and two
moments (and moves the untouched ones along their momentum); `MaskedAdam` reads the gradient,
and only where it is non-zero the parameter and moments (DirectVoxGO's masked Adam).
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam

from .ops import masked_adam_

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CPU = torch.device("cpu")


def _without_dynamo_import(name: str) -> Callable[..., Any]:
    """`torch.optim.Optimizer.<name>` less the wrapper that keeps torch.compile out of it
    (`torch._disable_dynamo`), whose first call imports torch._dynamo: about 1 s (0.95 s on
    an H200 host, 1.1-1.3 s on 2 CPU cores) that a run which never compiles pays at its
    first optimiser call. Under torch.compile the wrapped method runs, as in torch."""
    wrapped = getattr(torch.optim.Optimizer, name)
    plain = inspect.unwrap(wrapped)

    @functools.wraps(plain)
    def method(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return wrapped(self, *args, **kwargs)
        return plain(self, *args, **kwargs)

    return method


class _NoDynamoImport:
    """Mixin: the `torch.optim.Optimizer` methods that import torch._dynamo on first use,
    without that import outside torch.compile (`_without_dynamo_import`)."""

    add_param_group = _without_dynamo_import("add_param_group")
    zero_grad = _without_dynamo_import("zero_grad")
    state_dict = _without_dynamo_import("state_dict")
    load_state_dict = _without_dynamo_import("load_state_dict")


_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)  # the update, without its wrappers


class Adam(_NoDynamoImport, torch.optim.Adam):
    """`torch.optim.Adam`: the same arguments, state, `state_dict` and updates (it is a
    subclass, and runs torch's own code), less the import of torch._dynamo that the first
    `add_param_group`, `zero_grad`, `step` or `state_dict` of a torch optimiser makes to
    keep torch.compile out of them (about 1 s of a short run's start-up, for a run that
    never compiles). Under torch.compile each method runs as torch's does.

    Examples:
        >>> import torch
        >>> import grid
        >>> field = grid.VoxelGrid(8, 2)
        >>> opt = grid.Adam(field.parameters(), lr=0.1, fused=True)
        >>> field(torch.zeros(4, 3)).sum().backward()
        >>> opt.step()
        >>> opt.zero_grad()
    """

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """`torch.optim.Adam.step`: one update; `closure` re-evaluates the loss (optional)."""
        if torch.compiler.is_compiling():
            step = torch.optim.Adam.step  # torch.optim hooks it at a first Adam (`hooked`);
            if getattr(step, "hooked", False):  # the hooks have run already, in this call
                step = step.__wrapped__
            return step(self, closure)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _ADAM_STEP(self, closure)


class MaskedAdam(_NoDynamoImport, torch.optim.Optimizer):
    """Adam over the elements whose gradient is non-zero this step; the rest are left alone.

    **What it computes.** At every `step()`, for each parameter that has a `.grad`, its
    step count goes up by one (one count per parameter, as `torch.optim.Adam`'s
    `state["step"]`, not one per element), then every element whose gradient is non-zero
    gets exactly the update `torch.optim.Adam` (non-amsgrad) would make from that element's
    own moments with the bias corrections of that step count:

        m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    Every element whose gradient is exactly zero (+0 or -0) keeps its value and both moments
    untouched: no momentum drift, no decay of its moments, no weight decay. So when every
    gradient is non-zero each step equals `torch.optim.Adam`'s (tests/grid/test_masked_adam.py
    checks it), and an element touched again after a pause resumes from the moments it had,
    under the bias correction of the global count (as DirectVoxGO's MaskedAdam). Unlike
    DirectVoxGO's kernel, `eps` is added after the second-moment bias correction, as
    `torch.optim.Adam` does.

    One fused native op per parameter (`grid.masked_adam_`, CPU and CUDA): it reads the
    gradient, and only where a 16-byte (CUDA) or 64-byte (CPU) piece of it holds a non-zero
    value the parameter and moments. float32 and float64 parameters; float16 / bfloat16
    parameters keep float16 / bfloat16 moments, as `torch.optim.Adam` does, with the
    arithmetic in float32 and one rounding per stored value, as its fused kernel does.

    **Groups that update every element.** A param group with `skip_zero_grad=False` (the
    name of DirectVoxGO's group option) gets `torch.optim.Adam`'s own step instead
    (`torch.optim.adam.adam`, foreach where torch picks it): for parameters whose gradient
    is dense anyway, such as the MLP beside the grids, so that they train exactly as before.

    Args:
        params: parameters or param groups (dicts with "params" and any of the options
            below; each group may set its own `lr`, `betas`, `eps`, `weight_decay`,
            `decoupled_weight_decay`, `skip_zero_grad`).
        lr: learning rate, >= 0.
        betas: (beta1, beta2), each in [0, 1).
        eps: > 0, added to the denominator.
        weight_decay: >= 0. As L2 added to the gradient (`torch.optim.Adam`), or with
            `decoupled_weight_decay=True` the parameter shrunk by `1 - lr * weight_decay`
            before the update (`AdamW`); in both cases only where the gradient is non-zero.
        skip_zero_grad: True: the masked update above; False: `torch.optim.Adam`'s update of
            every element (see above).
        capturable: as `torch.optim.Adam`'s: the step counts live on the parameters'
            device and the learning rate may be a 0-dim tensor there (filled in place to
            change it), so that `step()` reads nothing back to the host and can be captured
            in a CUDA graph (`torch.cuda.graphs`) and replayed. The masked groups then call
            `grid.masked_adam_` with tensor arguments; the others torch's capturable Adam.

    Like `Adam`, its methods do not import torch._dynamo outside torch.compile.

    Not supported: amsgrad, maximize, sparse gradients, complex parameters, parameters on
    more than one device (make one optimizer per device). `state_dict()` holds the same
    per-parameter keys as `torch.optim.Adam` (`step`, `exp_avg`, `exp_avg_sq`), so
    `VoxelGrid.upsample(resolution, optimizer)` resamples its moments like Adam's.

    Examples:
        >>> import torch
        >>> import grid
        >>> field = grid.VoxelGrid(8, 2, init="zeros")  # features [8, 8, 8, 2]
        >>> opt = grid.MaskedAdam(field.parameters(), lr=0.1)
        >>> for corner in ([-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]):  # one voxel's gradient a step
        ...     opt.zero_grad()
        ...     field(torch.tensor([corner])).sum().backward()
        ...     opt.step()
        >>> # step 2 leaves voxel (0, 0, 0) as step 1 set it (Adam's momentum would move it)
        >>> [round(v, 4) for v in field.features[0, 0, 0].tolist()]
        [-0.1, -0.1]
        >>> int((field.features != 0).sum())  # the two touched voxels' features, nothing else
        4
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        decoupled_weight_decay: bool = False,
        skip_zero_grad: bool = True,
        capturable: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "decoupled_weight_decay": decoupled_weight_decay,
            "skip_zero_grad": skip_zero_grad,
            "capturable": capturable,
        }
        _check_options(defaults)
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Also what `load_state_dict` ends with: a state saved without some options (an
        older one, or torch.optim.Adam's) gets their defaults."""
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", False)
            group.setdefault("skip_zero_grad", True)
            group.setdefault("capturable", False)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As `torch.optim.Optimizer.add_param_group`, and checks the group's options and
        that its parameters are floating point and on the device of the others."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        _check_options(group)
        devices = {p.device for g in self.param_groups for p in g["params"]}
        if len(devices) > 1:
            names = ", ".join(sorted(str(d) for d in devices))
            raise ValueError(
                f"MaskedAdam: params: expected every parameter on one device, got {names} "
                "(make one optimizer per device)"
            )
        for p in group["params"]:
            if p.dtype not in _FLOAT:
                raise ValueError(
                    "MaskedAdam: params: expected floating-point parameters (float16, "
                    f"bfloat16, float32 or float64), got {p.dtype}"
                )

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient (see the class docstring).

        Args:
            closure: re-evaluates the model and returns the loss (optional).

        Returns:
            The closure's loss, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            capturable, lr = group["capturable"], group["lr"]
            if isinstance(lr, Tensor) and not capturable:
                lr = lr.item()  # torch's foreach Adam takes a tensor only when capturable
            every = []  # (param, grad, state) of a skip_zero_grad=False group
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.layout != torch.strided:
                    raise RuntimeError(
                        "MaskedAdam: sparse gradients are not supported (the gradient of a "
                        f"parameter of shape {list(p.shape)} is {grad.layout}); use "
                        "torch.optim.SparseAdam for those"
                    )
                state = self.state[p]
                if not state:  # the keys and types of torch.optim.Adam's state
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                # the step count on the device when capturable, on the host otherwise (a
                # loaded state may hold either)
                home = p.device if capturable else _CPU
                if state["step"].device != home:
                    state["step"] = state["step"].to(home, torch.float32)
                if not group["skip_zero_grad"]:
                    every.append((p, grad, state))
                    continue
                state["step"] += 1
                masked_adam_(
                    p,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    _like(grad, p),
                    lr=lr,
                    beta1=beta1,
                    beta2=beta2,
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    decoupled_weight_decay=group["decoupled_weight_decay"],
                    step=state["step"] if capturable else int(state["step"].item()),
                )
            if every:
                params, grads, states = zip(*every, strict=True)
                adam(
                    list(params),
                    list(grads),
                    [s["exp_avg"] for s in states],
                    [s["exp_avg_sq"] for s in states],
                    [],
                    [s["step"] for s in states],
                    capturable=capturable and params[0].device.type != "cpu",
                    decoupled_weight_decay=group["decoupled_weight_decay"],
                    amsgrad=False,
                    beta1=beta1,
                    beta2=beta2,
                    lr=lr,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=False,
                )
        return loss


def _check_options(group: dict[str, Any]) -> None:
    """ValueError naming the option of `group` that torch.optim.Adam's update cannot take."""

    def number(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"MaskedAdam: {name}: expected a number, got {value!r}")
        return float(value)

    lr = group["lr"]
    if isinstance(lr, Tensor):  # a capturable run's learning rate, filled in place
        if lr.numel() != 1 or lr.dtype not in (torch.float32, torch.float64):
            raise ValueError(
                f"MaskedAdam: lr: expected a number or a one-value float32 / float64 tensor, "
                f"got a {lr.dtype} tensor of shape {list(lr.shape)}"
            )
        lr = lr.item()
    if number("lr", lr) < 0:
        raise ValueError(f"MaskedAdam: lr: expected a number >= 0, got {group['lr']!r}")
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"MaskedAdam: betas: expected (beta1, beta2), got {betas!r}")
    for i, beta in enumerate(betas):
        if not 0 <= number(f"betas[{i}]", beta) < 1:
            raise ValueError(f"MaskedAdam: betas[{i}]: expected a number in [0, 1), got {beta!r}")
    if number("eps", group["eps"]) <= 0:
        raise ValueError(f"MaskedAdam: eps: expected a number > 0, got {group['eps']!r}")
    if number("weight_decay", group["weight_decay"]) < 0:
        raise ValueError(
            f"MaskedAdam: weight_decay: expected a number >= 0, got {group['weight_decay']!r}"
        )
    for name in ("decoupled_weight_decay", "skip_zero_grad", "capturable"):
        if not isinstance(group[name], bool):
            raise ValueError(f"MaskedAdam: {name}: expected True or False, got {group[name]!r}")


def _like(grad: Tensor, param: Tensor) -> Tensor:
    """`grad` in the memory layout of `param` (the op walks both as one flat array): itself
    when the strides already agree, as autograd's gradients of dense parameters do."""
    if grad.shape != param.shape:
        return grad  # the op names the mismatch
    strides = zip(param.shape, grad.stride(), param.stride(), strict=True)
    if all(n <= 1 or a == b for n, a, b in strides):
        return grad
    return torch.empty_like(param, memory_format=torch.preserve_format).copy_(grad)
