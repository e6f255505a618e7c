"""The "tpu_dist" c10d backend (alias "tpu"): torch.distributed on tpu tensors, one process per device.

Light on purpose: ``register()`` runs at ``import torch`` (through the backend's registration), so this
module imports neither JAX nor the backend implementation; those load when a process group is created
or a functional collective first sees a tpu tensor.

Collectives are host-staged over gloo today (``_backend.HostStaged``); that one class is the seam a
device-native implementation would replace.
"""
from __future__ import annotations

import os

BACKEND_NAME = "tpu_dist"
ALIASES = ("tpu",)
DEFAULT_TIMEOUT_S = 60.0

_REGISTERED = False


def default_timeout_s() -> float:
    """Seconds a collective waits for its peers before failing (env TORCH_TPU_DIST_TIMEOUT, default 60)."""
    value = os.environ.get("TORCH_TPU_DIST_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise RuntimeError(f"TORCH_TPU_DIST_TIMEOUT={value!r} is not a number of seconds") from None
    if seconds <= 0:
        raise RuntimeError(f"TORCH_TPU_DIST_TIMEOUT={value!r} must be positive")
    return seconds


def _create(dist_backend_opts, backend_options):
    from . import _backend

    return _backend.create_process_group(dist_backend_opts, backend_options)


def register() -> None:
    """Register the c10d backend and the dispatch entries of the functional collectives (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    import torch.distributed as dist

    if not dist.is_available():
        return
    for name in (BACKEND_NAME, *ALIASES):
        if name.upper() in dist.Backend._plugins:
            continue
        dist.Backend.register_backend(name, _create, extended_api=True, devices=["tpu", "cpu"])
    # "tpu" tensors default to our backend (e.g. init_process_group(device_id=...) without a backend).
    dist.Backend.default_device_backend_map["tpu"] = BACKEND_NAME
    from ..executors import dispatch

    dispatch.add_special(special_handlers())
    _expose_as_torch_tpu_distributed()


def _expose_as_torch_tpu_distributed() -> None:
    # ``torch.tpu`` is a plain module (no __path__), so ``import torch.tpu.distributed`` / ``python -m
    # torch.tpu.distributed`` only resolve through sys.modules; this package is that module.
    import sys

    from .. import device_module

    this = sys.modules[__name__]
    sys.modules.setdefault("torch.tpu.distributed", this)
    if not hasattr(device_module, "distributed"):
        device_module.distributed = this


def special_handlers() -> dict:
    """aten-level collective ops that reach ``TpuTensor.__torch_dispatch__`` -> handler."""
    from . import _dispatch

    return _dispatch.handlers()


def get_backend_class():
    from . import _backend

    return _backend.TpuProcessGroup
