"""Hostile, round 9: threads, long loops and device defaults, as a user would meet them.

Found:
  * [wrong dtype] under ``torch.set_default_dtype(torch.bfloat16)`` (or float16, float64) an op seen
    before under another default dtype (``torch.arange(0, 1, 0.25)``, ``int_tensor / 2``,
    ``int_tensor * 1.5``, ``linspace``) returned the old default's dtype: the op-entry key held no
    default dtype.
Every case compares with CPU torch (tests/differential.py) in strict and fused eager and, where a graph
makes sense, compiled mode.
"""
import gc
import sys
import threading
import time

import pytest
import torch

import differential as D
import torch_tpu
from differential import watchdog  # noqa: F401

pytestmark = pytest.mark.usefixtures("watchdog")

ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]


# ---------------------------------------------------------------------------------------------------
# devices and defaults


def _default_dtype_ops(x):
    dev = x.device
    i = torch.arange(4, device=dev)
    return (torch.arange(0, 1, 0.25, device=dev), i / 2, i * 1.5, torch.linspace(0, 1, 3, device=dev),
            torch.full((2,), 1.5, device=dev), torch.tensor([2.5], device=dev), i.sqrt(), x.sum() + i / 3,
            torch.nn.functional.linear(x, torch.ones(3, 3, device=dev)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.float16])
def test_default_dtype_changes_between_calls(dtype):
    """The same calls under float32, then under another default dtype, then float32 again: each result
    has the dtype CPU torch gives (the op entries of the first pass served the second)."""
    x = D.rand(2, 3)
    D.check(_default_dtype_ops, x, modes=ALL)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        D.check(_default_dtype_ops, x.to(dtype), modes=ALL, atol=1e-2, rtol=1e-2)
    finally:
        torch.set_default_dtype(old)
    D.check(_default_dtype_ops, x, modes=ALL)
