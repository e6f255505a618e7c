"""Loading a warm process's programs before it asks for them, on a background thread.

Each process notes the structural disk keys of its programs in the order it first needs them, and at exit
stores that sequence twice (verified disk entries): as "the last run's", and under a name made from its
first few keys (a workload that starts the same way, same model and shapes, finds it).

A new process starts loading the last run's sequence on background threads at its first device transfer
(while the model's weights move, before its first op); once it has needed its own first few keys it
checks that guess, and switches to the sequence named by those keys when the last run was another
workload. Deserialising an executable releases the GIL for most of its time, so the main thread goes on
meanwhile (one thread per core and one more, at most 4, share the sequence in order); ``take`` hands a loaded
program over, waiting for it when a thread is loading it right
then (rather than loading it a second time). A program not loaded yet is loaded by the main thread as
before: prefetching never changes which program runs (each is found by its own verified key), only when
it is read from disk.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading

from . import counters, disk_cache, platform, stable_keys

_FIRST = 8            # keys that name a workload
_WAIT_S = 60.0        # longest wait for a program the thread is loading (then the main thread loads it)
_MAX_KEYS = 50_000    # longest sequence kept
_AHEAD = 256          # most programs held loaded and not yet taken: a process that starts like the last
                      # run and then does something else must not load and keep all of that run's programs
                      # (small entries, op descriptions, do not count: 225 of them held up the programs)
_loaders: dict = {}   # a key's kind (its first line) -> loader: key -> what the main thread takes, or None
_small: set = set()   # kinds whose entries are a few bytes (not bounded by _AHEAD)


class _State:
    lock = threading.Lock()
    taken = threading.Condition(lock)  # notified when the main thread takes (or a launch stops)
    started = False
    order: list = []          # this process's keys, first use order
    known: set = set()
    ready: dict = {}          # key -> program loaded ahead
    loading: dict = {}        # key -> threading.Event set when done: the programs being loaded now
    source: list | None = None  # the sequence being prefetched
    guess: list | None = None   # the last run's sequence, read at the first device use
    stop: threading.Event | None = None
    threads: list = []          # loader threads started (joined at exit)


def set_loader(kind: str, fn, small: bool = False) -> None:
    """``fn`` loads the keys whose first line is ``kind`` (program_cache: programs; op_store: op
    descriptions, read ahead as verified bytes, ``small``)."""
    _loaders[kind] = fn
    if small:
        _small.add(kind)


def _programs_held() -> int:
    """Loaded or loading entries not taken yet that count towards _AHEAD (call with the lock held)."""
    return sum(1 for held in (_State.ready, _State.loading) for k in held
               if k.partition("\n")[0] not in _small)


def _load(key: str):
    fn = _loaders.get(key.partition("\n")[0])
    return None if fn is None else fn(key)


def _named_key(first: list) -> str:
    digest = hashlib.sha256("\n".join(first).encode()).hexdigest()
    return "program-sequence\n" + digest + "\n" + stable_keys.environment(True)


def _last_key() -> str:
    return "program-sequence-last\n" + stable_keys.environment(True)


def _read(key: str) -> list | None:
    payload = disk_cache.load(key)
    if payload is None:
        return None
    try:
        keys = json.loads(payload)
    except ValueError:
        return None
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else None


def started() -> bool:
    return _State.started


def start_early() -> None:
    """First device use: start loading what the last run used (a guess, checked after _FIRST keys)."""
    st = _State
    with st.lock:  # (the platform's start thread and the first transfer may both ask)
        if st.started:
            return
        st.started = True
    if not _loaders or not disk_cache.enabled():
        return
    try:
        keys = _read(_last_key())
    except Exception:  # never let a guess fail the transfer that triggered it
        return
    st.guess = keys
    if keys:
        _launch(keys)


def _launch(keys: list) -> None:
    st = _State
    if st.stop is not None:
        st.stop.set()
    with st.lock:  # what the wrong guess loaded makes room for this sequence
        st.ready.clear()
        st.taken.notify_all()
    st.source = keys
    st.stop = stop = threading.Event()
    cursor = [0]  # the next position of ``keys`` to claim, shared by this launch's threads
    threads = [threading.Thread(target=_run, args=(keys, cursor, stop), name=f"torch_tpu-prefetch-{i}",
                                daemon=True) for i in range(_thread_count())]
    st.threads = [t for t in st.threads if t.is_alive()] + threads
    for thread in threads:
        thread.start()


def _thread_count() -> int:
    # deserialising releases the GIL and waits on more than the CPU: on 2 cores, 3 loaders made a warm
    # pipeline's first call 1.5-2x faster than 1 (strict: 239 programs, first/steady 4.0 -> 2.1)
    return max(2, min(4, (os.cpu_count() or 2) + 1))


def seen(key: str) -> None:
    """The main thread needs ``key`` now (found, loaded or compiled)."""
    st = _State
    if key in st.known:
        return
    with st.lock:
        st.known.add(key)
        if len(st.order) < _MAX_KEYS:
            st.order.append(key)
        check = len(st.order) == _FIRST
    if check:
        _check_guess()


def _check_guess() -> None:
    st = _State
    first = st.order[:_FIRST]
    if st.source is not None and st.source[:_FIRST] == first:
        return  # the last run was this workload
    keys = _read(_named_key(first))
    if keys:
        _launch(keys)
    elif st.stop is not None:  # a wrong guess and nothing better: stop loading programs for nothing
        st.stop.set()
        st.source = None


def read(key: str):
    """What the background thread loaded for ``key``, else the verified bytes on disk, or None (for
    kinds whose loader is ``disk_cache.load``: op descriptions, graph sets); ``key`` is noted as needed."""
    seen(key)
    payload = take(key)
    return disk_cache.load(key) if payload is None else payload


def take(key: str):
    """What the background thread loaded for ``key`` (waiting while it loads it now), or None."""
    st = _State
    if not st.ready and not st.loading:
        return None
    with st.lock:
        found = st.ready.pop(key, None)
        loading = st.loading.get(key)
        st.taken.notify_all()
    if found is None and loading is not None:
        loading.wait(_WAIT_S)
        with st.lock:
            found = st.ready.pop(key, None)
            st.taken.notify_all()
    return found


def stop(timeout: float = 30.0) -> None:
    """Stop loading ahead and wait for the threads (each finishes the program it loads)."""
    st = _State
    if st.stop is not None:
        st.stop.set()
    with st.lock:
        st.taken.notify_all()
    for thread in st.threads:
        thread.join(timeout=timeout)


def _run(todo: list, cursor: list, stop: threading.Event) -> None:
    st = _State
    while not stop.is_set():
        with st.lock:  # claim the next key nobody has asked for, loaded or claimed
            while _programs_held() >= _AHEAD and not stop.is_set():
                st.taken.wait(1.0)
            key = None
            while cursor[0] < len(todo):
                k = todo[cursor[0]]
                cursor[0] += 1
                if k not in st.known and k not in st.ready and k not in st.loading:
                    key = k
                    break
            if key is None:
                return
            done = st.loading[key] = threading.Event()
        try:
            prog = _load(key)
        except Exception:
            prog = None
        with st.lock:
            if prog is not None:  # the main thread needs it, or will: it asked (seen) before taking
                st.ready[key] = prog
                counters.add("cache_prefetched", 1)
            del st.loading[key]
        done.set()


def save() -> None:
    """Store this process's sequence (once it names a workload) for the next process."""
    st = _State
    # a loader thread still inside XLA when the interpreter finalizes is unwound from C++ and aborts
    # the process ("terminate called ... exception not rethrown"): let it finish the program it loads
    stop()
    with st.lock:
        order = list(st.order)
    if len(order) < _FIRST or not disk_cache.enabled():
        return
    first = order[:_FIRST]
    old = st.source if st.source is not None and st.source[:_FIRST] == first else []
    merged = order + [k for k in old if k not in st.known]
    payload = json.dumps(merged[:_MAX_KEYS]).encode()
    if merged != old:
        disk_cache.store(_named_key(first), payload)
    if merged != old or st.guess is None or st.guess[:_FIRST] != first:
        disk_cache.store(_last_key(), payload)


atexit.register(save)  # registered after disk_cache's drain, so it runs before it


platform.after_start(start_early)  # from the platform's background start, when that comes first
