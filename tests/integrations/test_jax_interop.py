"""JAX interop: to_jax/from_jax (zero copy by buffer identity), DLPack both ways, and JAX's global x64
flag left alone (a fresh process runs int64/float64 tpu work in every mode, then checks user JAX)."""

import sys
import textwrap

import numpy as np
import pytest
import torch

import torch_tpu
from tests.harness import hangs


def _pointer(array) -> int:
    return array.unsafe_buffer_pointer()


def test_to_jax_and_from_jax_share_buffers():
    import jax.numpy as jnp

    cpu = torch.randn(3, 4)
    x = cpu.to("tpu")
    a = torch_tpu.to_jax(x)
    assert a.shape == (3, 4) and a.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(a), cpu.numpy())
    assert _pointer(a) == _pointer(torch_tpu.to_jax(x))  # the storage's own buffer, no copy
    b = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    t = torch_tpu.from_jax(b)
    assert t.device.type == "tpu" and t.dtype == torch.int32 and tuple(t.shape) == (2, 3)
    assert _pointer(torch_tpu.to_jax(t)) == _pointer(b)
    assert torch.equal(t.cpu(), torch.arange(6, dtype=torch.int32).reshape(2, 3))
    assert torch.equal((t * 2).cpu(), torch.arange(6, dtype=torch.int32).reshape(2, 3) * 2)
    # snapshots: an in-place op on the tensor leaves the JAX array alone (arrays are immutable)
    t.add_(1)
    np.testing.assert_array_equal(np.asarray(b), np.arange(6).reshape(2, 3))
    # a view is read into a new array; dtypes that numpy lacks keep theirs
    np.testing.assert_array_equal(np.asarray(torch_tpu.to_jax(x[:, 1:3].t())), cpu[:, 1:3].t().numpy())
    h = torch_tpu.to_jax(cpu.to(torch.bfloat16).to("tpu"))
    assert str(h.dtype) == "bfloat16"
    assert torch.equal(torch_tpu.from_jax(h).cpu(), cpu.to(torch.bfloat16))
    assert torch_tpu.from_jax(jnp.ones(2), requires_grad=True).requires_grad


def test_interop_errors():
    with pytest.raises(TypeError, match="tpu tensor"):
        torch_tpu.to_jax(torch.ones(2))
    with pytest.raises(TypeError, match="jax.Array"):
        torch_tpu.from_jax(np.ones(2))


def test_dlpack_both_ways():
    import jax

    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = cpu.to("tpu")
    j = jax.dlpack.from_dlpack(x)  # a tpu tensor as a DLPack producer: a snapshot
    assert _pointer(j) != _pointer(torch_tpu.to_jax(x))
    np.testing.assert_array_equal(np.asarray(j), cpu.numpy())

    class Sharing:  # a producer that asks the tensor for its own buffer
        def __dlpack__(self, **kw):
            return x.__dlpack__(**{**kw, "copy": False})

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    shared = jax.dlpack.from_dlpack(Sharing())
    assert _pointer(shared) == _pointer(torch_tpu.to_jax(x))
    assert torch.equal(torch.from_dlpack(x).cpu(), cpu)
    assert x.__dlpack_device__() == torch_tpu.to_jax(x).__dlpack_device__()
    for src in (torch.arange(5, dtype=torch.int64), np.arange(4.0)):
        t = torch_tpu.from_dlpack(src)
        assert t.device.type == "tpu"
        np.testing.assert_array_equal(t.cpu().numpy(), np.asarray(src))
    owned = torch.arange(3.0)
    t = torch_tpu.from_dlpack(owned, copy=True)
    owned.add_(10)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0]



def test_a_dlpack_consumer_writing_what_it_imported_changes_no_tpu_tensor():
    """Another library's import of a tpu tensor (NumPy here) is a snapshot: the tensor's buffer is
    immutable and may be shared (``to(copy=True)``) or donated, so the consumer never writes it."""
    x = torch.arange(4.0).to("tpu")
    copied = x.to(torch.float32, copy=True)
    imported = np.from_dlpack(x)
    if imported.flags.writeable:
        imported[0] = 100.0
    assert x.cpu().tolist() == copied.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    x.add_(1)
    assert imported.tolist()[1:] == [1.0, 2.0, 3.0] and copied.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_torch_dlpack_round_trips_stay_on_the_tpu_and_share_memory(mode):
    """As for a CUDA tensor: torch.from_dlpack(t) and torch.from_dlpack(to_dlpack(t)) are tensors of t's
    device sharing its memory (raised NotImplementedError / AttributeError '_tpu_storage', or returned
    a CPU tensor); copy=True copies; device="cpu" copies to the CPU, copy=False refuses to."""
    import torch.utils.dlpack as dlpack

    with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, mode)):
        cpu = torch.arange(6.0).reshape(2, 3)
        t = cpu.to("tpu")
        for imported in (torch.from_dlpack(t), torch.from_dlpack(dlpack.to_dlpack(t)),
                         dlpack.from_dlpack(dlpack.to_dlpack(t)), torch.from_dlpack(torch.to_dlpack(t))):
            assert imported.device == t.device and imported.shape == t.shape and imported.dtype == t.dtype
            assert torch.equal(imported.cpu(), cpu)
        shared = torch.from_dlpack(dlpack.to_dlpack(t))
        shared[0, 0] = 50.0  # written through the import: t sees it, as on CUDA
        t.mul_(2)  # and the import sees t's in-place op
        cpu[0, 0] = 50.0
        assert torch.equal(t.cpu(), cpu * 2) and torch.equal(shared.cpu(), cpu * 2)
        owned = torch.from_dlpack(t, copy=True)
        owned.add_(1)
        assert torch.equal(t.cpu(), cpu * 2) and owned.device == t.device
        on_cpu = torch.from_dlpack(t, device="cpu")
        assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, cpu * 2)
        with pytest.raises(ValueError, match="without copying"):
            torch.from_dlpack(t, device="cpu", copy=False)
        from_numpy = torch.from_dlpack(np.arange(3.0), device="tpu")
        assert from_numpy.device == t.device and from_numpy.cpu().tolist() == [0.0, 1.0, 2.0]
        view = t[:, 1:]  # a view exports its own elements
        assert torch.equal(torch.from_dlpack(dlpack.to_dlpack(view)).cpu(), (cpu * 2)[:, 1:])
        with pytest.raises(BufferError, match="require gradient"):
            torch.from_dlpack(t.clone().requires_grad_())
        # CPU tensors keep torch's own behaviour
        c = torch.arange(3)
        assert torch.from_dlpack(dlpack.to_dlpack(c)).data_ptr() == c.data_ptr()


_FRESH = textwrap.dedent("""
    import threading, torch, torch_tpu, jax, jax.numpy as jnp, numpy as np
    big = 2**40 + 3
    a = torch.arange(5, dtype=torch.int64) + big
    t = a.to("tpu")
    assert torch.equal(((t + big) * 2 - 1).cpu(), (a + big) * 2 - 1)  # Python ints: dynamic inputs
    assert t.sum().item() == int(a.sum())
    f = torch.tensor([1e300, 2.5], dtype=torch.float64)
    assert torch.equal((f.to("tpu") * 2).cpu(), f * 2)
    assert torch.equal(torch.arange(10, device="tpu").cpu(), torch.arange(10))
    x = torch.randn(4, 4).to("tpu").requires_grad_()
    (x[torch.tensor([0, 2], device="tpu")] * big).sum().backward()  # backward: autograd's own thread
    xc = x.detach().cpu().requires_grad_()
    (xc[torch.tensor([0, 2])] * big).sum().backward()
    assert torch.equal(x.grad.cpu(), xc.grad)
    assert torch_tpu.to_jax(torch.arange(6, device="tpu").view(2, 3)[:, 1]).dtype == np.int64
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        y = t * 3 + big
        torch_tpu.sync()
    assert torch.equal(y.cpu(), a * 3 + big)
    m = torch.compile(lambda v: v * 2 + big, backend="tpu", fullgraph=True, dynamic=False)
    assert torch.equal(m(t).cpu(), a * 2 + big)
    loaded = torch_tpu.from_jax(jnp.asarray(np.arange(3)))  # the user's (32-bit) JAX array
    assert loaded.dtype == torch.int32
    def other_thread():
        assert (torch.ones(2, dtype=torch.int64, device="tpu") + big).cpu().tolist() == [big + 1] * 2
        assert jnp.arange(3).dtype == jnp.int32
    th = threading.Thread(target=other_thread)
    th.start(); th.join()
    assert jax.config.jax_enable_x64 is False, "torch_tpu changed JAX's global x64 flag"
    assert jnp.arange(3).dtype == jnp.int32 and jnp.ones(2).dtype == jnp.float32
    print("OK")
""")


def test_jax_x64_flag_untouched_in_a_fresh_process():
    r = hangs.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-3000:]
