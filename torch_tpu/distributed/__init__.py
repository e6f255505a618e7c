"""The "tpu_dist" c10d backend (alias "tpu"): torch.distributed on tpu tensors, one process per device.

Light on purpose: ``register()`` runs at ``import torch`` (through the backend's registration), so this
module imports neither JAX nor the backend implementation; those load when a process group is created
or a functional collective first sees a tpu tensor.

Under torchrun the collectives are XLA programs over the group's devices (``xla_transport.py``, with the
bodies in ``xla_ops.py`` and the ``torch.compile`` lowerings in ``compiled.py``); what XLA cannot do, or
a run without JAX's distributed runtime, is host-staged over gloo (``process_group.HostStaged``).
"""
from __future__ import annotations

from .constants import ALIASES, BACKEND_NAME

_REGISTERED = False


def _create(dist_backend_opts, backend_options):
    from . import process_group

    return process_group.create_process_group(dist_backend_opts, backend_options)


def register() -> None:
    """Register the c10d backend (idempotent)."""
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


def dispatch_handlers() -> dict:
    """aten-level collective ops that reach ``TpuTensor.__torch_dispatch__`` -> handler."""
    from . import collectives

    return collectives.handlers()
