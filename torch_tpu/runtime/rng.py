"""Device RNG state: a (seed, offset) pair. Each random op consumes one offset; its key is a runtime
input of its program, so random ops never recompile as the state advances.

Keys use JAX's "rbg" implementation (XLA's RngBitGenerator, seeded with [seed, offset]): it compiles
several times faster than threefry on XLA:CPU and is the native generator on TPU.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from . import counters

DEFAULT_SEED = 67280421310721  # torch's default CPU seed, so runs are reproducible by default


class _State:
    seed = DEFAULT_SEED
    offset = 0


def manual_seed(seed: int) -> None:
    seed = int(seed)
    if not -(1 << 63) <= seed < (1 << 64):  # torch.manual_seed's range (negatives wrap)
        raise ValueError(f"Overflow when unpacking long long: seed {seed} is outside [-2**63, 2**64)")
    _State.seed = seed & 0xFFFFFFFFFFFFFFFF
    _State.offset = 0


def initial_seed() -> int:
    return _State.seed


def seed() -> None:
    import random

    manual_seed(random.getrandbits(63))


def key_data(seed: int, offset: int) -> np.ndarray:
    """The key data of draw ``offset`` of the stream ``seed`` (an op's key input)."""
    seed &= 0xFFFFFFFFFFFFFFFF
    offset &= 0xFFFFFFFFFFFFFFFF
    return np.array([seed & 0xFFFFFFFF, seed >> 32, offset & 0xFFFFFFFF, offset >> 32], dtype=np.uint32)


def next_key_data() -> np.ndarray:
    """Host key data for the next random op; advances the state. Under a lock: two threads' random ops
    read the same offset and drew the same numbers."""
    with _LOCK:
        seed, offset = _State.seed, _State.offset
        _State.offset = offset + 1
    counters.counters["random_draws"] += 1
    return key_data(seed, offset)


_LOCK = threading.Lock()


def peek_key_data() -> np.ndarray:
    """Like next_key_data without advancing (example input when compiling a random op)."""
    return key_data(_State.seed, _State.offset)


def make_key(data):
    """Inside a program: the JAX PRNG key for this op's key data."""
    from . import platform

    return platform.jax().random.wrap_key_data(data, impl="rbg")


def _signed(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= (1 << 63) else v


def get_state() -> torch.Tensor:
    """(seed, offset) as 16 bytes: all 64 bits of each (a seed of 2**63 or more, manual_seed(-1), too)."""
    return pack_state(_State.seed, _State.offset)


def set_state(state: torch.Tensor) -> None:
    _State.seed, _State.offset = unpack_state(state)


def pack_state(seed: int, offset: int) -> torch.Tensor:
    return torch.tensor([_signed(seed), _signed(offset)], dtype=torch.int64).view(torch.uint8)


def unpack_state(state) -> tuple[int, int]:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() != 16:
        raise RuntimeError("tpu RNG state must be a 16-byte torch.uint8 CPU tensor from get_rng_state()")
    vals = state.cpu().contiguous().view(torch.int64).tolist()
    return int(vals[0]) & 0xFFFFFFFFFFFFFFFF, int(vals[1]) & 0xFFFFFFFFFFFFFFFF
