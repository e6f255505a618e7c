"""``torch.tpu``: the device module, shaped like ``torch.cuda``.

Why one module: ``torch.tpu``'s surface, shaped like ``torch.cuda``: many small functions users reach as one module
(memory: device_memory.py).
"""
from __future__ import annotations

import sys

import torch

from .engine import modes as _modes
from .engine import streams as _streams
from .engine.events import TpuEvent as Event  # noqa: F401  (torch.tpu.Event, as torch.cuda.Event)
from .engine.modes import EagerMode
from .errors import OutOfMemoryError  # noqa: F401  (torch.tpu.OutOfMemoryError, a torch.OutOfMemoryError)
from .engine.sync import sync as _sync
from .runtime import dynamo_frames as _dynamo_frames
from .runtime import memory as _memory
from .runtime import platform as _platform
from .runtime import rng as _rng

_current_device = 0


def _lazy_init() -> None:
    _platform.devices()


def is_available() -> bool:
    """Whether the tpu device can be used. Before the platform has started this does not wait for it: the
    device is backed by whatever PJRT platform is present, the CPU at least, whenever JAX can be imported;
    the platform then starts on a background thread (``platform.start_in_background``), so that a library
    asking at import (diffusers does) does not hold the import for the ~10 s a TPU chip takes to open. A
    platform that then fails to start raises its error at the first device use."""
    if _platform.forked():
        return False
    if not is_initialized():
        import importlib.util

        if importlib.util.find_spec("jax") is None:
            return False
        _platform.start_in_background()
        return True
    try:
        return device_count() > 0
    except Exception:
        return False


def is_initialized() -> bool:
    return _platform.devices.cache_info().currsize > 0


def init() -> None:
    _lazy_init()


def _is_in_bad_fork() -> bool:
    return _platform.forked()


def device_count() -> int:
    """The devices this process can use: 1. torch_tpu binds one device per process (``tpu:0``; under torchrun,
    the one its local rank names), as the design says, so ``tpu:N`` for N > 0 is refused: a host's other
    devices (a TPU host's other chips, ``--xla_force_host_platform_device_count``) are other processes'. 0
    when no device starts. ``python -m torch_tpu info`` lists the host's devices."""
    return 1 if _platform.device_count() > 0 else 0


def current_device() -> int:
    return _current_device


def set_device(device) -> None:
    global _current_device
    index = _index(device)
    if index != 0 and index == _platform.local_device_index():
        index = 0  # torchrun's LOCAL_RANK names this process's bound device, which torch calls tpu:0
    if index != 0:
        raise RuntimeError(
            f"torch_tpu binds one device per process (tpu:0); got tpu:{index}. Run one process per device "
            "(torchrun) and select it with TORCH_TPU_DEVICE_INDEX or the launcher.")
    _current_device = index


def _index(device) -> int:
    if device is None:
        return _current_device
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return 0 if device.index is None else device.index
    raise TypeError(f"invalid device {device!r}")


class device:
    """Context manager selecting a device (only tpu:0 exists per process)."""

    def __init__(self, dev):
        self.idx = _index(dev)

    def __enter__(self):
        set_device(self.idx)

    def __exit__(self, *exc):
        return False


def _existing(device) -> int:
    """The index ``device`` names, refused (clearly) unless it is this process's device, as torch.cuda
    refuses an invalid device ordinal."""
    index = _index(device)
    if index != 0 and index != _platform.local_device_index():
        raise RuntimeError(f"tpu:{index} does not exist: torch_tpu binds one device per process (tpu:0)")
    return index


@_dynamo_frames.host_only
def synchronize(device=None) -> None:
    _existing(device)
    _sync()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """As ``torch.cuda.is_bf16_supported``: XLA computes bfloat16 on every platform; natively on TPUs and
    on GPUs of compute capability 8.0 or more, emulated (through float32) on the CPU and older GPUs."""
    if including_emulation:
        return True
    kind = _platform.platform()
    if kind == "tpu":
        return True
    if kind == "cuda":
        cap = getattr(_platform.jax_device(0), "compute_capability", None)
        try:
            return cap is None or float(cap) >= 8.0
        except (TypeError, ValueError):
            return True
    return False


def get_device_name(device=None) -> str:
    _existing(device)
    return _platform.device_name(0)


class _DeviceProperties:
    def __init__(self, index):
        dev = _platform.jax_device(index)
        self.name = _platform.device_name(index)
        self.platform = _platform.platform()
        self.index = index
        self.device_kind = getattr(dev, "device_kind", self.platform)
        self.total_memory = _memory_limit(index)

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_properties(device=None):
    _existing(device)
    return _DeviceProperties(0)


def get_device_capability(device=None) -> tuple[int, int]:
    """(major, minor) as ``torch.cuda.get_device_capability``, in the platform's own numbering (as
    ``torch.mtia``'s and ``torch.xpu``'s are their hardware's): an NVIDIA GPU's CUDA compute capability
    (``(9, 0)`` for an H100); a TPU's generation, from its device kind (``(5, 0)`` for "TPU v5 lite" and
    "TPU v5p", ``(6, 0)`` for "TPU v6 lite"); ``(0, 0)`` on the CPU platform, which has no device generation.
    A TPU's number is not a CUDA capability: code choosing CUDA kernels by it must check the device type."""
    index = _existing(device)
    kind = _platform.platform()
    dev = _platform.jax_device(index)
    if kind == "cuda":
        text = str(getattr(dev, "compute_capability", "") or "")
        major, _, minor = text.partition(".")
        if major.isdigit():
            return int(major), int(minor) if minor.isdigit() else 0
    if kind == "tpu":
        import re

        found = re.search(r"v?(\d+)", str(getattr(dev, "device_kind", "") or ""))
        if found:
            return int(found.group(1)), 0
    return (0, 0)


# --- RNG -----------------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    _rng.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    _rng.manual_seed(seed)


def seed() -> None:
    _rng.seed()


def seed_all() -> None:
    _rng.seed()


def initial_seed() -> int:
    return _rng.initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    _existing(device)
    return _rng.get_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    _existing(device)
    _rng.set_state(new_state)


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(states) -> None:
    set_rng_state(states[0])


# --- memory ---------------------------------------------------------------------------------------
# CUDA's names over PJRT's device statistics (GPU, TPU) or torch_tpu's count of live tensor storages
# (every platform; the CPU platform's PJRT reports nothing). See runtime/memory.py.
def _pjrt_stats(index=None) -> dict:
    try:
        device = _platform.jax_device(_index(index))
    except Exception:
        return {}
    return _memory.pjrt_stats(device)


def _memory_limit(index=None) -> int:
    stats = _pjrt_stats(index)
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def memory_stats(device=None) -> dict:
    """``torch.cuda.memory_stats()``'s keys ("allocated_bytes.all.current", "allocated_bytes.all.peak",
    "reserved_bytes.all.current", "num_alloc_retries", ...): PJRT's device statistics where the platform
    reports them, else counted tensor storages; PJRT's own under "pjrt.<name>"."""
    _existing(device)
    return _memory.stats(_pjrt_stats(device))


def memory_allocated(device=None) -> int:
    """Bytes held by live tpu tensors: PJRT's bytes_in_use where the platform reports it (GPU, TPU),
    else torch_tpu's own count of live tensor storages (the CPU platform reports none)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Peaks restart from what is in use now (PJRT's own peak cannot be reset: see memory_stats)."""
    _existing(device)
    _memory.reset_peak(_pjrt_stats(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    _existing(device)
    _memory.reset_accumulated()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of current, peak and total memory, like ``torch.cuda.memory_summary()``."""
    index = _index(device)
    pjrt = _pjrt_stats(index)
    source = ("PJRT device statistics" if "bytes_in_use" in pjrt
              else "counted tensor storages (this platform's PJRT reports none)")
    return _memory.summary(_memory.stats(pjrt), f"tpu:{index} ({get_device_name(index)})", _memory_limit(index),
                           source)


def mem_get_info(device=None) -> tuple[int, int]:
    _existing(device)
    total = _memory_limit(device)
    return max(total - memory_allocated(device), 0), total


def empty_cache() -> None:
    """Frees the device buffers torch_tpu itself keeps beside tensors (the device scalars strict eager keeps
    for Python numbers). XLA frees a tensor's buffer when its last reference dies, so there is no allocator
    cache to empty. As on CUDA, garbage held in reference cycles waits for Python's collector: run
    ``gc.collect()`` first to free it. (No collection here: accelerate's sequential offload calls this after
    every submodule, and a full collection of a process holding diffusers costs ~0.2 s on 2 CPU cores.)"""
    numbers = sys.modules.get("torch_tpu.engine.device_numbers")  # (loaded with the first strict op)
    if numbers is not None:
        numbers.release()


# --- execution modes ---------------------------------------------------------------------------------
@_dynamo_frames.host_only
def set_eager_mode(mode: EagerMode):
    """Switches the eager mode: for good as a plain call, until the block ends as a context manager
    (``with torch.tpu.set_eager_mode("debug"): ...``). ``mode``: an ``EagerMode``, or the name the command
    line uses ("eager", "debug", "fused")."""
    return _modes.eager_mode_context(mode)


class _ModuleWithEagerMode(type(_modes)):
    @property
    def eager_mode(self) -> EagerMode:
        return _modes.get_mode()

    @eager_mode.setter
    def eager_mode(self, mode: EagerMode) -> None:
        _modes.set_mode(mode)


# autocast support (torch.autocast("tpu")) queries these
def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def _is_compiled() -> bool:
    return True


# --- streams (engine/streams.py: the compute queue, and side streams of uploads) ---------------------
Stream = _streams.TpuStream
StreamContext = _streams.StreamContext


@_dynamo_frames.keep_out
def current_stream(device=None) -> Stream:
    _existing(device)
    return _streams.current()


@_dynamo_frames.keep_out
def default_stream(device=None) -> Stream:
    _existing(device)
    return _streams.default_stream()


@_dynamo_frames.keep_out
def set_stream(stream) -> None:
    _streams.set_current(stream)


@_dynamo_frames.keep_out
def stream(stream) -> StreamContext:
    """``with torch.tpu.stream(s): ...``: uploads inside are ``s``'s transfers (None: nothing changes)."""
    return StreamContext(stream)


def install_accelerator_streams() -> None:
    """``torch.accelerator.current_stream()`` / ``set_stream()`` on the tpu: torch's ask the C++ device guard,
    which knows one stream (id 0) and no current one."""
    import torch.accelerator as acc

    for name, ours in (("current_stream", current_stream), ("set_stream", set_stream)):
        original = getattr(acc, name, None)
        if original is None or getattr(original, "_tpu_patched", False):
            continue

        # (not _on_tpu's wrapper: keep_out marks a code object, and marking _on_tpu's would keep the memory
        # functions' wrappers out of dynamo too; these two need a code object of their own)
        def patched(*args, _ours=ours, _original=original, **kwargs):
            current = torch.accelerator.current_accelerator()
            if current is not None and current.type == "tpu":
                return _ours(*args, **kwargs)
            return _original(*args, **kwargs)

        patched._tpu_patched = True
        patched.__name__ = name
        patched.__doc__ = original.__doc__
        # (dynamo's guards on the current stream call it while a compiled region runs: traced, it recursed)
        setattr(acc, name, _dynamo_frames.keep_out(patched))


# --- what torch.cuda has and the tpu does not: a clear error, not a bare AttributeError --------------
_NO_STREAMS = ("ExternalStream", "CUDAGraph", "graph", "graphs", "make_graphed_callables")


def __getattr__(name):  # the module's only __getattr__ (a second one would replace it)
    # torch.cuda's module flag, read by torch libraries as ``getattr(device_module, "_initialized", False)``:
    # torch.utils.checkpoint saves and replays the device RNG state only when it is true (without it, a
    # checkpointed dropout drew a new mask on recompute: a silently wrong gradient)
    if name == "_initialized":
        return is_initialized()
    if name in _NO_STREAMS:
        raise AttributeError(
            f"torch.tpu.{name} does not exist: XLA runs a device's programs as whole compiled programs on one "
            "queue, so the tpu device has no captured graphs or external streams. Use "
            "torch.compile(backend='tpu') for whole-graph programs, torch.tpu.Stream() for uploads beside the "
            "computation, and torch.tpu.Event(enable_timing=True) to mark and time points of the queue.")
    raise AttributeError(f"module 'torch.tpu' has no attribute {name!r}")


# --- torch.accelerator.* on the tpu (torch's C++ side has no tpu allocator or device synchronize) --------
_ACCELERATOR_FUNCTIONS = {
    "synchronize": synchronize, "memory_allocated": memory_allocated, "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved, "max_memory_reserved": max_memory_reserved, "memory_stats": memory_stats,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats, "empty_cache": empty_cache,
    "get_memory_info": mem_get_info,
}


def _accelerator_capability(device=None) -> dict:
    """``torch.accelerator.get_device_capability()``: torch's key, the dtypes a tpu tensor holds
    (``supported_dtypes``), and what the chip is (``device_kind``; ``capability``, as
    ``torch.tpu.get_device_capability()`` gives it)."""
    from .runtime import dtypes

    index = _existing(device)
    return {"supported_dtypes": set(dtypes.supported()), "device_kind": get_device_name(index),
            "capability": get_device_capability(index)}


def _accelerator_snapshot(device=None, augment_with_fx_traces=False) -> dict:
    return _memory.snapshot(_existing(device))


def install_accelerator_api() -> None:
    """``torch.accelerator.synchronize()`` / ``memory_allocated()`` / ``empty_cache()`` ... and the same
    functions of ``torch.accelerator.memory`` (device-agnostic code calls either; the package re-exports the
    module's functions, so each name is replaced in both) when the current accelerator is the tpu: torch's
    own versions call C++ device hooks a Python backend cannot provide ("Backend doesn't support
    synchronizing all streams on device", "Allocator for tpu is not a DeviceAllocator", an INTERNAL ASSERT
    asking for a PyTorch bug report; no DeviceAllocator can be registered from Python). Other accelerators
    keep torch's functions."""
    import torch.accelerator as acc
    import torch.accelerator.memory as acc_memory

    functions = dict(_ACCELERATOR_FUNCTIONS, get_device_capability=_accelerator_capability)
    for module, names in ((acc, functions), (acc_memory, dict(functions, _snapshot=_accelerator_snapshot))):
        for name, ours in names.items():
            original = getattr(module, name, None)
            if original is None or getattr(original, "_tpu_patched", False):
                continue
            patched = _on_tpu(name, ours, getattr(original, "_tpu_original", original))
            setattr(module, name, patched)


_PATCHED: dict = {}  # name -> the function standing for torch.accelerator's (one per name, both modules)


def _on_tpu(name: str, ours, original):
    """``ours`` when the current accelerator is the tpu, else torch's ``original``."""
    known = _PATCHED.get(name)
    if known is not None and known._tpu_original is original:
        return known

    def patched(*args, **kwargs):
        current = torch.accelerator.current_accelerator()
        if current is not None and current.type == "tpu":
            return ours(*args, **kwargs)
        return original(*args, **kwargs)

    patched._tpu_patched = True
    patched._tpu_original = original
    patched.__name__ = patched.__qualname__ = name
    patched.__doc__ = original.__doc__
    _PATCHED[name] = patched
    return patched


sys.modules[__name__].__class__ = _ModuleWithEagerMode
