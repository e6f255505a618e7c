"""torch_tpu: a PyTorch device backend giving PyTorch a native "tpu" device on XLA (through JAX/PJRT).

``import torch`` loads it through the ``torch.backends`` entry point; ``import torch_tpu`` is only
needed with TORCH_DEVICE_BACKEND_AUTOLOAD=0. This module holds the public API only.
"""
from __future__ import annotations

__version__ = "0.1.0"


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group (called at the end of ``import torch``).

    Defined before any import: ``import torch_tpu`` first imports torch, whose autoload then looks
    this name up on the partially initialised package."""
    from . import _registration

    _registration.register()


import torch  # noqa: E402,F401  (before _registration, so torch's autoload finds _autoload above)

from . import _registration  # noqa: E402
from .engine.modes import EagerMode  # noqa: E402
from .engine.profiling import profile  # noqa: E402
from .engine.sync import sync  # noqa: E402
from .compile.extract import extract_jax  # noqa: E402
from .eager.jax_calls import call_jax  # noqa: E402
from .runtime import caches as _caches  # noqa: E402
from .runtime import counters as _counters  # noqa: E402
from .runtime import program_cache as _program_cache  # noqa: E402
from .tensor.interop import from_dlpack, from_jax, to_jax  # noqa: E402

_registration.register()


def stats() -> dict:
    """Per-process counters: compiles, compile_seconds, cache_hits, cache_misses, executions,
    flushes, cpu_fallbacks (and cpu_fallback_ops: a dict of them by op name), host/device transfer bytes,
    and tpu_dist's dist_xla_collectives, dist_host_fallbacks, dist_host_bytes."""
    return _counters.snapshot()


def reset_stats() -> None:
    """Zero the counters of ``stats()``; programs still compiling in the background are waited for first,
    so their compiles count before."""
    _program_cache.wait_in_flight()
    _counters.reset()


def reset_caches() -> None:
    """Forget every in-memory cache (programs, op entries, view metadata, output shapes). Safe at any
    time: the next call rebuilds what it needs (the persistent disk cache still answers)."""
    _caches.reset_all()


def platform() -> str:
    """The PJRT platform in use: 'tpu', 'cuda' or 'cpu'."""
    from .runtime import platform as _platform

    return _platform.platform()


__all__ = ["EagerMode", "stats", "reset_stats", "reset_caches", "sync", "platform", "to_jax", "from_jax", "profile",
           "from_dlpack", "call_jax", "extract_jax", "__version__"]
