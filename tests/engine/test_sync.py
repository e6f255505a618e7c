"""``torch.tpu.synchronize()`` waits for everything launched so far, also work whose results were
dropped (``model(x); torch.tpu.synchronize()`` is how benchmarks time a call), in every mode."""
import torch

import torch_tpu
from torch_tpu.runtime import program_cache


def _dropped_work(n=3):
    x = torch.randn(512, 512).to("tpu")
    for _ in range(n):
        (x @ x).tanh()  # results dropped at once


def test_synchronize_waits_for_dropped_results(eager_mode):
    _dropped_work()
    torch.tpu.synchronize()
    last = program_cache.last_launched()
    assert last is not None and last.is_ready()


def test_compiled_call_with_dropped_result():
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x @ x).tanh().sum(), backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(256, 256).to("tpu")
    f(x)
    f(x)
    torch.tpu.synchronize()
    assert program_cache.last_launched().is_ready()


def test_the_last_output_does_not_stop_fused_donation():
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        x = torch.ones(64, 64).to("tpu")
        y = x * 2
        torch_tpu.sync()  # y's array is now the last launched output
        torch_tpu.reset_stats()
        y = y + 1  # the old y dies: its buffer may be donated to the new one
        torch_tpu.sync()
        assert torch_tpu.stats()["donated_bytes"] == 64 * 64 * 4
        torch.testing.assert_close(y.cpu(), torch.full((64, 64), 3.0))
