"""The host tensor a device storage was uploaded from, so that moving an unchanged weight back to the host
reads nothing from the device.

Model offload (``enable_model_cpu_offload``: ``module.to("tpu")`` then ``module.to("cpu")`` at every call),
group offload without streams (``param.data = param.data.to("tpu")``, then ``module.to("cpu")``) and a
user's ``.to("cpu")`` of weights move each weight back to the host though it never changed there. A storage
filled whole from a CPU tensor (``copy_into``) remembers that tensor (``remember``) while both stay as they
were: the storage's version (every write bumps it) and the host tensor's (torch bumps it at every in-place
op on it or a view). Reading the storage back (``take``) then returns that host tensor itself instead of
reading the device (0.36 GiB/s for bfloat16 on a v5e, where the upload ran at 6.4), and forgets it: the
tensor handed over is the caller's from then on.

Only a host tensor nothing else holds is handed over (its storage's use count): another holder could
write it without torch seeing (``.data``, numpy, a shared untyped storage), and a CPU result must not alias
memory anyone else can write. In the offload paths nobody does: the CPU parameter's old data is dropped
when the module moves. The host memory stays allocated while the device copy lives (for weights moved to
the device for good, their host copy stays too); ``TORCH_TPU_KEEP_HOST_COPIES=0`` frees it at the move and
reads every weight back. ``torch_tpu.stats()`` counts the bytes read (``device_to_host_bytes``) and the
bytes handed over instead (``host_copy_bytes_reused``).
"""
from __future__ import annotations

import weakref

import torch

from .. import config
from ..runtime import counters

# storage -> (storage version, host tensor, host tensor's version); dies with the storage
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_use_count = torch._C._storage_Use_Count
_REMEMBERED = [0]
_PURGE_EVERY = 256


def remember(storage, host: torch.Tensor) -> None:
    """``storage`` (its whole value, in its shape and dtype) was just written from ``host``, a contiguous
    CPU tensor of that shape and dtype."""
    if not config.settings().keep_host_copies:
        return
    _COPIES[storage] = (storage.version, _alias(host), host._version)
    _REMEMBERED[0] += 1
    if _REMEMBERED[0] % _PURGE_EVERY == 0:
        purge()


def purge() -> int:
    """Forget the records whose storage or host tensor changed since (their host memory is of no further use);
    the number forgotten. Run every ``_PURGE_EVERY`` uploads: a weight written on the device (a training step
    after ``load_state_dict``) holds its old host tensor until then, not for its life."""
    stale = [s for s, (version, host, host_version) in list(_COPIES.items())
             if version != s.version or host._version != host_version]
    for s in stale:
        _COPIES.pop(s, None)
    return len(stale)


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A new tensor sharing ``t``'s memory and its version counter, so that in-place writes to ``t`` (or its
    views) show in its ``_version``. Called from a kernel, below autograd: a plain ``detach()`` there is
    ADInplaceOrView-less and gets a version counter of its own, so autograd's keys are let in again."""
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), _ONLY_PYTHON):
        return t.detach()


_ONLY_PYTHON = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)


def forget(storage) -> None:
    _COPIES.pop(storage, None)


def _only_holder(host: torch.Tensor) -> bool:
    """Nothing but our record holds ``host``'s memory (the Python storage object made to ask is the other
    reference counted)."""
    return _use_count(host.untyped_storage()._cdata) <= 2


def _valid(storage):
    """The record of ``storage`` if neither side changed since and nothing else holds the host tensor."""
    entry = _COPIES.get(storage)
    if entry is None:
        return None
    version, host, host_version = entry
    if version != storage.version or host._version != host_version:
        del _COPIES[storage]  # of no further use
        return None
    if not _only_holder(host):  # (may become ours alone later)
        return None
    counters.counters["host_copy_bytes_reused"] += host.nbytes
    return host


def take(storage) -> torch.Tensor | None:
    """The host tensor ``storage`` was uploaded from, handed over (and forgotten: it is the caller's), if
    neither changed since and nothing else holds it; else None (the caller reads the device)."""
    host = _valid(storage)
    if host is not None:
        del _COPIES[storage]
    return host


def peek(storage) -> torch.Tensor | None:
    """As ``take``, for a caller that only reads the tensor (``cpu_tensor.copy_(tpu_tensor)``, ``.item()``):
    the record stays."""
    return _valid(storage)


def held_bytes() -> int:
    """Host memory kept alive by the records (for the offload benchmark's report)."""
    return sum(entry[1].nbytes for entry in list(_COPIES.values()))
