"""Bytes held by live tpu storages of this process (for platforms whose PJRT reports none)."""
from __future__ import annotations


class _Counter:
    in_use = 0
    peak = 0


def allocated(nbytes: int) -> None:
    counter = _Counter
    in_use = counter.in_use = counter.in_use + nbytes
    if in_use > counter.peak:
        counter.peak = in_use


def freed(nbytes: int) -> None:
    _Counter.in_use -= nbytes


def in_use() -> int:
    return _Counter.in_use


def peak() -> int:
    return _Counter.peak


def reset_peak() -> None:
    _Counter.peak = _Counter.in_use
