"""JAX interop: ``to_jax`` / ``from_jax`` (zero copy where the layout allows) and DLPack both ways.

A tpu tensor's storage holds one immutable ``jax.Array``. ``to_jax`` of a tensor that is its whole
storage returns that very array (no copy); a view (a slice, a transpose, a dtype view) is read into a
new array first. ``from_jax`` wraps an array of this process's device as the storage of a new tensor
(no copy; an array on another device is copied there). Because device arrays are immutable, both
directions are snapshots: a later in-place op on the tensor replaces its storage's array and leaves
the ``jax.Array`` the user holds unchanged, exactly as a functional update does in JAX. ``__dlpack__``
exports a copy unless asked for ``copy=False`` (a DLPack consumer may write what it imports).

torch's own DLPack functions, as for a CUDA tensor: ``torch.from_dlpack(t)`` of a tpu tensor (or of
the capsule ``torch.utils.dlpack.to_dlpack(t)`` made) is a tpu tensor sharing ``t``'s memory (an in-place
op on either is seen by the other), ``copy=True`` a copy, ``device="cpu"`` a copy on the CPU; any
producer imports to the tpu with ``device="tpu"``. The capsule itself, read by another library, holds a
snapshot (as ``__dlpack__`` exports).
"""
from __future__ import annotations

import collections

import torch

from ..engine.deferred_errors import readable_array
from ..runtime import dtypes, platform
from .tensor import TpuStorage, TpuTensor, value_of


@platform.with_x64
def to_jax(tensor: torch.Tensor):
    """The value of a tpu tensor as a ``jax.Array`` on its device (the storage's own array when the
    tensor is the whole storage; autograd does not follow it).

    An int64 or float64 tensor exports an int64 or float64 array, but JAX arithmetic on it in your code
    follows JAX's default (64-bit mode off, which torch_tpu never changes for you): ``a + 1`` is int32 and
    ``a * 2`` float32, so int64 values past 2**31 wrap around (``2**40 + 1`` gives 1) and float64 values
    round or overflow (``1e300 * 2`` gives inf). Compute under ``jax.enable_x64(True)`` (or set
    ``jax.config.update("jax_enable_x64", True)``) to keep 64 bits."""
    if not isinstance(tensor, TpuTensor):
        where = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise TypeError(f"torch_tpu.to_jax expects a tpu tensor, got {where}; move it with .to('tpu') "
                        "first (or use jax.numpy.asarray(t.numpy()) for a CPU tensor)")
    return readable_array(value_of(tensor), "the tensor to_jax exports")


@platform.with_x64
def from_jax(array, *, requires_grad: bool = False) -> torch.Tensor:
    """A new tpu tensor holding ``array`` (a ``jax.Array``): no copy when the array is on this
    process's tpu device, else one copy to it."""
    jax = platform.jax()
    if not isinstance(array, jax.Array):
        raise TypeError(f"torch_tpu.from_jax expects a jax.Array, got {type(array).__name__}")
    if isinstance(array, jax.core.Tracer):
        raise TypeError("torch_tpu.from_jax got a traced value (inside jax.jit/grad): pass a concrete array")
    if array.is_deleted():
        raise RuntimeError("torch_tpu.from_jax: the jax.Array was deleted (donated or freed)")
    try:
        dtype = dtypes.to_torch_dtype(array.dtype)
    except KeyError:
        raise TypeError(f"torch_tpu.from_jax: jax dtype {array.dtype} has no torch equivalent on the tpu "
                        "device") from None
    device = platform.jax_device(0)
    if array.devices() != {device} or not array.is_fully_addressable:
        array = jax.device_put(array, device)
    elif getattr(array, "weak_type", False):
        # a weakly typed array (from a Python scalar) would make every program retrace for it
        array = jax.device_put(array.astype(array.dtype), device)
    storage = TpuStorage(array, tuple(array.shape), dtype, 0)
    tensor = TpuTensor(storage, tuple(array.shape), dtype=dtype)
    return tensor.requires_grad_(True) if requires_grad else tensor


@platform.with_x64
def from_dlpack(obj, *, copy: bool | None = None) -> torch.Tensor:
    """A tpu tensor from any DLPack producer (a CPU or CUDA torch tensor, a NumPy or CuPy array, a
    capsule): zero copy where the producer's memory is on this process's device and JAX accepts it.
    Like every DLPack import, a zero-copy result shares the producer's memory: writing the source
    afterwards is undefined for the tpu tensor (pass ``copy=True`` to own the bytes)."""
    jax = platform.jax()
    if isinstance(obj, TpuTensor):
        return obj.detach().clone() if copy else obj.detach()
    device = platform.jax_device(0)
    try:
        array = jax.dlpack.from_dlpack(obj, device=device, copy=copy)
    except Exception:
        if isinstance(obj, torch.Tensor) and copy is not False:  # JAX refuses this layout or device
            return obj.detach().to("tpu")
        raise
    if copy:  # JAX may still alias the producer's memory (its CPU client does): copy explicitly
        array = jax.device_put(array, device, may_alias=False).block_until_ready()  # copied before return
    return from_jax(array)


def _dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A DLPack export of a snapshot: a tpu tensor's buffer is immutable and may be shared by other
    tensors (a ``to(copy=True)``, a detached alias) or donated to a later in-place program, so a consumer
    that writes (``torch.from_dlpack(t)[0] = 1``) must not write it. ``copy=False`` shares the buffer
    (read only: writing it is undefined)."""
    if self.requires_grad:  # torch's __dlpack__ refuses it too
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    return _export(self, stream, max_version, dl_device, copy)


def _export(self, stream=None, max_version=None, dl_device=None, copy=None):
    array = to_jax(self)
    if copy is not False:
        jax = platform.jax()
        array = jax.device_put(array, next(iter(array.devices())), may_alias=False)
        copy = None  # the export of this private array needs no second copy
    kwargs = {}
    if stream is not None:
        kwargs["stream"] = stream
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    return array.__dlpack__(**kwargs)


def _dlpack_device(self):
    return to_jax(self).__dlpack_device__()


# capsules made by to_dlpack(tpu tensor), by id (the capsule is held, so its id stays its own), with
# the tensor each shares: torch.from_dlpack(capsule) returns that tensor's alias. Bounded: a capsule
# never imported is forgotten after _MAX_EXPORTS newer ones (torch's import then reads its snapshot).
_EXPORTS: collections.OrderedDict = collections.OrderedDict()
_MAX_EXPORTS = 64
_TORCH_FROM_DLPACK = torch.utils.dlpack.from_dlpack
_TORCH_TO_DLPACK = torch.utils.dlpack.to_dlpack


def to_dlpack(tensor):
    """``torch.utils.dlpack.to_dlpack``: for a tpu tensor, a capsule holding a snapshot of its value,
    which ``torch.from_dlpack`` turns back into a tpu tensor sharing ``tensor``'s memory."""
    if not isinstance(tensor, TpuTensor):
        return _TORCH_TO_DLPACK(tensor)
    try:
        capsule = _export(tensor)  # (torch's to_dlpack exports a tensor that requires grad, too)
    except BufferError:  # JAX exports no TPU buffer: the capsule holds a host copy
        capsule = _TORCH_TO_DLPACK(tensor.detach().cpu())
    _EXPORTS[id(capsule)] = (capsule, tensor.detach())
    while len(_EXPORTS) > _MAX_EXPORTS:
        _EXPORTS.popitem(last=False)
    return capsule


def torch_from_dlpack(ext_tensor, *, device=None, copy=None):
    """``torch.from_dlpack`` / ``torch.utils.dlpack.from_dlpack`` knowing the tpu device."""
    target = torch.device(device) if device is not None else None
    if not isinstance(ext_tensor, TpuTensor):
        entry = _EXPORTS.pop(id(ext_tensor), None)
        if entry is not None and entry[0] is ext_tensor:
            ext_tensor = entry[1]
        elif target is not None and target.type == "tpu":
            return from_dlpack(ext_tensor, copy=copy)
        else:
            return _TORCH_FROM_DLPACK(ext_tensor, device=device, copy=copy)
    if ext_tensor.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if target is None or target.type == "tpu":
        return ext_tensor.detach().clone() if copy else ext_tensor.detach()
    if copy is False:
        raise ValueError(f"cannot move DLPack tensor from device {ext_tensor.device} to {target} without "
                         "copying. Set copy=None or copy=True.")
    return ext_tensor.detach().to(target, copy=True)


def install() -> None:
    TpuTensor.__dlpack__ = _dlpack
    TpuTensor.__dlpack_device__ = _dlpack_device
    torch.utils.dlpack.from_dlpack = torch.from_dlpack = torch_from_dlpack
    torch.utils.dlpack.to_dlpack = torch.to_dlpack = to_dlpack
