"""Argument checks shared by the rendering functions: each error names the argument and
what was expected (TypeError for the wrong kind of object or dtype, ValueError for the
wrong shape, device or value)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

_INDEX_DTYPES = (torch.int64, torch.int32)


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, with an s unless `count` is 1: "1 row", "3 rows" (train's
    `plural`, which grid does not import)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def float_tensor(
    name: str, value: object, shape: str, dim: int | tuple[int, ...] | None, last: int | None = None
) -> None:
    """`value` is a floating-point tensor with `dim` dimensions (one of them for a tuple,
    any number >= 1 for None) and `last` as its last size (any for None)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}: expected a tensor of shape {shape}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor {shape}, got {value.dtype}")
    if dim is None:
        wrong_dim = value.dim() < 1
    else:
        wrong_dim = value.dim() not in (dim if isinstance(dim, tuple) else (dim,))
    if wrong_dim or (last is not None and value.shape[-1] != last):
        raise ValueError(f"{name}: expected shape {shape}, got {list(value.shape)}")


def floating_dtype(dtype: object) -> torch.dtype:
    """A layer's `dtype` argument: None is torch's default dtype; else a floating-point dtype."""
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"dtype: expected a floating-point torch.dtype (float32, float64, float16, "
            f"bfloat16), got {dtype!r}"
        )
    return dtype


def index_tensor(name: str, value: object) -> None:
    """`value` is a 1-D int64 or int32 tensor."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name}: expected an int64 tensor of shape [S], got {type(value).__name__}"
        )
    if value.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name}: expected an int64 (or int32) tensor [S], got {value.dtype}")
    if value.dim() != 1:
        raise ValueError(f"{name}: expected shape [S] (1-D), got {list(value.shape)}")


def same_device(name: str, value: Tensor, like_name: str, like: Tensor) -> None:
    if value.device != like.device:
        raise ValueError(
            f"{name}: expected a tensor on {like.device} like {like_name}, got {value.device}"
        )


def same_length(name: str, value: Tensor, like_name: str, like: Tensor) -> None:
    """`value.shape[0] == like.shape[0]` (one row per sample, or per ray)."""
    if value.shape[0] != like.shape[0]:
        raise ValueError(
            f"{name}: expected {plural(like.shape[0], 'row')} like {like_name}, "
            f"got shape {list(value.shape)}"
        )


def count(name: str, value: object) -> int:
    """A non-negative Python int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: expected an int >= 0, got {value}")
    return value


def real(name: str, value: object, positive: bool = False) -> float:
    """A finite Python number (> 0 if `positive`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(
            f"{name}: expected a finite number{' > 0' if positive else ''}, got {value}"
        )
    return value


def ray_index_values(ray_indices: Tensor, n_rays: int, name: str, sorted_: bool) -> None:
    """Every index in [0, n_rays) (and non-decreasing if `sorted_`).

    These read the data: one read-back of two or three numbers, which waits for the
    device on CUDA. Skipped while torch.compile traces (the values are unknown there).
    """
    if torch.compiler.is_compiling() or ray_indices.shape[0] == 0:
        return
    idx = ray_indices
    summary = [idx.min(), idx.max()]
    if sorted_:
        summary.append((idx[1:] < idx[:-1]).any().to(idx.dtype))
    low, high, *unsorted = torch.stack(summary).tolist()
    if low < 0:
        raise ValueError(f"{name}: expected ray indices >= 0, got {low}")
    if high >= n_rays:
        raise ValueError(f"n_rays: expected at least max({name}) + 1 = {high + 1}, got {n_rays}")
    if any(unsorted):
        raise ValueError(
            f"{name}: expected non-decreasing ray indices (packed samples sorted by ray, "
            f"front to back within a ray)"
        )
