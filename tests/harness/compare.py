"""Comparing the tpu's results with CPU torch's: tolerances per dtype, every tpu value read back to the host
(``read``, ``sync``), values, dtypes, shapes and structure compared (``assert_same_value``, ``assert_same``), and
low-precision results held to CPU's own error from float32 (``assert_low_precision_close``).
"""
from __future__ import annotations

import math

import pytest
import torch
from torch.utils import _pytree as pytree

import torch_tpu


_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}


def tolerance(dtype: torch.dtype, atol=None, rtol=None) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``: exact for integers and bool; ``atol``/``rtol`` may be numbers or
    {dtype: number} dicts that override the defaults."""
    a, r = _TOL.get(dtype, (0.0, 0.0))
    if isinstance(atol, dict):
        a = atol.get(dtype, a)
    elif atol is not None and (dtype.is_floating_point or dtype.is_complex):
        a = atol
    if isinstance(rtol, dict):
        r = rtol.get(dtype, r)
    elif rtol is not None and (dtype.is_floating_point or dtype.is_complex):
        r = rtol
    return a, r


class _Host:
    """A tpu value copied to the host, with what the comparison needs."""

    def __init__(self, t: torch.Tensor):
        self.device = t.device
        self.dtype = t.dtype
        self.shape = tuple(t.shape)
        self.stride = t.stride() if t.layout == torch.strided else None
        self.requires_grad = t.requires_grad
        self.value = t.detach().to("cpu")


def read(tree):
    """Copy every tensor of ``tree`` to the host (forcing deferred work to run and its errors to
    surface); Python values pass through."""
    def one(x):
        if isinstance(x, torch.Tensor):
            return _Host(x)
        return x
    return pytree.tree_map(one, tree, is_leaf=_is_size)


def _is_size(x) -> bool:
    return isinstance(x, torch.Size)


def sync():
    """Wait for the device (and flush a fused graph)."""
    torch_tpu.sync()
    torch.tpu.synchronize()


def _fmt(t: torch.Tensor, n=12) -> str:
    flat = t.reshape(-1)
    s = flat[:n].tolist()
    return f"{s}{'...' if flat.numel() > n else ''}"


def assert_same_value(exp, got, *, where="result", atol=None, rtol=None, signed_zeros=False,
                      check_stride=False, check_requires_grad=True):
    """``exp``: the CPU value (tensor or Python value); ``got``: the tpu value read by ``read``."""
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, _Host):
            pytest.fail(f"[wrong structure] {where}: CPU gave a tensor, tpu gave {type(got).__name__}: {got!r}")
        if got.dtype != exp.dtype:
            pytest.fail(f"[wrong dtype] {where}: CPU {exp.dtype}, tpu {got.dtype} "
                        f"(CPU {_fmt(exp.detach())}, tpu {_fmt(got.value)})")
        if got.shape != tuple(exp.shape):
            pytest.fail(f"[wrong shape] {where}: CPU {tuple(exp.shape)}, tpu {got.shape}")
        if check_requires_grad and got.requires_grad != exp.requires_grad:
            pytest.fail(f"[wrong requires_grad] {where}: CPU {exp.requires_grad}, tpu {got.requires_grad}")
        if check_stride and exp.layout == torch.strided and got.stride != exp.stride():
            pytest.fail(f"[wrong stride] {where}: CPU {exp.stride()}, tpu {got.stride}")
        e = exp.detach()
        g = got.value
        if e.is_quantized or e.layout != torch.strided:
            e = e.to_dense()
        a, r = tolerance(e.dtype, atol, rtol)
        if e.dtype == torch.bool or not (e.dtype.is_floating_point or e.dtype.is_complex):
            if not torch.equal(e, g):
                bad = (e != g).nonzero()[:4].tolist()
                pytest.fail(f"[wrong value] {where} ({e.dtype}{list(e.shape)}): CPU {_fmt(e)}, tpu {_fmt(g)}; "
                            f"first mismatches at {bad}")
            return
        try:
            torch.testing.assert_close(g, e, atol=a, rtol=r, equal_nan=True, check_dtype=False,
                                       check_device=False, check_layout=False, check_stride=False)
        except AssertionError as err:
            pytest.fail(f"[wrong value] {where} ({e.dtype}{list(e.shape)}): CPU {_fmt(e)}, tpu {_fmt(g)}\n"
                        f"{str(err).splitlines()[0:6]}")
        if signed_zeros and not e.is_complex():
            ef, gf = e.float(), g.float()
            zero = ef == 0
            if zero.any() and not torch.equal(torch.signbit(ef[zero]), torch.signbit(gf[zero])):
                pytest.fail(f"[wrong value] {where}: signed zeros differ: CPU {_fmt(e)}, tpu {_fmt(g)}")
        return
    if isinstance(got, _Host):
        pytest.fail(f"[wrong structure] {where}: CPU gave {type(exp).__name__} {exp!r}, tpu gave a tensor")
    if isinstance(exp, (bool, int, float, complex)) and not isinstance(exp, torch.SymInt):
        if type(exp) is not type(got):
            pytest.fail(f"[wrong type] {where}: CPU {type(exp).__name__} {exp!r}, tpu {type(got).__name__} {got!r}")
        if isinstance(exp, float) and math.isnan(exp):
            if not math.isnan(got):
                pytest.fail(f"[wrong value] {where}: CPU nan, tpu {got!r}")
            return
        if isinstance(exp, (float, complex)):
            if exp == got and not (signed_zeros and isinstance(exp, float) and exp == 0):
                return  # infinities too (inf - inf is nan)
            a, r = atol if isinstance(atol, (int, float)) else 1e-6, rtol if isinstance(rtol, (int, float)) else 1e-5
            if not abs(exp - got) <= a + r * abs(exp):
                pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")
            if signed_zeros and isinstance(exp, float) and exp == 0 and math.copysign(1, exp) != math.copysign(1, got):
                pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r} (sign of zero)")
            return
        if exp != got:
            pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")
        return
    if isinstance(exp, torch.device):
        return  # devices differ by construction
    if exp != got:
        pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")


def assert_low_precision_close(got: torch.Tensor, cpu_low: torch.Tensor, cpu_fp32: torch.Tensor, *,
                               where: str = "result", steps: float = 1.0) -> None:
    """A bfloat16/float16 result of many ops against CPU torch's, by the rule the pipeline tests follow
    (integrations/test_pipelines.py): results of different, equally valid op orders and fusions differ by about
    CPU's own low-precision error from float32, so the tpu's may be at most 1.5x as far from CPU's float32 result
    as CPU's low-precision one is, and within 2x that error of CPU's low-precision result, plus ``steps`` of the
    dtype's relative step at the result's scale (a result CPU computes exactly still rounds once). A wrong op
    is off by the values' own scale, far past CPU's error."""
    got, low, ref = (t.detach().cpu().double() for t in (got, cpu_low, cpu_fp32))
    if got.shape != ref.shape:
        pytest.fail(f"[wrong shape] {where}: CPU {tuple(ref.shape)}, tpu {tuple(got.shape)}")
    cpu_err = float((low - ref).abs().max())
    step = steps * torch.finfo(cpu_low.dtype).eps * float(ref.abs().max())
    to_ref, to_low = float((got - ref).abs().max()), float((got - low).abs().max())
    text = (f"{where} ({cpu_low.dtype}): max |tpu - CPU float32| = {to_ref:.3g}, max |tpu - CPU {cpu_low.dtype}| = "
            f"{to_low:.3g}, CPU's own error max |CPU {cpu_low.dtype} - CPU float32| = {cpu_err:.3g}, one step "
            f"at the result's scale {step:.3g}")
    if not (to_ref <= 1.5 * cpu_err + step and to_low <= 2 * cpu_err + step):
        pytest.fail(f"[wrong value] {text}")


def assert_same(exp_tree, got_tree, *, where="result", **kw):
    exp_leaves, exp_spec = pytree.tree_flatten(exp_tree, is_leaf=_is_size)
    got_leaves, got_spec = pytree.tree_flatten(got_tree, is_leaf=lambda x: isinstance(x, _Host) or _is_size(x))
    if len(exp_leaves) != len(got_leaves) or (exp_spec != got_spec and len(exp_leaves) > 1):
        pytest.fail(f"[wrong structure] {where}: CPU {exp_spec}, tpu {got_spec}")
    for i, (e, g) in enumerate(zip(exp_leaves, got_leaves)):
        assert_same_value(e, g, where=where if len(exp_leaves) == 1 else f"{where}[{i}]", **kw)
