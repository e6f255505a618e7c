"""Running out of device memory, and the devices a process can use.

Found here and fixed: an allocation larger than the device (a factory, the zeros of an empty tensor's first
read, an upload) raised JAX's raw ``JaxRuntimeError: RESOURCE_EXHAUSTED``; it is ``torch.tpu.OutOfMemoryError``
(a ``torch.OutOfMemoryError``, as ``torch.cuda.OutOfMemoryError``), saying what was asked, what the device holds
and which offload or 8-bit path fits a model larger than the device, and the process goes on. With
``--xla_force_host_platform_device_count=4`` ``torch.tpu.device_count()`` said 4 while ``tpu:1`` was refused: it
counts the devices a process can use, 1 (torch_tpu binds one device per process).
"""
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu

ABSURD = 2 ** 40  # elements: 4 TiB of float32


def _oom(fn):
    with pytest.raises(torch.tpu.OutOfMemoryError) as info:
        fn()
    err = info.value
    assert isinstance(err, torch.OutOfMemoryError) and isinstance(err, RuntimeError)
    text = str(err)
    assert text.startswith("tpu: out of memory") and "Asked for 4096.00 GiB" in text, text
    assert "enable_model_cpu_offload" in text and "enable_group_offload" in text and "8-bit" in text, text
    assert "RESOURCE_EXHAUSTED" not in type(err).__name__
    return text


@pytest.mark.parametrize("case", ["zeros", "first_read_of_empty", "op_output"])
def test_absurd_allocation_is_a_clear_error_and_the_process_goes_on(eager_mode, case):
    kept = torch.arange(6.0, device="tpu")
    fn = {"zeros": lambda: torch.zeros(ABSURD, device="tpu"),
          "first_read_of_empty": lambda: (torch.empty(ABSURD, device="tpu") + 1).cpu(),
          "op_output": lambda: (torch.ones(1, device="tpu").expand(ABSURD) * 2).cpu()}[case]
    text = _oom(fn)
    assert f"[{ABSURD}] float32" in text or "running" in text, text
    # what existed before stays readable, and the device keeps working
    assert torch.equal(kept.cpu(), torch.arange(6.0))
    torch.testing.assert_close((kept * 2).sum().cpu(), torch.tensor(30.0))
    torch.tpu.synchronize()


def test_out_of_memory_error_is_torch_tpu_s():
    assert issubclass(torch.tpu.OutOfMemoryError, torch.OutOfMemoryError)
    assert torch.tpu.OutOfMemoryError is torch_tpu.errors.OutOfMemoryError


def test_message_names_the_device_s_size_when_it_is_known(monkeypatch):
    from torch_tpu import errors

    monkeypatch.setattr(errors, "_memory_report", lambda: (15 * 2**30, 16 * 2**30, False))
    text = errors.out_of_memory_message("uploading a [3072, 12288] bfloat16 tensor to the device",
                                        "RESOURCE_EXHAUSTED: Error allocating device buffer", 72 * 2**20)
    assert "Asked for 72.0 MiB. Tensors on the device hold 15.00 GiB of its 16.00 GiB." in text, text
    text = errors.out_of_memory_message("allocating", "x", 24 * 2**30)
    assert "larger than the whole device" in text


def _count(env_flags: str) -> str:
    code = ("import torch\n"
            "print(torch.tpu.device_count(), torch.accelerator.device_count())\n"
            "for dev in ('tpu:1', 1):\n"
            "    try:\n"
            "        torch.ones(1, device=dev)\n"
            "        print('made')\n"
            "    except RuntimeError as e:\n"
            "        print('refused', 'one device per process' in str(e))\n")
    env = dict(os.environ, XLA_FLAGS=env_flags, TORCH_TPU_PLATFORM="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_device_count_counts_the_devices_a_process_can_use():
    # four XLA CPU devices on the host: the process binds one, tpu:0, and tpu:1 is refused, saying why
    assert _count("--xla_force_host_platform_device_count=4") == ["1", "1", "refused", "True", "refused", "True"]
