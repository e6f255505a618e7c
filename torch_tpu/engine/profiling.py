"""``torch_tpu.profile(logdir)``: device time per op or graph, and the compilations kept apart, for
Perfetto, TensorBoard or a table.

Two recordings. torch_tpu's own (``runtime/device_trace.py``): each program's time on the device queue
and each XLA compilation, written as ``torch_tpu_trace.json.gz`` (Chrome trace format: open it in
ui.perfetto.dev), one track for the device's programs and one per compiling thread, and summed by name
in ``prof.table()`` / ``prof.programs``. And JAX's profiler: the host (dispatch) and the device with the
kernels inside each program, for TensorBoard (and JAX's own Perfetto file, which on the CPU platform is
mostly compiler passes). Programs are named after what they run (``runtime/compile_log.program_name``):
``aten.<op>.<overload>`` in strict eager, ``fused.<Module>`` in fused eager, ``compiled.<function>.<kind>``
under ``torch.compile``, so both read in torch's terms instead of ``jit(fn)``. (``torch.profiler`` sees only
the host: its device activities need C++ hooks a Python backend cannot register.)
"""
from __future__ import annotations

import gzip
import json
import os

from ..runtime import device_trace, platform
from .sync import sync


class profile:
    """Context manager: ``with torch_tpu.profile("logs/run1") as prof: ...``.

    Writes ``<logdir>/torch_tpu_trace.json.gz`` (device time of each program and each compilation, on
    their own tracks: open in ui.perfetto.dev), ``<logdir>/plugins/profile/<timestamp>/*.xplane.pb``
    (TensorBoard: ``tensorboard --logdir <logdir>``, Profile tab) and, with ``perfetto=True`` (default),
    JAX's ``perfetto_trace.json.gz`` beside it. ``python=True`` also records every Python call (large
    traces). Pending device work is finished on entry (so it stays out of the trace) and on exit (so
    asynchronous and deferred work is inside it). After the block, ``prof.files`` lists the files
    written, ``prof.programs`` the device time and compilations by program name, ``prof.table()`` the
    same as text."""

    def __init__(self, logdir: str | os.PathLike, *, perfetto: bool = True, python: bool = False):
        self.logdir = os.fspath(logdir)
        self.perfetto = perfetto
        self.python = python
        self.files: list[str] = []
        self.programs: dict[str, dict] = {}
        self._before: set = set()
        self._recorder = None

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
        self._recorder = device_trace.start()
        return self

    def __exit__(self, *exc):
        jax = platform.jax()
        try:
            sync()
        finally:
            rec = device_trace.stop()
            jax.profiler.stop_trace()
            ours = os.path.join(self.logdir, "torch_tpu_trace.json.gz")
            if rec is not None:
                self.programs = _by_name(rec)
                _write_trace(rec, ours)
            self.files = sorted((self._listing() - self._before) | ({ours} if rec is not None else set()))
        return False

    def table(self, sort_by: str = "device_ms") -> str:
        """The programs by name: launches, device time, compilations (sorted by ``sort_by``)."""
        rows = sorted(self.programs.items(), key=lambda kv: -kv[1][sort_by])
        width = max([len(n) for n, _ in rows] + [len("program")])
        lines = [f"{'program':<{width}}  launches  device ms   mean ms  compiles  compile s"]
        for name, r in rows:
            mean = r["device_ms"] / r["launches"] if r["launches"] else 0.0
            lines.append(f"{name:<{width}}  {r['launches']:8d}  {r['device_ms']:9.3f}  {mean:8.3f}  "
                         f"{r['compiles']:8d}  {r['compile_s']:9.3f}")
        total = sum(r["device_ms"] for r in self.programs.values())
        compile_s = sum(r["compile_s"] for r in self.programs.values())
        lines.append(f"device time {total:.3f} ms in {sum(r['launches'] for r in self.programs.values())} "
                     f"launches; XLA compilation {compile_s:.3f} s")
        return "\n".join(lines)


def _by_name(rec) -> dict:
    out: dict = {}

    def row(name):
        return out.setdefault(name, {"launches": 0, "device_ms": 0.0, "compiles": 0, "compile_s": 0.0})

    for name, begin, end in rec.programs:
        r = row(name)
        r["launches"] += 1
        r["device_ms"] += (end - begin) * 1000.0
    for name, begin, end, _ in rec.compiles:
        r = row(name)
        r["compiles"] += 1
        r["compile_s"] += end - begin
    return out


def _write_trace(rec, path: str) -> None:
    """Chrome trace format (Perfetto reads it): the device's programs on one track, compilations on one
    track per compiling thread."""
    pid = 1
    device = f"tpu:0 ({platform.device_name(0)})"
    events = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"torch_tpu {device}"}},
              {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "device: programs"}},
              {"ph": "M", "pid": pid, "tid": 1, "name": "thread_sort_index", "args": {"sort_index": 0}}]
    for name, begin, end in rec.programs:
        events.append({"ph": "X", "pid": pid, "tid": 1, "cat": "device", "name": name,
                       "ts": begin * 1e6, "dur": max(end - begin, 0.0) * 1e6})
    tids: dict = {}
    for name, begin, end, thread in rec.compiles:
        tid = tids.get(thread)
        if tid is None:
            tid = tids[thread] = 2 + len(tids)
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": f"XLA compile ({thread})"}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": tid}})
        events.append({"ph": "X", "pid": pid, "tid": tid, "cat": "compile", "name": f"compile {name}",
                       "ts": begin * 1e6, "dur": max(end - begin, 0.0) * 1e6})
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
