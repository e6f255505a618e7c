"""The op table (see registry.py). ``load()`` imports every lowering module (and so JAX): called on
first device use, never at ``import torch``."""
import functools


@functools.lru_cache(maxsize=None)
def load() -> None:
    from ..runtime import platform

    platform.jax()  # configure JAX (x64, caches) before any lowering module imports it
    from . import elementwise, reductions, variance, nn, attention, spatial, shape, indexing, random, factories  # noqa: F401
    from . import activations, activation_backward, amp, ctc, fft, index_accumulate, linalg, nn_fastpaths, position_embeddings, rnn, special  # noqa: F401
    from . import meta_kernels

    meta_kernels.register()
