"""The minimal storage kernels, one table for every mode: data movement (copy_, _to_copy, .item()),
allocation (empty_like, new_empty), and in-place metadata changes (set_, resize_, as_strided_).

Everything here reads or writes whole storages or views; ops that compute go through the op table.

Why one module: one table of storage kernels, a few lines each.
"""
from __future__ import annotations

import math

import torch

from ..engine import deferred_errors, streams
from ..engine.launchers import launch
from ..errors import device_mismatch
from ..runtime import caches, dtypes, platform, program_cache, stable_keys
from . import host_copies, strided
from .tensor import TpuStorage, TpuTensor, empty, refresh_layout, value_of, wrap, write

aten = torch.ops.aten
_META = torch._C.DispatchKey.Meta
_CONVERT_FNS: dict = caches.register("cast programs", caches.Bounded(program_cache.max_programs))
stable_keys.register_kind("convert")  # (source shape and dtype, target shape and dtype)


def _device_is_tpu(device) -> bool:
    if device is None:
        return False
    return torch.device(device).type == "tpu"


def convert(array, dst_shape, dst_dtype: torch.dtype):
    """Cast and broadcast a device array (a small cached program; nothing when it already fits)."""
    want = dtypes.to_jax_dtype(dst_dtype)
    if tuple(array.shape) == tuple(dst_shape) and array.dtype == want:
        return array
    key = ("convert", tuple(array.shape), array.dtype, tuple(dst_shape), want)
    fn = _CONVERT_FNS.get(key)
    if fn is None:
        jnp = platform.jax().numpy

        def fn(a):
            return jnp.broadcast_to(dtypes.astype(a, want), tuple(dst_shape))

        _CONVERT_FNS[key] = fn
    return launch(key, fn, (array,), (tuple(dst_shape), want), "copy")


_VIEW_CONVERT_FNS: dict = caches.register("view cast programs", caches.Bounded(program_cache.max_programs))
stable_keys.register_kind("view-convert")  # a view-read key's layout and the target dtype


def convert_value(x: TpuTensor, dst_dtype: torch.dtype):
    """``x``'s value cast to ``dst_dtype``: for a view whose value is not computed yet, one program that reads
    it from its storage and casts (``x.float()`` of a reshaped or sliced tensor: diffusers' rotary embedding
    does it twice per attention), instead of a view read and a cast."""
    storage = x._tpu_storage
    want = dtypes.to_jax_dtype(dst_dtype)
    if x._tpu_full or x._tpu_cache_version == storage.version or want == dtypes.to_jax_dtype(x.dtype):
        return convert(value_of(x), x.shape, dst_dtype)
    read_key, read, args = strided.reader(storage, x)
    key = ("view-convert", *read_key[1:], want)
    fn = _VIEW_CONVERT_FNS.get(key)
    if fn is None:
        def fn(storage_array, view_offset):
            return dtypes.astype(read(storage_array, view_offset), want)

        _VIEW_CONVERT_FNS[key] = fn
    return launch(key, fn, args, (tuple(x.shape), want), "copy")


def to_host(x: TpuTensor, owned: bool = True) -> torch.Tensor:
    """x's value as a new CPU tensor (``owned``: the caller's to keep; else only read): a point that waits,
    so pending device-side checks are read first. A whole storage still as it was uploaded from a CPU tensor
    is that tensor (``host_copies``): no device read, and nothing to wait for."""
    if x._tpu_full:
        host = (host_copies.take if owned else host_copies.peek)(x._tpu_storage)
        if host is not None:
            return host
    arr = value_of(x)
    deferred_errors.verify()
    deferred_errors.check_read(arr)  # a value computed from a failed check raises at every read
    return dtypes.device_to_host(arr, x.dtype)


def copy_into(dst: TpuTensor, src: torch.Tensor) -> TpuTensor:
    """``dst.copy_(src)`` for a tpu ``dst`` and a tpu or CPU ``src`` (broadcast and cast like torch)."""
    if isinstance(src, torch.nn.parameter.UninitializedTensorMixin):
        # its .shape raised torch's "uninitialized parameter" error from inside copy_ (a lazy module's
        # module.to("tpu") before its first call)
        raise RuntimeError(
            "copy_: a lazy module's uninitialized parameter cannot move to the tpu (a Parameter subclass "
            "does not survive module.to('tpu'), see the README's limits): call the module once on the "
            "CPU to initialise it, then move it")
    if dst.shape != src.shape:
        try:
            fits = torch.broadcast_shapes(src.shape, dst.shape) == dst.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise RuntimeError(
                f"The size of tensor a ({tuple(dst.shape)}) must match the size of tensor b "
                f"({tuple(src.shape)}) (copy_ into a tpu tensor)") from None
    strided.check_writable(dst)
    if isinstance(src, TpuTensor):
        strided.check_no_partial_overlap(dst, (src,))
        if tuple(src.shape) == tuple(dst.shape):  # (a view source read inside the cast's program)
            write(dst, convert_value(src, dst.dtype))
            return dst
        arr = value_of(src)
    else:
        arr = _upload(src, dst._tpu_storage.device_index)
    write(dst, convert(arr, dst.shape, dst.dtype))
    if dst._tpu_full and _uploaded_as_is(src, dst):
        host_copies.remember(dst._tpu_storage, src)
    return dst


def _upload(src: torch.Tensor, device_index: int):
    """``src`` (CPU) uploaded (asynchronously: PJRT's copy runs beside the program queue), and noted on the
    current side stream if there is one (``engine/streams.py``: waiting for that stream waits for it)."""
    arr = dtypes.host_to_device(src, platform.jax_device(device_index))
    if streams.side_stream() is not None:
        streams.note_upload(arr)
    return arr


def _uploaded_as_is(src: torch.Tensor, dst: TpuTensor) -> bool:
    """``src`` (CPU) holds ``dst``'s new value in its memory as it is: its shape, dtype, contiguous, no math bit."""
    return (src.device.type == "cpu" and src.dtype == dst.dtype and src.shape == dst.shape and src.is_contiguous()
            and src.layout == torch.strided and not src.is_conj() and not src.is_neg())


def copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, TpuTensor):
        return copy_into(dst, src)
    # CPU destination, tpu source
    host = to_host(src, owned=False)
    dst.copy_(host)
    return dst


def copy_from(func, args, kwargs):
    """``_copy_from(src, dst)``: torch.tensor(data, device="tpu") and friends."""
    src, dst = args[0], args[1]
    return copy_(func, (dst, src), {})


def to_copy(func, args, kwargs):
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "meta":
        # no data to read: a meta tensor of x's layout (accelerate's offload to "meta" read every weight back)
        meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return aten._to_copy.default(meta, **kwargs)
    if device is not None and not _device_is_tpu(device):
        host = to_host(x)
        if dtype != x.dtype:
            host = host.to(dtype)
        if torch.device(device).type != "cpu":
            host = host.to(device)
        return host
    index = None if device is None else torch.device(device).index
    if index not in (None, 0):  # tpu:0 -> tpu:1 returned a tpu:0 tensor
        raise RuntimeError(f"{func}: tpu:{index} does not exist: torch_tpu binds one device per process "
                           "(tpu:0); run one process per device")
    if not isinstance(x, TpuTensor):  # CPU tensor -> tpu (some paths call _to_copy directly)
        arr = _upload(x, 0)
        out = wrap(convert(arr, x.shape, dtype), dtype)
        if _uploaded_as_is(x, out):
            host_copies.remember(out._tpu_storage, x)
        return out
    fmt = kwargs.get("memory_format")
    if fmt not in (None, torch.preserve_format) or not x.is_contiguous():
        # x.to(dtype) keeps a dense non-contiguous layout (channels_last ...), as on CPU; .to(memory_format=)
        return copy_into(empty_like(None, (x,), {"dtype": dtype, "memory_format": fmt}), x)
    # _to_copy must not alias: arrays are immutable, so a new storage is enough
    arr = convert_value(x, dtype)
    return TpuTensor(TpuStorage(arr, arr.shape, dtype), arr.shape, dtype=dtype)


def local_scalar_dense(func, args, kwargs):
    return to_host(args[0], owned=False).item()


def resize_(func, args, kwargs):
    x, size = args[0], tuple(args[1])
    if tuple(x.shape) == size:
        return x
    if not x._tpu_full or view_resizable(x, size):
        # (shrinking keeps the storage, as CPU does: views taken before still share it)
        resize_view(x, size)
        return x
    resize_whole(x, size)
    return x


def view_resizable(x: TpuTensor, size) -> bool:
    """A view resized to ``size`` (contiguous, at its offset) stays inside its base's storage."""
    st = x._tpu_storage
    return x.storage_offset() + math.prod(size) <= math.prod(st.shape)


def resize_view(x: TpuTensor, size) -> None:
    """``x`` (a view) becomes a contiguous view of ``size`` at its offset in the same storage, as CPU's
    resize_ of a view does; growing past the storage's end (which CPU does by growing the base's
    storage in place) is refused."""
    size = tuple(size)
    if not view_resizable(x, size):
        raise RuntimeError(
            f"tpu: cannot resize a view of shape {tuple(x.shape)} at storage offset {x.storage_offset()} to "
            f"{size}: it would need {x.storage_offset() + math.prod(size)} elements and its base's storage "
            f"has {math.prod(x._tpu_storage.shape)} (a tpu storage cannot grow in place; allocate a new "
            "tensor)")
    stride = tuple(torch.empty(size, device="meta").stride())
    _set_sizes(x, x.storage_offset(), size, stride)
    _retarget(x, x._tpu_storage)


def resize_whole(x: TpuTensor, size) -> None:
    """``x`` (a whole storage) becomes a contiguous tensor of ``size`` on a new storage that starts with
    x's elements (as CPU's resize_; new elements read as zeros). Views of the old storage keep it."""
    # (x.data = new takes new's dispatch keys: made in x's inference state, so an inference tensor stays
    # one and a normal tensor resized under inference_mode stays normal)
    with torch.inference_mode(x.is_inference()):
        new = deterministic_fill(empty(tuple(size), x.dtype, x.device.index or 0))
    keep = min(x.numel(), new.numel())
    if keep:
        copy_into(new.view(-1)[:keep], x.reshape(-1)[:keep])
    with torch.no_grad():
        x.data = new  # sizes and strides (the wrapper's metadata); the version counter stays x's
    x._tpu_storage = new._tpu_storage
    x._tpu_full = True
    x._tpu_cache = None
    x._tpu_cache_version = -1


def is_pinned(func, args, kwargs):
    return False


def _set_sizes(dst: TpuTensor, offset: int, size, stride, source=None) -> None:
    """Give the wrapper ``dst`` new sizes, strides and offset in place, with torch's own meta kernel of
    ``set_`` (its checks: negative sizes ...). A wrapper's torch-level storage is a null-data, resizable
    one whose byte count that kernel just records. With ``source`` (a tpu tensor) the wrapper also takes
    the source's torch-level storage, as ``set_(tensor)`` does on CPU."""
    holder = torch._C.TensorBase.untyped_storage(dst if source is None else source)
    # (a torch-function mode, such as the one set_default_device leaves active, must not send this
    # internal call back through dispatch: it reached this kernel with the wrapper's own storage)
    with torch._C.DisableTorchFunction():
        aten.set_.source_Storage_storage_offset._op_dk(_META, dst, holder, offset, size, stride)


def _retarget(dst: TpuTensor, storage: TpuStorage) -> TpuTensor:
    dst._tpu_storage = storage
    refresh_layout(dst)
    return dst


def set_source_tensor(func, args, kwargs):
    """``dst.set_(src)``: dst takes src's storage, sizes, strides and offset (they share it afterwards);
    views taken of dst before keep the old storage."""
    dst, src = args[0], args[1]
    if not isinstance(src, TpuTensor):
        raise device_mismatch(func, src)
    _set_sizes(dst, src.storage_offset(), src.shape, src.stride(), source=src)
    return _retarget(dst, src._tpu_storage)


def set_empty(func, args, kwargs):
    """``t.set_()``: an empty tensor on a new empty storage."""
    dst = args[0]
    _set_sizes(dst, 0, (0,), (1,))
    return _retarget(dst, TpuStorage(None, (0,), dst.dtype, dst._tpu_storage.device_index))


def _tpu_storage_of(func, dst: TpuTensor, source) -> TpuStorage:
    if isinstance(source, torch.TypedStorage):
        source = source._untyped_storage
    storage = getattr(source, "_tpu", None)
    if storage is None:
        where = getattr(source, "device", "cpu")
        raise RuntimeError(
            f"{func}: Attempted to set the storage of a tensor on device \"{dst.device}\" to a storage on "
            f"different device \"{where}\".  This is no longer allowed; the devices must match.")
    return storage


def set_source_storage(func, args, kwargs):
    """``dst.set_(storage[, offset, size, stride])`` with a tpu untyped (or typed) storage: dst becomes a
    view of that storage in dst's dtype (TypedStorage element access goes through here)."""
    dst, source = args[0], args[1]
    storage = _tpu_storage_of(func, dst, source)
    itemsize = dst.dtype.itemsize
    if len(args) > 2:
        offset, size = int(args[2]), tuple(args[3])
        stride = tuple(args[4]) if len(args) > 4 and args[4] is not None and len(args[4]) else None
    else:
        offset, size, stride = 0, (storage.nbytes // itemsize,), None
    if stride is None:
        stride = tuple(torch.empty(size, device="meta").stride())
    if 0 not in size:
        need = (offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))) * itemsize
        if need > storage.nbytes:
            raise RuntimeError(
                f"{func}: sizes {list(size)}, strides {list(stride)}, storage offset {offset} and itemsize "
                f"{itemsize} need a storage of {need} bytes, but the tpu storage has {storage.nbytes} "
                "(a tpu storage cannot grow; set_ a larger storage)")
    _set_sizes(dst, offset, size, stride)
    return _retarget(dst, storage)


def deterministic_fill(t: TpuTensor) -> TpuTensor:
    """Under ``torch.use_deterministic_algorithms(True)`` (with torch.utils.deterministic's
    ``fill_uninitialized_memory``, on by default) new memory is filled as on CPU and CUDA: NaN for
    floating and complex dtypes, the largest value otherwise (True for bool), so reading memory never
    written shows. (It read as zeros.)"""
    if t.numel() and torch.are_deterministic_algorithms_enabled() and \
            torch.utils.deterministic.fill_uninitialized_memory:
        if t.dtype.is_floating_point or t.dtype.is_complex:
            value = float("nan")
        elif t.dtype is torch.bool:
            value = True
        else:
            value = torch.iinfo(t.dtype).max
        with torch.no_grad():  # through the router: factory kernels run with the Python key excluded
            TpuTensor.__torch_dispatch__(aten.fill_.Scalar, (TpuTensor,), (t, value), {})
    return t


def _elsewhere(kwargs):
    """The device a factory's ``device=`` names when it is not the tpu (None otherwise)."""
    device = kwargs.get("device")
    if device is None or torch.device(device).type == "tpu":
        return None
    return torch.device(device)


def empty_like(func, args, kwargs):
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    device = _elsewhere(kwargs)
    if device is not None:
        # ``torch.empty_like(t, device="meta")`` (dynamo pickles a guarded tensor's metadata so): a tensor
        # on that device with the layout torch gives, made from a meta stand-in of ``x``
        mx = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return torch.empty_like(mx, dtype=dtype, device=device,
                                memory_format=kwargs.get("memory_format") or torch.preserve_format)
    stride = None
    if not x.is_contiguous() or kwargs.get("memory_format") not in (None, torch.preserve_format):
        # torch's layout rule (preserve_format keeps dense strides, channels_last ...) via meta
        mx = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        stride = torch.empty_like(mx, memory_format=kwargs.get("memory_format") or torch.preserve_format).stride()
    return deterministic_fill(empty(x.shape, dtype, stride=stride))


def new_empty(func, args, kwargs):
    x, size = args[0], args[1]
    stride = args[2] if func is aten.new_empty_strided.default and len(args) > 2 else None
    device = _elsewhere(kwargs)
    if device is not None:  # ``t.new_empty(3, device="cpu")``
        dtype = kwargs.get("dtype") or x.dtype
        return torch.empty(size, dtype=dtype, device=device) if stride is None else \
            torch.empty_strided(size, stride, dtype=dtype, device=device)
    return deterministic_fill(empty(size, kwargs.get("dtype") or x.dtype, stride=stride))


def as_strided_(func, args, kwargs):
    """In-place metadata change (squeeze_, unsqueeze_, transpose_, t_ land here): set the
    wrapper's own sizes/strides with torch's kernel, then refresh what the payload cached."""
    x = args[0]
    torch.ops.aten.as_strided_.default._op_dk(
        torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional, *args, **kwargs)
    refresh_layout(x)
    return x


def has_compatible_shallow_copy_type(func, args, kwargs):
    # reached under inference_mode by nn.Module.to(): only two tpu tensors can share a TensorImpl type
    a, b = args
    return isinstance(a, TpuTensor) and isinstance(b, TpuTensor)


def lift_fresh(func, args, kwargs):
    """A fresh constant (``torch.tensor(data, device="tpu")``): the tensor itself. While a tracing mode
    runs (dynamo's fake mode, AOTAutograd's functional one: ``torch.tensor`` inside a compiled function)
    the modes decline a real tpu tensor, so the constant is lifted as the CPU tensor it was built from
    and moved to the device by a traced copy (the compiled program holds the constant)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    x = args[0]
    if not _get_current_dispatch_mode_stack():
        return x
    # the device's value, not the CPU tensor an upload kept (host_copies): that one was made before the
    # tracing mode ran, and the mode refuses ops on it ("Please convert all Tensors to FakeTensors first")
    host = dtypes.device_to_host(value_of(x), x.dtype)
    if host.numel() > 1:
        return aten._to_copy.default(aten.lift_fresh.default(host), device=x.device)
    # The fake mode computes ops of one-element constants for real (constant propagation) and cannot
    # make a fake of the real tpu result: move a two-element constant instead and take its first
    padded = torch.cat([host.reshape(-1), torch.zeros(2 - host.numel(), dtype=host.dtype)])
    moved = aten._to_copy.default(aten.lift_fresh.default(padded), device=x.device)
    return aten.view.default(aten.slice.Tensor(moved, 0, 0, host.numel()), list(host.shape))


KERNELS = {
    aten.lift_fresh.default: lift_fresh,
    aten.copy_.default: copy_,
    aten._copy_from.default: copy_from,
    aten._copy_from_and_resize.default: copy_from,
    aten._to_copy.default: to_copy,
    aten._local_scalar_dense.default: local_scalar_dense,
    aten.resize_.default: resize_,
    aten.is_pinned.default: is_pinned,
    aten.set_.source_Tensor: set_source_tensor,
    aten.set_.default: set_empty,
    aten.set_.source_Storage: set_source_storage,
    aten.set_.source_Storage_storage_offset: set_source_storage,
    aten.empty_like.default: empty_like,
    aten.new_empty.default: new_empty,
    aten.new_empty_strided.default: new_empty,
    aten.as_strided_.default: as_strided_,
    aten._has_compatible_shallow_copy_type.default: has_compatible_shallow_copy_type,
}
