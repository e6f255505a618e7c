"""Meta kernels for aten ops the op table lowers but torch gives no meta (or fake) kernel.

``torch.compile`` traces with fake tensors: an op without a meta kernel makes FakeTensorMode run the real
kernel on zeros of the fake device, which a tpu tensor outside ``TpuTensor`` cannot do; inside a traced
backward that error aborted the process (compiled ``fractional_max_pool3d`` backward). The eager path
needs none of these (it asks the lowering for shapes). Ops whose output shape depends on values
(``data_dependent`` lowerings) have fake kernels of torch's own.
"""
from __future__ import annotations

import torch

_LIBRARY = None


def _like_first(x, *args, **kwargs):
    return torch.empty_like(x)


def _like_second(grad, x, *args, **kwargs):
    return torch.empty_like(x)


def _geqrf(a):
    m, n = a.shape[-2:]
    return torch.empty_like(a), a.new_empty(a.shape[:-2] + (min(m, n),))


def _histogram(self, bins=100, *, range=None, weight=None, density=False):
    return self.new_empty((bins,)), self.new_empty((bins + 1,))


def _histogram_edges(self, bins, *, weight=None, density=False):
    return self.new_empty((bins.shape[0] - 1,)), torch.empty_like(bins)


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    return torch.empty_like(hx), hx.new_empty((hx.shape[0], 5 * hx.shape[1]))


def _gru_cell_backward(grad_hy, workspace, has_bias):
    batch, hidden = grad_hy.shape
    gates = grad_hy.new_empty((batch, 3 * hidden))
    bias = grad_hy.new_empty((3 * hidden,)) if has_bias else None
    return gates, torch.empty_like(gates), torch.empty_like(grad_hy), bias, None if bias is None else torch.empty_like(bias)


KERNELS = {
    "_standard_gamma_grad": _like_first,
    "_sample_dirichlet": _like_first,
    "binomial": _like_first,
    "_dirichlet_grad": _like_first,
    "_ctc_loss_backward": _like_second,
    "geqrf": _geqrf,
    "fractional_max_pool3d_backward": _like_second,
    "multilabel_margin_loss_backward": _like_second,
    "multi_margin_loss_backward": _like_second,
    "histogram.bin_ct": _histogram,
    "histogram.bins_tensor": _histogram_edges,
    "_thnn_fused_gru_cell": _gru_cell,
    "_thnn_fused_gru_cell_backward": _gru_cell_backward,
}


def register() -> None:
    """Once per process; an op that has gained a meta kernel in this torch keeps torch's."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    _LIBRARY = torch.library.Library("aten", "IMPL")
    for name, kernel in KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + name, "Meta"):
            _LIBRARY.impl(name, kernel, "Meta")
