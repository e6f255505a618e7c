"""Threads that compile XLA programs in the background (fused eager's graphs, ``fused.py``; strict eager's
new op programs, ``strict_line.py``).

Tracing and lowering stay on the caller's thread (they run torch meta kernels and Python lowerings);
only XLA's own compilation, which releases the GIL and is what costs minutes for a model-sized graph on
TPU or GPU (and ~0.3 s for one small op's program on a TPU), runs here. Several programs then compile at
once (the text encoders and the transformer of a pipeline; a model's first call's ops) while the program
goes on recording or lowering the next ones.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

from .. import config

_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_threads = 0


def threads() -> int:
    """How many compile threads the settings ask for (0: compile on the calling thread)."""
    n = config.settings().compile_threads
    if n is None:  # the caller's thread keeps one core busy tracing and recording
        n = max(1, min(_MOST, (os.cpu_count() or 1) - 1))
    return n


# a TPU host's 13 cores: a cold strict process compiles ~230 small programs (~0.3 s each there), which 8
# threads keep up with while the caller lowers the next ones; more would mostly hold memory (fused graphs)
_MOST = 8


def submit(fn, *args) -> concurrent.futures.Future | None:
    """Run ``fn(*args)`` on a compile thread; None when background compiles are off."""
    global _pool, _pool_threads
    n = threads()
    if n <= 0:
        return None
    with _lock:
        if _pool is None or _pool_threads != n:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="torch_tpu-compile")
            _pool_threads = n
        return _pool.submit(fn, *args)


def _after_fork_in_child() -> None:
    global _pool
    _pool = None  # its threads did not survive the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
