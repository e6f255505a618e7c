"""Walking an op's arguments: its structural key and its dynamic inputs, in one pass; and the argument
templates that put traced values back in their places.

The key holds everything that changes the program and nothing that changes between calls:
- tensors: shape and dtype (their arrays are dynamic inputs);
- Python numbers passed as a ``Scalar`` of the schema (``alpha=``, ``x * 2.5``, a fill value): their
  type only (int, float, complex), the value is a dynamic input, so an optimizer whose learning rate
  changes every step reuses one program. Booleans stay in the key, and so do the Scalars a lowering
  declares ``static`` (addmm's ``beta``: 0 means "ignore the input, NaN included"), or only those of
  their values its ``static_when`` accepts (pow's exponent 2: x * x; any other exponent is an input);
- every other static argument (dims, sizes, dtypes, ``eps``) by type and exact value: ``1``, ``1.0``,
  ``True`` and ``1+0j`` are distinct keys, so are ``0.0`` and ``-0.0``, and NaN is found again.

A view input (a reshape, transpose, slice, expand or dtype view: any tensor that is not its whole
storage) is *folded*: the key holds its geometry (storage shape and dtype, its dtype, size, stride,
whether its program is specialised on offset 0, which only a view reading its whole storage is), the
inputs its storage's array (and its offset, 0 included, otherwise), and the op's program reads the view
itself (``ViewSlot``). So a view costs no program and no copy of its own: XLA
fuses the read into the op or turns it into a bitcast, and ``x[i]`` loops share one program.

Why one module: one pass over an op's arguments builds its key and its inputs together; apart, two walks of the
arguments would drift.
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from ..engine import launchers
from ..engine.fused import LazyArray
from ..errors import device_mismatch
from .. import ops
from ..ops import registry
from ..runtime import caches, dtypes, generators, platform
from ..tensor import strided
from ..tensor.tensor import TpuTensor

_NUMBERS = (int, float, complex)
_TPU_GENERATOR = ("generator", "tpu")  # in a key: any torch.Generator("tpu") (its draws are program inputs)


def static_key(x):
    """A static Python value as a key part: type-tagged numbers (1, 1.0, True, -0.0, NaN all distinct)."""
    t = type(x)
    if t is float:
        return ("f", x.hex())
    if t is bool:
        return ("b", x)
    if t is complex:
        return ("c", x.real.hex(), x.imag.hex())
    return x


# ops whose Scalar arguments decide the output's shape: their values must stay in the key
_SHAPE_SCALAR_OPS = {"aten::arange", "aten::range"}
# ops whose lowering cannot trace a dynamic Scalar (found at build time, see op_path): keyed by value
_STATIC_SCALAR_OPS: set = set()
_SCALAR_SLOTS: dict = caches.register("scalar slots", {})


# a Python number reaches a Tensor argument as a "wrapped number" (``x + 2.5``): a value, like a Scalar
_VALUE_TYPES = ("number", "Optional[number]", "Tensor", "Optional[Tensor]")


def _scalar_slots(func):
    """(positions, keyword names) of the arguments whose Python number can be a dynamic input, and
    (positions, names, predicate) of the static ones that are static only for the values the predicate
    accepts (``Lowering.static_when``)."""
    slots = _SCALAR_SLOTS.get(id(func))
    if slots is None:
        some = (frozenset(), frozenset(), None)
        if id(func) in _STATIC_SCALAR_OPS or func._schema.name in _SHAPE_SCALAR_OPS:
            slots = (frozenset(), frozenset(), some)
        else:
            ops.load()  # the first op of a process gets here before any lowering module is imported
            low, _ = registry.resolve(func)
            static = low.static if low is not None else ()
            numbers = [(i, a.name, a.name in static) for i, a in enumerate(func._schema.arguments)
                       if str(a.type) in _VALUE_TYPES]
            slots = (frozenset(i for i, _, st in numbers if not st), frozenset(n for _, n, st in numbers if not st))
            if low is not None and low.static_when is not None:
                some = (frozenset(i for i, _, st in numbers if st), frozenset(n for _, n, st in numbers if st),
                        low.static_when)
            slots = slots + (some,)
        _SCALAR_SLOTS[id(func)] = slots
    return slots


def _dynamic_position(slots, i, x) -> bool:
    """The number ``x`` at position ``i`` is a dynamic input."""
    if i in slots[0]:
        return True
    some = slots[2]
    return i in some[0] and not some[2](x)


def _dynamic_name(slots, k, x) -> bool:
    if k in slots[1]:
        return True
    some = slots[2]
    return k in some[1] and not some[2](x)


def keep_scalars_static(func) -> None:
    """``func``'s lowering branches on a Scalar's value: key its Scalars by value from now on."""
    logging.getLogger("torch_tpu").debug("%s: its lowering needs static Scalars (compiles per value)", func)
    _STATIC_SCALAR_OPS.add(id(func))
    _SCALAR_SLOTS.pop(id(func), None)


def _scalar(x, sig, arrays, args, kwargs=None):
    """A number in a Scalar slot: dynamic (its type in the key, its value an input) unless a bool."""
    t = type(x)
    if t is bool:
        sig.append(static_key(x))
    elif t is complex and _complex64_suffices(args, kwargs):
        sig.append(_COMPLEX64_SCALAR)
        arrays.append(np.complex64(x))
    else:
        if t is int:
            if x >= 2 ** 63:
                x = _beyond_int64(x, args)
            elif x and -_EXACT_IN_FLOAT <= x <= _EXACT_IN_FLOAT and _has_inexact_tensor(args):
                x = float(x)  # see _has_inexact_tensor
            t = type(x)
        sig.append(_DYNAMIC_TAGS[t])  # a converted int is keyed as what it became
        arrays.append(x)


_EXACT_IN_FLOAT = 2 ** 53  # every int up to this is a double exactly: converting it rounds nothing
_COMPLEX64_SCALAR = ("scalar", "complex64")
# the types of the values of dynamic Scalars among a call's program inputs (a complex one may be a complex64)
SCALAR_INPUTS = (int, float, complex, np.complex64)
_64_BIT_INEXACT = (torch.float64, torch.complex128)


def _tensors(values):
    """The tensors among ``values``, in lists and tuples too (a foreach op's operands)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif type(v) in (list, tuple):
            yield from _tensors(v)


def _rounded_to_complex64(args) -> bool:
    """Whether a 0-d complex128 CPU tensor among ``args`` (autograd's wrapped numbers: ``fft(x * 1j)``'s
    backward multiplies by one) computes as complex64: beside a tensor with dimensions, a 0-d one promotes
    only to the default dtype's complex type (``ones(3) * tensor(1j, dtype=complex128)`` is complex64), so
    with a float32 default and no float64/complex128 tensor with dimensions torch rounds it to complex64
    anyway. Its key keeps its dtype: CPU's checks ran on the call as it was."""
    dimensioned = [a for a in _tensors(args) if a.dim() > 0]
    return bool(dimensioned) and _complex64_suffices(dimensioned)


def _complex64_suffices(args, kwargs=None) -> bool:
    """Whether a complex Scalar can be a complex64 input: no float64 or complex128 tensor among the call's
    arguments and a default dtype other than float64, so the result is complex64 (or narrower) and torch
    rounds the Scalar to complex64 anyway. JAX would take the Python complex as complex128, which a TPU
    cannot compile (``runtime/tpu_lowering``): ``z * 1j`` of a complex64 ``z`` would be refused there."""
    if _get_default_dtype() is torch.float64:
        return False
    values = list(args) + (list(kwargs.values()) if kwargs else [])
    return not any(a.dtype in _64_BIT_INEXACT for a in _tensors(values))


def _has_inexact_tensor(args) -> bool:
    """Whether a floating or complex tensor is among ``args``. With one, an int Scalar computes exactly
    as the same float does (the result takes the tensor's dtype; the value is converted to it once either
    way), so ``x / 2`` and ``x / 2.0`` share one program instead of compiling two (the demo pipeline had
    four such pairs). Zero stays an int: negated (``sub`` adds ``-alpha * other``) it is +0, where 0.0
    gives -0.0 and ``-0.0 - 0 * -0.0`` keeps its sign on CPU. Ops over integer tensors keep ints apart:
    there an int Scalar keeps the integer dtype and a float one promotes."""
    for a in args:
        if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex()):
            return True
    return False


def _beyond_int64(x, args):
    """An int in [2**63, 2**64): torch holds it as a uint64 Scalar, which wraps into an integer tensor's
    dtype and converts to a float one's (x + 2**63 is x - 2**63 on int64, 9.2e18 on float32). Larger
    ints stay as they are (JAX refuses them, as torch does)."""
    if x >= 2 ** 64:
        return x
    if _has_inexact_tensor(args):
        return float(x)
    return x - 2 ** 64


_DYNAMIC_TAGS = {int: ("scalar", "int"), float: ("scalar", "float"), complex: ("scalar", "complex")}


class Slot:
    """Placeholder for a dynamic array input in an argument template."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def value(self, arrays):
        return arrays[self.index]


class ViewSlot(Slot):
    """Placeholder for a folded view input: its storage's array (then its offset, when not 0)."""

    __slots__ = ("read", "has_offset")

    def __init__(self, index, read, has_offset):
        self.index, self.read, self.has_offset = index, read, has_offset

    def value(self, arrays):
        i = self.index
        return self.read(arrays[i], arrays[i + 1] if self.has_offset else 0)


def _storage_array(storage):
    """A storage's array as a program input (zeros made on first use; a deferred value taken over
    by the current mode)."""
    arr = storage.array
    if arr is None:
        arr = storage.value()
    elif type(arr) is LazyArray:
        arr = storage.array = launchers.current.take(arr)
    return arr


def _has_read_value(x) -> bool:
    return x._tpu_cache_version == x._tpu_storage.version


_WRITES: dict = {}  # id(op overload) -> whether it writes an argument


def _reads_only(func) -> bool:
    writes = _WRITES.get(id(func))
    if writes is None:
        writes = _WRITES[id(func)] = bool(registry.mutated_arguments(func))
    return not writes


def _reshaped(storage, reads_only: bool):
    """The storage's whole value in another shape, when one was read for its current version (only
    for ops that write no argument: a write into a whole-storage view returns the storage's memory in
    the storage's own shape, ``plans.write_orders``, so a writing op's key keeps that shape)."""
    reshaped = storage.reshaped
    if reads_only and reshaped is not None and reshaped[0] == storage.version:
        if type(reshaped[1]) is LazyArray and reshaped[1].error is not None:
            return None  # the graph that read it failed: read the storage itself
        return reshaped
    return None


def _base_shape(storage, reads_only: bool) -> tuple:
    """The shape of the array a view of ``storage`` is read from (see _fold_view)."""
    reshaped = _reshaped(storage, reads_only)
    return storage.shape if reshaped is None else tuple(reshaped[1].shape)


def _placement(x, storage, base_shape) -> str:
    """How a view's program finds it in the array of shape ``base_shape`` it is read from ("zero": no
    offset input); see ``strided.placement``."""
    return strided.placement(tuple(x.shape), tuple(x.stride()), x.storage_offset(), base_shape,
                             storage.dtype, x.dtype)


def _fold_view(func, x, sig, arrays):
    """A view input: its geometry in the key, its storage's array (and its offset, unless the program is
    specialised on offset 0) as inputs."""
    storage = x._tpu_storage
    reads_only = _reads_only(func)
    if _reshaped(storage, reads_only) is not None:
        # the storage's value in another shape, read at a fused graph boundary (tensor._read_view):
        # a view's geometry counts elements of the flat storage, so it reads the same from either
        arr = storage.reshaped[1]
        if type(arr) is LazyArray:
            arr = launchers.current.take(arr)
            storage.reshaped = (storage.version, arr)
    else:
        arr = _storage_array(storage)
    base_shape = _base_shape(storage, reads_only)
    where = _placement(x, storage, base_shape)
    sig.append(("view", base_shape, storage.dtype, x.dtype, x.shape, x.stride(), where))
    arrays.append(arr)
    if where != "zero":
        # a runtime input: x[i] for every i (0 included) shares one program
        arrays.append(np.int64(x.storage_offset()))


def _stride_order(shape, stride):
    """The dims of extent > 1 from the largest stride to the smallest, or None in natural order."""
    real = [k for k, n in enumerate(shape) if n != 1]
    order = sorted(real, key=lambda k: -stride[k])
    return None if order == real else tuple(order)


def _walk(func, x, sig, arrays, allow_cpu, args=None):
    """``x``'s key parts into ``sig`` and its arrays into ``arrays``; ``args``, the call's arguments where ``x``
    is one of them (a 0-d CPU tensor among them may go to the device narrowed: ``_rounded_to_complex64``)."""
    if isinstance(x, TpuTensor):
        if x._tpu_full:
            sig.append((x.shape, x.dtype))
            arrays.append(_storage_array(x._tpu_storage))
        elif _has_read_value(x):  # a view whose value was read already (and is still current): that value
            # the order of its strides sets the result's layout (torch's meta kernels keep a permuted
            # input's order), so a permuted one must not share the key of a contiguous tensor of its shape:
            # either entry, built first, gave the other its layout (c.exp() came back permuted and
            # .view(-1) failed). A slice in natural order (gaps only) lays results out contiguously.
            order = _stride_order(x.shape, x.stride())
            # (a permuted view that is its whole storage is written back as the storage's memory, in the
            # storage's shape: plans.write_orders; a transposed (2, 2) and the same view of a (4,) memory
            # shared one entry, which wrote a (2, 2) array into the (4,) storage)
            sig.append((x.shape, x.dtype) if order is None else
                       (x.shape, x.dtype, order, strided.memory_order(tuple(x.shape), x.stride()) is not None,
                        x._tpu_storage.shape, x._tpu_storage.dtype, x.storage_offset() == 0))
            arr = x._tpu_cache
            if type(arr) is LazyArray:
                arr = x._tpu_cache = launchers.current.take(arr)
            arrays.append(arr)
        else:
            _fold_view(func, x, sig, arrays)
    elif isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise RuntimeError(f"{func}: cannot mix meta and tpu tensors")
        if x.dim() != 0 and not allow_cpu:
            raise device_mismatch(func, x)
        if args is not None and x.dtype is torch.complex128 and x.dim() == 0 and _rounded_to_complex64(args):
            sig.append(("cpu", x.shape, x.dtype, _COMPLEX64_SCALAR))
            x = x.to(torch.complex64)
        else:
            sig.append(("cpu", x.shape, x.dtype))
        arrays.append(dtypes.host_to_device(x, platform.jax_device()))
    elif type(x) in (list, tuple):
        sig.append((type(x), len(x)))
        for e in x:
            _walk(func, e, sig, arrays, allow_cpu)
    elif isinstance(x, torch.Generator) and generators.tpu_generator(x) is not None:
        sig.append(_TPU_GENERATOR)  # the op draws its key from it at each call (op_path), not a static value
    elif isinstance(x, torch.Generator):
        raise RuntimeError(
            f"{func}: expected a 'tpu' device type for generator but found '{x.device.type}'. "
            "Create random tensors on the CPU with that generator and move them, as diffusers does.")
    else:
        sig.append(static_key(x))


# index ops accept CPU index tensors (like CUDA)
_CPU_INDEX_OPS = {id(op) for op in (torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default,
                                    torch.ops.aten.index_put_.default, torch.ops.aten._index_put_impl_.default)}


# foreach ops whose per-tensor scalars come as a 1-D tensor: torch reads it on the host (CUDA requires
# it on the CPU), so a CPU tensor is accepted in that position only
_aten = torch.ops.aten
_CPU_SCALARS_OPS = {id(op): 3 for op in (_aten._foreach_addcdiv.Tensor, _aten._foreach_addcdiv_.Tensor,
                                         _aten._foreach_addcmul.Tensor, _aten._foreach_addcmul_.Tensor)}


def key_and_inputs(func, args, kwargs):
    """(structural key, dynamic inputs) of a call: arrays, and Python numbers of dynamic Scalars.
    Hot path: plain tpu tensors are inlined."""
    fid = id(func)
    sig = [fid]  # id: OpOverload.__hash__ is Python code
    arrays = []
    allow_cpu = fid in _CPU_INDEX_OPS
    cpu_scalars_at = _CPU_SCALARS_OPS.get(fid)
    slots = None
    for i, a in enumerate(args):
        ta = type(a)
        if ta is TpuTensor and a._tpu_full:
            storage = a._tpu_storage
            arr = storage.array
            if arr is None:
                arr = storage.value()
            elif type(arr) is LazyArray:
                arr = storage.array = launchers.current.take(arr)
            # a whole storage: its shape and dtype are the tensor's and its array's (``TpuTensor._tpu_full``),
            # and reading them off the storage costs no JAX property nor torch getter
            sig.append((storage.shape, storage.dtype))
            arrays.append(arr)
        elif ta in _NUMBERS:
            if slots is None:
                slots = _scalar_slots(func)
            if _dynamic_position(slots, i, a):
                _scalar(a, sig, arrays, args)
            else:
                sig.append(static_key(a))
        else:
            _walk(func, a, sig, arrays, allow_cpu or cpu_scalars_at == i, args)
    if kwargs:
        for k, v in kwargs.items():
            sig.append(k)
            if type(v) in _NUMBERS and _dynamic_name(_scalar_slots(func), k, v):
                _scalar(v, sig, arrays, args, kwargs)
            else:
                _walk(func, v, sig, arrays, allow_cpu or (k == "scalars" and cpu_scalars_at is not None))
    default = _get_default_dtype()
    if default is not _FLOAT32:
        # the result dtype of factories and of int-with-float promotions is the default dtype: an entry
        # built under float32 must not serve a call under torch.set_default_dtype(torch.bfloat16)
        sig.append(("default_dtype", default))
    return tuple(sig), arrays


_get_default_dtype = torch.get_default_dtype
_FLOAT32 = torch.float32


def template(x, counter, dynamic: bool = False, reads_only: bool = False):
    """``x`` with every dynamic input replaced by a Slot numbered in walk order (``counter[0]`` counts):
    tensors (a ViewSlot for a folded view), and the number itself when ``dynamic`` (a Scalar slot whose
    value is an input). ``reads_only``: the op writes no argument (see _reshaped)."""
    if isinstance(x, TpuTensor) and not x._tpu_full and not _has_read_value(x):
        storage = x._tpu_storage
        base_shape = _base_shape(storage, reads_only)
        where = _placement(x, storage, base_shape)
        zero = where == "zero"
        read = strided.read_fn(base_shape, storage.dtype, tuple(x.shape), tuple(x.stride()), x.dtype, where)
        s = ViewSlot(counter[0], read, not zero)
        counter[0] += 1 if zero else 2
        return s
    if isinstance(x, torch.Tensor) or (dynamic and type(x) in _NUMBERS):
        s = Slot(counter[0])
        counter[0] += 1
        return s
    if type(x) in (list, tuple):
        return type(x)(template(e, counter, reads_only=reads_only) for e in x)
    return x


def templates(func, args, kwargs):
    """Templates of ``args`` and ``kwargs`` matching ``key_and_inputs``'s input order, and the count."""
    slots = _scalar_slots(func)
    counter = [0]
    reads_only = _reads_only(func)
    tmpl_args = [template(a, counter, type(a) in _NUMBERS and _dynamic_position(slots, i, a), reads_only)
                 for i, a in enumerate(args)]
    tmpl_kwargs = {k: template(v, counter, type(v) in _NUMBERS and _dynamic_name(slots, k, v), reads_only)
                   for k, v in kwargs.items()}
    return tmpl_args, tmpl_kwargs, counter[0]


def fill(x, arrays):
    """A template with its Slots replaced by ``arrays`` (a folded view read from its storage)."""
    if isinstance(x, Slot):
        return x.value(arrays)
    if type(x) in (list, tuple):
        return type(x)(fill(e, arrays) for e in x)
    return x


def to_meta(x):
    """Arguments for torch's meta kernel: tensors as meta tensors of their strides (torch lays results
    out after them: channels_last stays channels_last), the tpu device as meta."""
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("meta")
    if type(x) in (list, tuple):
        return type(x)(to_meta(e) for e in x)
    return x
