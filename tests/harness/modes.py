"""The execution modes a differential case runs in, by name (strict, fused, compiled ...): ``_in_mode`` enters one,
``_mode_fn`` wraps a function for it, ``current_mode_name`` says which is on.
"""
from __future__ import annotations

import contextlib

import torch

import torch_tpu


_MODE_NAMES = {
    "strict": "DEFER_NEVER",
    "fused": "DEFER_AND_FUSE",
    "blocking": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
}


@contextlib.contextmanager
def _in_mode(mode):
    if mode is None or mode == "compiled":
        yield
        return
    if isinstance(mode, str):
        mode = torch_tpu.EagerMode[_MODE_NAMES.get(mode, mode)]
    with torch.tpu.set_eager_mode(mode):
        yield


def _mode_fn(fn, mode):
    if mode == "compiled":
        torch._dynamo.reset()
        return torch.compile(fn, backend="tpu", dynamic=False)
    return fn


def current_mode_name() -> str:
    m = torch.tpu.eager_mode
    return {v: k for k, v in _MODE_NAMES.items()}.get(m.name, m.name)
