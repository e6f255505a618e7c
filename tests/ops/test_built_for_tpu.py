"""Programs built as for a TPU and run here (TORCH_TPU_BUILD_FOR=tpu: the TPU's choices of lowering, its Pallas
kernels in JAX's TPU interpret mode), in strict, fused and compiled mode, against CPU torch.

The TPU lowering check (TORCH_TPU_CHECK_LOWERING) only lowers those programs; this file runs them. What it covers
is what only a TPU's programs compute: linear algebra by XLA:TPU's own SVD algorithm and by our 64-bit LU, the
special-value forms of division, remainders, atan2, hypot, sinh and expm1, and attention through the Pallas
flash-attention kernels. XLA:TPU's own arithmetic is not XLA:CPU's (bench/results/tpu/tpu_semantics_probe.json):
what differs there is tested in tests/ops/test_tpu_special_values.py with it emulated, and on the chip."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import rand
from tests.ops import test_linalg as linalg_cases
from torch_tpu.ops import attention
from torch_tpu.runtime import platform, stable_keys

pytestmark = [pytest.mark.build_for_tpu, pytest.mark.slow, pytest.mark.usefixtures("watchdog"),
              pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")]

ALL = ["strict", "fused", "compiled"]


def test_programs_here_are_built_for_a_tpu():
    assert platform.target() == "tpu"
    assert "built-for-tpu" in stable_keys.environment(with_source=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_spectral_family(dtype):
    """eigh, SVD (XLA:TPU's own algorithm for float32, QDWH and eigh for float64), QR, pinv, rank."""
    D.check(linalg_cases._spectral_family, linalg_cases._spd(2, dtype=dtype),
            rand(2, 5, 3, seed=5, low=-1, high=1).to(dtype), modes=ALL, atol=linalg_cases.TOL[dtype],
            rtol=linalg_cases.TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_lu_family_and_gradients(dtype):
    """The LU family (float64: Gaussian elimination, XLA:TPU having no 64-bit LU) and every op's gradient."""
    D.check(linalg_cases._lu_family, linalg_cases._square(2, 3, dtype=dtype), rand(2, 3, 4, 2, seed=5).to(dtype),
            modes=ALL, atol=linalg_cases.TOL[dtype], rtol=linalg_cases.TOL[dtype])
    D.check(linalg_cases._grads, linalg_cases._grad_leaf(linalg_cases._square(2, dtype=dtype)),
            linalg_cases._grad_leaf(linalg_cases._spd(2, seed=3, dtype=dtype)),
            linalg_cases._grad_leaf(rand(2, 4, 3, seed=5).to(dtype)), modes=ALL,
            atol=linalg_cases.TOL[dtype] * 10, rtol=linalg_cases.TOL[dtype] * 10)


def test_matrix_exp_float64():
    """float64 matrix_exp: its Pade step solved with our LU (XLA:TPU's LU is 32-bit only)."""
    a = (rand(2, 3, 3, seed=3) * 0.5).double()
    D.check(lambda a: [torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(a - a.mT)], a, modes=ALL,
            atol=1e-12, rtol=1e-12)


_XS = [0.0, -0.0, 1.0, -2.5, 7.0, float("inf"), float("-inf"), float("nan"), 3.0e38, -3.0e38]
_YS = [0.5, -2.0, float("inf"), float("-inf"), 3.0e38, -3.0e38, float("nan")]


def _special_pairs():
    """Pairs whose quotient is neither past float32's range (CPU torch's own fmod differs between its vector and
    scalar loops there) nor subnormal (XLA flushes those; a TPU has none)."""
    def ordinary(x, y):
        if not (math.isfinite(x) and math.isfinite(y)):
            return True
        q = abs(x / y)
        return q <= 3.4e38 and (q == 0 or q >= 1.2e-38)

    xs, ys = zip(*[(x, y) for x, y in itertools.product(_XS, _YS) if ordinary(x, y)])
    return torch.tensor(xs), torch.tensor(ys)


def _special_value_ops(x, y):
    return [torch.fmod(x, y), torch.remainder(x, y), torch.floor_divide(x, y), x / y,
            torch.div(x, y, rounding_mode="trunc"), torch.atan2(x, y), torch.hypot(x, y), torch.sinh(x),
            torch.expm1(x), torch.fmod(x, float("inf")), torch.remainder(x, -2.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_special_values_as_cpu(dtype):
    x, y = _special_pairs()
    D.check(_special_value_ops, x.to(dtype), y.to(dtype), modes=ALL, signed_zeros=True, atol=0,
            rtol=1e-6 if dtype == torch.float32 else 1e-2)


def _inexact_divisor_ops(x, i):
    r = torch.fmod(x, 0.7)
    return [r, torch.remainder(x, -0.1), torch.floor_divide(x, 0.7), torch.div(x, 0.3, rounding_mode="trunc"),
            torch.fmod(r * 10, 0.3), i % 0.7, i * 0.1, torch.where(r > 0.35, i, 0.1)]


def test_remainders_and_truncation_by_inexact_divisors_in_one_graph():
    """The TPU's exact remainder (a loop) and trunc division, one feeding the next and beside an int tensor with
    Python floats, in one fused or compiled graph: bit for bit as CPU torch (XLA:TPU's own remainder rounds, and
    its division is a reciprocal's product; tests/ops/test_tpu_special_values.py emulates both)."""
    x = torch.linspace(-1e4, 1e4, 1001)
    i = torch.arange(-500, 501, dtype=torch.int32) * 7
    D.check(_inexact_divisor_ops, x, i, modes=ALL, signed_zeros=True, atol=0, rtol=0)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # (a fused graph failing as a whole warns and runs op by op)
@pytest.mark.parametrize("layout", ["heads_major", "sequence_major"])
def test_attention_through_the_pallas_kernels(layout, monkeypatch):
    """bfloat16 attention long enough for the flash-attention kernels: JAX's (heads-major q, k, v) and ours
    (``attention_kernel``: q, k, v permuted views of (batch, length, heads x head_dim)), interpreted here."""
    used = []
    for name in ("_flash", "_flash_sequence_major"):
        original = getattr(attention, name)
        monkeypatch.setattr(attention, name, lambda *a, _o=original, _n=name: (used.append(_n), _o(*a))[1])
    g = torch.Generator().manual_seed(0)
    shape = (1, 1536, 2, 128) if layout == "sequence_major" else (1, 2, 1536, 128)
    q, k, v = (torch.randn(*shape, generator=g).bfloat16() for _ in range(3))

    def fn(q, k, v):
        if layout == "sequence_major":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v)

    D.check(fn, q, k, v, modes=ALL, atol=2e-2, rtol=2e-2)
    assert ("_flash_sequence_major" if layout == "sequence_major" else "_flash") in used, used


@pytest.mark.parametrize("name", ["acts_jacfwd", "acts_dual", "acts_vmap_grad", "acts_backward_broadcast",
                                  "hessian_acts"])
def test_activation_derivatives_and_transforms(name):
    """gelu, silu, softplus, mish, elu, tanh and leaky_relu under jacfwd, dual numbers, vmap(grad), their backward
    ops and a hessian: built for a TPU, softplus and mish take the precise float32 functions, whose derivatives
    JAX computed wrong (their backward is the VJP of the forward: softplus's gradient was 0.5 off)."""
    from tests.ops.test_dtypes_formats import FUNC_CASES

    fn, args = FUNC_CASES[name]
    D.check(fn, *args, modes=["strict", "fused"], atol=1e-5, rtol=1e-4)
