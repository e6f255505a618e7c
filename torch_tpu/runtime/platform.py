"""Chooses the PJRT platform and device, and configures JAX once, on first use.

JAX is imported lazily so that ``import torch`` (which autoloads this backend) stays light.
"""
from __future__ import annotations

import functools
import os
import threading

from .. import config

_LOCK = threading.Lock()


def _configure_environment() -> None:
    # torch CUDA may share the GPU with XLA: never grab 75% of its memory up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


@functools.lru_cache(maxsize=None)
def jax():
    """Import and configure JAX (once)."""
    with _LOCK:
        config.settings()  # a malformed TORCH_TPU_* variable fails here, on first device use, by name
        _configure_environment()
        import jax as _jax

        # torch's int64 indices and float64 need 64-bit types.
        _jax.config.update("jax_enable_x64", True)
        # JAX's own persistent compilation cache stays off: program_cache keeps every program on disk,
        # each entry checked against its key and a checksum when loaded (disk_cache.py).
        if config.compile_cache_dir():
            try:
                _jax.config.update("jax_enable_compilation_cache", False)
            except Exception:  # an old JAX without the option
                pass
        from . import compile_events

        compile_events.install(_jax)
        return _jax


def _try_devices(jax_mod, platform: str):
    try:
        return jax_mod.devices(platform)
    except Exception:
        return []


@functools.lru_cache(maxsize=None)
def platform() -> str:
    """The PJRT platform in use: 'tpu', 'cuda' or 'cpu'."""
    jax_mod = jax()
    name = config.settings().platform
    if name:
        if not _try_devices(jax_mod, name):
            raise RuntimeError(
                f"TORCH_TPU_PLATFORM={name!r} was requested but JAX finds no {name} device "
                f"(installed jax {jax_mod.__version__}; for GPUs install jax[cuda], for TPUs libtpu)")
        return name
    for name in ("tpu", "cuda"):
        if _try_devices(jax_mod, name):
            return name
    return "cpu"


@functools.lru_cache(maxsize=None)
def devices():
    """The local PJRT devices of the chosen platform, in index order."""
    jax_mod = jax()
    plat = platform()
    devs = [d for d in jax_mod.local_devices(backend=plat)]
    if config.settings().device_index is not None and len(devs) > 1:
        # one process per device (torchrun): this process sees only its own device, as tpu:0
        idx = local_device_index()
        if not 0 <= idx < len(devs):
            raise RuntimeError(
                f"TORCH_TPU_DEVICE_INDEX={idx} (the local rank) names no device: this host has "
                f"{len(devs)} {plat} device(s); start at most {len(devs)} processes per host")
        devs = [devs[idx]]
    return devs


def device_count() -> int:
    return len(devices())


def local_device_index() -> int:
    """The device this process binds: 0, or the local rank under a multi-process launcher."""
    index = config.settings().device_index
    return 0 if index is None else index


def jax_device(index: int | None = None):
    devs = devices()
    idx = 0 if index is None else index
    if idx < 0 or idx >= len(devs):
        raise RuntimeError(
            f"tpu:{idx} does not exist: this process sees {len(devs)} {platform()} device(s)")
    return devs[idx]


def device_name(index: int | None = None) -> str:
    dev = jax_device(index)
    plat = platform()
    if plat == "cpu":
        return "cpu (XLA)"
    kind = getattr(dev, "device_kind", "") or plat
    if plat == "tpu" and not kind.upper().startswith("TPU"):
        kind = f"TPU {kind}"
    return kind
