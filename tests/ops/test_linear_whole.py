"""linear is ONE op on tpu tensors when nothing needs its backward and torch's decomposition would round once
(eager.whole_ops): no transpose, flattening or reshaping views dispatched, the values of CPU torch (bitwise for
half inputs, whose bias torch adds to the float32 product before rounding); with autograd, a strided input with
a bias (torch's matmul + add_, two roundings) or bad inputs, torch's own decomposition and errors.
Bitwise on the CPU platform; on a TPU the dtype's tolerance, float16 with the error of XLA:TPU's float16 product
(three bfloat16 passes) scaled by the terms' magnitude."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import torch_tpu
from tests.harness.counting import programs_run


class _Ops(TorchDispatchMode):
    """The aten ops that reach the tpu tensors' dispatch (below autograd)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def _case(dtype, shape, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 2).to(dtype)
    w = torch.randn(6, shape[-1], generator=g).to(dtype)
    b = torch.randn(6, generator=g).to(dtype) if bias else None
    return x, w, b


def _tpu(*ts):
    return [None if t is None else t.to("tpu") for t in ts]


@pytest.mark.parametrize("grad_off", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 8), (2, 3, 5, 8), (0, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_one_op_matching_cpu(eager_mode, dtype, shape, bias, grad_off):
    x, w, b = _case(dtype, shape, bias)
    ref = F.linear(x, w, b)
    xt, wt, bt = _tpu(x, w, b)
    context = torch.no_grad() if grad_off == "no_grad" else torch.inference_mode()
    with context:
        with _Ops() as ops:
            got, programs = programs_run(lambda: F.linear(xt, wt, bt))
    assert ops.seen == ["aten.linear.default"]  # (torch's decomposition: t, view, addmm, view)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.is_contiguous()
    if dtype in (torch.bfloat16, torch.float16) and torch_tpu.platform() == "cpu":
        assert torch.equal(got.cpu(), ref)  # one rounding of the float32 product plus bias, as on CPU
    elif dtype == torch.float16:
        # XLA:TPU runs a float16 product at HIGHEST as three bfloat16 passes (its HIGH: 1e-5 relative error of
        # each product, bench/results/tpu/numerics_exp.json), so a result that cancels is off by that much of
        # its terms' magnitude, besides the float16 rounding of the result
        terms = x.double().abs() @ w.double().abs().T + (0 if b is None else b.double().abs())
        bound = 2.0 ** -10 * ref.double().abs() + 2e-5 * terms  # (a float16 ulp: a near-tie rounds either way)
        assert ((got.cpu().double() - ref.double()).abs() <= bound).all()
    else:
        torch.testing.assert_close(got.cpu(), ref)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER and x.numel():
        assert programs == 1


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["transposed", "patches", "weight_transposed"])
def test_strided_operands_are_torchs_decomposition(eager_mode, layout, bias):
    """A transposed input (with a bias torch's linear takes matmul then add_: the product rounded to bf16 before
    the bias is added), FLUX.2's patchified latents (a permuted view of a 4-d tensor, which XLA:CPU's bf16 dot
    cannot read in place) and a transposed weight: the decomposition, CPU's values to the bit."""
    x, w, b = _case(torch.bfloat16, (2, 16, 16), bias)
    stored_w, weight_view = w, (lambda t: t)
    if layout == "transposed":
        stored = x.transpose(1, 2).contiguous()  # x is its transposed view

        def view(t):
            return t.transpose(1, 2)
    elif layout == "patches":
        stored = x.transpose(1, 2).reshape(2, 16, 4, 4).contiguous()  # (batch, channels, h, w) latents

        def view(t):  # diffusers' _pack_latents: reshape (B, C, h*w), permute (B, h*w, C)
            return t.flatten(2).transpose(1, 2)
    else:
        stored, view = x, (lambda t: t)
        stored_w, weight_view = w.t().contiguous(), (lambda t: t.t())
    ref = F.linear(view(stored), weight_view(stored_w), b)
    st, wt, bt = _tpu(stored, stored_w, b)
    with torch.no_grad(), _Ops() as ops:
        got = F.linear(view(st), weight_view(wt), bt)
    assert "aten.linear.default" not in ops.seen
    assert torch.equal(got.cpu(), ref)


def test_module_output_used_in_place_and_input_mutated_after(eager_mode):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 5).to(torch.bfloat16)
    x = torch.randn(3, 4, 8).to(torch.bfloat16)

    def run(m, t):
        with torch.no_grad():
            y = m(t)
            y.mul_(2).add_(1)
            t.add_(1)
            return y[:, 1], m(t)

    ref = run(lin, x.clone())
    got = run(lin.to("tpu"), x.to("tpu"))
    for g, r in zip(got, ref):
        assert torch.equal(g.cpu(), r)


@pytest.mark.parametrize("needs", ["input", "weight", "bias"])
def test_with_autograd_the_decomposition_and_gradients_match_cpu(eager_mode, needs):
    x, w, b = _case(torch.float32, (2, 3, 8), True)
    leaf = {"input": x, "weight": w, "bias": b}[needs].requires_grad_()
    F.linear(x, w, b).square().sum().backward()
    xt, wt, bt = (t.detach().to("tpu").requires_grad_(t.requires_grad) for t in (x, w, b))
    with _Ops() as ops:
        out = F.linear(xt, wt, bt)
    assert "aten.linear.default" not in ops.seen
    out.square().sum().backward()
    got = {"input": xt, "weight": wt, "bias": bt}[needs].grad
    torch.testing.assert_close(got.cpu(), leaf.grad)


@pytest.mark.parametrize("case", ["dtypes", "inner_size", "bias_size", "weight_3d", "input_1d", "cpu_weight"])
def test_other_inputs_are_torchs_own(case):
    """Mixed dtypes, shapes that do not agree, a 3-d weight, a 1-d input, a CPU weight: the decomposition,
    whose values or errors are CPU torch's."""
    x, w, b = _case(torch.float32, (3, 8), True)
    if case == "dtypes":
        w = w.double()
    elif case == "inner_size":
        w = w[:, :5]
    elif case == "bias_size":
        b = b[:4]
    elif case == "weight_3d":
        w = w[None]
    elif case == "input_1d":
        x = x[0]
    try:
        ref, ref_error = F.linear(x, w, b), None
    except RuntimeError as exc:
        ref, ref_error = None, exc
    xt, wt, bt = _tpu(x, w, b)
    if case == "cpu_weight":
        wt = w
    with torch.no_grad():
        if ref_error is not None or case == "cpu_weight":
            with pytest.raises(RuntimeError):
                F.linear(xt, wt, bt)
            return
        got = F.linear(xt, wt, bt)
    torch.testing.assert_close(got.cpu(), ref)
