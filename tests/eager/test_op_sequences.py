"""Sequences of calls whose bugs live *between* ops.

* autograd: a tensor saved for backward modified in place (also through a view, a ``detach()``, in
  fused mode) must make backward raise like CPU torch (version counters); in-place on a leaf that
  requires grad raises; in-place on a view of a non-leaf records CopySlices; backward twice; gradients
  of non-contiguous and expanded leaves; ``retain_grad`` on views; double backward; hooks; tensors
  made under ``no_grad`` / ``inference_mode`` used later;
* ``out=``: wrong dtype (raise or cast, as CPU), wrong shape (resized), a non-contiguous view (written
  through to its base), an out that aliases an input, out= of reductions and matmul;
* mixed devices: a CPU 0-dim tensor with a tpu tensor (allowed), CPU index tensors and masks into a tpu
  tensor (allowed, as with CUDA), a CPU tensor with more dims (error naming both devices), copy_ across
  devices with broadcasting and a dtype change, ``torch.where`` with mixed operands;
* type promotion across ops: 0-dim tensors of a higher category, int/int division, floor_divide and
  remainder signs, integer wrap-around, sum/prod/cumsum default dtypes, mean of ints, casts, clamp with
  tensor bounds of other dtypes, complex.

Every differential case runs on CPU torch and on the tpu in strict and in fused mode (both raise, or
equal results and inputs afterwards). Mixed-device cases whose CPU-only run cannot be the reference
(the CPU run has no second device) assert the CUDA rule directly. All cases run in one crash-tolerant
child process (``isolated.run_cases_isolated``).
"""
import warnings

import pytest
import torch

from tests.harness import differential as D
from tests.harness.compare import assert_same_value, read
from tests.harness.errors import assert_device_works, Gap, is_clear
from tests.harness.inputs import per_device, rand, t
from tests.harness.isolated import assert_isolated_result, case_and_mode, isolated_fixture
from tests.harness.modes import _in_mode

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
MODES = ["strict", "fused"]


def _leaf(*shape, seed=0, dtype=torch.float32):
    return rand(*shape, seed=seed, dtype=dtype).requires_grad_(True)


def _grad_of(x):
    return x.grad


# --------------------------------------------------------------------------------------------------
# 1. autograd sequences


def _saved_input_modified(x):
    y = x * 1
    z = y * y          # saves y
    y.add_(1)
    z.sum().backward()
    return x.grad


def _saved_result_modified(x):
    z = x.exp()        # saves its result
    z.mul_(2)
    z.sum().backward()
    return x.grad


def _saved_result_modified_through_view(x):
    z = x.exp()
    z[1:3].mul_(2)
    z.sum().backward()
    return x.grad


def _saved_modified_through_detach(x):
    z = x.exp()
    z.detach().zero_()
    z.sum().backward()
    return x.grad


def _saved_modified_through_data(x):
    z = x.sigmoid()
    z.data.fill_(0.5)  # .data does not bump the version: CPU backward runs with the new values
    z.sum().backward()
    return x.grad


def _saved_modified_by_copy(x):
    z = x.tanh()
    z.copy_(torch.zeros_like(z))
    z.sum().backward()
    return x.grad


def _saved_modified_by_setitem(x):
    y = x * 2
    z = y.pow(2)
    y[0] = 3.0
    z.sum().backward()
    return x.grad


def _saved_modified_by_out(x):
    y = x * 2
    z = y.sin()
    with torch.no_grad():
        torch.add(y, 1, out=y)
    z.sum().backward()
    return x.grad


def _saved_base_modified_via_view_fill(x):
    y = x * 1
    z = y.log1p()
    y.view(-1)[0:2].fill_(0.0)
    z.sum().backward()
    return x.grad


def _version_bumps(x):
    y = x.detach().clone()
    v0 = y._version
    y.add_(1)
    v1 = y._version
    y[0].mul_(2)
    v2 = y._version
    y.t_() if y.dim() == 2 else None
    torch.add(y, 1, out=y)
    v3 = y._version
    y.copy_(y * 2)
    v4 = y._version
    y[1] = 5.0
    v5 = y._version
    return [v1 > v0, v2 > v1, v3 > v2, v4 > v3, v5 > v4], y


def _view_version_shared(x):
    y = x.detach().clone()
    v = y[1:3]
    before = (y._version, v._version)
    v.mul_(2)
    mid = (y._version, v._version)
    y.add_(1)
    after = (y._version, v._version)
    return [mid[0] > before[0], mid[1] > before[1], after[0] > mid[0], after[1] > mid[1], mid[0] == mid[1]]


def _inplace_on_leaf(x):
    x.add_(1)
    return x


def _inplace_on_leaf_view(x):
    x[0].mul_(2)
    return x


def _inplace_on_leaf_no_grad(x):
    with torch.no_grad():
        x.mul_(2)
    (x * x).sum().backward()
    return x.grad, x


def _copyslices(x):
    y = x * 2
    y[1:3].mul_(3)
    (y * y).sum().backward()
    return y, x.grad


def _copyslices_setitem(x):
    y = x * 2
    y[0] = x[1] * 5
    (y.sin()).sum().backward()
    return y, x.grad


def _copyslices_transpose(x):
    y = x.exp()
    y.t()[1].add_(x[:, 0])
    y.sum().backward()
    return y, x.grad


def _copyslices_chain(x):
    y = x + 0
    y[:, 1:].mul_(2)
    y[1:, :].add_(y[:1, :])
    y.pow(2).sum().backward()
    return y, x.grad


def _backward_twice_retain(x):  # (a second backward without retain_graph: tests/autograd/test_autograd_modes.py)
    loss = (x.sin() * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    return x.grad


def _grad_accumulates(x):
    (x * 3).sum().backward()
    (x * x).sum().backward()
    return x.grad


def _grad_zero_then_accumulate(x):
    (x * 3).sum().backward()
    x.grad.zero_()
    (x * x).sum().backward()
    return x.grad


def _grad_none_then_again(x):
    (x * 3).sum().backward()
    x.grad = None
    (x.exp()).sum().backward()
    return x.grad


def _noncontig_leaf_grad(x):
    (x * torch.arange(x.numel(), device=x.device, dtype=x.dtype).reshape(x.shape)).sum().backward()
    return x.grad, x.grad.stride()


def _expanded_leaf_grad(x):
    (x * torch.arange(12.0, device=x.device).reshape(3, 4)).sum().backward()
    return x.grad


def _retain_grad_view(x):
    y = x * 2
    v = y[1:]
    v.retain_grad()
    y.retain_grad()
    (v * v).sum().backward()
    return v.grad, y.grad, x.grad


def _retain_grad_transpose(x):
    y = (x * 2).t()
    y.retain_grad()
    (y.sin()).sum().backward()
    return y.grad, x.grad


def _double_backward(op):
    def fn(x):
        g, = torch.autograd.grad(op(x).sum(), x, create_graph=True)
        g2, = torch.autograd.grad((g * g).sum(), x)
        return g, g2
    return fn


def _double_backward_backward(x):
    g, = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    g.sum().backward()
    return g, x.grad


def _hvp(x):
    w = torch.arange(x.numel(), dtype=x.dtype, device=x.device).reshape(x.shape) / 10
    y = (x @ x.t()).tanh().sum()
    g, = torch.autograd.grad(y, x, create_graph=True)
    hv, = torch.autograd.grad(g, x, grad_outputs=w)
    return g, hv


def _hook_scales(x):
    x.register_hook(lambda g: g * 2)
    (x * x).sum().backward()
    return x.grad


def _hook_intermediate(x):
    y = x.exp()
    seen = []
    y.register_hook(lambda g: seen.append(g.clone()) or g + 1)
    (y * 3).sum().backward()
    return seen[0], x.grad


def _hook_wrong_shape(x):
    y = x * 2
    y.register_hook(lambda g: g[:1])
    y.sum().backward()
    return x.grad


def _hook_inplace_grad(x):
    y = x * 2
    y.register_hook(lambda g: g.mul_(0.5))
    (y * y).sum().backward()
    return x.grad


def _post_accumulate_hook(x):
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    (x * 4).sum().backward()
    return seen[0], x.grad


def _no_grad_then_autograd(x):
    with torch.no_grad():
        c = x * 2
    y = (c * x).sum()
    y.backward()
    return c.requires_grad, x.grad


def _no_grad_inplace_then_backward(x):
    y = x * 2
    z = y * y
    with torch.no_grad():
        y.add_(1)     # still bumps the version
    z.sum().backward()
    return x.grad


def _inference_tensor_saved(x):
    with torch.inference_mode():
        c = torch.ones(x.shape, device=x.device) * 2
    (x * c).sum().backward()
    return x.grad


def _inference_tensor_inplace_outside(x):
    with torch.inference_mode():
        c = x.detach() * 2
    c.add_(1)
    return c


def _inference_tensor_read_outside(x):
    with torch.inference_mode():
        c = x.detach() * 2
    return c + 1, c.is_inference(), (c + 1).is_inference()


def _inference_tensor_add_no_save(x):
    with torch.inference_mode():
        c = torch.full(x.shape, 3.0, device=x.device)
    (x + c).sum().backward()   # add saves nothing: allowed
    return x.grad


def _detach_inplace_grad_ok(x):
    y = x * 2
    z = y + 1          # add saves nothing
    y.detach().mul_(0)
    z.sum().backward()
    return x.grad, y


def _requires_grad_after_inplace(x):
    y = x.detach().clone()
    y.mul_(2)
    y.requires_grad_()
    (y * y).sum().backward()
    return y.grad


def _set_data_then_backward(x):
    y = x * 2
    x.data = torch.ones_like(x.data)
    (y * x).sum().backward()
    return x.grad


def _optimizer_then_stale_graph(x):
    opt = torch.optim.SGD([x], lr=0.1)
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    opt.step()         # modifies x in place under no_grad
    loss.backward()    # the graph saved x: CPU raises
    return x.grad


def _unbind_inplace(x):
    y = x * 1
    a, b = y.unbind(0)
    a.mul_(2)
    return y


def _split_inplace_backward(x):
    y = x * 1
    s = y.split(1, 0)
    s[0].mul_(2)
    y.sum().backward()
    return x.grad


def _view_of_leaf_inplace_no_grad_then_grad(x):
    with torch.no_grad():
        x[0] = 7.0
    (x.sin()).sum().backward()
    return x, x.grad


def _mul_saved_other_modified(x):
    w = torch.ones_like(x) * 3
    w.requires_grad_()
    z = x * w
    w.data.mul_(2)    # .data: no version bump, CPU uses the new w
    z.sum().backward()
    return x.grad


def _grad_of_inplace_output(x):
    y = x.clone()
    y.mul_(x)
    y.sum().backward()
    return x.grad


AUTOGRAD = {
    "saved_input_modified": (_saved_input_modified, lambda: [_leaf(4)]),
    "saved_result_modified": (_saved_result_modified, lambda: [_leaf(4)]),
    "saved_result_modified_through_view": (_saved_result_modified_through_view, lambda: [_leaf(4)]),
    "saved_modified_through_detach": (_saved_modified_through_detach, lambda: [_leaf(4)]),
    "saved_modified_through_data": (_saved_modified_through_data, lambda: [_leaf(4)]),
    "saved_modified_by_copy": (_saved_modified_by_copy, lambda: [_leaf(4)]),
    "saved_modified_by_setitem": (_saved_modified_by_setitem, lambda: [_leaf(4)]),
    "saved_modified_by_out": (_saved_modified_by_out, lambda: [_leaf(4)]),
    "saved_base_modified_via_view_fill": (_saved_base_modified_via_view_fill, lambda: [_leaf(2, 3).abs()
                                                                                        .detach().requires_grad_()]),
    "version_bumps": (_version_bumps, lambda: [rand(3, 3)]),
    "view_version_shared": (_view_version_shared, lambda: [rand(4)]),
    "inplace_on_leaf": (_inplace_on_leaf, lambda: [_leaf(3)]),
    "inplace_on_leaf_view": (_inplace_on_leaf_view, lambda: [_leaf(2, 3)]),
    "inplace_on_leaf_no_grad": (_inplace_on_leaf_no_grad, lambda: [_leaf(3)]),
    "copyslices": (_copyslices, lambda: [_leaf(4)]),
    "copyslices_setitem": (_copyslices_setitem, lambda: [_leaf(3, 2)]),
    "copyslices_transpose": (_copyslices_transpose, lambda: [_leaf(3, 3)]),
    "copyslices_chain": (_copyslices_chain, lambda: [_leaf(3, 3)]),
    "backward_twice_retain": (_backward_twice_retain, lambda: [_leaf(3)]),
    "grad_accumulates": (_grad_accumulates, lambda: [_leaf(3)]),
    "grad_zero_then_accumulate": (_grad_zero_then_accumulate, lambda: [_leaf(3)]),
    "grad_none_then_again": (_grad_none_then_again, lambda: [_leaf(3)]),
    "noncontig_leaf_grad": (_noncontig_leaf_grad,
                            lambda: [per_device(lambda d: rand(4, 3).to(d).t().requires_grad_())]),
    "expanded_leaf_grad": (_expanded_leaf_grad,
                           lambda: [per_device(lambda d: rand(3, 1).to(d).expand(3, 4).requires_grad_())]),
    "retain_grad_view": (_retain_grad_view, lambda: [_leaf(4)]),
    "retain_grad_transpose": (_retain_grad_transpose, lambda: [_leaf(2, 3)]),
    "double_backward_sin": (_double_backward(torch.sin), lambda: [_leaf(4)]),
    "double_backward_exp": (_double_backward(torch.exp), lambda: [_leaf(4)]),
    "double_backward_tanh": (_double_backward(torch.tanh), lambda: [_leaf(4)]),
    "double_backward_cube": (_double_backward(lambda x: x * x * x), lambda: [_leaf(4)]),
    "double_backward_softmax": (_double_backward(lambda x: x.softmax(-1) * torch.arange(
        4.0, device=x.device)), lambda: [_leaf(2, 4)]),
    "double_backward_matmul": (_double_backward(lambda x: (x @ x.t()) ** 2), lambda: [_leaf(2, 3)]),
    "double_backward_then_backward": (_double_backward_backward, lambda: [_leaf(4)]),
    "hessian_vector": (_hvp, lambda: [_leaf(2, 3)]),
    "hook_scales": (_hook_scales, lambda: [_leaf(3)]),
    "hook_intermediate": (_hook_intermediate, lambda: [_leaf(3)]),
    "hook_wrong_shape": (_hook_wrong_shape, lambda: [_leaf(3)]),
    "hook_inplace_grad": (_hook_inplace_grad, lambda: [_leaf(3)]),
    "post_accumulate_hook": (_post_accumulate_hook, lambda: [_leaf(3)]),
    "no_grad_then_autograd": (_no_grad_then_autograd, lambda: [_leaf(3)]),
    "no_grad_inplace_then_backward": (_no_grad_inplace_then_backward, lambda: [_leaf(3)]),
    "inference_tensor_saved": (_inference_tensor_saved, lambda: [_leaf(3)]),
    "inference_tensor_inplace_outside": (_inference_tensor_inplace_outside, lambda: [rand(3)]),
    "inference_tensor_read_outside": (_inference_tensor_read_outside, lambda: [rand(3)]),
    "inference_tensor_add_no_save": (_inference_tensor_add_no_save, lambda: [_leaf(3)]),
    "detach_inplace_grad_ok": (_detach_inplace_grad_ok, lambda: [_leaf(3)]),
    "requires_grad_after_inplace": (_requires_grad_after_inplace, lambda: [rand(3)]),
    "set_data_then_backward": (_set_data_then_backward, lambda: [_leaf(3)]),
    "optimizer_then_stale_graph": (_optimizer_then_stale_graph, lambda: [_leaf(3)]),
    "unbind_inplace": (_unbind_inplace, lambda: [_leaf(2, 3)]),
    "split_inplace_backward": (_split_inplace_backward, lambda: [_leaf(2, 3)]),
    "view_of_leaf_inplace_no_grad_then_grad": (_view_of_leaf_inplace_no_grad_then_grad, lambda: [_leaf(2, 3)]),
    "mul_saved_other_modified": (_mul_saved_other_modified, lambda: [_leaf(3)]),
    "grad_of_inplace_output": (_grad_of_inplace_output, lambda: [_leaf(3)]),
}


# --------------------------------------------------------------------------------------------------
# 2. out= arguments


def _e(x, *shape, dtype=None):
    return torch.empty(*shape, dtype=dtype or x.dtype, device=x.device)


def _warned(fn):
    """fn's result and whether it warned (CPU warns when an out= tensor of another shape is resized)."""
    def run(*a):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn(*a)
        return r, any("resized" in str(m.message) for m in w)
    return run


A23 = rand(2, 3, seed=1)
B34 = rand(3, 4, seed=2)
I23 = t([[-7, 7, 5], [-5, 0, 3]], dtype=torch.int64)
HALF = t([12.0, 0.3333, 300.0, 1.001], dtype=torch.float16)

OUT = {
    "add_out_int_from_float": (lambda a: torch.add(a, a, out=_e(a, 2, 3, dtype=torch.int32)), [A23]),
    "add_out_double_from_float": (lambda a: torch.add(a, a, out=_e(a, 2, 3, dtype=torch.float64)), [A23]),
    "add_out_half_from_float": (lambda a: torch.add(a, a, out=_e(a, 2, 3, dtype=torch.float16)), [A23]),
    "add_out_float_from_int": (lambda i: torch.add(i, i, out=_e(i, 2, 3, dtype=torch.float32)), [I23]),
    "div_out_int": (lambda i: torch.div(i, 2, out=_e(i, 2, 3)), [I23]),
    "div_floor_out_int": (lambda i: torch.div(i, 2, rounding_mode="floor", out=_e(i, 2, 3)), [I23]),
    "mm_out_double": (lambda a, b: torch.mm(a, b, out=_e(a, 2, 4, dtype=torch.float64)), [A23, B34]),
    "mm_out_wrong_shape": (_warned(lambda a, b: torch.mm(a, b, out=_e(a, 3, 3))), [A23, B34]),
    "matmul_out": (lambda a, b: torch.matmul(a, b, out=_e(a, 2, 4)), [A23, B34]),
    "matmul_out_noncontig": (lambda a, b, o: (torch.matmul(a, b, out=o.t()), o), [A23, B34, rand(4, 2)]),
    "bmm_out_wrong_dtype": (lambda a: torch.bmm(a[None], a.t()[None], out=_e(a, 1, 2, 2, dtype=torch.int64)),
                            [A23]),
    "add_out_wrong_shape": (_warned(lambda a: torch.add(a, 1, out=_e(a, 5))), [A23]),
    "add_out_empty_shape": (_warned(lambda a: torch.add(a, 1, out=_e(a, 0))), [A23]),
    "add_out_bigger_shape": (_warned(lambda a: torch.add(a, 1, out=_e(a, 4, 4).fill_(9))), [A23]),
    "add_out_noncontig_view": (lambda a, base: (torch.add(a, 1, out=base[:, ::2]), base),
                               [A23, torch.zeros(2, 6)]),
    "add_out_transposed_view": (lambda a, base: (torch.mul(a, 3, out=base.t()), base), [A23, torch.zeros(3, 2)]),
    "add_out_row_of_base": (lambda a, base: (torch.sub(a[0], 1, out=base[1]), base), [A23, torch.zeros(3, 3)]),
    "out_noncontig_wrong_shape": (_warned(lambda a, base: (torch.add(a, 1, out=base[:, ::2]), base)),
                                  [A23, torch.zeros(3, 6)]),
    "add_out_alias_input": (lambda a, b: (torch.add(a, b, out=a), a), [A23, rand(2, 3, seed=3)]),
    "mul_out_alias_other": (lambda a, b: (torch.mul(a, b, out=b), b), [A23, rand(2, 3, seed=3)]),
    "cumsum_out_alias": (lambda a: (torch.cumsum(a, 1, out=a), a), [A23]),
    "exp_out_alias_transpose": (lambda a: (torch.exp(a.t(), out=a), a), [rand(3, 3)]),
    "sum_out": (lambda a: torch.sum(a, 1, out=_e(a, 2)), [A23]),
    "sum_out_wrong_dtype": (lambda a: torch.sum(a, 1, out=_e(a, 2, dtype=torch.int64)), [A23]),
    "sum_out_int_to_float": (lambda i: torch.sum(i, 1, out=_e(i, 2, dtype=torch.float32)), [I23]),
    "sum_out_keepdim_wrong_shape": (_warned(lambda a: torch.sum(a, 1, keepdim=True, out=_e(a, 2))), [A23]),
    "mean_out_int": (lambda i: torch.mean(i, 1, out=_e(i, 2)), [I23]),
    "mean_out_double": (lambda a: torch.mean(a, 0, out=_e(a, 3, dtype=torch.float64)), [A23]),
    "max_dim_out": (lambda a: torch.max(a, 1, out=(_e(a, 2), _e(a, 2, dtype=torch.int64))), [A23]),
    "max_dim_out_bad_index_dtype": (lambda a: torch.max(a, 1, out=(_e(a, 2), _e(a, 2, dtype=torch.int32))),
                                    [A23]),
    "amax_out": (lambda a: torch.amax(a, 0, out=_e(a, 3)), [A23]),
    "prod_out_int": (lambda i: torch.prod(i, 0, out=_e(i, 3)), [I23]),
    "cat_out_wrong_dtype": (lambda a: torch.cat([a, a], out=_e(a, 4, 3, dtype=torch.float64)), [A23]),
    "cat_out_int_from_float": (lambda a: torch.cat([a, a], out=_e(a, 4, 3, dtype=torch.int64)), [A23]),
    # CPU resizes the out= tensor before it finds the overlap and raises: the input is left resized,
    # garbage in it; the tpu raises first and keeps the input (inputs are not compared after the error)
    "cat_out_alias_input": (lambda a: torch.cat([a, a], out=a), [A23], {"check_inputs": False}),
    "where_out": (lambda a: torch.where(a > 0, a, 0.0, out=_e(a, 2, 3)), [A23]),
    "clamp_out_noncontig": (lambda a, base: (torch.clamp(a, -0.5, 0.5, out=base[::2]), base),
                            [A23, torch.zeros(4, 3)]),
    "abs_out_int_to_float": (lambda i: torch.abs(i, out=_e(i, 2, 3, dtype=torch.float32)), [I23]),
    "neg_out_bool": (lambda i: torch.neg(i, out=_e(i, 2, 3, dtype=torch.bool)), [I23]),
    "eq_out_float": (lambda a: torch.eq(a, 0.5, out=_e(a, 2, 3)), [A23]),
    "eq_out_int": (lambda a: torch.gt(a, 0.0, out=_e(a, 2, 3, dtype=torch.int64)), [A23]),
    "addmm_out_alias_bias": (lambda c, a, b: (torch.addmm(c, a, b, out=c), c), [rand(2, 4), A23, B34]),
    "out_requires_grad_input": (lambda x: torch.add(x, 1, out=_e(x, 3)), [_leaf(3)]),
    "out_requires_grad_out": (lambda x: torch.add(x.detach(), 1, out=x), [_leaf(3)]),
    "out_then_reuse": (lambda a: (lambda o: (torch.add(a, 1, out=o), torch.mul(a, 2, out=o), o))(_e(a, 2, 3)),
                       [A23]),
    "out_resized_then_used": (lambda a: (lambda o: (torch.add(a, 1, out=o), o.sum(), o.stride()))(_e(a, 0)), [A23]),
    "sum_out_int_from_float_computes_in_int": (lambda a: (torch.sum(a, 1, out=_e(a, 2, dtype=torch.int64)),
                                                          torch.prod(a, 1, out=_e(a, 2, dtype=torch.int64)),
                                                          torch.cumsum(a, 1, out=_e(a, 2, 3, dtype=torch.int64))),
                                               [A23]),
    "inplace_partial_overlap_transpose": (lambda a: a.add_(a.t()), [rand(3, 3)]),
    "out_partial_overlap_transpose": (lambda a: torch.add(a, 1, out=a.t()), [rand(3, 3)]),
    "copy_partial_overlap_transpose": (lambda a: a.copy_(a.t()), [rand(3, 3)]),
    "inplace_full_overlap_ok": (lambda a: a.mul_(a[:]), [rand(3, 3)]),
    "resize_then_op": (lambda a: (lambda x: (x.resize_(2, 3), x.mul_(0).add_(a), x.stride()))(a.flatten()[:5].clone()),
                       [A23]),
    "out_zero_dim": (lambda a: torch.sum(a, out=_e(a, 1)), [A23]),
    "arange_out_dtype": (lambda a: torch.arange(5, out=_e(a, 5, dtype=torch.int32)), [A23]),
    "linspace_out_noncontig": (lambda a, base: (torch.linspace(0, 1, 3, out=base[:, 1]), base),
                               [A23, torch.zeros(3, 2)]),
    # CPU computes in the inputs' dtype and casts into a wider out=: half results overflow to inf and
    # round to half first (the tpu's half lowerings computed in float32 and wrote the float32 value)
    **{f"{name}_half_out_float": (lambda h, fn=fn: fn(h, _e(h, 4, dtype=torch.float32)), [HALF],
                                  {"atol": 1e-3, "rtol": 1e-3})  # (half rounding: 1 ulp)
       for name, fn in {"exp": lambda h, o: torch.exp(h, out=o), "sinh": lambda h, o: torch.sinh(h, out=o),
                        "pow": lambda h, o: torch.pow(h, 3.1, out=o), "mul": lambda h, o: torch.mul(h, h, out=o),
                        "sigmoid": lambda h, o: torch.sigmoid(h, out=o), "log": lambda h, o: torch.log(h, out=o),
                        "div": lambda h, o: torch.div(h, 7.0, out=o), "rsqrt": lambda h, o: torch.rsqrt(h, out=o)}.items()},
    "exp_bf16_out_double": (lambda h: torch.exp(h.bfloat16(), out=_e(h, 4, dtype=torch.float64)), [HALF]),
    "softmax_half_out_float": (lambda h: torch._softmax(h, 0, False, out=_e(h, 4, dtype=torch.float32)), [HALF]),
    "sort_half_out_float_raises": (lambda h: torch.sort(h, out=(_e(h, 4, dtype=torch.float32),
                                                                _e(h, 4, dtype=torch.int64))), [HALF]),
}


# --------------------------------------------------------------------------------------------------
# 3. mixed devices (differential: the CPU run has every tensor on the CPU)


def _cpu(*vals, dtype=None):
    return torch.tensor(vals[0] if len(vals) == 1 else list(vals), dtype=dtype)


MIXED = {
    "add_cpu_0dim": (lambda x: x + _cpu(2.5), [A23]),
    "cpu_0dim_add_first": (lambda x: _cpu(2.5) + x, [A23]),
    "int_plus_cpu_0dim_float": (lambda i: i + _cpu(0.5), [I23]),
    "int8_times_cpu_0dim_int64": (lambda i: i.to(torch.int8) * _cpu(1000), [I23]),
    "half_plus_cpu_0dim_double": (lambda x: x.half() + _cpu(1.0, dtype=torch.float64), [A23]),
    "mul_inplace_cpu_0dim": (lambda x: x.mul_(_cpu(3.0)), [A23]),
    "int_inplace_cpu_0dim_float": (lambda i: i.add_(_cpu(0.5)), [I23]),
    "where_cpu_0dim": (lambda x: torch.where(x > 0, x, _cpu(-1.0)), [A23]),
    "where_scalars_mixed": (lambda x: torch.where(x > 0, 1, 0.5), [A23]),
    "where_cpu_0dim_cond": (lambda x: torch.where(_cpu(True), x, 0.0), [A23]),
    "clamp_cpu_0dim_bounds": (lambda x: torch.clamp(x, _cpu(-0.5), _cpu(0.5)), [A23]),
    "pow_cpu_0dim_base": (lambda x: torch.pow(_cpu(2.0), x), [A23]),
    "lerp_cpu_0dim_weight": (lambda x: torch.lerp(x, x * 2, _cpu(0.25)), [A23]),
    "getitem_cpu_index": (lambda x: x[_cpu(1, 0, 1)], [A23]),
    "getitem_cpu_index_2d": (lambda x: x[_cpu(1, 0), _cpu(2, 0)], [A23]),
    "getitem_cpu_bool_mask": (lambda x: x[_cpu([[True, False, True], [False, False, True]])], [A23]),
    "getitem_cpu_bool_rows": (lambda x: x[_cpu(False, True)], [A23]),
    "setitem_cpu_index": (lambda x: x.__setitem__(_cpu(1, 0), 5.0), [A23]),
    "setitem_cpu_mask": (lambda x: x.__setitem__(_cpu([[True, False, True], [False, False, True]]), -1.0), [A23]),
    "setitem_cpu_index_cpu_value": (lambda x: x.__setitem__(_cpu(1), _cpu(9.0)), [A23]),
    "index_put_cpu_index": (lambda x: x.index_put_((_cpu(0, 1),), x[0] * 0 + 4, accumulate=True), [A23]),
    "getitem_cpu_index_out_of_range": (lambda x: x[_cpu(0, 5)], [A23]),
    "copy_broadcast_dtype": (lambda x: x.copy_(_cpu(1, 2, 3)), [A23]),
    "copy_from_cpu_noncontig": (lambda x: x.copy_(torch.arange(6, dtype=torch.float64).reshape(3, 2).t()),
                                [A23]),
    "copy_into_view_from_cpu": (lambda x: x[:, 1].copy_(_cpu(True, False)), [A23]),
    "copy_to_cpu_broadcast": (lambda x: torch.zeros(3, 2, 3, dtype=torch.int32).copy_(x * 10), [A23]),
    "copy_to_cpu_view": (lambda x: (lambda c: (c[:, ::2].copy_(x[:, :2].t()), c))(torch.zeros(3, 4)), [A23]),
    "copy_shape_mismatch": (lambda x: x.copy_(_cpu(1.0, 2.0)), [A23]),
    "tensor_from_tpu_0dim_item": (lambda x: torch.tensor([x[0, 0], x[1, 1]]), [A23]),
}


def _raises(fn, *pattern):
    try:
        r = fn()
        torch.tpu.synchronize()
        if isinstance(r, torch.Tensor):
            r.cpu()
    except Exception as e:  # noqa: BLE001
        assert is_clear(e), f"[unclear error] {type(e).__name__}: {e}"
        text = str(e).lower()
        for p in pattern:
            assert p in text, f"[unclear error] the error does not name {p!r}: {type(e).__name__}: {e}"
        assert_device_works()
        return
    pytest.fail("[silent] tpu returned a value where CUDA's rule is an error")


def _x():
    return torch.arange(6.0, device="tpu").reshape(2, 3)


def _rule_device_results():
    # a CPU 0-dim tensor with a tpu tensor: the result lives on the tpu
    assert (_x() + _cpu(1.0)).device.type == "tpu", "[wrong device] tpu + cpu 0-dim"
    assert (_cpu(1.0) * _x()).device.type == "tpu", "[wrong device] cpu 0-dim * tpu"
    assert torch.where(_x() > 1, _cpu(1.0), _x()).device.type == "tpu", "[wrong device] where"
    assert _x()[_cpu(1, 0)].device.type == "tpu", "[wrong device] tpu[cpu index]"


def _product_into_input(fn):
    """mm/matmul with out= aliasing an input: CPU torch zeroes the output before it reads the inputs
    (its result is all zeros, an artefact of its kernel); the tpu must give the product itself."""
    a = rand(3, 3)
    x = a.to("tpu")
    r = fn(x)
    assert r is x, "[wrong structure] out= must return the out tensor"
    assert_same_value(a @ a, read(x), where="the out= input after the call")


DEVICE_RULES = {
    "cpu_nonscalar_plus_tpu": lambda: _raises(lambda: _x() + torch.ones(3), "cpu", "tpu"),
    "tpu_plus_cpu_nonscalar_inplace": lambda: _raises(lambda: _x().add_(torch.ones(3)), "cpu", "tpu"),
    "cpu_inplace_with_tpu_nonscalar": lambda: _raises(lambda: torch.ones(2, 3).add_(_x()), "cpu", "tpu"),
    "cpu_inplace_with_tpu_0dim": lambda: _raises(lambda: torch.ones(2, 3).add_(_x()[0, 0]), "cpu", "tpu"),
    "mm_mixed": lambda: _raises(lambda: torch.mm(_x(), torch.ones(3, 2)), "cpu", "tpu"),
    "cat_mixed": lambda: _raises(lambda: torch.cat([_x(), torch.ones(2, 3)]), "cpu", "tpu"),
    "where_cpu_cond_tpu_values": lambda: _raises(lambda: torch.where(torch.ones(2, 3) > 0, _x(), _x()),
                                                 "cpu", "tpu"),
    "cpu_tensor_plus_tpu_0dim": lambda: _raises(lambda: torch.ones(2) + _x()[0, 0], "cpu", "tpu"),
    "cpu_index_select": lambda: _raises(lambda: torch.index_select(_x(), 1, torch.tensor([2, 0])), "cpu", "tpu"),
    "mm_out_alias_input": lambda: _product_into_input(lambda a: torch.mm(a, a, out=a)),
    "matmul_out_alias_input": lambda: _product_into_input(lambda a: torch.matmul(a, a, out=a)),
    "tpu_index_into_cpu": lambda: _raises(lambda: torch.ones(4)[torch.tensor([1, 2], device="tpu")], "cpu"),
    "tpu_mask_into_cpu": lambda: _raises(lambda: torch.ones(3)[torch.tensor([True, False, True], device="tpu")],
                                         "cpu"),
    "add_out_on_cpu": lambda: _raises(lambda: torch.add(_x(), 1, out=torch.empty(2, 3)), "cpu", "tpu"),
    "add_out_on_tpu_from_cpu": lambda: _raises(lambda: torch.add(torch.ones(2, 3), 1, out=_x()), "cpu", "tpu"),
    "device_results": _rule_device_results,
}


# --------------------------------------------------------------------------------------------------
# 4. type promotion across ops

NEG_I = t(-7, 7, -7, 7, -1, 0, dtype=torch.int64)
DEN_I = t(2, -2, -2, 2, 3, 5, dtype=torch.int64)
NEG_F = t(-7.5, 7.5, -7.5, 7.5, -0.0, 3.0)
DEN_F = t(2.0, -2.0, -2.0, 2.0, 2.0, float("inf"))

I8 = t(100, -100, 5, dtype=torch.int8)

PROMO = {
    "int_div_int": (lambda a, b: a / b, [NEG_I, DEN_I]),
    "int_div_0dim_int": (lambda a, b: a / b[0], [NEG_I, DEN_I]),
    "int_truediv_scalar_int": (lambda a: a / 2, [NEG_I]),
    "floordiv_int_neg": (lambda a, b: a // b, [NEG_I, DEN_I]),
    "floordiv_float_neg": (lambda a, b: a // b, [NEG_F, DEN_F]),
    "floordiv_int_scalar_neg": (lambda a: a // -3, [NEG_I]),
    "floordiv_int_by_float_scalar": (lambda a: a // 2.5, [NEG_I]),
    "remainder_int_neg": (lambda a, b: a % b, [NEG_I, DEN_I]),
    "remainder_float_neg": (lambda a, b: a % b, [NEG_F, DEN_F]),
    "remainder_scalar_first": (lambda b: torch.remainder(-7, b), [DEN_I]),
    "fmod_int_neg": (lambda a, b: torch.fmod(a, b), [NEG_I, DEN_I]),
    "fmod_float_neg": (lambda a, b: torch.fmod(a, b), [NEG_F, DEN_F]),
    "div_trunc_int": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), [NEG_I, DEN_I]),
    "div_floor_float": (lambda a, b: torch.div(a, b, rounding_mode="floor"), [NEG_F, DEN_F]),
    "floordiv_int8_min_by_neg1": (lambda a: a // torch.tensor(-1, dtype=torch.int8, device=a.device),
                                  [t(-128, 127, dtype=torch.int8)]),
    "uint8_plus_int8": (lambda a, b: a + b, [t(200, 3, dtype=torch.uint8), t(-100, 5, dtype=torch.int8)]),
    "uint8_minus_wrap": (lambda a: a - 10, [t(3, 200, dtype=torch.uint8)]),
    "uint8_neg": (lambda a: -a, [t(3, 200, 0, dtype=torch.uint8)]),
    "half_plus_bf16": (lambda a: a.half() + a.bfloat16(), [t(1.5, 3.25, 1000.0)]),
    "half_times_0dim_bf16": (lambda a: a.half() * torch.tensor(3.0, dtype=torch.bfloat16, device=a.device),
                             [t(1.5, 3.25, 1000.0)]),
    "bool_add_bool": (lambda m: m + m, [t(True, False, True)]),
    "bool_mul_bool": (lambda m: m * m.logical_not(), [t(True, False, True)]),
    "bool_sub_bool": (lambda m: m - m, [t(True, False, True)]),
    "bool_neg": (lambda m: -m, [t(True, False, True)]),
    "bool_plus_int_scalar": (lambda m: m + 3, [t(True, False, True)]),
    "bool_div_bool": (lambda m: m / m, [t(True, False, True)]),
    "bool_sum": (lambda m: (m.sum(), m.sum(0).dtype), [t(True, False, True)]),
    "bool_cumsum": (lambda m: m.cumsum(0), [t(True, False, True)]),
    "bool_prod": (lambda m: m.prod(), [t(True, False, True)]),
    "int8_add_wrap": (lambda a: a + a, [t(100, -100, 127, dtype=torch.int8)]),
    "int8_mul_scalar_wrap": (lambda a: a * 3, [t(100, -100, 127, dtype=torch.int8)]),
    "int32_mul_wrap": (lambda a: a * a, [t(2 ** 20, -(2 ** 17) - 3, 65536, dtype=torch.int32)]),
    "int64_mul_wrap": (lambda a: a * a, [t(2 ** 40, -(2 ** 33) - 3, 3037000500, dtype=torch.int64)]),
    "int64_big_exact": (lambda a: (a + 1, a - 1), [t(2 ** 53 + 1, -(2 ** 62), dtype=torch.int64)]),
    "int8_sum_default": (lambda a: (a.sum(), a.sum(0)), [t(100, 100, 100, dtype=torch.int8)]),
    "int8_sum_dtype_int8": (lambda a: a.sum(dtype=torch.int8), [t(100, 100, 100, dtype=torch.int8)]),
    "int8_cumsum_default": (lambda a: a.cumsum(0), [t(100, 100, 100, dtype=torch.int8)]),
    "int8_cumsum_dtype": (lambda a: a.cumsum(0, dtype=torch.int8), [t(100, 100, 100, dtype=torch.int8)]),
    "int32_cumsum_wrap": (lambda a: a.cumsum(0, dtype=torch.int32), [t(2 ** 30, 2 ** 30, 2 ** 30,
                                                                          dtype=torch.int32)]),
    "uint8_sum_default": (lambda a: a.sum(), [t(200, 200, dtype=torch.uint8)]),
    "int16_prod_default": (lambda a: a.prod(), [t(300, 300, 300, dtype=torch.int16)]),
    "int32_cumprod": (lambda a: a.cumprod(0), [t(1000, 1000, 1000, 1000, dtype=torch.int32)]),
    "int64_prod_wrap": (lambda a: a.prod(), [t(2 ** 40, 2 ** 40, dtype=torch.int64)]),
    "half_sum_dtype": (lambda a: (a.half().sum(), a.bfloat16().sum(), a.half().cumsum(0)), [t(1.5, 2.5, 1000.0)]),
    "mean_int_raises": (lambda a: a.mean(), [NEG_I]),
    "mean_int_dtype": (lambda a: a.mean(dtype=torch.float64), [NEG_I]),
    "mean_bool_raises": (lambda m: m.mean(), [t(True, False)]),
    "nanmean_int": (lambda a: a.nanmean(), [NEG_I]),
    "var_int": (lambda a: a.var(), [NEG_I]),
    "float_to_int_casts": (lambda a: (a.to(torch.int32), a.to(torch.int8), a.to(torch.int64), a.long()),
                           [t(-1.7, 1.7, 2.5, -0.5, 126.9, -127.9)]),
    "float_to_uint8_in_range": (lambda a: a.to(torch.uint8), [t(0.2, 1.7, 254.9, 128.5)]),
    "double_to_int64_big": (lambda a: a.long(), [t(2.0 ** 52 + 0.5, -(2.0 ** 60), dtype=torch.float64)]),
    "half_to_int16": (lambda a: a.half().short(), [t(-1000.5, 65.25, 2047.0)]),
    "int_to_bool_to_float": (lambda a: a.bool().float(), [NEG_I]),
    "float_to_bool": (lambda a: a.bool(), [t(-0.0, 0.0, 1e-30, float("nan"))]),
    "clamp_int_float_tensor_bounds": (lambda a: torch.clamp(a, min=torch.tensor([-1.5], device=a.device)), [NEG_I]),
    "clamp_float_double_tensor_bounds": (lambda a: torch.clamp(a, torch.full((6,), -1.0, dtype=torch.float64,
                                                                              device=a.device), 2.0), [NEG_F]),
    "clamp_int_float_scalar": (lambda a: torch.clamp(a, 0.5, 3.5), [NEG_I]),
    "clamp_int8_int_tensor": (lambda a: torch.clamp(a, max=torch.tensor(1000, device=a.device)),
                              [t(100, -100, dtype=torch.int8)]),
    "clamp_inplace_int_float_bound": (lambda a: a.clamp_(0.5, 3.5), [NEG_I]),
    "clamp_min_gt_max": (lambda a: torch.clamp(a, min=torch.tensor(2.0, device=a.device),
                                               max=torch.tensor(-1.0, device=a.device)), [NEG_F]),
    "clamp_bool_tensor": (lambda m: torch.clamp(m, max=torch.tensor(False, device=m.device)), [t(True, False)]),
    "zero_dim_float_vs_int_tensor": (lambda a: a * torch.tensor(1.5, dtype=torch.float64, device=a.device), [NEG_I]),
    "zero_dim_int_vs_int8": (lambda a: a.to(torch.int8) + torch.tensor(300, device=a.device), [NEG_I]),
    "zero_dim_both": (lambda a: a[0] + torch.tensor(1.5, dtype=torch.float64, device=a.device), [NEG_I]),
    "zero_dim_bool_vs_int": (lambda a: torch.tensor(True, device=a.device) + a.to(torch.int16), [NEG_I]),
    "zero_dim_complex_vs_float": (lambda a: a * torch.tensor(1 + 2j, device=a.device), [NEG_F]),
    "complex_ops": (lambda a: (lambda c: (c * c, c.abs(), c.conj(), c.real, (c + 1).angle()))(
        torch.complex(a, a.flip(0))), [NEG_F]),
    "complex_sum": (lambda a: torch.complex(a, -a).sum(), [t(1.0, 2.0)]),
    "where_int_float_scalar": (lambda a: torch.where(a > 0, a, 0.5), [NEG_I]),
    "where_int8_int_scalar": (lambda a: torch.where(a > 0, a.to(torch.int8), 1000), [NEG_I]),
    "add_alpha_float_int_raises": (lambda a: torch.add(a, a, alpha=0.5), [NEG_I]),
    "sub_alpha_int": (lambda a: torch.sub(a, a, alpha=3), [NEG_I]),
    "shift_int8_large": (lambda a: (a << 9, a >> 9, a << 3), [t(1, -1, 100, dtype=torch.int8)]),
    "shift_int64_by_tensor": (lambda a: a << torch.tensor([1, 63, 64, 0, 2, 3], device=a.device), [NEG_I]),
    "abs_int8_min": (lambda a: a.abs(), [t(-128, 5, dtype=torch.int8)]),
    "bitwise_bool_uint8": (lambda m: m & torch.tensor([3, 2], dtype=torch.uint8, device=m.device),
                           [t(True, False)]),
    "pow_int_float_scalar": (lambda a: a ** 0.5, [t(4, 9, dtype=torch.int32)]),
    "pow_int_0dim_float": (lambda a: a ** torch.tensor(2.0, device=a.device), [t(4, 9, dtype=torch.int32)]),
    "sqrt_int": (lambda a: torch.sqrt(a), [t(4, 9, dtype=torch.int32)]),
    "sigmoid_bool": (lambda m: m.sigmoid(), [t(True, False)]),
    "int_tensor_inplace_float_raises": (lambda a: a.mul_(1.5), [NEG_I]),
    "int_tensor_inplace_div_raises": (lambda a: a.div_(2), [NEG_I]),
    "int_inplace_0dim_float_tensor_raises": (lambda a: a.add_(torch.tensor(1.5, device=a.device)), [NEG_I]),
    "float_inplace_double_tensor": (lambda a: a.add_(torch.ones(6, dtype=torch.float64, device=a.device)), [NEG_F]),
    "float16_inplace_float32": (lambda a: a.half().add_(a), [t(1.0009765625, 2.0, 65504.0)]),
    "zero_dim_narrow_maximum": (lambda a: torch.maximum(a, torch.tensor(1000, device=a.device)), [I8]),
    "zero_dim_narrow_lt": (lambda a: a < torch.tensor(1000, device=a.device), [I8]),
    "zero_dim_narrow_eq_half": (lambda h: h.half() == torch.tensor(0.1, dtype=torch.float64, device=h.device),
                                [t(0.1, 0.2, 0.3)]),
    "zero_dim_narrow_floordiv": (lambda a: a // torch.tensor(-300, device=a.device), [I8]),
    "zero_dim_narrow_remainder": (lambda a: a % torch.tensor(-300, device=a.device), [I8]),
    "zero_dim_narrow_fmod": (lambda a: torch.fmod(a, torch.tensor(-300, device=a.device)), [I8]),
    "zero_dim_narrow_div_trunc": (lambda a: torch.div(a, torch.tensor(-300, device=a.device),
                                                      rounding_mode="trunc"), [I8]),
    "zero_dim_narrow_true_div": (lambda a: a / torch.tensor(1000, device=a.device), [I8]),
    "zero_dim_narrow_atan2": (lambda a: torch.atan2(a, torch.tensor(1000, device=a.device)), [I8]),
    "zero_dim_narrow_logical_and": (lambda a: torch.logical_and(a, torch.tensor(256, device=a.device)), [I8]),
    "zero_dim_narrow_shift": (lambda a: a << torch.tensor(257, device=a.device), [I8]),
    "zero_dim_narrow_uint8_max": (lambda a: torch.maximum(a.to(torch.uint8), torch.tensor(-1, device=a.device)),
                                  [I8]),
    "zero_dim_narrow_clamp_half": (lambda h: torch.clamp(h.half(), min=torch.tensor(
        0.1, dtype=torch.float64, device=h.device)), [t(0.1, 0.2, 0.3)]),
    "zero_dim_both_zero_dim": (lambda a: torch.maximum(a[0], torch.tensor(1000, device=a.device)), [I8]),
    "zero_dim_where_narrow": (lambda a: torch.where(a > 0, a, torch.tensor(1000, device=a.device)), [I8]),
    "zero_dim_cpu_narrow_lt": (lambda a: a < torch.tensor(1000), [I8]),
    "var_mean_int": (lambda a: torch.var_mean(a, 0), [NEG_I]),
    "std_bool": (lambda m: m.std(), [t(True, False)]),
    "conj_view": (lambda a: (lambda c: (c.conj(), c.conj() * 1, c.conj().imag, torch._neg_view(c),
                                        c.conj().resolve_conj()))(torch.complex(a, a.flip(0))), [NEG_F]),
    "conj_mH": (lambda a: torch.complex(a, a.flip(0)).reshape(2, 3).mH, [NEG_F]),
    "conj_then_grad": (lambda a: (lambda c: torch.autograd.grad((c.conj() * (1 + 2j)).real.sum(), a))(
        torch.complex(a, a * 2)), [_leaf(3)]),
    "sequence_promote_then_narrow": (lambda a: (a / 2).to(torch.int8) + a.to(torch.int8), [NEG_I]),
}


# --------------------------------------------------------------------------------------------------
# registry of cases (the worker runs them by name)


def _check_case(fn, make_args, mode, kw=None):
    def run():
        args = make_args() if callable(make_args) else [a.clone() if isinstance(a, torch.Tensor) else a
                                                        for a in make_args]
        D.check(fn, *args, **{"modes": [mode], "check_stride": True, **(kw or {})})
    return run


FAMILIES = {"autograd": AUTOGRAD, "out": OUT, "mixed": MIXED, "promo": PROMO}

ISOLATED_CASES = {}
for _fam, _cases in FAMILIES.items():
    for _n, (_fn, _mk, *_kw) in _cases.items():
        for _m in MODES:
            ISOLATED_CASES[f"{_fam}:{_n}:{_m}"] = _check_case(_fn, _mk, _m, *_kw)


def _in_mode_case(fn, mode):
    def run():
        with _in_mode(mode):
            fn()
    return run


for _n, _fn in DEVICE_RULES.items():
    for _m in MODES:
        ISOLATED_CASES[f"rule:{_n}:{_m}"] = _in_mode_case(_fn, _m)


results = isolated_fixture(__file__, case_and_mode, timeout_per_case=120)


# gaps left open, each a strict xfail of the failure it expects: "fam:name" -> Gap(reason, match)
XFAIL: dict[str, Gap] = {}


def _ids(fam, cases):
    return [pytest.param(f"{fam}:{n}", marks=XFAIL[f"{fam}:{n}"].mark())
            if f"{fam}:{n}" in XFAIL else f"{fam}:{n}" for n in cases]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", _ids("autograd", AUTOGRAD))
def test_autograd_sequence(results, case, mode):
    assert_isolated_result(results, f"{case}:{mode}", XFAIL.get(case))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", _ids("out", OUT))
def test_out_argument(results, case, mode):
    assert_isolated_result(results, f"{case}:{mode}", XFAIL.get(case))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", _ids("mixed", MIXED))
def test_mixed_devices(results, case, mode):
    assert_isolated_result(results, f"{case}:{mode}", XFAIL.get(case))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", _ids("rule", DEVICE_RULES))
def test_mixed_device_rules(results, case, mode):
    assert_isolated_result(results, f"{case}:{mode}", XFAIL.get(case))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", _ids("promo", PROMO))
def test_promotion(results, case, mode):
    assert_isolated_result(results, f"{case}:{mode}", XFAIL.get(case))
