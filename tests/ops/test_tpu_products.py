"""Products in programs built for a TPU, checked without a TPU (each lowering traced as for a TPU and run on
this platform, against CPU torch):

- small float32 convolutions are a matmul over the unfolded input (XLA:TPU compiles a float32 convolution at
  HIGHEST precision 5-15x slower than that matmul; ops/spatial.py): values, the calls that keep the
  convolution, the lowering for a TPU, a module on the tpu device with the TPU lowering check on;
- 64-bit integer matmuls, einsums and convolutions are multiplies and sums (XLA:TPU compiles no 64-bit integer
  dot or convolution; ops/_util.py): values, overflow wrapping as on the CPU, and the TPU lowering check
  refusing a 64-bit integer dot, which is how CI finds one without a TPU."""
import jax
import numpy as np
import pytest
import torch

import torch_tpu
from torch_tpu.ops import nn as nn_lowerings
from torch_tpu.ops import spatial
from torch_tpu.runtime import platform, tpu_lowering


def _fresh(stride, padding, dilation, groups, transposed=False, precision=None):
    """A new function each time: JAX serves a trace it made for the same function and arguments, whatever
    platform the lowering was targeting then."""
    return lambda x, w, b: spatial.convolution(x, w, b, stride, padding, dilation, transposed, [0], groups,
                                               precision=precision)


def _as_for(target, fn, *args):
    """(result, jaxpr text) of ``fn`` traced as for ``target``, run here when built for a TPU (on a TPU host the
    platform here is the chip, which cannot run what was built for another platform: the result is then None)."""
    with platform.Targeting(target), platform.X64():
        result = jax.jit(fn)(*args) if target == "tpu" else None
        return result, str(jax.make_jaxpr(fn)(*args))


CASES = {  # x shape, weight shape, stride, padding, dilation, groups, bias
    "vae-3x3": ((1, 16, 64, 64), (16, 16, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    "strided-dilated-grouped": ((2, 6, 17, 13), (4, 3, 3, 2), [2, 1], [1, 0], [1, 2], 2, True),
    "depthwise": ((3, 8, 9, 9), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8, True),
    "1x1": ((2, 5, 7, 7), (3, 5, 1, 1), [1, 1], [0, 0], [1, 1], 1, False),
    "conv1d": ((1, 6, 17), (4, 6, 5), [3], [2], [2], 1, True),
    "conv3d": ((1, 4, 5, 6, 7), (8, 2, 2, 3, 1), [1, 2, 1], [0, 1, 1], [2, 1, 1], 2, False),
    "unbatched": ((4, 9, 9), (2, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    "kernel-as-large-as-input": ((1, 3, 4, 4), (2, 3, 4, 4), [1, 1], [0, 0], [1, 1], 1, True),
    "empty-batch": ((0, 3, 8, 8), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    "stride-past-the-input": ((1, 2, 4, 4), (2, 2, 3, 3), [5, 5], [3, 3], [1, 1], 1, False),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_small_float32_convolutions_are_a_matmul_for_a_tpu_and_match_cpu(case):
    xs, ws, stride, padding, dilation, groups, bias = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g)
    w = torch.randn(ws, generator=g) / np.sqrt(np.prod(ws[1:]))
    b = torch.randn(ws[0], generator=g) if bias else None
    batched = x if x.ndim == w.ndim else x[None]
    want = torch.ops.aten.convolution(batched, w, b, stride, padding, dilation, False, [0], groups)
    want = want if x.ndim == w.ndim else want[0]
    args = (x.numpy(), w.numpy(), None if b is None else b.numpy())
    got, jaxpr = _as_for("tpu", _fresh(stride, padding, dilation, groups), *args)
    assert "dot_general" in jaxpr and "conv_general_dilated" not in jaxpr
    assert "precision=(Precision.HIGHEST, Precision.HIGHEST)" in jaxpr  # torch's float32 default: exact products
    assert got.dtype == np.float32 and tuple(got.shape) == tuple(want.shape)
    torch.testing.assert_close(torch.from_numpy(np.array(got)), want, rtol=1e-5, atol=1e-5)
    # the same program built for this platform keeps the convolution
    _, here = _as_for("cpu", _fresh(stride, padding, dilation, groups), *args)
    assert "conv_general_dilated" in here


def _keeps_convolution(x, w, transposed=False, precision=None):
    _, jaxpr = _as_for("tpu", _fresh([1, 1], [1, 1], [1, 1], 1, transposed, precision), x, w, None)
    return "conv_general_dilated" in jaxpr and "dot_general" not in jaxpr


def test_calls_that_keep_the_convolution():
    small = np.ones((1, 4, 8, 8), np.float32), np.ones((4, 4, 3, 3), np.float32)
    assert not _keeps_convolution(*small)
    # bfloat16 compiles fast as a convolution; float64 is not what the measurement covered
    assert _keeps_convolution(*(a.astype(jax.numpy.bfloat16) for a in small))
    assert _keeps_convolution(*(a.astype(np.float64) for a in small))
    # torch.set_float32_matmul_precision("medium"): DEFAULT precision compiles fast too
    assert _keeps_convolution(*small, precision="medium")
    assert _keeps_convolution(*small, transposed=True)
    # an unfolded input over the bound (9 taps of a 128-channel 128x128 input: 75 MB) keeps the convolution
    big = np.ones((1, 128, 128, 128), np.float32), np.ones((128, 128, 3, 3), np.float32)
    assert _keeps_convolution(*big)


def test_high_precision_setting_reaches_the_matmul():
    x, w = np.ones((1, 4, 8, 8), np.float32), np.ones((4, 4, 3, 3), np.float32)
    _, jaxpr = _as_for("tpu", _fresh([1, 1], [1, 1], [1, 1], 1, precision="high"), x, w, None)
    assert "dot_general" in jaxpr and "precision=(Precision.HIGH, Precision.HIGH)" in jaxpr


def test_matmul_form_lowers_for_a_tpu():
    s = jax.ShapeDtypeStruct
    fn = _fresh([1, 1], [1, 1], [1, 1], 1)
    with platform.Targeting("tpu"), platform.X64():
        text = jax.export.export(jax.jit(fn), platforms=("tpu",))(
            s((1, 16, 64, 64), np.float32), s((16, 16, 3, 3), np.float32), s((16,), np.float32)).mlir_module()
    assert "stablehlo.dot_general" in text and "stablehlo.convolution" not in text


def test_module_on_the_device_with_the_tpu_lowering_check(monkeypatch, fresh_programs):
    """A conv stack on the tpu device in both eager modes, its programs also lowered for a TPU: the values are
    CPU torch's (this platform runs the convolution; the check proves the TPU's form lowers)."""
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.SiLU(),
                              torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2))
    x = torch.randn(2, 3, 16, 16)
    want = net(x)
    dev = net.to("tpu")
    before = torch_tpu.stats()["tpu_lowerings"]
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode), torch.no_grad():
            torch.testing.assert_close(dev(x.to("tpu")).cpu(), want, rtol=1e-5, atol=1e-5)
    assert torch_tpu.stats()["tpu_lowerings"] > before


# --- 64-bit integers -----------------------------------------------------------------------------
def _ints(shape, seed, full_range=False):
    g = torch.Generator().manual_seed(seed)
    if full_range:  # products and sums overflow: both sides wrap
        return torch.randint(-2 ** 62, 2 ** 62, shape, generator=g, dtype=torch.int64)
    return torch.randint(-50, 50, shape, generator=g, dtype=torch.int64)


INT_CASES = {  # name: (torch function, lowering, operand shapes)
    "mm": (torch.mm, nn_lowerings.mm, [(4, 5), (5, 3)]),
    "bmm": (torch.bmm, nn_lowerings.mm, [(2, 4, 5), (2, 5, 3)]),
    "matmul-broadcast": (torch.matmul, nn_lowerings.mm, [(2, 1, 4, 5), (3, 5, 2)]),
    "matmul-vector-left": (torch.matmul, nn_lowerings.mm, [(5,), (2, 5, 3)]),
    "matmul-vector-right": (torch.matmul, nn_lowerings.mm, [(2, 4, 5), (5,)]),
    "dot": (torch.dot, nn_lowerings.mm, [(5,), (5,)]),
    "mv": (torch.mv, nn_lowerings.mm, [(4, 5), (5,)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3),
              lambda c, a, b: nn_lowerings.addmm(c, a, b, beta=2, alpha=3), [(3,), (4, 5), (5, 3)]),
    "baddbmm": (torch.baddbmm, nn_lowerings.addmm, [(2, 4, 3), (2, 4, 5), (2, 5, 3)]),
    "addbmm": (torch.addbmm, nn_lowerings.addbmm, [(4, 3), (2, 4, 5), (2, 5, 3)]),
    "linear": (torch.nn.functional.linear, nn_lowerings.linear, [(2, 4, 5), (3, 5), (3,)]),
    "einsum-batched": (lambda a, b: torch.einsum("bij,bkj->bik", a, b),
                       lambda a, b: nn_lowerings.einsum("bij,bkj->bik", [a, b]), [(2, 4, 5), (2, 3, 5)]),
    "mm-empty-inner": (torch.mm, nn_lowerings.mm, [(3, 0), (0, 2)]),
    "einsum-to-batch": (lambda a, b: torch.einsum("bij,bjk->b", a, b),
                        lambda a, b: nn_lowerings.einsum("bij,bjk->b", [a, b]), [(2, 3, 4), (2, 4, 5)]),
    "einsum-three": (lambda a, b, c: torch.einsum("ij,jk,k->i", a, b, c),
                     lambda a, b, c: nn_lowerings.einsum("ij,jk,k->i", [a, b, c]), [(4, 5), (5, 3), (3,)]),
}


@pytest.mark.parametrize("full_range", [False, True], ids=["small", "overflowing"])
@pytest.mark.parametrize("case", list(INT_CASES), ids=list(INT_CASES))
def test_int64_products_for_a_tpu_are_multiplies_and_sums(case, full_range):
    torch_fn, lowering, shapes = INT_CASES[case]
    operands = [_ints(s, i, full_range) for i, s in enumerate(shapes)]
    want = torch_fn(*operands)
    got, jaxpr = _as_for("tpu", lambda *a: lowering(*a), *[o.numpy() for o in operands])
    assert "dot_general" not in jaxpr
    assert got.dtype == np.int64
    torch.testing.assert_close(torch.from_numpy(np.array(got)), want, rtol=0, atol=0)
    _, here = _as_for("cpu", lambda *a: lowering(*a), *[o.numpy() for o in operands])
    assert "dot_general" in here or case in ("einsum-three", "mm-empty-inner")  # XLA:CPU keeps its integer dot


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("full_range", [False, True], ids=["small", "overflowing"])
def test_int64_convolutions_for_a_tpu_are_multiplies_and_sums(transposed, full_range):
    x = _ints((2, 4, 6, 5), 0, full_range)
    if transposed:  # stride, padding, output padding, dilation and groups all at work
        w = _ints((4, 3, 3, 2), 1, full_range)
        args = ([2, 1], [1, 0], [1, 2], True, [1, 0], 2)
    else:
        w = _ints((6, 2, 3, 2), 1, full_range)
        args = ([2, 1], [1, 1], [1, 2], False, [0], 2)
    b = _ints((w.shape[1] * 2 if transposed else w.shape[0],), 2, full_range)
    want = torch.ops.aten.convolution(x, w, b, *args)
    got, jaxpr = _as_for("tpu", lambda *a: spatial.convolution(*a, *args), x.numpy(), w.numpy(), b.numpy())
    assert "conv_general_dilated" not in jaxpr and "dot_general" not in jaxpr
    torch.testing.assert_close(torch.from_numpy(np.array(got)), want, rtol=0, atol=0)


def test_int32_products_keep_the_dot():
    a = np.ones((4, 5), np.int32)
    _, jaxpr = _as_for("tpu", lambda x, y: nn_lowerings.mm(x, y), a, a.T.copy())
    assert "dot_general" in jaxpr  # XLA:TPU compiles 32-bit integer dots


def test_lowering_check_refuses_a_64_bit_integer_dot():
    platform.jax()
    i64 = jax.ShapeDtypeStruct((4, 4), np.int64)
    with pytest.raises(tpu_lowering.TpuLoweringError, match="64-bit integer product.*dot_general"):
        tpu_lowering.check(lambda a, b: jax.lax.dot(a, b), (i64, i64), "a dot")
    with pytest.raises(tpu_lowering.TpuLoweringError, match="64-bit integer product.*convolution"):
        tpu_lowering.check(lambda a, b: jax.lax.conv(a, b, (1, 1), "SAME"),
                           (jax.ShapeDtypeStruct((1, 2, 5, 5), np.uint64),
                            jax.ShapeDtypeStruct((3, 2, 3, 3), np.uint64)), "a convolution")
    tpu_lowering.check(lambda a, b: jax.lax.dot(a, b), (jax.ShapeDtypeStruct((4, 4), np.int32),) * 2, "int32")


def test_int64_products_on_the_device_pass_the_tpu_lowering_check(monkeypatch, fresh_programs):
    """The ops of a user's integer arithmetic on the tpu device, strict and fused, every program also lowered
    for a TPU and checked for what XLA:TPU cannot compile."""
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    a, b, x, w = _ints((3, 4), 0), _ints((4, 2), 1), _ints((1, 2, 5, 5), 2), _ints((3, 2, 3, 3), 3)
    want = (a @ b, torch.einsum("ij,jk->ik", a, b), torch.nn.functional.conv2d(x, w, padding=1))
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            ad, bd, xd, wd = (t.to("tpu") for t in (a, b, x, w))
            got = (ad @ bd, torch.einsum("ij,jk->ik", ad, bd), torch.nn.functional.conv2d(xd, wd, padding=1))
            for g, e in zip(got, want):
                torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)
