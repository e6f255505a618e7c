"""``safetensors.torch.load_file(path, device="tpu")`` (and ``load_model(..., device="tpu")``, which calls it).

safetensors checks the device against a list compiled into its Rust core (cpu, cuda, mps, npu, xpu, xla,
hpu, mlu, musa) and raised "device tpu is invalid": diffusers' group offloading to disk
(``offload_to_disk_path``) loads each group so at every onload. For a tpu device the file is read on the
host (memory-mapped, as safetensors reads it for the CPU) and each tensor moved to the device, whose storage
then keeps the host tensor (``tensor/host_copies.py``): an unchanged weight offloaded again reads nothing back.
Other devices keep safetensors' own function. Patched when safetensors.torch is first imported (never imported
here), through the same import hook that patches diffusers' modules.
"""
from __future__ import annotations

from . import diffusers_hook

_MODULE = "safetensors.torch"


def _is_tpu(device) -> bool:
    try:
        import torch

        if isinstance(device, int):
            return False
        return torch.device(device).type == "tpu"
    except (RuntimeError, TypeError):
        return False


def _patch(module) -> None:
    original = module.load_file
    if hasattr(original, "__torch_tpu_original__"):
        return

    def load_file(filename, device="cpu", **kwargs):
        if not _is_tpu(device):
            return original(filename, device, **kwargs)
        return {name: t.to(device) for name, t in original(filename, "cpu", **kwargs).items()}

    load_file.__doc__ = original.__doc__
    load_file.__torch_tpu_original__ = original
    module.load_file = load_file


def install() -> None:
    diffusers_hook.when_executed(_MODULE, _patch)
