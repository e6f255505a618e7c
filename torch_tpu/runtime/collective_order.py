"""The ranks of a device set agree on their collectives before a program holding some launches.

Collectives of separately compiled programs pair up across processes by their order on the device set:
each process's k-th collective over those devices meets every other's k-th. ``spmd.in_order`` makes a
program issue its collectives one by one in the order the code called them, so ranks that cut their work
into programs differently still pair the same collectives. Ranks whose code calls different collectives
(another size, another op) would still pair wrong ones, and on the CPU platform gloo then aborts the
process ("Received data size doesn't match expected size") with nothing for Python to catch.

So before a program launches, each process publishes the descriptions of its collectives by their numbers
in torch's store (the job's TCPStore) and compares them with what the others published for the same numbers
(one write, then one read per peer and one for their descriptions: never a wait). Of two processes, the one
that compares later sees the other's descriptions (each publishes before it compares), so a mismatch is
found before both launch it: that one raises a ``RuntimeError`` naming both sides' collectives and launches
nothing; the other, which launched, fails at its collective when the peer does not come
(``TORCH_TPU_DIST_TIMEOUT``), named. Descriptions every peer has compared are deleted on a thread.
"""
from __future__ import annotations

import threading

from . import multiprocess

_LOCK = threading.Lock()
_STORE: list = [None]  # torch's store shared by every process of the job (set by the first tpu_dist group)
_LAUNCHED: dict = {}   # device set -> collectives launched over it so far by this process
_PUBLISHED: dict = {}  # device set -> numbers of this process's descriptions not yet deleted, oldest first


def use_store(store) -> None:
    """The job's store (a ``torch.distributed`` Store every process reaches under the same keys)."""
    if _STORE[0] is None:
        _STORE[0] = store


def before_launch(device_ids: tuple, collectives: tuple) -> None:
    """Publish and compare the descriptions of ``collectives`` (a program's, in order) before it launches;
    raises ``RuntimeError`` if another rank published different collectives under the same numbers."""
    store = _STORE[0]
    if not collectives or store is None or not multiprocess.active():
        return
    devices = tuple(sorted(device_ids))
    rank = multiprocess.rank()
    peers = [r for r in multiprocess.ranks_of(devices) if r != rank]
    base = f"torch_tpu/order/{'-'.join(map(str, devices))}/"
    with _LOCK:
        first = _LAUNCHED.get(devices, 0)
        last = first + len(collectives) - 1
        numbers = range(first, last + 1)
        # this rank's descriptions, and where it is: the last number it published, and the last it compared
        store.multi_set([f"{base}{k}/{rank}" for k in numbers] + [f"{base}at/{rank}"],
                        list(collectives) + [f"{last},{first - 1}"])
        mine = _PUBLISHED.setdefault(devices, [])
        mine.extend(numbers)
        tops, compared = {}, {}
        for p in peers:  # (compare_set with no expected value: reads it, or marks it absent as -1)
            top, done = (store.compare_set(f"{base}at/{p}", "", "-1,-1").decode().split(",") + ["-1"])[:2]
            tops[p], compared[p] = int(top), int(done)
        wanted = [(p, k) for p in peers for k in range(first, min(last, tops[p]) + 1)]
        theirs = store.multi_get([f"{base}{k}/{p}" for p, k in wanted]) if wanted else []
        for (p, k), value in zip(wanted, theirs):
            if value.decode() != collectives[k - first]:
                del mine[-len(collectives):]
                multiprocess.note_failure()
                raise RuntimeError(
                    f"tpu_dist: ranks {sorted([rank, *peers])} run different collectives: collective #{k} is "
                    f"{collectives[k - first]} on rank {rank} and {value.decode()} on rank {p}. Nothing was "
                    f"launched on rank {rank}; rank {p}'s collective fails when this one does not come "
                    f"(TORCH_TPU_DIST_TIMEOUT). This rank's program holds #{first}-#{last}: "
                    f"{', '.join(collectives[:6])}")
        _LAUNCHED[devices] = last + 1
        if peers:  # every peer compared these: gone
            done = min(compared.values())
            old = 0
            while old < len(mine) and mine[old] <= done:
                old += 1
            if old:
                _delete_later(store, [f"{base}{k}/{rank}" for k in mine[:old]])
                del mine[:old]


_DELETE: list = []
_DELETE_READY = threading.Condition(threading.Lock())
_DELETER: list = []


def _delete_later(store, keys: list) -> None:
    """Deleted on a thread of its own: no round trip on the launch's path."""
    with _DELETE_READY:
        _DELETE.extend((store, k) for k in keys)
        _DELETE_READY.notify()
        if not _DELETER:
            _DELETER.append(threading.Thread(target=_deleting, name="torch_tpu collective order", daemon=True))
            _DELETER[0].start()


def _deleting() -> None:
    while True:
        with _DELETE_READY:
            while not _DELETE:
                _DELETE_READY.wait()
            batch = list(_DELETE)
            _DELETE.clear()
        for store, key in batch:
            try:
                store.delete_key(key)
            except Exception:  # the store went away (the job ends): nothing left to clean
                return
