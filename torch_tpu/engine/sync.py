"""``torch_tpu.sync()`` / ``torch.tpu.synchronize()``: materialise deferred work and wait for the device."""
from __future__ import annotations

import sys

from ..runtime import platform
from . import deferred_errors, fused


def sync() -> None:
    if "jax" not in sys.modules:  # nothing ever ran on the device
        return
    with platform.X64():
        fused.flush()
        jax = platform.jax()
        jax.block_until_ready(jax.live_arrays())
        deferred_errors.verify()
