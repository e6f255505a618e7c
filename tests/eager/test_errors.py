"""Errors behave like CUDA's: device mixing, ops without lowering, CPU fallback, launch blocking."""
import warnings

import pytest
import torch

import torch_tpu
from tests.harness.failing_ops import boom_op
from tests.harness import hangs

DEV = "tpu"


def test_mixing_cpu_and_tpu_raises():
    a = torch.ones(3, device=DEV)
    b = torch.ones(3)
    for fn in (lambda: a + b, lambda: b + a, lambda: torch.matmul(a, b), lambda: a.add_(b),
               lambda: torch.cat([a, b])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()
    # 0-dim CPU tensors are allowed, like on CUDA
    s = torch.tensor(2.0)
    ref = torch.ones(3) * s + s
    torch.testing.assert_close((a * s + s).cpu(), ref)
    assert (a * s).device.type == "tpu"


def _fresh_entries():
    torch_tpu.reset_caches()  # the fallback decision is cached per op signature


def test_no_lowering_error_names_op(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK", raising=False)
    _fresh_entries()
    x = torch.rand(7, 3, device=DEV)
    with pytest.raises(NotImplementedError) as info:
        torch.special.airy_ai(x)  # an op the op table does not lower
    msg = str(info.value)
    assert "aten.special_airy_ai.default" in msg and "tpu[7, 3]:float32" in msg
    assert "TORCH_TPU_CPU_FALLBACK" in msg


def test_cpu_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CPU_FALLBACK", "1")
    _fresh_entries()
    xc = torch.rand(7, 3) + 0.5
    x = xc.to(DEV)
    torch_tpu.reset_stats()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a1 = torch.special.airy_ai(x)
        a2 = torch.special.airy_ai(x)
        c = torch.special.modified_bessel_k0(x)
    msgs = [str(m.message) for m in w if "CPU" in str(m.message)]
    assert sum("airy_ai" in m for m in msgs) == 1 and sum("modified_bessel_k0" in m for m in msgs) == 1
    assert torch_tpu.stats()["cpu_fallbacks"] == 3
    assert a1.device.type == "tpu" and c.device.type == "tpu"
    torch.testing.assert_close(a1.cpu(), torch.special.airy_ai(xc))
    torch.testing.assert_close(a2.cpu(), torch.special.airy_ai(xc))
    torch.testing.assert_close(c.cpu(), torch.special.modified_bessel_k0(xc))
    _fresh_entries()


def test_launch_blocking_raises_at_the_op():
    op = boom_op()
    x = torch.ones(3, device=DEV)
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        y = x + 1
        assert y._tpu_storage.array.is_ready()  # waited for
        with pytest.raises(RuntimeError, match=r"tputest\.boom.*failed.*tpu\[3\]:float32"):
            op(x)
    assert torch.tpu.eager_mode == torch_tpu.EagerMode.DEFER_NEVER


def test_launch_blocking_env(monkeypatch):
    from torch_tpu.engine import modes

    monkeypatch.setenv("TORCH_TPU_LAUNCH_BLOCKING", "1")
    try:
        modes.init_from_settings()  # what import does with the variable set
        assert torch.tpu.eager_mode == torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert (torch.ones(2, device=DEV) * 3).cpu().tolist() == [3.0, 3.0]
    finally:
        modes.set_mode(torch_tpu.EagerMode.DEFER_NEVER)


def test_bad_input_error_is_torchs():
    a = torch.ones(2, 3, device=DEV)
    b = torch.ones(4, 5, device=DEV)
    with pytest.raises(RuntimeError) as info:
        torch.matmul(a, b)
    assert "[2, 3]" in str(info.value) and "[4, 5]" in str(info.value)
    with pytest.raises(RuntimeError, match="must match the size|broadcast"):
        a + torch.ones(3, 2, device=DEV)


def test_numpy_and_device_errors():
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        torch.ones(1, device=DEV).numpy()
    with pytest.raises(RuntimeError, match="tpu:1"):
        torch.ones(1, device="tpu:1")


def test_device_in_a_forked_child_raises_instead_of_hanging():
    """Like CUDA: the parent started the XLA runtime, a fork cannot use it; CPU work still runs."""
    import sys

    code = (
        "import multiprocessing as mp, torch\n"
        "x = torch.ones(3, device='tpu') * 2\n"
        "def child(q):\n"
        "    out = []\n"
        "    for name, fn in [('op', lambda: x + 1), ('read', x.cpu), ('new', lambda: torch.zeros(2, device='tpu'))]:\n"
        "        try:\n"
        "            fn(); out.append(name + ' ran')\n"
        "        except Exception as e:\n"
        "            out.append(name + ' ' + type(e).__name__ + ('spawn' in str(e)) * ' names spawn')\n"
        "    out.append(f'bad_fork={torch.tpu._is_in_bad_fork()} cpu={torch.ones(2).sum().item()}')\n"
        "    q.put(out)\n"
        "ctx = mp.get_context('fork'); q = ctx.Queue()\n"
        "p = ctx.Process(target=child, args=(q,)); p.start(); print(q.get(timeout=60)); p.join(30)\n"
        "print('exit', p.exitcode, (x * 3).cpu().tolist())\n")
    out = hangs.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert ("['op ForkedProcessError names spawn', 'read ForkedProcessError names spawn', "
            "'new ForkedProcessError names spawn', 'bad_fork=True cpu=2.0']") in out.stdout, out.stdout
    assert "exit 0 [6.0, 6.0, 6.0]" in out.stdout


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING"])
def test_out_of_memory_is_torchs_error_and_the_device_survives(mode):
    """A program that cannot get its memory (1 PiB: no overcommit setting grants it) raised a raw
    jax JaxRuntimeError at the read; it is torch.OutOfMemoryError (a RuntimeError), as on CUDA, and
    the values that existed before stay readable."""
    x = torch.ones(2 ** 24, device="tpu")
    keep = torch.arange(4., device="tpu") * 2
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode[mode]):
        if mode == "DEFER_NEVER_AND_LAUNCH_BLOCKING":  # raised at the op, as CUDA does
            with pytest.raises(torch.OutOfMemoryError, match="tpu: out of memory running aten.mul"):
                x[:, None] * x[None, :]
            assert keep.cpu().tolist() == [0., 2., 4., 6.]
            return
        y = x[:, None] * x[None, :]
        with pytest.raises(torch.OutOfMemoryError, match="tpu: out of memory"):
            y[0, :4].cpu()
        with pytest.raises(torch.OutOfMemoryError, match="tpu: out of memory"):
            y[1, :4].cpu()  # still failed: every read of it raises
        repr(y)  # no abort (reading a failed value whole crashed in PJRT)
        z = x[:, None] * x[None, :]
        with pytest.raises(torch.OutOfMemoryError, match="tpu: out of memory"):
            torch.tpu.synchronize()
        torch.tpu.synchronize()  # reported once, not at every synchronize
        del y, z
        assert keep.cpu().tolist() == [0., 2., 4., 6.]
        assert (keep + 1).cpu().tolist() == [1., 3., 5., 7.]


def test_copy_from_meta_is_cpus_error():
    for copy in (lambda m: m.to("tpu"), lambda m: torch.zeros(3, device="tpu").copy_(m)):
        with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
            copy(torch.empty(3, device="meta"))


def test_lowering_result_of_another_shape_is_an_error_not_a_broadcast():
    """A functional result whose shape differs from torch's promise raises (it was broadcast: ``any(x,
    dim=())`` reduced every dim and the total filled x's shape); a value written in place still broadcasts."""
    import jax.numpy as jnp

    from torch_tpu.errors import OpError
    from torch_tpu.ops import calling

    meta = torch.empty(3, 4, device="meta")
    with pytest.raises(OpError, match=r"aten.any.dims.*\(\).*\(3, 4\)"):
        calling.conform(torch.ops.aten.any.dims, jnp.asarray(1.0), meta)
    spread = calling.conform(torch.ops.aten.add_.Tensor, jnp.asarray(2.0), meta, broadcast=True)
    assert spread.shape == (3, 4) and bool((spread == 2.0).all())


def test_tensors_alive_until_interpreter_exit_free_quietly():
    """Tensors kept on modules torn down after torch_tpu's (an attribute of ``torch``, a library's cache,
    a reference cycle) are freed at exit: no "Exception ignored in TpuStorage.__del__" on stderr."""
    import sys

    code = (
        "import functools, torch\n"
        "torch._kept_by_a_library = torch.ones(2, device='tpu') + 1\n"
        "functools._cache = [torch.zeros(3, device='tpu')]\n"
        "class Cycle: pass\n"
        "c = Cycle(); c.me = c; c.t = torch.arange(4.0, device='tpu') * 2\n"
        "print((torch._kept_by_a_library * 3).cpu().tolist())\n")
    out = hangs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "[6.0, 6.0]" in out.stdout, out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr, out.stderr
