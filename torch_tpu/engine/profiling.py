"""``torch_tpu.profile(logdir)``: a device trace of what runs, for TensorBoard or Perfetto.

JAX's profiler records the host (dispatch) and the device (each XLA program's execution and the
kernels inside it). Programs are named after what they run (see ``runtime/compile_log.program_name``):
``aten.<op>.<overload>`` in strict eager, ``fused.<Module>`` in fused eager, ``compiled.<function>.<kind>``
under ``torch.compile``, so the trace reads in torch's terms instead of ``jit(fn)``.
"""
from __future__ import annotations

import os

from ..runtime import platform
from .sync import sync


class profile:
    """Context manager: ``with torch_tpu.profile("logs/run1") as prof: ...``.

    Writes ``<logdir>/plugins/profile/<timestamp>/*.xplane.pb`` (TensorBoard: ``tensorboard --logdir
    <logdir>``, Profile tab) and, with ``perfetto=True`` (default), ``perfetto_trace.json.gz`` beside it
    (open in ui.perfetto.dev). ``python=True`` also records every Python call (large traces).
    Pending device work is finished on entry (so it stays out of the trace)
    and on exit (so asynchronous and deferred work is inside it). After the block, ``prof.files``
    lists the files written."""

    def __init__(self, logdir: str | os.PathLike, *, perfetto: bool = True, python: bool = False):
        self.logdir = os.fspath(logdir)
        self.perfetto = perfetto
        self.python = python
        self.files: list[str] = []
        self._before: set = set()

    def _listing(self) -> set:
        found = set()
        for root, _, names in os.walk(self.logdir):
            found.update(os.path.join(root, n) for n in names)
        return found

    def __enter__(self):
        jax = platform.jax()
        os.makedirs(self.logdir, exist_ok=True)
        self._before = self._listing()
        sync()
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 1 if self.python else 0
        jax.profiler.start_trace(self.logdir, create_perfetto_trace=self.perfetto, profiler_options=options)
        return self

    def __exit__(self, *exc):
        jax = platform.jax()
        try:
            sync()
        finally:
            jax.profiler.stop_trace()
            self.files = sorted(self._listing() - self._before)
        return False
