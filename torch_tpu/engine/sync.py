"""``torch_tpu.sync()`` / ``torch.tpu.synchronize()``: materialise deferred work and wait for the device."""
from __future__ import annotations

import sys

from ..runtime import platform, program_cache
from . import deferred_errors, fused


def sync() -> None:
    """Run pending fused work and wait for everything launched so far: live values, and programs
    whose results were dropped (``model(x); torch.tpu.synchronize()`` waits for the model)."""
    if "jax" not in sys.modules:  # nothing ever ran on the device
        return
    fused.flush()
    jax = platform.jax()
    jax.block_until_ready(jax.live_arrays())
    program_cache.wait_for_launched()
    deferred_errors.verify()
