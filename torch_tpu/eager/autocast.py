"""``torch.autocast("tpu")``: CUDA's policy (aten/src/ATen/autocast_mode.cpp), list for list.

* lower precision: matmul/conv-like ops run in the autocast dtype (bfloat16 by default, the TPU convention);
* fp32: precision-sensitive ops run in float32 (their floating inputs cast up);
* fp32 with an optional dtype (sum, prod, cumsum, softmax, norms...): when the first argument is an
  autocast-eligible tensor and no dtype was given, the op runs with ``dtype=torch.float32`` (inputs not cast);
* promote: ops whose inputs must share a dtype (index_put, scatter_add, dot, cross...) get every
  floating input cast to the widest floating dtype among them, so mixed bf16/fp32 code runs as on CUDA.

Every other op falls through unchanged. Only floating tpu tensors other than float64 are cast (CUDA's
``is_eligible``). Casts of float32 leaf tensors that require grad (the weights) to the autocast dtype are
cached until the outermost autocast region exits, as CUDA's ``cached_cast`` does: a weight is cast once per
region, and a weight changed in place inside the region (an optimizer step) is still read as its cast from
before, as on CUDA and the CPU (the tpu read the new value: a training loop inside one autocast region
computed other losses than on CUDA). ``tests/integrations/test_torch_ecosystem.py`` checks the lists against torch's own CUDA autocast
test lists (``torch.testing._internal.autocast_test_lists``).
"""
from __future__ import annotations

import threading
import weakref

import torch

from ..runtime import dynamo_frames

LOWER = ("_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
         "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
         "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
         "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
         "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention")
FP32 = ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
        "native_layer_norm", "group_norm", "rms_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
        "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "nll_loss_nd",
        "cross_entropy_loss", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
        "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
        "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
        "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
        "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
        "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
        "norm.Scalar", "norm.ScalarOpt_dim")
FP32_OPT_DTYPE = ("prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
                  "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList")
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add")

_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _eligible(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "tpu" \
        and x.dtype != torch.float64


_LOCAL = threading.local()  # torch's cast cache is per thread too


def _cache() -> dict:
    c = getattr(_LOCAL, "casts", None)
    if c is None:
        c = _LOCAL.casts = {}
    return c


def _cached(x, dtype):
    """torch's ``cached_cast``: a float32 leaf that requires grad, cast to the autocast dtype, once per
    region (the cache is emptied by ``torch.clear_autocast_cache``, which the outermost region's exit calls)."""
    if not (x.dtype == torch.float32 and dtype == torch.get_autocast_dtype("tpu") and x.requires_grad
            and x.is_leaf and not x._is_view() and torch.is_autocast_cache_enabled()):
        return x.to(dtype)
    cache = _cache()
    hit = cache.get(id(x))
    if hit is not None and hit[0]() is x:
        return hit[1]
    out = x.to(dtype)
    cache[id(x)] = (weakref.ref(x), out)
    return out


def cached_values() -> set:
    """ids of the values the cast cache holds (a recorded module call may leave its casts there: torch's cache
    is an optimisation, and a replay that does not refill it computes the same values)."""
    return {id(out._tpu_storage.array) for _, out in _cache().values() if hasattr(out, "_tpu_storage")}


def _clear_cache(original):
    def clear_autocast_cache():
        _cache().clear()
        original()
    return clear_autocast_cache


def _cast(x, dtype):
    if _eligible(x):
        return _cached(x, dtype)
    if type(x) in (list, tuple):
        return type(x)(_cast(e, dtype) for e in x)
    return x


def _widest(x, dtype):
    if _eligible(x):
        return torch.promote_types(dtype, x.dtype)
    if type(x) in (list, tuple):
        for e in x:
            dtype = _widest(e, dtype)
    return dtype


def _op(op_name: str):
    packet, _, overload = op_name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _kernel(op_name: str, policy: str):
    # The op and its dtype argument's position are looked up at the first call: building torch's
    # OpOverloadPacket parses every overload's schema (~1 ms an op), too slow for ``import torch``.
    resolved = []

    def resolve():
        op = _op(op_name)
        resolved[:] = [op, next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)]
        return resolved

    def kernel(*args, **kwargs):
        op, dtype_index = resolved or resolve()
        if policy == "fp32_opt_dtype":
            given = kwargs.get("dtype", args[dtype_index] if dtype_index < len(args) else None)
            if args and _eligible(args[0]) and given is None:
                if dtype_index < len(args):
                    args = args[:dtype_index] + (torch.float32,) + args[dtype_index + 1:]
                else:
                    kwargs = {**kwargs, "dtype": torch.float32}
        else:
            if policy == "lower":
                dtype = torch.get_autocast_dtype("tpu")
            elif policy == "fp32":
                dtype = torch.float32
            else:  # promote
                dtype = _widest(list(args) + list(kwargs.values()), torch.get_autocast_dtype("tpu"))
            args = _cast(args, dtype)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return dynamo_frames.keep_out(kernel)


def register():
    """The AutocastPrivateUse1 kernels; returns the libraries (they must stay alive)."""
    # bfloat16 is the TPU convention (torch's default for a new device is float16). torch keeps this
    # per thread: other threads get it from torch.autocast("tpu", dtype=...) or set_autocast_dtype.
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    torch.clear_autocast_cache = _clear_cache(torch.clear_autocast_cache)  # torch.autocast's exit calls it
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    ops = torch.library.Library("aten", "IMPL")
    for names, policy in ((LOWER, "lower"), (FP32, "fp32"), (FP32_OPT_DTYPE, "fp32_opt_dtype"),
                          (PROMOTE, "promote")):
        for name in names:
            ops.impl(name, _kernel(name, policy), "AutocastPrivateUse1")
    return fallback, ops
