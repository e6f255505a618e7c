"""Out-of-range indices raise, as on CPU torch (at the next wait, like CUDA's device-side assert; at the op
under launch blocking), in every mode; valid and negative indices give CPU's values."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.errors import DeviceAssertError

X = torch.arange(10.0).reshape(2, 5)
I = torch.tensor

CASES = {
    "index": lambda x, k, d: x[:, I([k, 0], device=d)],
    "index_put": lambda x, k, d: x.clone().index_put_((I([0], device=d), I([k], device=d)), I(7.0, device=d)),
    "index_put_acc": lambda x, k, d: x.clone().index_put_((I([0], device=d), I([k], device=d)),
                                                         I(7.0, device=d), accumulate=True),
    "index_select": lambda x, k, d: x.index_select(1, I([k], device=d)),
    "gather": lambda x, k, d: x.gather(1, I([[k], [0]], device=d)),
    "scatter": lambda x, k, d: x.scatter(1, I([[k], [0]], device=d), 1.0),
    "scatter_add": lambda x, k, d: x.scatter_add(1, I([[k], [0]], device=d), torch.ones(2, 1, device=d)),
    "scatter_reduce": lambda x, k, d: x.scatter_reduce(1, I([[k], [0]], device=d), torch.ones(2, 1, device=d),
                                                       "amax"),
    "index_add": lambda x, k, d: x.clone().index_add_(1, I([k], device=d), torch.ones(2, 1, device=d)),
    "index_copy": lambda x, k, d: x.clone().index_copy_(1, I([k], device=d), torch.ones(2, 1, device=d)),
    "index_fill": lambda x, k, d: x.clone().index_fill_(1, I([k], device=d), 7.0),
    "take": lambda x, k, d: x.take(I([k * 2], device=d)),
    "embedding": lambda x, k, d: F.embedding(I([k % 3 if k >= 0 else k, 1], device=d), x.t()),
    "nll_loss": lambda x, k, d: F.nll_loss(x, I([k, 0], device=d)),
    "cross_entropy": lambda x, k, d: F.cross_entropy(x, I([k, 0], device=d)),
}
KS = {"valid": 3, "negative": -1, "too_big": 5, "far": 10**6}


def _on(device, fn, k):
    try:
        out = fn(X.to(device), k, device)
        return out.cpu() if isinstance(out, torch.Tensor) else out
    except Exception as exc:  # noqa: BLE001 - compared: both raise
        return exc


@pytest.mark.parametrize("k", sorted(KS))
@pytest.mark.parametrize("op", sorted(CASES))
def test_like_cpu(op, k, eager_mode):
    cpu, tpu = _on("cpu", CASES[op], KS[k]), _on("tpu", CASES[op], KS[k])
    if isinstance(cpu, Exception):
        assert isinstance(tpu, Exception), f"{op}[{k}]: CPU raised {cpu!r}, tpu returned {tpu}"
        assert isinstance(tpu, type(cpu)), f"{op}[{k}]: CPU raised {cpu!r}, tpu {tpu!r}"  # (DeviceAssertError: both)
        assert op.split("_")[0] in str(tpu) or "index" in str(tpu) or "Target" in str(tpu), tpu
    else:
        assert not isinstance(tpu, Exception), f"{op}[{k}]: tpu raised {tpu!r}"
        torch.testing.assert_close(tpu, cpu)


def test_raised_at_the_next_wait_and_the_device_keeps_working():
    x = X.to("tpu")
    y = x.index_select(1, I([7], device="tpu"))  # no wait: nothing raised yet (as CUDA)
    z = x * 2
    with pytest.raises(DeviceAssertError, match=r"aten.index_select.default \(tpu\[2, 5\]:float32"):
        z.item() if z.numel() == 1 else z.sum().item()
    del y
    torch.testing.assert_close((x * 3).cpu(), X * 3)  # reported once; the device works on
    x.gather(1, I([[9], [0]], device="tpu"))
    with pytest.raises(DeviceAssertError):
        torch.tpu.synchronize()


def test_launch_blocking_raises_at_the_op():
    x = X.to("tpu")
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        with pytest.raises(DeviceAssertError, match="gather"):
            x.gather(1, I([[5], [0]], device="tpu"))


def test_compiled_graph_checks():
    emb = torch.nn.Embedding(5, 3).to("tpu")
    f = torch.compile(emb, backend="tpu", fullgraph=True, dynamic=False)
    assert f(I([1, 2], device="tpu")).cpu().shape == (2, 3)
    with pytest.raises(DeviceAssertError, match="embedding"):
        f(I([1, 7], device="tpu")).cpu()
    torch.testing.assert_close(f(I([4, 0], device="tpu")).cpu(), emb.weight.detach().cpu()[[4, 0]])


def test_many_pending_checks_are_folded_and_still_name_the_op():
    x = X.to("tpu")
    for k in range(300):
        x.index_select(1, I([k % 5], device="tpu"))
    x.gather(1, I([[5], [0]], device="tpu"))
    for k in range(300):
        x.index_select(1, I([k % 5], device="tpu"))
    with pytest.raises(DeviceAssertError, match="gather"):
        torch.tpu.synchronize()


@pytest.mark.parametrize("before,after", [(0, 0), (0, 9), (5, 5), (10, 30), (255, 1), (260, 40)])
def test_the_first_failure_is_named_at_any_pending_count(before, after, eager_mode):
    # a wait folds many pending codes into one (padded to a power of two) before reading them: the op
    # named is still the first that failed, whatever the count, and nothing stale is left afterwards
    x = X.to("tpu")
    for k in range(before):
        x.index_select(1, I([k % 5], device="tpu"))
    x.gather(1, I([[5], [0]], device="tpu"))
    x.index_select(1, I([9], device="tpu"))  # a second failure: not the one reported
    for k in range(after):
        x.index_select(1, I([k % 5], device="tpu"))
    with pytest.raises(DeviceAssertError, match="gather"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # nothing left to report
    torch.testing.assert_close(x.index_select(1, I([4], device="tpu")).cpu(), X.index_select(1, I([4])))


def test_checks_can_be_turned_off(monkeypatch):
    """TORCH_TPU_CHECKS=0: no device-side check, so no error, now or at a later wait; the out-of-range index
    reads what XLA's gather gives it (the index clamped into range), and in-range rows are CPU's."""
    monkeypatch.setenv("TORCH_TPU_CHECKS", "0")
    torch_tpu.reset_caches()  # programs are built with or without their checks
    try:
        x = X.to("tpu")
        out = x.gather(1, I([[5], [0]], device="tpu")).cpu()
        torch.tpu.synchronize()  # nothing pending to report either
        torch.testing.assert_close(out, X.gather(1, I([[4], [0]])))
    finally:
        monkeypatch.delenv("TORCH_TPU_CHECKS")
        torch_tpu.reset_caches()


@pytest.mark.parametrize("mode", [torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE])
def test_programs_built_without_checks_are_never_reused_with_checks(monkeypatch, mode):
    """The disk cache holds programs by key across reset_caches (and processes): one built while checks
    were off must not be found once they are on (it has no check output)."""
    x = X.to("tpu")
    bad = I([[7], [0]], device="tpu")  # a shape of its own in this file
    monkeypatch.setenv("TORCH_TPU_CHECKS", "0")
    torch_tpu.reset_caches()
    try:
        with torch.tpu.set_eager_mode(mode):
            x.gather(1, bad).cpu()
    finally:
        monkeypatch.delenv("TORCH_TPU_CHECKS")
        torch_tpu.reset_caches()
    with torch.tpu.set_eager_mode(mode), pytest.raises(DeviceAssertError, match="gather"):
        x.gather(1, bad).cpu()
    torch_tpu.sync()


def test_boolean_mask_of_the_wrong_shape_raises_at_once():
    x = X.to("tpu")
    with pytest.raises(IndexError, match=r"The shape of the mask \[3\] at index 0 does not match"):
        x[torch.ones(3, dtype=torch.bool, device="tpu")]
