"""``t.data = other`` and ``torch.utils.swap_tensors`` between the CPU and the tpu, as between the CPU and CUDA.

Found here and fixed: ``p.data = p.data.to("tpu")`` (diffusers' group offloading at every onload, accelerate's
hooks, users' own loops) raised torch's "variable and tensor have incompatible tensor type", naming neither
the device nor a fix; ``tpu_param.data = cpu_tensor`` raised too. Each case runs the same code on CPU torch
(where ``.data =`` moves nothing) and compares values, identity and what holders of the tensor see.
"""

import pytest
import torch

import torch_tpu  # noqa: F401


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))


def _move_data(module, device):
    for p in module.parameters():
        p.data = p.data.to(device)
    for b in module.buffers():
        b.data = b.data.to(device)


def test_parameter_data_to_tpu_and_back_keeps_identity_and_attributes(eager_mode):
    p = torch.nn.Parameter(torch.randn(3, 5))
    p.tag = "kept"
    before = p.detach().clone()
    holder = {p: "key"}  # dicts keyed by the parameter (diffusers' cpu_param_dict) stay valid
    p.data = p.data.to("tpu")
    assert p.device.type == "tpu" and isinstance(p, torch.nn.Parameter) and p.requires_grad and p.tag == "kept"
    assert holder[p] == "key"
    assert torch.equal(p.detach().cpu(), before)
    p.data = p.data.to("cpu")
    assert p.device.type == "cpu" and type(p) is torch.nn.Parameter and p.requires_grad and p.tag == "kept"
    assert torch.equal(p.detach(), before) and holder[p] == "key"
    assert not any(k.startswith("_tpu_") for k in p.__dict__)


def test_data_shares_the_assigned_tensor(eager_mode):
    """After ``t.data = other`` the two share memory, both ways, as on CPU."""
    for first, second in (("cpu", "tpu"), ("tpu", "cpu")):
        t = torch.zeros(4, device=first)
        other = torch.arange(4.0, device=second)
        t.data = other
        other.add_(1)
        assert t.device.type == second
        assert torch.equal(t.cpu(), torch.arange(4.0) + 1), (first, second)
        t.mul_(2)
        assert torch.equal(other.cpu(), (torch.arange(4.0) + 1) * 2), (first, second)


def test_buffer_and_plain_tensor_data(eager_mode):
    t = torch.arange(6.0).reshape(2, 3)
    t.data = t.data.to("tpu")
    assert type(t) is not torch.Tensor and t.device.type == "tpu" and not t.requires_grad
    assert torch.equal((t * 2).cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    t.data = torch.ones(5, dtype=torch.float64)  # another shape and dtype, as .data allows on CPU
    assert type(t) is torch.Tensor and t.shape == (5,) and t.dtype == torch.float64


def test_module_data_moves_match_cpu_training(eager_mode):
    """An optimizer built before the parameters' .data moved to the tpu updates them (identity kept), and the
    model trains as on CPU; then the weights move back with .data and keep training there."""
    x, y = torch.randn(6, 4), torch.randn(6, 3)
    ref, dev = _model(), _model()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=1e-2)
    _move_data(dev, "tpu")
    for model, opt, inputs in ((ref, opt_ref, (x, y)), (dev, opt_dev, (x.to("tpu"), y.to("tpu")))):
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(inputs[0]), inputs[1]).backward()
            opt.step()
    for a, b in zip(ref.parameters(), dev.parameters()):
        assert b.device.type == "tpu"
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    # the optimizer state is on the tpu now; back to the CPU, data and gradient both
    _move_data(dev, "cpu")
    for a, b in zip(ref.parameters(), dev.parameters()):
        assert type(b) is torch.nn.Parameter and b.grad.device.type == "cpu"
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6)


def test_gradient_moves_with_the_data(eager_mode):
    p = torch.nn.Parameter(torch.randn(3))
    (p * 2).sum().backward()
    p.data = p.data.to("tpu")
    assert p.grad.device.type == "tpu" and torch.equal(p.grad.cpu(), torch.full((3,), 2.0))
    (p * 3).sum().backward()  # accumulates into the moved gradient
    assert torch.equal(p.grad.cpu(), torch.full((3,), 5.0))


def test_parameter_subclass_comes_back(eager_mode):
    class Tagged(torch.nn.Parameter):
        pass

    p = Tagged(torch.randn(2))
    p.quant_type = 8
    p.data = p.data.to("tpu")
    assert isinstance(p, torch.nn.Parameter) and p.quant_type == 8
    p.data = p.data.to("cpu")
    assert type(p) is Tagged and p.quant_type == 8


def test_swap_tensors_across_devices(eager_mode):
    a = torch.nn.Parameter(torch.randn(3))
    b = torch.nn.Parameter(torch.randn(3, device="tpu"))
    va, vb = a.detach().clone(), b.detach().cpu()
    torch.utils.swap_tensors(a, b)
    assert a.device.type == "tpu" and b.device.type == "cpu"
    assert torch.equal(a.detach().cpu(), vb) and torch.equal(b.detach(), va)
    assert isinstance(a, torch.nn.Parameter) and isinstance(b, torch.nn.Parameter)


def test_refused_clearly_while_a_view_holds_the_tensor():
    t = torch.randn(4)
    view = t[:2]
    with pytest.raises(RuntimeError, match=r"cpu tensor \(\(4,\), torch.float32\) hold the tpu:0 tensor's data.*a "
                                           r"view of it"):
        t.data = t.data.to("tpu")
    assert t.device.type == "cpu" and view.device.type == "cpu"
    del view
    t.data = t.data.to("tpu")  # once the view is gone
    assert t.device.type == "tpu"


def test_refused_clearly_for_a_non_leaf():
    p = torch.nn.Parameter(torch.randn(3))
    y = p * 2
    with pytest.raises(RuntimeError, match="not a leaf"):
        y.data = y.data.to("tpu")


def test_within_one_kind_unchanged(eager_mode):
    """CPU to CPU stays torch's own setter (its errors too), tpu to tpu the payload move."""
    t = torch.zeros(3)
    t.data = torch.ones(3)
    assert torch.equal(t, torch.ones(3))
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        t.data = 5  # torch's own error
    d = torch.zeros(3, device="tpu")
    d.data = torch.ones(2, 2, device="tpu")
    assert d.shape == (2, 2) and torch.equal(d.cpu(), torch.ones(2, 2))
