"""``torch_tpu.sync()`` / ``torch.tpu.synchronize()``: materialise deferred work and wait for the device."""
from __future__ import annotations

import sys

from ..runtime import multiprocess, platform, program_cache
from . import deferred_errors, fused


def sync() -> None:
    """Run pending fused work and wait for everything launched so far: live values, and programs
    whose results were dropped (``model(x); torch.tpu.synchronize()`` waits for the model)."""
    if "jax" not in sys.modules:  # nothing ever ran on the device
        return
    with platform.X64():
        fused.flush()
        jax = platform.jax()
        try:
            jax.block_until_ready(jax.live_arrays())
        except Exception as exc:
            err = multiprocess.collective_error(exc, "a collective synchronize waited for")
            if err is exc:
                raise
            raise err from exc
        program_cache.wait_for_launched()
        deferred_errors.verify()
