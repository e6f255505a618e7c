"""A live status line while an XLA compilation takes long, so a cold first step that sits still says why.

``with compiling(name):`` wraps every XLA compilation (``program_cache._compile_and_keep``, on the caller's
thread or a compile thread). A ticker thread looks at the compilations running; one still running after
``TORCH_TPU_COMPILE_STATUS_AFTER`` seconds (default 1) is announced on stderr, and its end too:

    torch_tpu: compiling FluxTransformer2DModel (fused graph) with XLA ... (1.0 s so far)
    torch_tpu: compiled FluxTransformer2DModel (fused graph) in 5.3 s

``TORCH_TPU_COMPILE_STATUS``: auto (default: when stderr is a terminal), 1, 0; ``python -m torch_tpu
generate`` turns it on, ``--quiet`` off. Short compilations print nothing.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time

from .. import config
from . import device_trace

__all__ = ["compiling", "enabled"]

_LOCK = threading.Lock()
_RUNNING: dict = {}  # id -> [name, start, announced]
_IDS = itertools.count()
_TICKER = None
_TICK_S = 0.1


def enabled() -> bool:
    mode = config.settings().compile_status
    if mode == "auto":
        try:
            return sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(mode)


def _say(text: str) -> None:
    try:
        print(f"torch_tpu: {text}", file=sys.stderr, flush=True)
    except (ValueError, OSError):  # a closed stderr: nothing to tell
        pass


def _tick() -> None:
    while True:
        time.sleep(_TICK_S)
        after = config.settings().compile_status_after_s
        now = time.perf_counter()
        with _LOCK:
            due = [c for c in _RUNNING.values() if not c[2] and now - c[1] >= after]
            for c in due:
                c[2] = True
        for name, start, _ in due:
            _say(f"compiling {name} with XLA ... ({now - start:.1f} s so far)")


@contextlib.contextmanager
def compiling(name: str):
    """Announce ``name``'s compilation if it runs past the threshold (and then its end); a recording
    ``torch_tpu.profile`` gets its span."""
    global _TICKER
    began = time.perf_counter()
    if not enabled():
        try:
            yield
        finally:
            _record(name, began)
        return
    key = next(_IDS)
    entry = [name, began, False]
    with _LOCK:
        _RUNNING[key] = entry
        if _TICKER is None:
            _TICKER = threading.Thread(target=_tick, name="torch_tpu-compile-status", daemon=True)
            _TICKER.start()
    try:
        yield
    finally:
        with _LOCK:
            del _RUNNING[key]
        took = time.perf_counter() - began
        if entry[2] or took >= config.settings().compile_status_after_s:  # (also when the ticker was late)
            _say(f"compiled {name} in {took:.1f} s")
        _record(name, began)


def _record(name: str, began: float) -> None:
    rec = device_trace.current()
    if rec is not None:
        rec.compiled(name, began, time.perf_counter())
