"""The ranks of a device set agree on their collectives before a program holding some launches.

Collectives of separately compiled programs pair up across processes by their order on the device set:
each process's k-th collective over those devices meets every other's k-th. ``spmd.in_order`` makes a
program issue its collectives one by one in the order the code called them, so ranks that cut their work
into programs differently still pair the same collectives. Ranks whose code calls different collectives
(another size, another op) would still pair wrong ones, and on the CPU platform gloo then aborts the
process ("Received data size doesn't match expected size") with nothing for Python to catch.

So before a program launches, each process publishes, in torch's store (the job's TCPStore), the
descriptions of the collectives it launched or is launching that not every peer has compared yet (its
window: usually a few), with the number of the first and of the last it has compared; then it reads each
peer's window and compares the collectives both hold under the same numbers. One write and one read per
peer, never a wait. Of two processes, the one that compares later sees the other's descriptions (each
publishes before it compares, and keeps a description until every peer has compared past it), so a
mismatch is found before both launch it: that one raises a ``RuntimeError`` naming both sides'
collectives and launches nothing; the other, which launched, fails at its collective when the peer does
not come (``TORCH_TPU_DIST_TIMEOUT``), named.
"""
from __future__ import annotations

import json
import threading

from . import multiprocess

_LOCK = threading.Lock()
_STORE: list = [None]  # torch's store shared by every process of the job (set by the first tpu_dist group)
_LAUNCHED: dict = {}   # device set -> collectives launched over it so far by this process
_WINDOW: dict = {}     # device set -> [(number, description)] not yet compared by every peer, in order


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
    if not peers:  # a group of one: nothing to pair
        return
    base = f"torch_tpu/order/{'-'.join(map(str, devices))}/"
    with _LOCK:
        first = _LAUNCHED.get(devices, 0)
        last = first + len(collectives) - 1
        window = _WINDOW.setdefault(devices, [])
        window.extend(zip(range(first, last + 1), collectives))
        # everything before ``first`` this rank compared when it launched it
        store.set(f"{base}{rank}", json.dumps([first - 1, window[0][0], [d for _, d in window]]))
        compared = []
        for p in peers:  # (compare_set with no expected value reads it; "" while the peer published nothing)
            raw = store.compare_set(f"{base}{p}", "", "").decode()
            if not raw:
                continue
            done, start, theirs = json.loads(raw)
            compared.append(done)
            for k in range(max(first, start), min(last, start + len(theirs) - 1) + 1):
                if theirs[k - start] != collectives[k - first]:
                    del window[-len(collectives):]
                    multiprocess.note_failure()
                    raise RuntimeError(
                        f"tpu_dist: ranks {sorted([rank, *peers])} run different collectives: collective #{k} "
                        f"is {collectives[k - first]} on rank {rank} and {theirs[k - start]} on rank {p}. Nothing "
                        f"was launched on rank {rank}; rank {p}'s collective fails when this one does not come "
                        f"(TORCH_TPU_DIST_TIMEOUT). This rank's program holds #{first}-#{last}: "
                        f"{', '.join(collectives[:6])}")
        _LAUNCHED[devices] = last + 1
        if len(compared) == len(peers):  # descriptions every peer compared leave the window
            done = min(compared)
            while window and window[0][0] <= done:
                window.pop(0)
