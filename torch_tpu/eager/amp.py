"""GradScaler's in-place ops: unscale writes a *list* of tensors and update_scale returns one of the two
tensors it writes (the op path writes single tensors and returns all it wrote): run their functional
forms through the op path, then write the results back."""
from __future__ import annotations

import torch

from ..tensor.tensor import TpuTensor, value_of, write

# the op path is imported where it runs: this module loads at ``import torch``, the op path at the
# first op

aten = torch.ops.aten


def non_finite_check_and_unscale_(func, args, kwargs):
    names = ("self", "found_inf", "inv_scale")
    grads, found_inf, inv_scale = list(args) + [kwargs[n] for n in names[len(args):]]
    if not grads:
        return None
    for t in (*grads, found_inf, inv_scale):
        if not isinstance(t, TpuTensor):
            raise RuntimeError(f"tpu: {func}: every tensor must be on the tpu device, got {t.device}")
    from .op_path import run_op

    new_grads, new_found = run_op(aten._amp_foreach_non_finite_check_and_unscale.default,
                                  (list(grads), found_inf, inv_scale), {})
    for g, new in zip(grads, new_grads):
        write(g, value_of(new))
    write(found_inf, value_of(new_found))
    return None


def update_scale_(func, args, kwargs):
    """Writes the scale and the growth tracker, returns the scale (the op path would return both)."""
    names = ("self", "growth_tracker", "found_inf", "scale_growth_factor", "scale_backoff_factor",
             "growth_interval")
    values = list(args) + [kwargs[n] for n in names[len(args):]]
    scale, tracker = values[0], values[1]
    from .op_path import run_op

    new_scale, new_tracker = run_op(aten._amp_update_scale.default, tuple(values), {})
    write(scale, value_of(new_scale))
    write(tracker, value_of(new_tracker))
    return scale


HANDLERS = {aten._amp_foreach_non_finite_check_and_unscale_.default: non_finite_check_and_unscale_,
            aten._amp_update_scale_.default: update_scale_}
