"""Moving an unchanged upload back to the host reads nothing from the device (``tensor/host_copies.py``), and
is still CPU torch's result in every case where it cannot (the device copy or the host tensor changed, the
host tensor is shared, a view, another dtype).

Found here and fixed: every ``.to("cpu")`` of a weight read it back from the device though it had not
changed since it was uploaded (model offload read every weight back at every call: 35 MiB of 35 on the tiny
pipeline, ~33 GB for FLUX.1 with T5, over a minute at the chip's read rate); ``.to("meta")`` of a tpu
tensor read it too. ``torch_tpu.stats()`` counts what was read (``device_to_host_bytes``) and what was handed
over instead (``host_copy_bytes_reused``).
"""

import pytest
import torch

import torch_tpu


def _reads(fn):
    torch_tpu.reset_stats()
    out = fn()
    s = torch_tpu.stats()
    return out, s["device_to_host_bytes"], s["host_copy_bytes_reused"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_unchanged_upload_comes_back_without_a_read(eager_mode, dtype):
    x = (torch.arange(24) - 5).reshape(4, 6).to(dtype)
    expected = x.clone()
    y = x.to("tpu")
    del x  # the tensor it came from is nobody else's now (as a module's old CPU parameter after .to("tpu"))
    (y * 2).sum()  # reading it on the device changes nothing
    z, read, reused = _reads(y.cpu)
    assert torch.equal(z, expected) and z.dtype == dtype and z.is_contiguous()
    assert read == 0 and reused == expected.nbytes
    # handed over once: the next read is a real one, and the two results do not share memory
    z2, read, reused = _reads(y.cpu)
    assert torch.equal(z2, expected) and read == expected.nbytes and reused == 0
    z.add_(1)
    assert torch.equal(z2, expected) and torch.equal(y.cpu(), expected)


def test_a_shared_source_is_read_from_the_device(eager_mode):
    """The user still holds the CPU tensor: the result must not alias it (a write through numpy or .data would
    not show in its version), so the device is read."""
    x = torch.randn(5)
    y = x.to("tpu")
    z, read, reused = _reads(y.cpu)
    assert read == x.nbytes and reused == 0 and torch.equal(z, x)
    z.add_(1)
    assert not torch.equal(z, x)


def test_writes_on_either_side_make_it_read(eager_mode):
    x = torch.arange(6.0)
    y = x.to("tpu")
    x.add_(100)  # the source changed after the upload: y did not
    del x
    z, read, _ = _reads(y.cpu)
    assert read == 24 and torch.equal(z, torch.arange(6.0))

    x = torch.arange(6.0)
    y = x.to("tpu")
    del x
    y[2] = -1  # the device copy changed (through a view)
    z, read, reused = _reads(y.cpu)
    expected = torch.arange(6.0)
    expected[2] = -1
    assert read == 24 and reused == 0 and torch.equal(z, expected)


def test_views_dtypes_and_layouts_read_as_before(eager_mode):
    x = torch.randn(4, 3)
    y = x.t().to("tpu")  # a transposed source is copied on the way: not remembered
    expected = x.t().contiguous()
    del x
    z, read, _ = _reads(y.cpu)
    assert read == z.nbytes and torch.equal(z, expected)

    x = torch.randn(4, 3)
    y = x.to("tpu", torch.bfloat16)  # converted on the way
    expected = x.to(torch.bfloat16)
    del x
    z, read, _ = _reads(y.cpu)
    assert read == z.nbytes and torch.equal(z, expected)

    x = torch.randn(4, 3)
    expected = x.clone()
    y = x.to("tpu")
    del x
    row, read, _ = _reads(lambda: y[1].cpu())  # a view of the upload: read (the record stays for y)
    assert torch.equal(row, expected[1]) and read == 12
    half, read, _ = _reads(lambda: y.to("cpu", torch.float16))  # the host copy, converted on the host
    assert torch.equal(half, expected.half()) and read == 0


def test_reads_that_only_look_keep_the_copy(eager_mode):
    x = torch.tensor([3.5])
    y = x.to("tpu")
    del x
    (value, read, reused) = _reads(y.item)
    assert value == 3.5 and read == 0 and reused == 4
    dst = torch.zeros(1)
    _, read, _ = _reads(lambda: dst.copy_(y))
    assert read == 0 and dst.item() == 3.5
    z, read, _ = _reads(y.cpu)  # still there to hand over
    assert read == 0 and z.item() == 3.5


def test_to_meta_reads_nothing(eager_mode):
    y = torch.randn(3, 4, device="tpu")
    m, read, _ = _reads(lambda: y.t().to("meta"))
    assert m.device.type == "meta" and m.shape == (4, 3) and m.stride() == (1, 4) and read == 0
    m, _, _ = _reads(lambda: y.to("meta", torch.float16))
    assert m.dtype == torch.float16 and m.shape == (3, 4)


def test_module_round_trip_reads_no_weight_and_uploads_a_tied_weight_once(eager_mode):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 8)
    head = torch.nn.Linear(8, 10, bias=False)
    head.weight = emb.weight  # tied
    model = torch.nn.Sequential(emb, torch.nn.LayerNorm(8), head)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    size = sum(p.nbytes for p in model.parameters()) + sum(b.nbytes for b in model.buffers())
    _, _, _ = _reads(lambda: model.to("tpu"))
    assert torch_tpu.stats()["host_to_device_bytes"] == size  # the tied weight once
    ids = torch.tensor([[1, 2, 3]])
    out = model(ids.to("tpu")).cpu()
    _, read, reused = _reads(lambda: model.to("cpu"))
    assert read == 0 and reused == size
    assert model[0].weight is model[2].weight and model[0].weight.device.type == "cpu"
    for k, v in model.state_dict().items():
        assert torch.equal(v, expected[k]), k
    torch.testing.assert_close(out, model(ids))


def test_setting_off_reads_back(eager_mode, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_KEEP_HOST_COPIES", "0")
    x = torch.randn(7)
    expected = x.clone()
    y = x.to("tpu")
    del x
    z, read, reused = _reads(y.cpu)
    assert read == 28 and reused == 0 and torch.equal(z, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e5m2, torch.bool])
def test_a_fresh_transfer_becomes_the_tensor_without_another_copy(monkeypatch, dtype):
    """On a TPU or GPU JAX's transfer is a fresh host array nobody else holds (read-only to numpy): it becomes
    the CPU tensor as it is (bfloat16/float8 through their bits as integers), no second copy, no warning. The
    CPU platform's is a view of the device buffer, which is copied (the other tests run that path)."""
    import warnings

    import numpy as np

    from torch_tpu.runtime import dtypes

    made = []

    def fresh(array):
        host = np.array(array)  # a copy, as a TPU's transfer is
        host.flags.writeable = False  # as JAX marks it
        made.append(host)
        return host, True

    monkeypatch.setattr(dtypes, "_host_array", fresh)
    x = (torch.arange(12) - 4).reshape(3, 4).to(dtype)
    y = (x.to("tpu").clone() if dtype != torch.bool else x.to("tpu") & True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = y.cpu()
    assert z.dtype == dtype and torch.equal(z.view(torch.uint8) if dtype.itemsize == 1 and dtype.is_floating_point
                                            else z, x.view(torch.uint8) if dtype.itemsize == 1 and
                                            dtype.is_floating_point else x)
    assert z.untyped_storage().data_ptr() == made[-1].ctypes.data  # the transfer's memory itself


def test_a_written_weight_lets_its_host_tensor_go(eager_mode, monkeypatch):
    """A weight written on the device (a training step after load_state_dict) does not hold its old host tensor
    for its life: the records are purged as uploads go on."""
    import weakref

    from torch_tpu.tensor import host_copies

    monkeypatch.setattr(host_copies, "_PURGE_EVERY", 4)
    src = torch.randn(1000)
    expected = src + 1
    gone = weakref.ref(src.untyped_storage())  # (the host memory, through its storage object)
    w = src.to("tpu")
    del src
    w.add_(1)  # written: the host copy no longer is its value
    for _ in range(8):
        torch.ones(2).to("tpu")  # more uploads
    assert gone() is None
    assert torch.equal(w.cpu(), expected)  # and w reads from the device
