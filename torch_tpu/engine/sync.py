"""``torch_tpu.sync()`` / ``torch.tpu.synchronize()``: materialise deferred work and wait for the device."""
from __future__ import annotations

import sys

from ..errors import out_of_memory
from ..runtime import dynamo_frames, failed_values, multiprocess, platform, program_cache
from . import deferred_errors, fused


@dynamo_frames.host_only
def sync(skip: frozenset = frozenset()) -> None:
    """Run pending fused work and wait for everything launched so far: live values, and programs
    whose results were dropped (``model(x); torch.tpu.synchronize()`` waits for the model). A failed
    value (a program that ran out of memory) raises once here, not at every later synchronize.
    ``skip``: ids of arrays not to wait for (side streams' uploads, when the default stream is waited for)."""
    if "jax" not in sys.modules:  # nothing ever ran on the device
        return
    with platform.X64():
        fused.finish()
        jax = platform.jax()
        try:
            live = jax.live_arrays()
            jax.block_until_ready([a for a in live if id(a) not in skip] if skip else live)
            program_cache.wait_for_launched()
        except Exception as exc:
            first, seen = _first_unreported_failure(jax)
            if first is not None:
                err = multiprocess.collective_error(first, "a collective synchronize waited for")
                if err is first:
                    err = out_of_memory(first, "in work synchronize waited for")
                    if err is None:
                        raise first from None
                raise err from first
            if not seen:  # not a failed value: some other error
                raise
        deferred_errors.verify()


def _first_unreported_failure(jax):
    """Wait for each live value (and the last launch); the first error of a value not reported before.
    Every failed value is remembered, so the same failure is not raised again by the next call."""
    first, seen = None, False
    arrays = list(jax.live_arrays())
    last = program_cache.last_launched()
    if last is not None and not last.is_deleted():
        arrays.append(last)
    for a in arrays:
        try:
            a.block_until_ready()
        except Exception as exc:  # noqa: BLE001 - reported below, once
            seen = True
            if not failed_values.reported(a):
                failed_values.remember(a)
                first = first or exc
    return first, seen
