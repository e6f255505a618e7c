"""The tpu tensor: a torch wrapper subclass whose data lives in an XLA buffer.

Aliasing model (the same one torch's own devices use): every tensor is a strided view of a
*storage*. A storage holds one immutable JAX array in its base's logical shape; mutating any view
replaces that array (a functional scatter) and bumps the storage's version, so the base and every
other view see the change the next time they are read. Views remember their torch metadata
(size, stride, storage offset), computed by torch's own meta kernels, and read their value lazily
with a small cached program (see ``strided.py``).

Why one module: the tensor subclass whose methods torch calls (flatten, dispatch, the storage's life): one class.
"""
from __future__ import annotations

import math

import torch

from ..engine import fused, module_graphs, poisoned
from ..engine.fused import LazyArray, note_write
from ..runtime import dtypes, memory, platform, program_cache
from . import strided

_DEVICE: torch.device | None = None
_cross = []  # [fn]: tensor/data_moves.swap, set at its install (a module above this one)


def _cross_device_data(t, new) -> None:
    if not isinstance(new, torch.Tensor) or not _cross:
        torch._C.TensorBase.data.__set__(t, new)  # torch's own error
        return
    _cross[0](t, new)


def set_cross_device_data(fn) -> None:
    _cross[:] = [fn]


def device_for(index: int = 0) -> torch.device:
    global _DEVICE
    if index == 0:
        if _DEVICE is None:
            _DEVICE = torch.device("tpu", 0)
        return _DEVICE
    return torch.device("tpu", index)


class TpuStorage:
    """A mutable holder of one immutable device array (the base's data)."""

    # _ptr (its address) and _py (a weak ref to its untyped storage object) are set only on request
    # (tensor/untyped.py), never on the hot path
    __slots__ = ("array", "shape", "dtype", "version", "nbytes", "device_index", "reshaped", "_ptr", "_py",
                 "__weakref__")

    def __init__(self, array, shape, dtype: torch.dtype, device_index: int = 0, nbytes: int | None = None,
                 _counts=memory.COUNTS):
        self.array = array  # jax.Array, or None: not yet written (reads as zeros)
        self.shape = shape = shape if type(shape) is tuple else tuple(shape)
        self.dtype = dtype
        self.version = 0
        self.device_index = device_index
        # (version, array): the whole value in another shape, read by fused mode at a graph boundary
        # (``_read_view``); views of this storage read from it while the version is current
        self.reshaped = None
        if nbytes is None:  # (an op's output passes its entry's: ``new_output``)
            nbytes = math.prod(shape) * dtype.itemsize
        self.nbytes = nbytes
        # counted in memory's counts (runtime/memory.py), inlined here: every op output makes a storage
        c = _counts
        in_use = c.in_use = c.in_use + nbytes
        live = c.live = c.live + 1
        c.allocs += 1
        c.allocated_bytes += nbytes
        if in_use > c.limit:  # torch.tpu.set_per_process_memory_fraction
            # its bytes uncounted now, not by __del__: the error's traceback keeps this half-made storage alive
            # (a test or a user holding the exception), and every later allocation would see them held; __del__
            # still counts it as freed (with no bytes)
            c.in_use -= nbytes
            c.freed_bytes += nbytes
            self.nbytes = 0
            memory.over_limit(nbytes, in_use - nbytes)
        if in_use > c.peak:
            c.peak = in_use
        if live > c.live_peak:
            c.live_peak = live

    def __del__(self, _counts=memory.COUNTS):
        # the counts are bound at definition: a storage kept alive in a module torn down after ``memory``
        # (a tensor on ``torch.some_attr``, a library's cache) is freed at exit when memory's globals are
        # None already
        c = _counts
        nbytes = self.nbytes
        c.in_use -= nbytes
        c.live -= 1
        c.frees += 1
        c.freed_bytes += nbytes

    def value(self):
        arr = self.array
        if arr is None:
            if not self.nbytes and math.prod(self.shape):
                _freed_error(self, "read")
            with platform.X64():  # a program of its own, cached (on disk too) like every other
                arr = program_cache.zeros(self.shape, dtypes.to_jax_dtype(self.dtype),
                                          platform.jax_device(self.device_index))
            self.array = arr
        return arr

    def set(self, array) -> None:
        if not self.nbytes and math.prod(self.shape):
            _freed_error(self, "written")
        if type(array) is LazyArray:  # fused mode: undone if the graph fails before this write
            note_write(self, self.array, array)
        self.array = array
        self.version += 1


def _freed_error(storage: TpuStorage, what: str):
    raise RuntimeError(
        f"tpu: a tensor whose storage was freed with untyped_storage().resize_(0) was {what}; re-allocate it "
        f"first with untyped_storage().resize_({math.prod(storage.shape) * storage.dtype.itemsize}) (on CPU "
        "this reads or writes freed memory)")


def _contiguous_strides(shape) -> tuple:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _dynamo_tracing() -> bool:
    import sys

    guards = sys.modules.get("torch._guards")
    return guards is not None and guards.TracingContext.try_get() is not None


class _DynamoOnly:
    """A class attribute visible only while dynamo traces (hasattr is False otherwise)."""

    def __init__(self, fn, static: bool = False):
        self.fn, self.static = fn, static

    def __get__(self, obj, cls=None):
        if not _dynamo_tracing():
            raise AttributeError("only defined while torch.compile traces")
        if self.static or obj is None:
            return self.fn
        return self.fn.__get__(obj, cls)


class _Unflatten(_DynamoOnly):
    """``__tensor_unflatten__``: visible only while dynamo traces, and the moment dynamo reads a tpu tensor
    as a traceable subclass (``is_traceable_wrapper_subclass(t)`` asks ``hasattr(t, "__tensor_unflatten__")``
    before it flattens ``t``, in its variable builder, fakeification and guard building), so reading it from a
    tensor also brings that tensor's meta stand-in up to date (``TpuTensor._tpu_fake_inner``)."""

    def __get__(self, obj, cls=None):
        fn = super().__get__(obj, cls)
        if obj is not None:
            obj._tpu_fresh_stand_in()
        return fn


class _StandIn:
    """``TpuTensor._tpu_fake_inner``, the inner tensor dynamo fakes and guards. A non-data descriptor: the
    first read stores the stand-in in the tensor's ``__dict__``, where every later read finds it without
    Python code (dynamo's guards read it once per tpu input at every compiled call)."""

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        return obj._tpu_fresh_stand_in()


def _fake_on_tpu(inner):
    """dynamo's fake of a tpu tensor: a plain FakeTensor whose device is tpu (not its meta stand-in's),
    so traced device logic sees "tpu" and other backends (inductor) cannot silently run on meta."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(inner, FakeTensor) and inner.device.type == "meta":
        meta = torch.empty_strided(inner.shape, inner.stride(), dtype=inner.dtype, device="meta")
        fake = FakeTensor(inner.fake_mode, meta, device_for(0))
        if inner.requires_grad:
            fake.requires_grad_(True)
        return fake
    return inner


class TpuTensor(torch.Tensor):
    """A tensor on the "tpu" device. Users never construct it directly."""

    _tpu_storage: TpuStorage
    # class-level defaults: a fresh (non-view) tensor sets only its storage (hot path)
    _tpu_full = True
    _tpu_cache = None
    _tpu_cache_version = -1

    @staticmethod
    def __new__(cls, storage: TpuStorage, size=None, stride=None, offset: int = 0, dtype=None,
                requires_grad: bool = False):
        if isinstance(storage, torch.Tensor):
            # ``type(param)(tensor, requires_grad=...)``: a tpu parameter's type is TpuTensor, and code
            # that rebuilds parameters by their type (accelerate's offload hooks) means nn.Parameter.
            return torch.nn.Parameter(storage, requires_grad=requires_grad)
        dtype = storage.dtype if dtype is None else dtype
        device = device_for(storage.device_index)
        if stride is None:
            t = torch.Tensor._make_wrapper_subclass(
                cls, size, dtype=dtype, device=device, requires_grad=requires_grad)
            full = dtype == storage.dtype and tuple(size) == storage.shape
        else:
            t = torch.Tensor._make_wrapper_subclass(
                cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=device,
                requires_grad=requires_grad)
            full = is_full(storage, size, stride, offset, dtype)
        t._tpu_storage = storage
        t._tpu_full = full
        t._tpu_cache = None
        t._tpu_cache_version = -1
        return t

    def _tpu_is_full(self) -> bool:
        storage = self._tpu_storage
        return (self.dtype == storage.dtype and self.storage_offset() == 0
                and tuple(self.shape) == storage.shape
                and (math.prod(storage.shape) <= 1 or self.stride() == _contiguous_strides(self.shape)))

    # Dispatch is installed by torch_tpu.eager.router (keeps this module free of op logic).
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __format__(self, format_spec):
        # ``f"{loss:.4f}"``: torch formats a 0-dim plain Tensor as its number, but tests
        # ``type(self) is Tensor``, which every tpu tensor (this subclass) failed
        if self.dim() == 0 and not isinstance(self, torch.nn.Parameter):
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __repr__(self, *, tensor_contents=None):
        """CPU torch's repr of the value, with the suffixes torch gives a device tensor: the device first
        (as ``device='cuda:0'``), then grad_fn or requires_grad; a Parameter says so."""
        try:
            cpu = self.detach().cpu()
            body = repr(cpu)
            data = "[]" if cpu.numel() == 0 else torch._tensor_str._tensor_str(cpu, len("tensor("))
        except Exception as exc:  # never let repr raise while debugging
            return f"<tpu tensor {tuple(self.shape)} {self.dtype}: value unavailable ({exc})>"
        if body.startswith("tensor(") and body.endswith(")"):
            head = "tensor(" + data
            if not body.startswith(head):
                head = body[:-1]
            rest = body[len(head):-1]
            if self.grad_fn is not None:
                name = type(self.grad_fn).__name__
                if name == "CppFunction":
                    name = self.grad_fn.name().rsplit("::", 1)[-1]
                rest += f", grad_fn=<{name}>"
            elif self.requires_grad:
                rest += ", requires_grad=True"
            body = f"{head}, device='{self.device}'{rest})"
        if getattr(self, "_is_param", False):
            body = "Parameter containing:\n" + body
        return body

    # ``p.data = w`` must also move the payload, which lives on the Python object (a property of this class, not
    # only torch.Tensor's of tensor/data_moves.py: torch.compile replays a traced ``.data =`` through it)
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, TpuTensor):
            _cross_device_data(self, new)  # (tensor/data_moves.py: between the CPU and the tpu)
            return
        torch._C.TensorBase.data.__set__(self, new)
        self._tpu_storage = new._tpu_storage
        self._tpu_full = new._tpu_full
        self._tpu_cache = new._tpu_cache
        self._tpu_cache_version = new._tpu_cache_version


    def __deepcopy__(self, memo):
        """A copy sharing nothing with self, but as much with other copies as self does with their
        originals (views of one storage stay views of one new storage). Device arrays are immutable,
        so the new storage may hold the same array: the copy is free, also of a value still pending in
        fused mode."""
        if id(self) in memo:
            return memo[id(self)]
        if getattr(self, "_is_param", False):
            # nn.Parameter.__deepcopy__ (a tpu parameter's type is TpuTensor, so torch's is not reached): a
            # parameter of its own holding a clone of the data, no .grad, no attributes, as on CPU and CUDA
            # (``ema = deepcopy(model)`` after a backward kept every .grad, and copied flat-buffer params
            # stayed views of one storage)
            result = torch.nn.Parameter(self.data.clone(memory_format=torch.preserve_format), self.requires_grad)
            memo[id(self)] = result
            return result
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the "
                               "deepcopy protocol at the moment.")
        import copy

        storage = self._tpu_storage
        new_storage = memo.get(id(storage))
        if new_storage is None:
            new_storage = TpuStorage(storage.array, storage.shape, storage.dtype, storage.device_index)
            memo[id(storage)] = new_storage
            memo.setdefault(id(memo), []).append(storage)  # keep the id valid while memo lives
        new = TpuTensor(new_storage, tuple(self.shape), self.stride(), self.storage_offset(), self.dtype,
                        requires_grad=self.requires_grad)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for name, value in self.__dict__.items():
            if not name.startswith("_tpu_"):  # the payload is shared above, caches are rebuilt
                new.__dict__[name] = copy.deepcopy(value, memo)
        memo[id(self)] = new
        return new

    def tolist(self):
        return self.detach().cpu().tolist()

    # torch.compile: while dynamo traces, a tpu tensor is a "traceable wrapper subclass" whose one
    # inner tensor is a meta stand-in; dynamo fakes it on the outer (tpu) device and unflatten hands
    # that plain FakeTensor back, so dynamo traces tpu tensors like any device's. Outside dynamo the
    # unflatten is hidden (else nn.Module._apply would swap_tensors every parameter on .to("tpu"));
    # flatten stays visible because dynamo's guards call it on every compiled call.
    def __tensor_flatten__(self):
        return ["_tpu_fake_inner"], None

    __tensor_unflatten__ = _Unflatten(
        lambda inner, ctx, outer_size, outer_stride: _fake_on_tpu(inner["_tpu_fake_inner"]), static=True)

    def _is_view(self):
        # While dynamo fakes graph inputs, describe a tpu view as a plain tensor: its fake view
        # replay would flatten the fake base, which is a plain FakeTensor (see unflatten above).
        if _dynamo_tracing():
            return False
        return torch._C.TensorBase._is_view(self)

    def __coerce_same_metadata_as_tangent__(self, expected_meta, expected_type=None):
        # compiled backward was traced on plain stand-ins; a tpu tangent is what it runs on
        return self

    _tpu_fake_inner = _StandIn()

    def _tpu_fresh_stand_in(self):
        """The meta stand-in of this tensor's current metadata, stored as ``_tpu_fake_inner`` in its
        ``__dict__``. Kept while the metadata is what it was made for: dynamo's aliasing guards compare
        inner tensors by identity. ``p.data = w`` (another shape, stride or dtype) changes the metadata
        without an op reaching this backend, so a stored stand-in can be stale between traces: the guards
        still read the old one, and fail on the outer tensor's own metadata; the trace that follows reads
        ``__tensor_unflatten__`` first (``_Unflatten``), which brings it up to date before dynamo fakes it
        (a stale one made that fakeification fail: ``__tensor_unflatten__``'s shape/stride assertion).
        ``refresh_layout`` drops it after in-place layout ops (``t_``, ``as_strided_`` ...)."""
        d = self.__dict__
        inner = d.get("_tpu_fake_inner")
        stride = self.stride()
        if inner is None or inner.dtype != self.dtype or inner.shape != self.shape or inner.stride() != stride:
            inner = d["_tpu_fake_inner"] = torch.empty_strided(self.shape, stride, dtype=self.dtype, device="meta")
        return inner

    def numpy(self, *, force: bool = False):
        raise TypeError(
            "can't convert tpu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
            "to host memory first.")


def new_full(array, dtype: torch.dtype, _make=torch.Tensor._make_wrapper_subclass) -> "TpuTensor":
    """Wrap a fresh device array (an op's output) as a new tensor on tpu:0."""
    shape = array.shape  # (a Python property of JAX's arrays on some versions: read once)
    t = _make(TpuTensor, shape, dtype=dtype, device=_DEVICE or device_for(0))
    t._tpu_storage = TpuStorage(array, shape, dtype)
    return t


def new_output(array, shape: tuple, dtype: torch.dtype, nbytes: int,
               _make=torch.Tensor._make_wrapper_subclass, _storage=TpuStorage) -> "TpuTensor":
    """Hot path (a plain op's result): ``new_full`` of an array whose shape and byte count the caller
    knows already (the op entry's output: its program returns that shape, see ``eager/entries.py``), so
    neither JAX's ``shape`` property nor the byte count is computed again."""
    t = _make(TpuTensor, shape, dtype=dtype, device=_DEVICE or device_for(0))
    t._tpu_storage = _storage(array, shape, dtype, 0, nbytes)
    return t


def is_full(storage: TpuStorage, size, stride, offset: int, dtype: torch.dtype) -> bool:
    """Whether a view of ``storage`` of this geometry is all of it, in its shape and dtype (``_tpu_full``)."""
    return (dtype == storage.dtype and offset == 0 and tuple(size) == storage.shape
            and (math.prod(storage.shape) <= 1 or tuple(stride) == _contiguous_strides(size)))


def new_view(storage: TpuStorage, size, stride, offset: int, dtype: torch.dtype, full: bool,
             _make=torch.Tensor._make_wrapper_subclass) -> "TpuTensor":
    """Hot path (every view op): ``TpuTensor(storage, size, stride, offset, dtype)`` whose ``full``
    (``is_full`` of the same arguments) the caller worked out once for this geometry."""
    t = _make(TpuTensor, size, strides=stride, storage_offset=offset, dtype=dtype,
              device=device_for(storage.device_index))
    t._tpu_storage = storage
    if not full:  # (the class default is True; _tpu_cache and its version keep theirs: nothing read yet)
        t._tpu_full = False
    return t


def new_strided(array, size, stride, dtype: torch.dtype) -> "TpuTensor":
    """Wrap a fresh flat device array holding a dense layout's memory (an op result torch lays out in
    another order than contiguous, see ``strided.memory_order``) as a tensor of that size and stride."""
    return TpuTensor(TpuStorage(array, array.shape, dtype), size, stride, 0, dtype)


def value_of(t: TpuTensor):
    """The device array holding t's logical value (computing a view's value if needed)."""
    storage = t._tpu_storage
    if t._tpu_full:
        arr = storage.array
        return arr if arr is not None else storage.value()
    if t._tpu_cache_version == storage.version:
        return t._tpu_cache
    arr = strided.read(storage, t)
    t._tpu_cache = arr
    t._tpu_cache_version = storage.version
    return arr


def _read_view(x) -> None:
    """Fused mode's graph boundaries (a model call, a repeated block): compute (and cache on the tensor)
    the value of a tpu view. A view that is all of its storage in another shape (diffusers' packed
    latents: a permuted tensor's contiguous copy, reshaped) leaves its value on the storage too, so the
    views the call takes of it (a Linear flattens its input) read that value: the graph then sees the
    same input shape as when it gets a tensor of its own (the next denoising step's latents)."""
    if type(x) is TpuTensor and not x._tpu_full:
        arr = value_of(x)
        storage = x._tpu_storage
        if (x.dtype == storage.dtype and x.storage_offset() == 0 and x.numel() == math.prod(storage.shape)
                and x.stride() == _contiguous_strides(x.shape)):
            storage.reshaped = (storage.version, arr)


module_graphs.set_view_reader(_read_view)


# bumped whenever a tensor's own sizes or strides change in place: a check of many tensors' layouts (a recorded
# module call's, eager/replay_guards.py) compares them only after it moved
LAYOUT_EPOCH = [0]


def refresh_layout(t: TpuTensor) -> None:
    """After t's own sizes/strides changed in place (as_strided_, squeeze_, t_ ...)."""
    LAYOUT_EPOCH[0] += 1
    t._tpu_full = t._tpu_is_full()
    t._tpu_cache = None
    t._tpu_cache_version = -1
    t.__dict__.pop("_tpu_fake_inner", None)  # torch.compile's stand-in has the old layout


def write(t: TpuTensor, array) -> None:
    """Make ``array`` (t's shape and dtype) the new value of t, and so of its base and other views."""
    storage = t._tpu_storage
    if poisoned.active:  # a write into a value computed from a failed device-side check raises too
        poisoned.readable(storage.array, "the tensor being written")
    if t._tpu_full:
        storage.set(array)
        return
    strided.check_writable(t)  # an expanded view: torch refuses to write it, so do we
    storage.set(strided.write(storage, t, array))
    t._tpu_cache = array
    t._tpu_cache_version = storage.version


def write_storage(t: TpuTensor, array) -> None:
    """Make ``array`` (the new value of t's whole storage, in its shape) the storage's value: t is the
    whole storage seen in another order than its memory, and the op's program already put its new value
    in memory order."""
    t._tpu_storage.set(array)


def wrap(array, dtype: torch.dtype | None = None, device_index: int = 0) -> TpuTensor:
    """A new tensor owning a fresh storage that holds ``array``."""
    if dtype is None:
        dtype = dtypes.to_torch_dtype(array.dtype)
    return TpuTensor(TpuStorage(array, array.shape, dtype, device_index), array.shape, dtype=dtype)


def empty(size, dtype: torch.dtype, device_index: int = 0, stride=None) -> TpuTensor:
    """A new tensor whose storage is written later (reads as zeros if never written)."""
    size = tuple(size)
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    if stride is not None and 0 not in size and tuple(stride) != _contiguous_strides(size) \
            and math.prod(size) > 1:
        # a non-contiguous layout (empty_strided, empty_like of a transposed tensor): a flat
        # storage of the layout's extent, viewed with the requested strides
        extent = 1 + sum((s - 1) * st for s, st in zip(size, stride))
        storage = TpuStorage(None, (extent,), dtype, device_index)
        return TpuTensor(storage, size, tuple(stride), 0, dtype)
    storage = TpuStorage(None, size, dtype, device_index)
    return TpuTensor(storage, size, dtype=dtype)
