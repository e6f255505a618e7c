"""Autocast and AMP as on CUDA: torch.autocast("tpu") defaults to bfloat16 (the TPU convention) and
torch.amp.GradScaler("tpu") trains exactly like GradScaler("cpu"), inf/NaN steps included."""

import torch


def test_autocast_defaults_to_bfloat16():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with torch.autocast("tpu"):
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        out = a.to("tpu") @ b.to("tpu")
    with torch.autocast("cpu"):  # CPU autocast's default is bfloat16 too
        ref = a @ b
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), ref, atol=2e-2, rtol=2e-2)


def _train(device, bad_steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    x = torch.randn(5, 4).to(device)
    scales = []
    for step in range(6):
        opt.zero_grad()
        scaler.scale(model(x).square().mean()).backward()
        if step in bad_steps:  # an overflowing step: skipped, and the scale backs off
            model[0].weight.grad[1, 2] = float("inf") if step % 2 else float("nan")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, [p.detach().cpu() for p in model.parameters()], scaler.state_dict()["_growth_tracker"]


def test_grad_scaler_matches_cpu():
    cpu_scales, cpu_params, cpu_tracker = _train("cpu", {1, 4})
    tpu_scales, tpu_params, tpu_tracker = _train("tpu", {1, 4})
    assert tpu_scales == cpu_scales and tpu_tracker == cpu_tracker
    for got, want in zip(tpu_params, cpu_params):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
