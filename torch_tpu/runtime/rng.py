"""Device RNG state: a (seed, offset) pair. Each random op consumes one offset; the key for that op
is derived inside its program, so random ops never recompile as the state advances."""
from __future__ import annotations

import numpy as np
import torch

_DEFAULT_SEED = 67280421310721  # torch's default CPU seed, so runs are reproducible by default


class _State:
    seed = _DEFAULT_SEED
    offset = 0


def manual_seed(seed: int) -> None:
    _State.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    _State.offset = 0


def initial_seed() -> int:
    return _State.seed


def seed() -> None:
    import random

    manual_seed(random.getrandbits(63))


def next_key_data() -> np.ndarray:
    """Host array [seed, offset] for the next random op; advances the state."""
    data = np.array([_State.seed & 0x7FFFFFFFFFFFFFFF, _State.offset], dtype=np.int64)
    _State.offset += 1
    return data


def peek_key_data() -> np.ndarray:
    """Like next_key_data without advancing (example input when compiling a random op)."""
    return np.array([_State.seed & 0x7FFFFFFFFFFFFFFF, _State.offset], dtype=np.int64)


def make_key(data):
    """Inside a program: a JAX PRNG key from the [seed, offset] array."""
    from . import platform

    jax = platform.jax()
    key = jax.random.PRNGKey(data[0])
    return jax.random.fold_in(key, data[1])


def get_state() -> torch.Tensor:
    return torch.tensor([_State.seed & 0x7FFFFFFFFFFFFFFF, _State.offset], dtype=torch.int64).view(torch.uint8)


def set_state(state: torch.Tensor) -> None:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() != 16:
        raise RuntimeError("tpu RNG state must be a 16-byte torch.uint8 CPU tensor from get_rng_state()")
    vals = state.cpu().contiguous().view(torch.int64).tolist()
    _State.seed, _State.offset = int(vals[0]), int(vals[1])
