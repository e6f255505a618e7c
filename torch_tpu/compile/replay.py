"""Launch blocking in compiled graphs: a device-side check that fails is raised at the op, as eager's.

Under ``DEFER_NEVER_AND_LAUNCH_BLOCKING`` an eager op whose device-side check fails (an index out of
range) raises at the op itself, after the writes of the ops before it, as CPU torch does. A compiled
graph is one program: its runner reads the graph's checks right after the launch and, when one failed,
raises ``CheckFailed`` before writing anything back into the inputs (AOTAutograd's own write-backs are
skipped too, the call having raised). The call is then replayed as dynamo's torch-level graph, eagerly,
still launch blocking, on the untouched inputs: the failing op raises its own error, after the writes
before it landed (``y = x[bad]; x.mul_(3)`` leaves ``x`` as it was; ``x.add_(1); x[bad] = 5`` keeps the
add). No memory is held beyond the call. The other modes report the check at the next wait, as eager's
asynchronous checks (and CUDA's device-side asserts) do.
"""
from __future__ import annotations

from ..engine import deferred_errors, launchers, poisoned
from ..errors import DeviceAssertError, OpError, out_of_memory


class CheckFailed(DeviceAssertError):
    """A compiled graph's device-side check failed under launch blocking (nothing written back)."""


def verify_now() -> None:
    """In launch blocking mode: read the graph's checks now; a failure raises ``CheckFailed``."""
    if not launchers.current.verifies_each_op:
        return
    try:
        deferred_errors.verify()
    except DeviceAssertError as exc:
        raise CheckFailed(str(exc)) from exc


def on_check_failure(compiled, gm):
    """``compiled``, replayed eagerly as ``gm`` when a check fails under launch blocking."""
    def run(*args):
        try:
            return compiled(*args)
        except CheckFailed as exc:
            gm(*args)  # the failing op raises here, after the writes before it
            raise exc  # (the replay passed: the program's own error stands)

    return run


def launch(prog, arrays, what: str, held=()):
    """``prog(*arrays)``: a graph's program that fails to run (out of memory, a runtime error) raises
    naming the graph, as an eager op's launch names its op, before anything is written back. ``held``:
    the input tensors' values as their storages hold them; the outputs take the lineage of the device-side
    checks they were computed from, and an input computed from a failed one raises (``poisoned.py``)."""
    inputs = [*held, *arrays]
    taken = poisoned.lineage(inputs, what) if poisoned.active else None
    try:
        outs = prog(*arrays)
    except Exception as exc:
        raise (out_of_memory(exc, f"running {what}") or OpError(f"tpu: {what} failed to run: {exc}")) from exc
    if taken is not None:
        poisoned.mark(outs, taken, inputs)
    return outs
