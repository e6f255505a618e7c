"""Device events as torch.cuda users write them: ``torch.Event("tpu")`` / ``torch.tpu.Event`` record,
query, wait, synchronize and time (``.synchronize()`` raised "Backend doesn't support synchronizing
events"; ``torch.tpu.Event`` did not exist). No wall-clock thresholds: the checks are what events promise
(a synchronized event's work is done, times add up, the device time fits in the host's)."""

import pytest
import torch

import torch_tpu


def _work(x, n=6):
    y = x
    for _ in range(n):
        y = torch.tanh(y @ x) * 0.5
    return y


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_events_record_synchronize_and_time_the_work_between_them(mode):
    with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, mode)):
        x = torch.randn(256, 256).to("tpu") / 16
        _work(x)  # compiled before the timed part
        torch.tpu.synchronize()
        start, middle = torch.Event("tpu", enable_timing=True), torch.tpu.Event(enable_timing=True)
        end = torch.Event(device="tpu", enable_timing=True)
        start.record()
        y = _work(x)
        middle.record()
        z = _work(y)
        end.record()
        end.synchronize()
        assert end.query() and middle.query() and start.query()
        # the work recorded before the event is done (in fused mode it was pending until record())
        assert torch_tpu.to_jax(z).is_ready() and torch_tpu.to_jax(y).is_ready()
        first, second, whole = start.elapsed_time(middle), middle.elapsed_time(end), start.elapsed_time(end)
        # completions in record order, on one clock: the whole is the sum of its parts
        assert 0 <= first and 0 <= second and whole == pytest.approx(first + second, abs=1e-6)
        ref = _work(_work(x.cpu()))
        torch.testing.assert_close(z.cpu(), ref, atol=1e-4, rtol=1e-4)
        end.wait()  # one queue: nothing to order, and it does not raise
        end.wait(torch.Stream("tpu"))


def test_event_errors_and_other_devices_follow_torch():
    a, b = torch.Event("tpu"), torch.Event("tpu")
    assert a.query()  # not recorded: nothing to wait for, as on CUDA
    a.synchronize()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    timed, unrecorded = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    timed.record()
    with pytest.raises(ValueError, match="must be recorded"):
        timed.elapsed_time(unrecorded)
    cpu = torch.Event("cpu")  # other devices keep torch's own events
    assert isinstance(cpu, torch.Event) and cpu.device.type == "cpu"
    assert isinstance(torch.Stream("tpu").record_event(), torch.Event)  # torch's own objects still are
    with pytest.raises(AttributeError, match="no captured graphs"):  # (streams: test_streams.py)
        torch.tpu.CUDAGraph()
