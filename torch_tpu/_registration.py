"""Registers PrivateUse1 as the "tpu" device: name, device module, guard, hooks, factory kernels.

Light on purpose: runs at ``import torch`` through the ``torch.backends`` entry point, so it must
not import JAX (that happens on first device use).
"""
from __future__ import annotations

import torch

_DONE = False
_LIB = None


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def register() -> None:
    global _DONE
    if _DONE:
        return
    _DONE = True
    if torch._C._get_privateuse1_backend_name() not in ("privateuseone", "tpu"):
        raise RuntimeError(
            f"torch_tpu: PrivateUse1 is already registered as {torch._C._get_privateuse1_backend_name()!r} "
            "(another backend such as torchax was imported first); the two cannot share a process")
    from . import device_module

    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
        torch._register_device_module("tpu", device_module)
        torch._C._acc.register_python_privateuseone_hook(_Hooks())
        torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _register_factories()
    from .executors import dispatch

    dispatch.install()
    _register_autocast()
    _register_dynamo_backend()


def _register_factories() -> None:
    global _LIB
    from . import factories

    _LIB = torch.library.Library("aten", "IMPL")
    for name, fn in factories.KERNELS.items():
        _LIB.impl(name, fn, "PrivateUse1")


def _register_autocast() -> None:
    # torch.autocast("tpu") needs the AutocastPrivateUse1 key to fall through to our dispatch.
    try:
        lib = torch.library.Library("_", "IMPL")
        lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        _register_autocast.lib = lib
    except Exception:
        pass


def _register_dynamo_backend() -> None:
    pass
