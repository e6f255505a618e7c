"""Mapping between torch dtypes and JAX/NumPy dtypes, and host <-> device copies."""
from __future__ import annotations

import collections
import functools
import warnings
import weakref

import numpy as np
import torch

from ..errors import OpError, out_of_memory
from . import counters, failed_values, multiprocess, platform, prefetch

# the floating dtypes torch computes real math in (float8 only converts)
REAL_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# torch's names of dtypes in its CPU kernels' messages: the dispatch macros' ("Float"), C++'s ("float")
TYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
              torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
              torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
              torch.complex128: "ComplexDouble", torch.uint16: "UInt16", torch.uint32: "UInt32",
              torch.uint64: "UInt64", **{getattr(torch, n): n.capitalize() for n in (
                  "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")}}
CPP_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
             torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int",
             torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char",
             torch.bool: "bool", torch.complex64: "c10::complex<float>", torch.complex128: "c10::complex<double>"}


@functools.lru_cache(maxsize=None)
def _tables():
    jnp = platform.jax().numpy
    import ml_dtypes

    to_jax = {
        torch.float32: jnp.float32,
        torch.float64: jnp.float64,
        torch.float16: jnp.float16,
        torch.bfloat16: jnp.bfloat16,
        torch.int8: jnp.int8,
        torch.int16: jnp.int16,
        torch.int32: jnp.int32,
        torch.int64: jnp.int64,
        torch.uint8: jnp.uint8,
        torch.bool: jnp.bool_,
        torch.complex64: jnp.complex64,
        torch.complex128: jnp.complex128,
        torch.uint16: jnp.uint16,
        torch.uint32: jnp.uint32,
        torch.uint64: jnp.uint64,
        torch.float8_e4m3fn: jnp.float8_e4m3fn,
        torch.float8_e5m2: jnp.float8_e5m2,
        torch.float8_e4m3fnuz: jnp.float8_e4m3fnuz,
        torch.float8_e5m2fnuz: jnp.float8_e5m2fnuz,
    }
    to_torch = {np.dtype(v): k for k, v in to_jax.items()}
    # numpy has no bfloat16/float8: move those through a same-width integer view.
    host_view = {
        torch.bfloat16: (torch.int16, np.dtype(ml_dtypes.bfloat16)),
        torch.float8_e4m3fn: (torch.int8, np.dtype(ml_dtypes.float8_e4m3fn)),
        torch.float8_e5m2: (torch.int8, np.dtype(ml_dtypes.float8_e5m2)),
        torch.float8_e4m3fnuz: (torch.int8, np.dtype(ml_dtypes.float8_e4m3fnuz)),
        torch.float8_e5m2fnuz: (torch.int8, np.dtype(ml_dtypes.float8_e5m2fnuz)),
    }
    return to_jax, to_torch, host_view


def supported() -> frozenset:
    """The torch dtypes a tpu tensor can hold (``torch.accelerator.get_device_capability()["supported_dtypes"]``)."""
    return frozenset(_tables()[0])


def to_jax_dtype(dtype: torch.dtype):
    try:
        return _tables()[0][dtype]
    except KeyError:
        # not a TypeError: Python turns one raised inside a binary operator into "unsupported operand type(s)"
        raise RuntimeError(f"torch dtype {dtype} is not supported on the tpu device") from None


def to_torch_dtype(jax_dtype) -> torch.dtype:
    return _tables()[1][np.dtype(jax_dtype)]


def astype(array, want):
    """``array.astype(want)`` (a traced or concrete JAX array) with torch's conversion rules where XLA's
    differ: a complex value converted to a real dtype keeps its real part (no warning), and a value
    beyond float8_e4m3fn's range (infinities included) saturates to +-448 as torch's conversion does
    (XLA gives NaN; e4m3fn has no infinity). NaN stays NaN."""
    import ml_dtypes

    jnp = platform.jax().numpy
    want = np.dtype(want)
    src = np.dtype(array.dtype)
    if src == want:
        return array
    if jnp.issubdtype(src, jnp.complexfloating) and not jnp.issubdtype(want, jnp.complexfloating):
        array = jnp.real(array)
        src = np.dtype(array.dtype)
    if want == np.dtype(ml_dtypes.float8_e4m3fn) and src != np.dtype(bool):
        top = 448
        if jnp.issubdtype(src, jnp.floating):
            array = jnp.clip(array, -top, top)  # maximum/minimum propagate NaN
        elif jnp.iinfo(src).max > top:
            array = jnp.clip(array, max(-top, jnp.iinfo(src).min), top)
    return array.astype(want)


def host_to_device(cpu_tensor: torch.Tensor, device):
    """Copy a CPU tensor to a device array (same dtype, same logical shape)."""
    jax = platform.jax()
    if not prefetch.started():
        prefetch.start_early()  # a warm process loads its programs while the weights move
    t = cpu_tensor.detach()
    if t.device.type != "cpu":
        # a meta tensor (accelerate's offloaded weights, a model built on the meta device): torch's error
        raise NotImplementedError(
            f"Cannot copy out of {t.device.type} tensor; no data! ({tuple(t.shape)} {t.dtype} to the tpu "
            "device)" + (" If the weights were offloaded with accelerate (enable_sequential_cpu_offload), "
                         "remove the offload hooks before moving the model." if t.device.type == "meta" else ""))
    to_jax_dtype(t.dtype)  # a dtype the device cannot hold is refused by name (not by numpy)
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    view = _tables()[2].get(t.dtype)
    if view is not None:
        arr = t.view(view[0]).numpy().view(view[1])
    else:
        arr = t.numpy()
    counters.counters["host_to_device_bytes"] += arr.nbytes
    if getattr(device, "platform", "cpu") == "cpu":
        # on the CPU platform device_put shares the numpy buffer (zero copy): without this copy a
        # later in-place change of the CPU tensor would silently change the tpu tensor
        arr = arr.copy()
    with platform.X64():  # else JAX truncates int64/float64 host data to 32 bits
        try:
            out = jax.device_put(arr, device)
        except Exception as exc:
            oom = out_of_memory(exc, f"uploading a {list(t.shape)} {t.dtype} tensor to the device")
            if oom is None:
                raise
            raise oom from exc
    _UPLOADS.add(out, arr.nbytes)
    return out


class _UploadsInFlight:
    """Uploads return before their copies are done, and an accelerator's runtime may stage each one in host
    memory until then: a model moved at once (a 9.5 GB text encoder under model offload) could stage all of
    it beside the model's own host memory. Past ``LIMIT`` bytes in flight, an upload waits for the oldest ones
    (the device's copy engine stays busy: the bytes still in flight keep it so)."""

    LIMIT = 1 << 30

    def __init__(self):
        self.arrays: collections.deque = collections.deque()  # (weak reference, bytes), oldest first
        self.bytes = 0

    def add(self, array, nbytes: int) -> None:
        if nbytes < (1 << 20):
            return  # (small ones: not worth the bookkeeping)
        self.arrays.append((weakref.ref(array), nbytes))  # (weakly: a freed tensor's memory goes at once)
        self.bytes += nbytes
        while self.bytes > self.LIMIT and len(self.arrays) > 1:
            ref, n = self.arrays.popleft()
            self.bytes -= n
            oldest = ref()
            if oldest is not None:
                try:
                    oldest.block_until_ready()
                except Exception:  # noqa: BLE001  (a failed upload raises where its value is used)
                    pass


_UPLOADS = _UploadsInFlight()


def device_to_host(array, dtype: torch.dtype) -> torch.Tensor:
    """Copy a device array to a new CPU tensor of the given torch dtype (waits for the value)."""
    platform.jax()  # raises in a forked child, where reading would hang
    try:
        # wait first: a value whose program failed (out of memory) raises here, while np.asarray of it
        # aborts the process in PJRT's CPU client ("Check failed: buffer_.IsConcrete()")
        array.block_until_ready()
        host, fresh = _host_array(array)
    except Exception as exc:  # a collective that produced (or preceded) this value failed
        failed_values.remember(array)  # raised here: a later synchronize does not raise it again
        err = multiprocess.collective_error(exc, "a collective this value waited for")
        if err is exc:
            err = out_of_memory(exc, "computing a value that was read (dispatch is asynchronous: the op that "
                                "ran out is earlier; TORCH_TPU_LAUNCH_BLOCKING=1 names it)")
            if err is None:
                if not isinstance(exc, platform.jax().errors.JaxRuntimeError):
                    raise  # already the backend's own error (a fused graph's, naming its op)
                err = OpError(f"tpu: the program computing a value that was read failed on the device: {exc} "
                              "(dispatch is asynchronous: TORCH_TPU_LAUNCH_BLOCKING=1 names the op)")
        raise err from exc
    counters.counters["device_to_host_bytes"] += host.nbytes
    counters.counters["device_to_host_reads"] += 1
    view = _tables()[2].get(dtype)
    if view is not None:  # (bfloat16, float8: numpy has no such dtype torch knows; the bits as integers)
        host = host.view(np.dtype(f"i{host.dtype.itemsize}"))
    if not fresh or not host.flags.c_contiguous:
        host = np.array(host, order="C")  # copies; np.ascontiguousarray would turn 0-d into 1-d
    if host.flags.writeable:
        out = torch.from_numpy(host)
    else:
        with warnings.catch_warnings():  # memory nobody else holds, marked read-only by JAX's C++ side
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            out = torch.from_numpy(host)
    return out.view(dtype) if view is not None else out


def _host_array(array) -> tuple[np.ndarray, bool]:
    """``array``'s value on the host, and whether that is a fresh copy nothing else holds (a TPU's or GPU's
    transfer) rather than a view of the device buffer (the CPU platform's). JAX's own ``np.asarray(array)``
    does the same transfer and also keeps the copy on the array, read-only: the tensor made from it then
    needed a second copy (the chip read bfloat16 at 0.36 GiB/s where JAX reads 0.62, float32 at 0.62 where
    JAX reads 2.46)."""
    single = getattr(array, "_single_device_array_to_np_array_did_copy", None)
    if single is not None and len(array.sharding.device_set) == 1:
        return single()
    return np.asarray(array), False
