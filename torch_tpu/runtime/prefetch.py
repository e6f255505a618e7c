"""Loading a warm process's programs before it asks for them, on a background thread.

Each process notes the structural disk keys of its programs in the order it first needs them. At exit it
stores that sequence (a verified disk entry) under a name made from its first few keys: a workload that
starts the same way (the same model, the same shapes) finds it. Once a new process has needed those
first keys, a background thread loads the rest of the sequence from disk (deserialising an executable
releases the GIL for most of its time) while the main thread goes on; ``take`` hands a loaded program
over. A program not loaded yet is loaded by the main thread as before: prefetching never changes which
program runs, only when it is read from disk.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import threading

from . import counters, disk_cache, stable_keys

_FIRST = 8            # keys that name a workload
_MAX_KEYS = 50_000    # longest sequence kept
_loader = None        # program_cache's loader: alias key -> program or None


class _State:
    lock = threading.Lock()
    order: list = []          # this process's keys, first use order
    known: set = set()
    ready: dict = {}          # key -> program loaded ahead
    stored: list | None = None  # the sequence found on disk (None: none found, or not looked up yet)
    thread: threading.Thread | None = None
    stop = False


def set_loader(fn) -> None:
    global _loader
    _loader = fn


def _manifest_key(first: list) -> str:
    digest = hashlib.sha256("\n".join(first).encode()).hexdigest()
    return "program-sequence\n" + digest + "\n" + stable_keys.environment(True)


def seen(key: str) -> None:
    """The main thread needs ``key`` now (found, loaded or compiled)."""
    st = _State
    if key in st.known:
        return
    with st.lock:
        st.known.add(key)
        if len(st.order) < _MAX_KEYS:
            st.order.append(key)
        start = len(st.order) == _FIRST
    if start:
        _start()


def take(key: str):
    """The program of ``key`` if the background thread has loaded it."""
    if not _State.ready:
        return None
    with _State.lock:
        return _State.ready.pop(key, None)


def _start() -> None:
    payload = disk_cache.load(_manifest_key(_State.order[:_FIRST]))
    if payload is None:
        return
    try:
        keys = json.loads(payload)
    except ValueError:
        return
    _State.stored = keys
    todo = [k for k in keys[_FIRST:] if isinstance(k, str)]
    if todo and _loader is not None:
        _State.thread = threading.Thread(target=_run, args=(todo,), name="torch_tpu-prefetch", daemon=True)
        _State.thread.start()


def _run(todo: list) -> None:
    st = _State
    for key in todo:
        if st.stop:
            return
        if key in st.known:
            continue
        try:
            prog = _loader(key)
        except Exception:
            prog = None
        if prog is not None:
            with st.lock:
                if key not in st.known:
                    st.ready[key] = prog
                    counters.add("cache_prefetched", 1)


def save() -> None:
    """Store this process's sequence (once it named a workload) for the next process."""
    st = _State
    st.stop = True
    with st.lock:
        order = list(st.order)
    if len(order) < _FIRST or not disk_cache.enabled():
        return
    old = st.stored or []
    if old[: len(order)] == order:
        return  # nothing new
    merged = order + [k for k in old if k not in st.known]
    disk_cache.store(_manifest_key(order[:_FIRST]), json.dumps(merged[:_MAX_KEYS]).encode())


atexit.register(save)  # registered after disk_cache's drain, so it runs before it
