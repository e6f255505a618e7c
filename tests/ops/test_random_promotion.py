"""Random binary-op calls mixing operand kinds, run on CPU torch and on tpu (strict and fused eager) from one
seed: tpu tensors of every dtype and shape, 0-dim tpu tensors, CPU 0-dim tensors (allowed, as with CUDA),
Python bools, ints, floats and complex numbers on either side; functional, in-place and out= forms.

Both must raise, or both return the same dtype, shape and values. Accepted differences, each stated:
an integer division by zero is a device-side check on tpu (``DeviceAssertError`` naming
ZeroDivisionError, as CUDA asserts); complex32 results are refused on tpu (README); complex add/sub of
an infinity is exact on tpu where CPU's kernel gives a nan imaginary part (README); an out= of a wider
dtype than the computation may be computed in the wider dtype (closer to exact than CPU's rounding).
A found seed becomes a named case in the test file of its family; this file keeps the sweep."""
from __future__ import annotations

import random
import warnings

import pytest
import torch

from tests.harness.inputs import fuzz_seeds
import torch_tpu
from torch_tpu.errors import DeviceAssertError

pytestmark = pytest.mark.fuzz

SEEDS = fuzz_seeds(200)
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64]
NUMBERS = [0, 1, -1, 2, 7, True, False, 0.0, -0.0, 1.0, 2.5, -3.5, 1e10, float("inf"), float("nan"), 1 + 0j,
           2 - 1j, 300, -129, 2**40]
OPS = ["add", "sub", "mul", "div", "div_floor", "div_trunc", "floor_divide", "remainder", "fmod", "pow",
       "maximum", "minimum", "eq", "lt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "atan2", "copysign",
       "hypot", "where", "lerp", "logaddexp", "xlogy", "true_divide", "rsub", "lshift", "rshift"]
LOW = (torch.float16, torch.bfloat16)


class _CpuScalar:  # a CPU 0-dim tensor operand (chosen the same way on both devices)
    def __init__(self, t):
        self.t = t


def _operand(r, device, shape):
    k = r.random()
    if k < 0.45:
        dtype = r.choice(DTYPES)
        v = torch.randn(shape, generator=torch.Generator().manual_seed(r.randrange(1 << 30))) * 4
        v = torch.complex(v, v.flip(-1) if v.dim() else v).to(dtype) if dtype.is_complex else v.to(dtype)
        return v.to(device)
    if k < 0.6:
        dtype = r.choice(DTYPES)
        value = (1 - 2j) if dtype.is_complex else r.choice([3, -2, 1, 0])
        return torch.tensor(value, dtype=dtype).to(device)
    if k < 0.68:
        return _CpuScalar(torch.tensor(r.choice([3, 2.5, -1])))
    return r.choice(NUMBERS)


def _apply(op, a, b, inplace, out):
    if op in ("div_floor", "div_trunc"):
        mode = op[4:]
        return a.div_(b, rounding_mode=mode) if inplace else torch.div(a, b, rounding_mode=mode)
    if op == "where":
        return torch.where(a > 0 if isinstance(a, torch.Tensor) else torch.tensor(True), a, b)
    if op == "lerp":
        return a.lerp_(b, 0.3) if inplace else torch.lerp(a, b, 0.3)
    if op == "rsub":
        return torch.rsub(a, b)
    if op in ("lshift", "rshift"):
        if inplace:
            return a.__ilshift__(b) if op == "lshift" else a.__irshift__(b)
        return a << b if op == "lshift" else a >> b
    if inplace:
        return getattr(a, op + "_")(b)
    if out is not None:
        return getattr(torch, op)(a, b, out=out)
    return getattr(torch, op)(a, b)


def call(seed: int, device: str):
    """(description, result on the CPU / exception) of seed's call on ``device``."""
    r = random.Random(seed)
    shape = r.choice([(3,), (2, 3), (1,), ()])
    op = r.choice(OPS)
    a, b = _operand(r, device, shape), _operand(r, device, r.choice([shape, (1,), ()]))
    if not isinstance(a, (torch.Tensor, _CpuScalar)) and not isinstance(b, (torch.Tensor, _CpuScalar)):
        a = torch.tensor([1.0, 2.0, 3.0]).to(device)
    if isinstance(a, _CpuScalar) and r.random() < 0.5:
        a, b = b, a
    a_cpu_scalar = isinstance(a, _CpuScalar)
    a, b = (x.t if isinstance(x, _CpuScalar) else x for x in (a, b))
    inplace = r.random() < 0.25 and isinstance(a, torch.Tensor) and not a_cpu_scalar
    out = torch.empty(0, dtype=r.choice(DTYPES), device=device) if not inplace and r.random() < 0.15 else None

    def kind(x):
        return (x.dtype, tuple(x.shape), "cpu" if x.device.type == "cpu" and device != "cpu" else "dev") \
            if isinstance(x, torch.Tensor) else x
    what = f"{op}({kind(a)}, {kind(b)}, inplace={inplace}, out={None if out is None else out.dtype})"
    low = any(isinstance(x, torch.Tensor) and x.dtype in LOW for x in (a, b, out))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _apply(op, a, b, inplace, out)
        return what, low, result.detach().cpu().clone()
    except Exception as exc:  # noqa: BLE001 - compared below
        return what, low, exc


def _check(seed):
    what, low, want = call(seed, "cpu")
    _, _, got = call(seed, "tpu")
    if isinstance(want, Exception):
        if isinstance(got, Exception):
            return
        if "ZeroDivisionError" in str(want):
            torch_tpu.sync()  # the device-side check names it at the next wait
            pytest.fail(f"seed {seed}: {what}: CPU raised ZeroDivisionError, the tpu returned {got}")
        if "ComplexHalf" in str(want):
            return  # a complex32 computation into a wider out=: the tpu computes it in complex64 (README)
        pytest.fail(f"seed {seed}: {what}: CPU raised {type(want).__name__}: {want}; the tpu returned {got}")
    if isinstance(got, Exception):
        if want.dtype == torch.complex32 and "complex32" in str(got):
            return
        pytest.fail(f"seed {seed}: {what}: the tpu raised {type(got).__name__}: {got}; CPU returned {want}")
    assert got.dtype == want.dtype and got.shape == want.shape, (seed, what, got, want)
    if want.is_complex() and "inf" in what and torch.isnan(want).any() and not torch.isnan(got).any():
        return  # complex add/sub of an infinity: CPU's kernel multiplies by alpha (inf * 0 is nan); README
    if want.is_floating_point() or want.is_complex():
        tol = dict(rtol=2e-2, atol=2e-2) if low or want.dtype in LOW else dict(rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got, want, equal_nan=True, **tol, msg=lambda m: f"seed {seed}: {what}: {m}")
    else:
        assert torch.equal(got, want), (seed, what, got, want)


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_random_binary_calls_match_cpu(mode):
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode[mode]):
        for seed in SEEDS:
            try:
                _check(seed)
            except DeviceAssertError as exc:  # an integer division by zero, raised at a later wait
                assert "ZeroDivisionError" in str(exc), exc
