"""Ops rewritten into other aten calls before they reach the op path.

Boolean-mask indexing: a mask's positions depend on its values, so XLA cannot trace it. A single leading
mask with a broadcastable value is a static select (torch.where); otherwise the mask becomes long
indices through nonzero (a data-dependent op, which waits for the mask). ``_unsafe_view`` is a view (no program);
``scaled_dot_product_attention`` without autograd (inference_mode) goes to its one lowering
(``attention.py``).

Why one module: one table of rewrites, a few lines each.
"""
from __future__ import annotations

import math

import torch

from ..tensor import kernels
from ..tensor.tensor import TpuTensor
from ..tensor.views import run_view
from . import attention
from .op_path import run_op

aten = torch.ops.aten


def _is_mask(i) -> bool:
    return isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)


def _check_mask_shapes(x, indices) -> None:
    """A boolean mask must match the dims it indexes (a shape check: raised at once, as on CPU)."""
    dim = 0
    for i in indices:
        if _is_mask(i):
            for k, size in enumerate(i.shape):
                if dim + k >= x.dim() or x.shape[dim + k] != size:
                    raise IndexError(
                        f"The shape of the mask {list(i.shape)} at index {k} does not match the shape of the "
                        f"indexed tensor {list(x.shape)} at index {dim + k}")
            dim += i.dim()
        else:
            dim += 1


def _long_indices(indices):
    out = []
    for i in indices:
        if _is_mask(i):
            if not isinstance(i, TpuTensor):
                i = i.to("tpu")
            out.extend(i.bool().nonzero().unbind(1))
        else:
            out.append(i)
    return out


def _indexed_on_tpu(func, x) -> None:
    """tpu indices into a CPU tensor: CUDA's rule (CPU indices into a device tensor are fine)."""
    if not isinstance(x, TpuTensor):
        raise RuntimeError(f"indices should be either on cpu or on the same device as the indexed tensor "
                           f"({x.device}); got tpu indices ({func})")


def index_with_masks(func, args, kwargs):
    x, indices = args[0], args[1]
    _indexed_on_tpu(func, x)
    if not any(_is_mask(i) for i in indices):
        return run_op(func, args, kwargs)
    _check_mask_shapes(x, indices)
    return run_op(func, (x, _long_indices(indices), *args[2:]), kwargs)


def index_put_with_masks(func, args, kwargs):
    x, indices, values = args[0], args[1], args[2]
    _indexed_on_tpu(func, x)
    if not any(_is_mask(i) for i in indices):
        return run_op(func, args, kwargs)
    _check_mask_shapes(x, indices)
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    mask = indices[0]
    if len(indices) == 1 and mask.dtype == torch.uint8 and values.numel() == 1 and not accumulate:
        # CPU torch sends a single mask with one value to masked_fill_, which takes bool masks only
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype unsigned char")
    k = mask.dim() if _is_mask(mask) else -1
    inplace = func is not aten.index_put.default
    if (len(indices) == 1 and k > 0 and tuple(mask.shape) == tuple(x.shape[:k])
            and values.dim() <= x.dim() - k and isinstance(x, TpuTensor)):
        m = mask.bool().reshape(tuple(mask.shape) + (1,) * (x.dim() - k))
        if not isinstance(m, TpuTensor):
            m = m.to("tpu")
        v = values.to(x.dtype)
        if not isinstance(v, TpuTensor) and v.dim() > 0:
            v = v.to("tpu")
        new = torch.where(m, x + v if accumulate else v, x)
        if inplace:
            return kernels.copy_into(x, new)
        return new
    return run_op(func, (x, _long_indices(indices), *args[2:]), kwargs)


def equal(func, args, kwargs):
    a, b = args
    if a.shape != b.shape:
        return False
    return bool(torch.eq(a, b).all().item())


def unsafe_view(func, args, kwargs):
    """``_unsafe_view`` (matmul, linear and einsum reshape their results with it) is a view without
    autograd's view tracking: on the CPU it aliases its input, and refuses strides it cannot view with
    torch's error (aten.view's meta kernel raises the same). So it runs no program."""
    return run_view(aten.view.default, args, kwargs)


def fill_expanded(func, args, kwargs):
    """``fill_``/``zero_`` of an expanded tensor: every element gets one value, so CPU torch allows it
    (other writes to such a tensor raise); fill the memory behind it, which its views then see."""
    x = args[0]
    if not isinstance(x, TpuTensor) or not any(st == 0 and sz > 1 for sz, st in zip(x.shape, x.stride())):
        return run_op(func, args, kwargs)
    behind = x.as_strided([1 if st == 0 else sz for sz, st in zip(x.shape, x.stride())], x.stride(),
                          x.storage_offset())
    func(behind, *args[1:], **kwargs)
    return x


def foreach_copy_across_devices(func, args, kwargs):
    """``_foreach_copy_(self, src)`` where a source or destination is on another device (diffusers'
    ``EMAModel.restore`` copies CPU-stored parameters back into tpu ones): CPU and CUDA torch take their
    slow route, one ``copy_`` per pair, which copies across devices; so do we. On one device: the op path."""
    dst, src = args[0], args[1]
    if all(isinstance(t, TpuTensor) for t in (*dst, *src)):
        return run_op(func, args, kwargs)
    if len(dst) != len(src):
        raise RuntimeError(f"{func}: Tensor lists must have the same number of tensors, got {len(dst)} and "
                           f"{len(src)}.")
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    for d, s in zip(dst, src):
        d.copy_(s, non_blocking=non_blocking)


def rnn_cell_with_zero_biases(func, args, kwargs):
    """The fused LSTM/GRU cell of a layer without biases (``bias=False``): torch's meta kernel reads the
    missing biases' device and fails, so run it with zero biases (the same values; autograd, above this
    layer, already knows there are none)."""
    names = ("input_gates", "hidden_gates", "state", "input_bias", "hidden_bias")
    call = dict(zip(names, args), **kwargs)
    gates = call["input_gates"]
    if call.get("input_bias") is None or call.get("hidden_bias") is None:
        zeros = gates.new_zeros(gates.shape[1])
        call["input_bias"] = zeros if call.get("input_bias") is None else call["input_bias"]
        call["hidden_bias"] = zeros if call.get("hidden_bias") is None else call["hidden_bias"]
    return run_op(func, [call[n] for n in names], {})


def attention_weights_undefined(func, args, kwargs):
    """``_native_multi_head_attention`` without ``need_weights``: CPU and CUDA return no weights (None);
    the meta kernel, which the op path follows, an empty tensor."""
    out, weights = run_op(func, args, kwargs)
    names = [a.name for a in func._schema.arguments]
    need = dict(zip(names, args), **kwargs).get("need_weights", True)
    return out, (weights if need else None)


def nested_tensors_refused(func, args, kwargs):
    """Nested tensors have no tpu layout. ``nn.TransformerEncoder`` makes one from its padding mask in
    inference (its "sparsity fast path"): say how to avoid it."""
    raise NotImplementedError(
        f"tpu: {func} would make a nested tensor, which the tpu device does not support; "
        "nn.TransformerEncoder makes one from src_key_padding_mask in eval mode without autograd: build "
        "it with enable_nested_tensor=False (the same values; padded positions are then computed rather "
        "than zero)")


def det_of_strided(func, args, kwargs):
    """``_linalg_det``/``_linalg_slogdet`` keep the LU factorization torch's backward solves with: of A^T
    for a contiguous real A (the lowering's), of A itself otherwise (then torch's backward solves with
    ``adjoint=True``): a real non-contiguous A runs the lowering on A.mT, whose transpose is A."""
    a = args[0] if args else kwargs["A"]
    if isinstance(a, TpuTensor) and not a.is_complex() and not a.is_contiguous():
        return run_op(func, [a.mT], {})
    return run_op(func, args, kwargs)


def shift_of_bool(func, args, kwargs):
    """``bool_tensor << 1`` and ``int_tensor >> bool_tensor``: CPU promotes, but the meta kernels of
    ``__lshift__``/``__rshift__`` refuse a bool tensor on either side; ``bitwise_left_shift`` computes the
    same with a meta kernel that promotes."""
    x = args[0] if args else kwargs.get("self")
    y = args[1] if len(args) > 1 else kwargs.get("other")
    if isinstance(x, torch.Tensor) and x.dtype in (torch.uint16, torch.uint32, torch.uint64):
        # (CPU has no shift kernel for them; parity's dtype refusals know bitwise_*_shift only)
        from ..runtime.dtypes import TYPE_NAMES

        kernel = "lshift_cpu" if "lshift" in func._schema.name else "rshift_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{TYPE_NAMES[x.dtype]}'")
    if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (x, y)):
        left = func._schema.name in ("aten::__lshift__", "aten::__ilshift__")
        inplace = func._schema.name.startswith("aten::__i")
        target = {(True, False): aten.bitwise_left_shift, (False, False): aten.bitwise_right_shift,
                  (True, True): aten.bitwise_left_shift_, (False, True): aten.bitwise_right_shift_}[left, inplace]
        return run_op(target.Tensor_Scalar if func._overloadname == "Scalar" else target.Tensor, list(args), kwargs)
    return run_op(func, args, kwargs)


def nearest_of_empty_batch(func, args, kwargs):
    """Nearest upsampling of an empty batch: CPU returns an empty result; torch's meta kernel fails on it
    ("cond must be a bool": its check gets an int), so the shape comes from a batch of one."""
    x = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if isinstance(x, TpuTensor) and x.dim() >= 3 and x.shape[0] == 0 and math.prod(x.shape[1:]) != 0:
        one = torch.empty((1,) + tuple(x.shape[1:]), dtype=x.dtype, device="meta")
        shape = func(one, *args[1:], **kwargs).shape
        return x.new_empty((0,) + tuple(shape[1:]))
    return run_op(func, args, kwargs)


def ctc_with_tensor_lengths(func, args, kwargs):
    """``_ctc_loss.Tensor`` (and its backward): the lengths are read to the host, as CUDA's kernel does,
    and the ``int[]`` overload runs (its shapes and indices are static). Lengths may be CPU tensors."""
    names = [a.name for a in func._schema.arguments]
    call = dict(zip(names, args), **kwargs)
    for name in ("input_lengths", "target_lengths"):
        lengths = call[name]
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
            raise RuntimeError(f"{name} must be integral")
        # flattened, as CPU's kernel reads them: an unbatched loss passes 0-d lengths
        call[name] = [int(v) for v in lengths.reshape(-1).tolist()]
    target = aten._ctc_loss.default if func is aten._ctc_loss.Tensor else aten._ctc_loss_backward.default
    return run_op(target, [call[n] for n in names if n in call], {})


def pack_padded_sequence(func, args, kwargs):
    """``_pack_padded_sequence(input, lengths, batch_first)``: the lengths are a CPU tensor by contract
    (batch_sizes, its second result, too), which the device check refused. torch's own composite kernel
    (slices of the input and one cat, as on CUDA) runs on the tpu input."""
    if isinstance(args[1], torch.Tensor) and args[1].device.type != "cpu":
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got 1D "
                           f"{args[1].device} {args[1].dtype} tensor")
    return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)


def _call(func, args, kwargs) -> dict:
    names = [a.name for a in func._schema.arguments]
    return dict(zip(names, args), **kwargs)


def as_strided_copy_of_storage(func, args, kwargs):
    """``as_strided_copy(x, size, stride, offset)`` reads x's *storage* (its offset by default), as CPU
    torch does, with torch's bounds check: the lowering indexed x's values, so a view gave other elements
    and sizes past the storage returned clamped values instead of raising."""
    c = _call(func, args, kwargs)
    x = c["self"]
    if not isinstance(x, TpuTensor):
        return run_op(func, args, kwargs)
    view = x.as_strided(c["size"], c["stride"], c.get("storage_offset"))
    return view.clone(memory_format=torch.contiguous_format)


def as_strided_scatter_of_storage(func, args, kwargs):
    """torch's CPU kernel: a clone of x's whole storage (x's layout kept), ``src`` copied into its
    ``as_strided`` view (bounds checked), the clone returned in x's layout."""
    c = _call(func, args, kwargs)
    x, src = c["self"], c["src"]
    if not isinstance(x, TpuTensor):
        return run_op(func, args, kwargs)
    numel = x._tpu_storage.nbytes // x.element_size()
    full = x.as_strided((numel,), (1,), 0).clone()
    out = full.as_strided(x.shape, x.stride(), x.storage_offset())
    target = out.as_strided(c["size"], c["stride"], c.get("storage_offset"))
    if tuple(target.shape) != tuple(src.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(target.shape)}")
    target.copy_(src)
    return out


def polygamma_inplace(func, args, kwargs):
    """``x.polygamma_(n)`` takes (self, n) where its functional overload takes (n, self): resolved to the
    functional lowering, the arguments arrived swapped ("could not lower aten.polygamma_"). Run as the
    out= form writing self, which keeps CPU's refusals (an integer self cannot hold the float result)."""
    c = _call(func, args, kwargs)
    return run_op(aten.polygamma.out, [c["n"], c["self"]], {"out": c["self"]})


def pow_of_one_out(func, args, kwargs):
    """``pow(1, t, out=o)``: CPU's kernel fills ``o`` with ones in o's own dtype (any dtype, even one the
    float result could not be cast to) before any type check; other bases take the usual path."""
    c = _call(func, args, kwargs)
    base, exponent, out = c["self"], c["exponent"], c["out"]
    # c10's Scalar equality: a bool base is not 1 (True takes the usual path, as on CPU)
    if isinstance(base, (int, float, complex)) and not isinstance(base, bool) and base == 1 and isinstance(exponent, TpuTensor) \
            and isinstance(out, TpuTensor):
        from torch._prims_common.wrappers import _maybe_resize_out

        _maybe_resize_out(out, exponent.shape)
        return out.fill_(1)
    return run_op(func, args, kwargs)


def _wider_float_out(x, out) -> bool:
    return isinstance(x, TpuTensor) and isinstance(out, TpuTensor) and x.dtype != out.dtype \
        and x.is_floating_point() and out.is_floating_point()


def moments_into_wider_out(func, args, kwargs):
    """``var``/``std`` of half into a float32 ``out=``: CPU's kernel computes in out's dtype (no half
    rounding of the result), and refuses a half or bfloat16 input when it reduces every dim (its
    all-reduce kernel has no instance for them)."""
    c = _call(func, args, kwargs)
    x, out = c["self"], c["out"]
    if not _wider_float_out(x, out):
        return run_op(func, args, kwargs)
    dims = c.get("dim")
    every_dim = not dims or len({d % max(x.dim(), 1) for d in dims}) >= x.dim()
    if every_dim and x.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"std_var_all: Unsupported dtype {'Half' if x.dtype == torch.float16 else 'BFloat16'}")
    return run_op(func, [x.to(out.dtype), *args[1:]], kwargs)


def logsumexp_into_wider_out(func, args, kwargs):
    """``logsumexp`` of half into a float32 ``out=``: CPU's kernel takes the max and ``exp`` in the input's
    dtype and sums, logs and adds in out's (the functional form would round the result to half)."""
    c = _call(func, args, kwargs)
    x, dims, keepdim, out = c["self"], c["dim"], c.get("keepdim", False), c["out"]
    if not _wider_float_out(x, out) or x.numel() == 0:
        return run_op(func, args, kwargs)
    maxes = torch.amax(x, dims, keepdim=True)
    maxes = maxes.masked_fill(maxes.abs() == math.inf, 0)
    torch.sum((x - maxes).exp(), dims, keepdim=keepdim, out=out)
    return out.log_().add_(maxes if keepdim else maxes.squeeze(dims))


def nansum_out(func, args, kwargs):
    """``nansum(x, out=o)``: CPU's kernel sums an integral or bool ``x`` as ``sum`` does (into any out dtype,
    bool included), and reduces a floating ``x`` in out's dtype, which it has no integral or complex
    instance for."""
    c = _call(func, args, kwargs)
    x, out = c["self"], c["out"]
    if _sums_every_dim(c):
        return nansum_of_no_dims(func, args, kwargs)
    if isinstance(x, TpuTensor) and isinstance(out, TpuTensor) and not x.is_complex():
        if not x.is_floating_point():
            return run_op(aten.sum.IntList_out, [x, c.get("dim"), c.get("keepdim", False)],
                          {"dtype": c.get("dtype"), "out": out})
        if c.get("dtype") is None and not out.is_floating_point():
            from ..runtime.dtypes import TYPE_NAMES

            raise NotImplementedError(f'"nansum_cpu" not implemented for \'{TYPE_NAMES[out.dtype]}\'')
    return run_op(func, args, kwargs)


def _sums_every_dim(c) -> bool:
    dim = c.get("dim")
    return isinstance(dim, (list, tuple)) and len(dim) == 0


def nansum_of_no_dims(func, args, kwargs):
    """``nansum(x, dim=[])`` sums every dim on CPU (as ``sum`` does); torch's meta kernel keeps every dim, so
    the result was the total broadcast to x's shape. ``dim=None`` is what CPU computes."""
    c = _call(func, args, kwargs)
    if not _sums_every_dim(c):
        return run_op(func, args, kwargs)
    c["dim"] = None
    names = [a.name for a in func._schema.arguments if not a.kwarg_only]
    return run_op(func, [c.pop(n) for n in names if n in c], c)


def nll_loss_of_byte_target(func, args, kwargs):
    """CPU's nll_loss takes a uint8 target as class indices (nll_loss2d does not); torch's meta kernel
    gathers with it and refuses (int32/int64 only): the target goes in as int64."""
    at = 2 if "backward" in func._schema.name else 1
    target = args[at] if len(args) > at else kwargs.get("target")
    if isinstance(target, torch.Tensor) and target.dtype == torch.uint8:
        if len(args) > at:
            args = (*args[:at], target.long(), *args[at + 1:])
        else:
            kwargs = {**kwargs, "target": target.long()}
    return run_op(func, args, kwargs)


def like_elsewhere(func, args, kwargs):
    """``torch.zeros_like(t, device="cpu")`` (any ``*_like`` factory naming another device than the tpu):
    made on that device from a meta stand-in of ``t``'s layout, as torch makes it for any source device."""
    device = kwargs.get("device")
    if device is None or torch.device(device).type == "tpu":
        return run_op(func, args, kwargs)
    x = args[0]
    meta = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
    return func(meta, *args[1:], **kwargs)


# (getattr, never the packet's ``__getattr__``: that makes a new OpOverload object and caches it in place of the
# one the op table's keys hold, so every table keyed by the old object misses it: zeros_like had "no lowering")
_LIKE_FACTORIES = [getattr(getattr(aten, name), overload)
                   for name in ("zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like")
                   for overload in getattr(aten, name).overloads()
                   if not getattr(getattr(aten, name), overload)._schema.is_mutable
                   and "out" not in overload]


REWRITES = {
    **{op: like_elsewhere for op in _LIKE_FACTORIES},
    aten.nll_loss_forward.default: nll_loss_of_byte_target,
    aten.nll_loss_backward.default: nll_loss_of_byte_target,
    aten.nansum.default: nansum_of_no_dims,
    aten.nansum.out: nansum_out,
    aten.var.correction_out: moments_into_wider_out,
    aten.var.out: moments_into_wider_out,
    aten.std.correction_out: moments_into_wider_out,
    aten.std.out: moments_into_wider_out,
    aten.logsumexp.out: logsumexp_into_wider_out,
    aten.pow.Scalar_out: pow_of_one_out,
    aten.polygamma_.default: polygamma_inplace,
    aten.as_strided_copy.default: as_strided_copy_of_storage,
    aten.as_strided_scatter.default: as_strided_scatter_of_storage,
    aten._ctc_loss.Tensor: ctc_with_tensor_lengths,
    aten._pack_padded_sequence.default: pack_padded_sequence,
    aten._ctc_loss_backward.Tensor: ctc_with_tensor_lengths,
    **{getattr(getattr(aten, name), overload): nearest_of_empty_batch
       for name in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
                    "_upsample_nearest_exact2d", "_upsample_nearest_exact3d") for overload in ("default", "vec")},
    aten.__lshift__.Scalar: shift_of_bool,
    aten.__rshift__.Scalar: shift_of_bool,
    aten.__lshift__.Tensor: shift_of_bool,
    aten.__rshift__.Tensor: shift_of_bool,
    aten.__ilshift__.Scalar: shift_of_bool,
    aten.__irshift__.Scalar: shift_of_bool,
    aten.__ilshift__.Tensor: shift_of_bool,
    aten.__irshift__.Tensor: shift_of_bool,
    aten._nested_tensor_from_mask_left_aligned.default: nested_tensors_refused,
    aten._nested_tensor_from_mask.default: nested_tensors_refused,
    aten.fill_.Scalar: fill_expanded,
    aten.zero_.default: fill_expanded,
    aten.index.Tensor: index_with_masks,
    aten.index_put.default: index_put_with_masks,
    aten.index_put_.default: index_put_with_masks,
    aten._index_put_impl_.default: index_put_with_masks,
    aten.equal.default: equal,
    aten._foreach_copy_.default: foreach_copy_across_devices,
    aten._unsafe_view.default: unsafe_view,
    aten.scaled_dot_product_attention.default: attention.sdpa_without_autograd,
    aten._thnn_fused_lstm_cell.default: rnn_cell_with_zero_biases,
    aten._thnn_fused_gru_cell.default: rnn_cell_with_zero_biases,
    aten._native_multi_head_attention.default: attention_weights_undefined,
    aten._linalg_det.default: det_of_strided,
    aten._linalg_slogdet.default: det_of_strided,
}
