"""rms_norm is ONE op on tpu tensors when nothing needs its backward (eager.whole_ops): one program in strict
mode instead of torch's 8-op decomposition, in fused mode one recorded op, the same values and dtype as CPU
torch for every mix of input and weight dtypes; with autograd, transforms or odd inputs, torch's own
decomposition (gradients and errors as on CPU)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from tests.harness.counting import programs_run

TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1.6e-2, torch.float16: 1e-3}
CASES = {  # name: (input dtype, weight dtype or None, normalized_shape, eps)
    "f32": (torch.float32, torch.float32, (16,), None),
    "bf16": (torch.bfloat16, torch.bfloat16, (16,), 1e-6),
    "f16_no_weight": (torch.float16, None, (16,), None),
    "bf16_f32_weight": (torch.bfloat16, torch.float32, (16,), 1e-5),
    "f32_f64_weight": (torch.float32, torch.float64, (16,), None),
    "f64_two_dims": (torch.float64, torch.float64, (3, 16), 0.5),
}


def _inputs(name):
    x_dtype, w_dtype, shape, eps = CASES[name]
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 3, 16, generator=g) * 3).to(x_dtype)
    w = None if w_dtype is None else torch.randn(shape, generator=g).to(w_dtype)
    return x, w, shape, eps


@pytest.mark.parametrize("grad_off", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("name", list(CASES))
def test_one_program_matching_cpu(eager_mode, name, grad_off):
    x, w, shape, eps = _inputs(name)
    ref = F.rms_norm(x, shape, w, eps)
    xt, wt = x.to("tpu"), (None if w is None else w.to("tpu"))
    context = torch.no_grad() if grad_off == "no_grad" else torch.inference_mode()
    with context:
        got, programs = programs_run(lambda: F.rms_norm(xt, shape, wt, eps))
    assert got.dtype == ref.dtype == x.dtype
    torch.testing.assert_close(got.cpu(), ref, atol=TOL[x.dtype], rtol=TOL[x.dtype])
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (torch's decomposition: 8)
    else:
        assert torch_tpu.stats()["flushes"] > 0


def test_module_in_a_sequence_with_in_place_use_of_its_output(eager_mode):
    """nn.RMSNorm's output written in place and viewed afterwards, the norm's input mutated after: values as
    on CPU (the whole op returns a fresh tensor, never a view of its input)."""
    torch.manual_seed(0)
    norm = torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.mul_(torch.linspace(0.5, 1.5, 16))
    x = torch.randn(4, 16)

    def run(m, t):
        with torch.no_grad():
            y = m(t)
            y.mul_(2).add_(1)
            t.zero_()
            return y[:, ::2].sum(0), y

    ref = run(norm, x.clone())
    got = run(norm.to("tpu"), x.clone().to("tpu"))
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.cpu(), r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["f32", "bf16_f32_weight"])
def test_with_autograd_the_gradients_match_cpu(eager_mode, name):
    x, w, shape, eps = _inputs(name)
    x, w = x.float().requires_grad_(), w.requires_grad_()
    ref = F.rms_norm(x, shape, w, eps)
    ref.sum().backward()
    xt = x.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    got = F.rms_norm(xt, shape, wt, eps)
    got.sum().backward()
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, atol=1e-4, rtol=1e-4)


def test_only_the_weight_requires_grad():
    x, w, shape, eps = _inputs("f32")
    w.requires_grad_()
    ref = F.rms_norm(x, shape, w, eps)
    ref.pow(2).sum().backward()
    wt = w.detach().to("tpu").requires_grad_()
    got = F.rms_norm(x.to("tpu"), shape, wt, eps)
    got.pow(2).sum().backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad, atol=1e-4, rtol=1e-4)


def test_torch_func_grad_goes_through_the_decomposition():
    x, w, shape, eps = _inputs("f32")
    ref = torch.func.grad(lambda t: F.rms_norm(t, shape, w, eps).pow(3).sum())(x)
    got = torch.func.grad(lambda t: F.rms_norm(t, shape, w.to("tpu"), eps).pow(3).sum())(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["shape_mismatch", "weight_shape", "integer_input", "weight_on_cpu"])
def test_bad_inputs_raise_as_on_cpu(case):
    x, w, _, _ = _inputs("f32")
    args = {"shape_mismatch": (x, (15,), w[:15]), "weight_shape": (x, (16,), w[:8]),
            "integer_input": (x.long(), (16,), None), "weight_on_cpu": (x, (16,), w)}[case]
    xt = args[0].to("tpu")
    wt = args[2] if case == "weight_on_cpu" or args[2] is None else args[2].to("tpu")
    if case == "weight_on_cpu":
        with torch.no_grad(), pytest.raises(RuntimeError, match="tpu|cpu|device"):
            F.rms_norm(xt, args[1], wt)
        return
    with pytest.raises(RuntimeError) as cpu_error:
        F.rms_norm(*args)
    with torch.no_grad(), pytest.raises(RuntimeError) as tpu_error:
        F.rms_norm(xt, args[1], wt)
    assert str(tpu_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]
