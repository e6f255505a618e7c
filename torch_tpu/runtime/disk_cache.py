"""The persistent cache on disk: entries that carry their full key and a checksum, bounded in size.

One file per entry, named by a digest of its key. Each file holds the key itself and a SHA-256 of its
payload; ``load`` returns the payload only when both match, so a file copied, swapped or corrupted on disk
is ignored (counted in ``cache_rejects``, logged, deleted) and the program is built again: a program never
runs under another program's key. Writes go through a background thread (serialising an executable and
writing it is off the critical path) and land atomically (a temporary file, then ``os.replace``), so a
reader never sees half an entry. When the folder grows past TORCH_TPU_CACHE_MAX_MB the least recently used
entries are deleted (loads refresh an entry's time). The folder's bytes are counted in a small file beside
the entries (``.bytes``, updated by every write): a process's first write reads it instead of stat-ing every
entry (a full folder holds ~10^5 of them: 431k took a background thread 2.5 s on a 2-core VM, competing
with the program for the GIL, and longer where a system call costs more); only an eviction, or a folder
without the count, scans.

TORCH_TPU_CACHE_DIR chooses the folder ('' turns the disk cache off).
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import queue
import struct
import tempfile
import threading
import time

from .. import config
from . import counters, multiprocess

_MAGIC = b"torch_tpu program cache v1\n"
_SUFFIX = ".ttpc"
_HEADER = struct.Struct("<IQ")  # key length, payload length
_log = logging.getLogger("torch_tpu")


def folder() -> str | None:
    """The cache folder, or None when the disk cache is off."""
    return config.compile_cache_dir()


def enabled() -> bool:
    # off in a multi-process job (JAX's distributed runtime): executables serialized there hold a device
    # assignment over the global device list that another process cannot run (seen: "Attempted to
    # execute with 2 argument lists when local device count is 1")
    return folder() is not None and not multiprocess.active()


def max_bytes() -> int:
    return config.settings().cache_max_mb * 2**20


def _path(root: str, key: str) -> str:
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:48] + _SUFFIX)


def encode(key: str, payload: bytes) -> bytes:
    kb = key.encode()
    return _MAGIC + _HEADER.pack(len(kb), len(payload)) + kb + hashlib.sha256(payload).digest() + payload


def decode(key: str, data: bytes) -> tuple[bytes | None, str]:
    """(payload, '') when ``data`` is a whole entry for ``key``; else (None, why not)."""
    n = len(_MAGIC)
    if data[:n] != _MAGIC:
        return None, "not a cache entry (bad header)"
    if len(data) < n + _HEADER.size:
        return None, "truncated"
    klen, plen = _HEADER.unpack_from(data, n)
    start = n + _HEADER.size
    if len(data) != start + klen + 32 + plen:
        return None, "truncated or padded"
    stored_key = data[start:start + klen]
    if stored_key != key.encode():
        return None, "it holds another key"
    digest = data[start + klen:start + klen + 32]
    payload = data[start + klen + 32:]
    if hashlib.sha256(payload).digest() != digest:
        return None, "checksum mismatch"
    return payload, ""


def load(key: str) -> bytes | None:
    """The payload stored under ``key``, or None (absent, or rejected and removed)."""
    root = folder()
    if root is None:
        return None
    path = _path(root, key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    payload, why = decode(key, data)
    if payload is None:
        reject(path, why)
        return None
    try:
        os.utime(path)  # least recently used goes first
    except OSError:
        pass
    return payload


def exists(key: str) -> bool:
    """Whether an entry for ``key`` is on disk (not verified: ``load`` checks it)."""
    root = folder()
    return root is not None and os.path.exists(_path(root, key))


def reject(path: str, why: str) -> None:
    """Count, log and delete a bad entry (the program is built again)."""
    counters.add("cache_rejects", 1)
    _log.warning("torch_tpu: ignoring persistent cache entry %s (%s); rebuilding it", path, why)
    try:
        os.remove(path)
    except OSError:
        pass


def forget(key: str) -> None:
    """Remove the entry of ``key`` (e.g. its payload could not be loaded)."""
    root = folder()
    if root is not None:
        try:
            os.remove(_path(root, key))
        except OSError:
            pass


def _write(root: str, key: str, payload: bytes) -> int:
    os.makedirs(root, exist_ok=True)
    data = encode(key, payload)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, _path(root, key))
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return len(data)


# -------------------------------------------------------------------------------------------------
# Background writer and the size bound
# -------------------------------------------------------------------------------------------------
class _Writer:
    def __init__(self):
        self.jobs: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.total: dict[str, int] = {}  # folder -> bytes (scanned on the first write)

    def submit(self, root: str, key: str, make_payload) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="torch_tpu-cache-writer", daemon=True)
                self.thread.start()
        self.jobs.put((root, key, make_payload))

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                self._do(*job)
            except Exception as exc:  # a cache that cannot be written never fails the program
                _log.debug("torch_tpu: persistent cache write failed: %r", exc)
            finally:
                self.jobs.task_done()

    def _do(self, root: str, key: str, make_payload) -> None:
        payload = make_payload() if callable(make_payload) else make_payload
        if payload is None:
            return
        written = _write(root, key, payload)
        counters.add("cache_stores", 1)
        # the count other processes wrote since this one last looked, else this process's own
        counted = _read_total(root)
        if counted is None:
            counted = self.total[root] if root in self.total else _scan(root)[1] - written
        total = counted + written
        if total > max_bytes():
            total = evict(root, max_bytes())
        self.total[root] = total
        _write_total(root, total)

    def drain(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.jobs.unfinished_tasks:
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(0.002)


_WRITER = _Writer()


def store(key: str, payload) -> None:
    """Write ``payload`` (bytes, or a callable making them, run off the critical path) under ``key``."""
    root = folder()
    if root is not None:
        _WRITER.submit(root, key, payload)


def flush_writes(timeout: float | None = None) -> None:
    """Wait for pending writes (tests; the end of the process)."""
    _WRITER.drain(timeout)


atexit.register(flush_writes, 30.0)


_TOTAL_FILE = ".bytes"  # the folder's entry bytes as the last write counted them


def _read_total(root: str) -> int | None:
    try:
        with open(os.path.join(root, _TOTAL_FILE)) as f:
            return max(int(f.read()), 0)
    except (OSError, ValueError):
        return None


def _write_total(root: str, total: int) -> None:
    """Replace the count atomically (two processes writing at once may lose one's increment: the bound
    is approximate between evictions, and each eviction counts the folder again)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(str(total))
        os.replace(tmp, os.path.join(root, _TOTAL_FILE))
    except OSError:
        pass


def _scan(root: str) -> tuple[list, int]:
    entries, total = [], 0
    try:
        with os.scandir(root) as it:
            for e in it:
                if e.name.endswith(_SUFFIX):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, e.path))
                    total += st.st_size
    except OSError:
        pass
    return entries, total


def evict(root: str, limit: int) -> int:
    """Delete least recently used entries until the folder holds at most 3/4 of ``limit``; returns
    the bytes left."""
    entries, total = _scan(root)
    if total <= limit:
        return total
    entries.sort()
    target = (limit * 3) // 4
    for _, size, path in entries:
        if total <= target:
            break
        try:
            os.remove(path)
            total -= size
            counters.add("cache_evictions", 1)
        except OSError:
            pass
    return total


def entry_count() -> int:
    root = folder()
    return 0 if root is None else len(_scan(root)[0])
