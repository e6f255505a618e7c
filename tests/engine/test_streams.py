"""Streams of the tpu device (``engine/streams.py``), as torch defines them for CUDA.

Found here and built: ``torch.tpu.Stream``, ``current_stream``, ``default_stream``, ``stream(s)``,
``set_stream``, ``StreamContext`` raised "does not exist" (so diffusers' group offloading refused
``use_stream=True``); ``torch.Stream("tpu")`` was torch's C++ stream, whose ``synchronize()`` waited for
nothing; ``Tensor.record_stream`` raised "no tpu lowering"; ``x.pin_memory().is_pinned()`` was False, so code
that pins once and checks (group offloading at every onload) copied every weight again; a compiled graph
touching a stream (dynamo's ``torch.ops.streams.*``) ran op by op.
"""

import warnings

import pytest
import torch

import torch_tpu


def test_stream_objects_and_current_stream():
    s = torch.tpu.Stream()
    t = torch.Stream("tpu")
    assert isinstance(s, torch.Stream) and isinstance(s, torch.tpu.Stream) and isinstance(t, torch.Stream)
    assert s.device == torch.device("tpu", 0) and s != t and s.stream_id not in (0, t.stream_id)
    default = torch.tpu.default_stream()
    assert default.stream_id == 0 and torch.tpu.current_stream() == default
    assert torch.accelerator.current_stream() == default
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s and torch.accelerator.current_stream() == s
        with t:  # a stream is its own context, as torch.Stream is
            assert torch.tpu.current_stream() == t
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == default
    with torch.tpu.stream(None):  # None changes nothing, as torch.cuda.stream(None)
        assert torch.tpu.current_stream() == default
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
    finally:
        torch.tpu.set_stream(default)
    assert torch.tpu.current_stream() == default


def test_cpu_streams_keep_torchs_behaviour():
    cpu = torch.Stream("cpu")
    assert cpu.device.type == "cpu" and cpu.query()
    cpu.synchronize()


def test_uploads_on_a_side_stream_are_its_work(eager_mode):
    s = torch.tpu.Stream()
    host = torch.randn(64, 64)
    with torch.tpu.stream(s):
        dev = host.to("tpu", non_blocking=True)
        dev.record_stream(torch.tpu.current_stream())  # nothing to do on the tpu, but accepted
    assert len(s._tpu_pending) == 1  # the upload was noted on s (not on the default stream)
    event = s.record_event()
    s.synchronize()
    assert s.query() and event.query() and not s._tpu_pending
    torch.tpu.default_stream().wait_stream(s)
    torch.tpu.current_stream().wait_event(event)
    out = (dev @ dev).cpu()
    torch.testing.assert_close(out, host @ host, rtol=1e-5, atol=1e-5)


def test_default_stream_waits_for_programs(eager_mode):
    x = torch.randn(256, 256, device="tpu")
    y = x @ x
    done = torch.tpu.current_stream().record_event()
    torch.tpu.current_stream().synchronize()
    assert done.query() and torch.tpu.current_stream().query()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-3)


def test_record_stream_of_another_device_is_refused():
    x = torch.ones(2, device="tpu")
    with pytest.raises(RuntimeError, match="stream of another device"):
        x.record_stream(torch.Stream("cpu"))


def test_a_stream_of_another_device_cannot_be_waited_for():
    s = torch.tpu.Stream()
    with pytest.raises(ValueError, match="another device"):
        s.wait_stream(torch.Stream("cpu"))


def test_pin_memory_for_the_tpu_is_a_copy_is_pinned_knows():
    x = torch.arange(6.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x) and p.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert p.pin_memory() is p  # pinned already: the same tensor, as torch does
    assert p[2:].is_pinned()  # a view of pinned memory is pinned
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=4,
                                         pin_memory=True)
    assert all(b[0].is_pinned() for b in loader)


def test_compiled_code_that_waits_for_a_stream_is_one_program():
    s = torch.tpu.Stream()

    @torch.compile(backend="tpu")
    def f(x):
        s.synchronize()  # dynamo's torch.ops.streams.synchronize_stream: on the host, before the program
        y = x * 2
        event = s.record_event()  # after some work: after the program
        return y + 1, event

    x = torch.arange(4.0, device="tpu")
    with torch.tpu.stream(s):
        w = torch.ones(4).to("tpu", non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "that graph runs op by op"
        out, event = f(x)
    assert torch.equal(out.cpu(), torch.arange(4.0) * 2 + 1) and event.query()
    assert not s._tpu_pending  # synchronized: the upload was waited for
    torch_tpu.reset_stats()
    f(x)
    assert torch_tpu.stats()["executions"] == 1
    del w
