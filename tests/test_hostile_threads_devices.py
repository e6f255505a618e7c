"""Hostile, round 9: threads, long loops and device defaults, as a user would meet them.

Found:
  * [wrong dtype] under ``torch.set_default_dtype(torch.bfloat16)`` (or float16, float64) an op seen
    before under another default dtype (``torch.arange(0, 1, 0.25)``, ``int_tensor / 2``,
    ``int_tensor * 1.5``, ``linspace``) returned the old default's dtype: the op-entry key held no
    default dtype.
  * [silent] ``x.to("tpu:1")`` (``x.tpu(1)``, ``x.to(torch.device("tpu", 1))``) of a tpu tensor returned a
    tpu:0 tensor; a factory or a CPU tensor's ``.to("tpu:1")`` already raised. Now a clear error.
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


def _cpu_scalar_mix(x):
    s = torch.tensor(2.5)            # a CPU 0-dim tensor: allowed with device tensors, as on CUDA
    i = torch.tensor(3)
    b = torch.tensor(True)
    return (x + s, s * x, x * i, torch.where(x > 0, x, s), x.clamp(min=torch.tensor(-0.5)),
            torch.maximum(x, torch.tensor(0.25)), x.masked_fill(x > 1, s), x.pow(i), x * b,
            torch.addcmul(x, x, x, value=2) - s)


def _cpu_scalar_inplace(x):
    x.mul_(torch.tensor(3.0))
    x.add_(torch.tensor(1), alpha=2)
    x[0] = torch.tensor(-7.0)
    return x


def _cpu_index(x):
    i = torch.tensor([0, 2, 2])      # CPU index tensors index a device tensor, as on CUDA
    m = torch.tensor([True, False, True, False])
    y = x.clone()
    y[i] = 5.0
    y[torch.tensor([1])] += 1.0
    z = x.clone()
    z.index_put_((torch.tensor([3, 0]),), torch.tensor([9.0, 8.0], device=x.device))
    return x[i], x[m], x[i, None], y, z, x[torch.tensor(1)]


def _cpu_nonscalar(x):
    return x + torch.ones(4)


def _out_wrong_device(x):
    return torch.add(x, x, out=torch.empty(4))


@pytest.mark.parametrize("case", ["cpu_scalar_mix", "cpu_scalar_inplace", "cpu_index"])
def test_cpu_tensors_allowed_with_tpu(case):
    fn = {"cpu_scalar_mix": _cpu_scalar_mix, "cpu_scalar_inplace": _cpu_scalar_inplace,
          "cpu_index": _cpu_index}[case]
    D.check(fn, D.rand(4), modes=EAGER)


@pytest.mark.parametrize("mode", EAGER)
def test_cpu_nonscalar_and_wrong_out_device_raise_naming_both(mode):
    with D._in_mode(mode):
        x = torch.ones(4, device="tpu")
        for fn in (_cpu_nonscalar, _out_wrong_device, lambda x: torch.add(torch.ones(4), torch.ones(4),
                                                                            out=torch.empty(4, device="tpu")),
                   lambda x: x.index_select(0, torch.tensor([1]))):
            with pytest.raises(RuntimeError, match=r"(?s)(tpu.*cpu|cpu.*tpu)"):
                fn(x).cpu()
        torch.testing.assert_close((x * 2).cpu(), torch.full((4,), 2.0))


@pytest.mark.parametrize("mode", EAGER)
def test_second_device_is_refused(mode):
    """``.to("tpu:1")`` of a tpu tensor returned a tpu:0 tensor without a word (one device per
    process): now a clear error, like a factory or a CPU tensor's ``.to("tpu:1")``."""
    with D._in_mode(mode):
        x = torch.ones(3, device="tpu")
        for make in (lambda: x.to("tpu:1"), lambda: x.to(torch.device("tpu", 1)), lambda: x.tpu(1),
                     lambda: torch.ones(3).to("tpu:1"), lambda: torch.zeros(2, device="tpu:1"),
                     lambda: torch.nn.Linear(2, 2).to("tpu:1"), lambda: x.new_ones(2, device="tpu:1")):
            with pytest.raises(RuntimeError, match="tpu:1.*one device per process"):
                make()
        assert x.to("tpu:0").device == x.device == torch.device("tpu", 0)
        assert torch.device("tpu").index is None and x.device.index == 0 and x.get_device() == 0
        assert x.device != torch.device("tpu")  # as torch.device("cuda:0") != torch.device("cuda")
        assert torch.ones(2).tpu().device == x.device and x.is_tpu and not torch.ones(1).is_tpu
        torch.testing.assert_close(x.to("tpu").cpu(), torch.ones(3))


def test_default_device_factories_and_modules():
    """``torch.set_default_device("tpu")``: factories and module construction land on the tpu and
    compute what CPU torch computes from the same values (the tpu's random numbers are its own)."""
    def run(device, state=None, x=None):
        with torch.device(device):
            m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.GELU())
            e = torch.nn.Embedding(5, 4)
            if state is not None:
                m.load_state_dict(state[0])
                e.load_state_dict(state[1])
            x = torch.randn(2, 3) if x is None else x.to(device)
            ids = torch.tensor([1, 4])
            out = m(x) + e(ids) + torch.arange(4) * 0.5 + torch.ones(4) + torch.eye(4)[1]
            out.sum().backward()
            devices = {t.device.type for t in (x, ids, out, m[0].weight, m[0].weight.grad, e.weight)}
            cpu_state = ({k: v.cpu() for k, v in m.state_dict().items()},
                         {k: v.cpu() for k, v in e.state_dict().items()})
            return out.detach().cpu(), m[0].weight.grad.cpu(), devices, cpu_state, x.cpu()

    old = torch.get_default_device()
    try:
        torch.set_default_device("tpu")
        got = run("tpu")
        assert torch.zeros(1).device.type == "tpu"
    finally:
        torch.set_default_device(old)
    exp = run("cpu", got[3], got[4])
    assert got[2] == {"tpu"} and exp[2] == {"cpu"}
    torch.testing.assert_close(got[0], exp[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], exp[1], atol=1e-5, rtol=1e-5)
    assert torch.zeros(1).device.type == old.type


def _deterministic_ops(x, idx):
    z = torch.zeros(4, device=x.device)
    return (z.index_add(0, idx, x), z.scatter_add(0, idx, x), z.index_put((idx,), x, accumulate=True),
            x.cumsum(0), x.sort().values, torch.bincount(idx, minlength=4), x.kthvalue(2).values,
            torch.nn.functional.embedding_bag(idx, x[:, None].expand(4, 3).contiguous(),
                                              torch.tensor([0, 2], device=x.device), mode="sum"))


def test_use_deterministic_algorithms():
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        D.check(_deterministic_ops, D.rand(4), torch.tensor([0, 0, 3, 1]), modes=ALL)
    finally:
        torch.use_deterministic_algorithms(old)


@pytest.mark.parametrize("mode", EAGER)
def test_non_blocking_copies_see_the_value_at_the_call(mode):
    """``non_blocking=True`` both ways, then an in-place write on the source: the copy holds the value
    the source had when the copy was asked for."""
    with D._in_mode(mode):
        for pin in (False, True):
            c = torch.arange(6.0)
            c = c.pin_memory() if pin else c
            d = c.to("tpu", non_blocking=True)
            c.add_(100)
            g = torch.empty(6, device="tpu")
            g.copy_(c, non_blocking=True)
            c.mul_(0)
            torch.testing.assert_close(d.cpu(), torch.arange(6.0))
            torch.testing.assert_close(g.cpu(), torch.arange(6.0) + 100)
        t = torch.arange(5.0, device="tpu") * 2
        h = t.to("cpu", non_blocking=True)
        t.add_(1)
        h2 = torch.empty(5).pin_memory()
        h2.copy_(t, non_blocking=True)
        t.zero_()
        v = t[1:4]
        h3 = v.to("cpu", non_blocking=True)
        v.fill_(-1)
        torch.tpu.synchronize()
        torch.testing.assert_close(h, torch.arange(5.0) * 2)
        torch.testing.assert_close(h2, torch.arange(5.0) * 2 + 1)
        torch.testing.assert_close(h3, torch.zeros(3))
