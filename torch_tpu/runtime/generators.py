"""``torch.Generator(device="tpu")``: a generator whose random streams are drawn on the tpu device.

torch builds a device's generator in C++ (``PrivateUse1HooksInterface::getNewGenerator``, or a generator
factory registered with ``REGISTER_GENERATOR_PRIVATEUSE1``); the hooks a Python backend registers
(``torch._C._acc.PrivateUse1Hooks``) expose only ``is_available``, ``is_built`` and
``has_primary_context``, so torch raised "You should register `PrivateUse1HooksInterface` ... implement
`getNewGenerator`". What Python can reach is the construction itself: ``torch.Generator`` is a C type
whose metaclass is torch's Python class ``OpaqueBaseMeta``; its ``__call__`` (installed here) returns a
``TpuGenerator`` for a tpu device and leaves every other construction to torch.

A ``TpuGenerator`` is a ``torch.Generator`` (a subclass; ``isinstance`` holds) whose ``device`` is the tpu
and whose state is a (seed, offset) pair like the device's default RNG (``runtime/rng.py``): each random
op given ``generator=g`` draws its key from ``g`` and advances ``g`` alone, so
``torch.Generator("tpu").manual_seed(0)`` makes the same numbers every time, whatever else ran. Its
``get_state``/``set_state`` use the 16-byte format of ``torch.tpu.get_rng_state``. The C++ object
underneath is a CPU generator seeded alike: a CPU op handed the generator (which torch would refuse for a
CUDA one) draws from that CPU stream.
"""
from __future__ import annotations

import threading
import weakref

import torch

from . import counters, rng

__all__ = ["TpuGenerator", "install", "next_key_data", "tpu_generator"]

_LOCK = threading.Lock()
# torch hands a generator that went through its dispatcher back to Python as a new torch.Generator
# object around the same C++ generator: the TpuGenerator it stands for, by that C++ object's address
_BY_CDATA: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class TpuGenerator(torch._C.Generator):
    """A random number generator of the tpu device (``torch.Generator(device="tpu")``)."""

    def __new__(cls, device=None):
        return super().__new__(cls, "cpu")

    def __init__(self, device=None):
        self._tpu_seed = rng.DEFAULT_SEED
        self._tpu_offset = 0
        _BY_CDATA[self._cdata] = self

    @property
    def device(self) -> torch.device:
        return torch.device("tpu", 0)

    def manual_seed(self, seed) -> "TpuGenerator":
        seed = int(seed)
        super().manual_seed(seed)  # (also checks the range, with torch's error)
        self._tpu_seed, self._tpu_offset = seed & 0xFFFFFFFFFFFFFFFF, 0
        return self

    def seed(self) -> int:
        s = super().seed()
        self._tpu_seed, self._tpu_offset = s, 0
        return s

    def initial_seed(self) -> int:
        return self._tpu_seed

    def get_offset(self) -> int:
        return self._tpu_offset

    def set_offset(self, offset: int) -> "TpuGenerator":
        self._tpu_offset = int(offset) & 0xFFFFFFFFFFFFFFFF
        return self

    def get_state(self) -> torch.Tensor:
        return rng.pack_state(self._tpu_seed, self._tpu_offset)

    def set_state(self, state) -> "TpuGenerator":
        self._tpu_seed, self._tpu_offset = rng.unpack_state(state)
        return self

    def clone_state(self) -> "TpuGenerator":
        return TpuGenerator().set_state(self.get_state())

    def graphsafe_get_state(self):
        return self.clone_state()

    def graphsafe_set_state(self, other) -> "TpuGenerator":
        return self.set_state(other.get_state())

    def __reduce__(self):
        return (_new, (), (self._tpu_seed, self._tpu_offset))

    def __setstate__(self, state) -> None:
        self._tpu_seed, self._tpu_offset = state
        _BY_CDATA[self._cdata] = self

    def __repr__(self) -> str:
        return f"<torch.Generator device=tpu seed={self._tpu_seed} offset={self._tpu_offset}>"


def _new() -> TpuGenerator:
    return TpuGenerator()


def tpu_generator(gen) -> TpuGenerator | None:
    """The TpuGenerator ``gen`` is (or stands for, after torch's dispatcher wrapped it anew), or None."""
    if isinstance(gen, TpuGenerator):
        return gen
    return _BY_CDATA.get(gen._cdata) if isinstance(gen, torch._C.Generator) else None


def next_key_data(gen: TpuGenerator):
    """Key data of the next random op drawn from ``gen``; advances ``gen`` only."""
    with _LOCK:
        seed, offset = gen._tpu_seed, gen._tpu_offset
        gen._tpu_offset = offset + 1
    counters.counters["random_draws"] += 1
    return rng.key_data(seed, offset)


def _device_of(args, kwargs):
    if "device" in kwargs:
        return kwargs["device"]
    return args[0] if args else None


def _is_tpu(device) -> bool:
    try:
        return device is not None and torch.device(device).type == "tpu"
    except (RuntimeError, TypeError):
        return False  # torch's own constructor reports the bad argument


def install() -> bool:
    """Route ``torch.Generator(device="tpu")`` here; False where torch's Generator has no Python metaclass
    to route through (then torch's error stands)."""
    meta = type(torch._C.Generator)
    if meta is type or getattr(meta, "_tpu_routed", False):
        return getattr(meta, "_tpu_routed", False)
    previous = meta.__dict__.get("__call__")

    def __call__(cls, *args, **kwargs):
        if cls is torch._C.Generator and _is_tpu(_device_of(args, kwargs)):
            if set(kwargs) - {"device"} or len(args) > 1:
                raise TypeError("torch.Generator(device='tpu') takes only the device")
            return TpuGenerator()
        if previous is not None:
            return previous(cls, *args, **kwargs)
        return type.__call__(cls, *args, **kwargs)

    meta.__call__ = __call__
    meta._tpu_routed = True
    return True
