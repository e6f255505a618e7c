"""torch_tpu: a PyTorch device backend giving PyTorch a native "tpu" device on XLA (through JAX/PJRT).

``import torch`` loads it through the ``torch.backends`` entry point; ``import torch_tpu`` is only
needed with TORCH_DEVICE_BACKEND_AUTOLOAD=0.
"""
from __future__ import annotations

__version__ = "0.1.0"


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group (called at the end of ``import torch``).

    Defined before any import: ``import torch_tpu`` first imports torch, whose autoload then looks
    this name up on the partially initialised package."""
    from . import _registration

    _registration.register()


import torch  # noqa: E402  (before _registration, so torch's autoload finds _autoload above)

from . import _registration
from .executors.modes import EagerMode

_registration.register()


def stats() -> dict:
    """Per-process counters: compiles, compile_seconds, cache_hits, cache_misses, executions,
    flushes, cpu_fallbacks, and host/device transfer bytes."""
    from . import counters as _stats

    return _stats.snapshot()


def reset_stats() -> None:
    from . import counters as _stats

    _stats.reset()


def sync() -> None:
    """Wait for all pending device work (materialises deferred work in fused mode)."""
    import sys

    if "jax" not in sys.modules:  # nothing ever ran on the device
        return
    from .executors import fused
    from .runtime import platform

    fused.flush()
    jax = platform.jax()
    jax.block_until_ready(jax.live_arrays())


def platform() -> str:
    """The PJRT platform in use: 'tpu', 'cuda' or 'cpu'."""
    from .runtime import platform as _p

    return _p.platform()


__all__ = ["EagerMode", "stats", "reset_stats", "sync", "platform", "__version__"]
