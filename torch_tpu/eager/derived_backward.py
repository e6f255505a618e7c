"""Backward ops whose forward is one of torch's decompositions (bicubic upsampling, grid_sample): their
gradient is the decomposition's own gradient, taken by autograd on tpu tensors.

Registered above autograd (the AutogradPrivateUse1 key): below it, inside ``__torch_dispatch__``, the
decomposition's ops would not be recorded, so there would be nothing to differentiate.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_LIBRARY = None


def _grads_of_decomposition(forward, tensors: list, wanted: list, grad, *static):
    """Gradients of torch's decomposition ``forward(*tensors, *static)`` for ``grad``, for the tensors
    ``wanted`` (None for the others)."""
    from torch._decomp import decomposition_table

    leaves = [t.detach().requires_grad_(w) for t, w in zip(tensors, wanted)]
    with torch.enable_grad():
        out = decomposition_table[forward](*leaves, *static)
        inputs = [t for t, w in zip(leaves, wanted) if w]
        # an input the decomposition does not differentiate through (grid_sample's grid in nearest
        # mode) gets zeros, as torch's own kernels give
        grads = iter(g if g is not None else torch.zeros_like(t)
                     for g, t in zip(torch.autograd.grad(out, inputs, grad, allow_unused=True), inputs))
    return [next(grads) if w else None for w in wanted]


def upsample_bicubic2d_backward(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    zeros = torch.zeros(tuple(input_size), dtype=grad.dtype, device=grad.device)  # the map is linear
    return _grads_of_decomposition(aten.upsample_bicubic2d.default, [zeros], [True], grad, output_size,
                                   align_corners, scales_h, scales_w)[0]


def grid_sampler_2d_backward(grad, x, grid, mode, padding, align_corners, mask):
    gx, ggrid = _grads_of_decomposition(aten.grid_sampler_2d.default, [x, grid], [bool(mask[0]), True], grad,
                                        mode, padding, align_corners)
    return (gx if gx is not None else torch.zeros_like(x)), ggrid


KERNELS = (upsample_bicubic2d_backward, grid_sampler_2d_backward)


def register() -> None:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("aten", "IMPL")
        _LIBRARY.impl("upsample_bicubic2d_backward", upsample_bicubic2d_backward, "AutogradPrivateUse1")
        _LIBRARY.impl("grid_sampler_2d_backward", grid_sampler_2d_backward, "AutogradPrivateUse1")
