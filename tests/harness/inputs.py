"""Inputs of a differential case: ``PerDevice`` (a value made once per device), copies of CPU tensors on the tpu
(``materialise``, with their views, strides and requires_grad), and the small constructors tests use (``t``,
``rand``, ``module_per_device``, ``leaf_per_device``, ``ids``, ``fuzz_seeds``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable

import torch
from torch.utils import _pytree as pytree


DEV = "tpu"


@dataclasses.dataclass
class PerDevice:
    """An argument built separately on each device: ``make(device) -> value`` (a view of a fresh
    tensor, a module, an optimizer...). ``make`` must build new objects on every call (``t.to("cpu")``
    returns ``t`` itself: clone first)."""
    make: Callable[[str], Any]


def per_device(make: Callable[[str], Any]) -> PerDevice:
    return PerDevice(make)


def noncontig(t: torch.Tensor) -> PerDevice:
    """``t`` (a CPU tensor) as a transposed view of a contiguous tensor on each device (same values,
    non-contiguous strides). 0/1-dim tensors become a strided (step 2) slice."""
    t = t.detach()
    if t.dim() >= 2:
        base = t.transpose(-1, -2).contiguous()
        return PerDevice(lambda d: base.clone().to(d).transpose(-1, -2))
    wide = torch.stack([t, torch.zeros_like(t)], -1).reshape(-1) if t.dim() == 1 else t.reshape(1)
    if t.dim() == 0:
        return PerDevice(lambda d: t.clone().to(d))
    return PerDevice(lambda d: wide.clone().to(d)[::2])


def _copy_tensor(t: torch.Tensor, device: str, memo: dict) -> torch.Tensor:
    key = id(t)
    if key in memo:
        return memo[key]
    base = t._base
    if base is not None and not t.requires_grad:
        # a view: copy its base once (views of one base share storage on the device too), then re-view
        b = _copy_tensor(base, device, memo)
        out = b.as_strided(t.size(), t.stride(), t.storage_offset())
    else:
        src = t.detach()
        if device == "cpu":
            out = src.clone()  # preserve_format keeps dense strides
        else:
            out = src.to(device)
        if t.requires_grad:
            out.requires_grad_(True)
    memo[key] = out
    return out


def materialise(args, device: str, memo: dict | None = None):
    """Copies of ``args`` on ``device``: tensors copied (identity preserved: a tensor passed twice is
    one tensor on the device), PerDevice built, everything else passed through."""
    memo = {} if memo is None else memo

    def one(a):
        if isinstance(a, PerDevice):
            return a.make(device)
        if isinstance(a, torch.Tensor):
            return _copy_tensor(a, device, memo)
        if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
            return type(a)(one(x) for x in a)
        if isinstance(a, dict):
            return {k: one(v) for k, v in a.items()}
        return a

    return [one(a) for a in args]


def _tensor_leaves(tree) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def fuzz_seeds(default: int) -> range:
    """The seeds a fuzz test runs: ``TORCH_TPU_FUZZ_SEEDS=N`` seeds 0..N-1, ``=A:B`` seeds A..B-1."""
    return range(*map(int, os.environ.get("TORCH_TPU_FUZZ_SEEDS", str(default)).split(":")))


def t(*vals, dtype=None, **kw) -> torch.Tensor:
    """A tiny CPU tensor from values: t(1, 2, 3), t([[1, 2]], dtype=torch.int8)."""
    if len(vals) == 1 and isinstance(vals[0], (list, tuple)):
        vals = vals[0]
    return torch.tensor(list(vals), dtype=dtype, **kw)


def rand(*shape, dtype=torch.float32, seed=0, low=-2.0, high=2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g) * (high - low) + low
    return x.to(dtype)


def module_per_device(make: Callable[[], torch.nn.Module], seed: int = 0) -> PerDevice:
    """A module built the same way on each device (same seed, same parameters)."""
    def on(device):
        torch.manual_seed(seed)
        return make().to(device)
    return per_device(on)


def leaf_per_device(*shape, seed: int = 1, dtype=torch.float32) -> PerDevice:
    """The same random values on each device, as a leaf requiring grad."""
    data = rand(*shape, seed=seed).to(dtype)
    return per_device(lambda d: data.clone().to(d).requires_grad_())


def ids(cases: Iterable) -> list[str]:
    return [c[0] for c in cases]
