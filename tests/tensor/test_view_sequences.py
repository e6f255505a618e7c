"""Bugs between ops -- view chains and mutation, mode switches in the
middle of a sequence, cache-key collisions, dynamic-shape ops in sequence, random sequences.

Every case compares with CPU torch through ``differential`` (both raise, or equal results and equal
inputs afterwards), in strict and fused eager mode (and compiled where it says so). The cases run in
one crash-tolerant child process (``isolated.run_cases_isolated``): a case that kills its process
fails alone and the rest go on; the suite pays the imports once.
"""
import pytest
import torch

from tests.harness import differential as D
from tests.harness.compare import assert_same, read
from tests.harness.errors import assert_device_works, _exc_text, is_clear
from tests.harness.inputs import DEV
from tests.harness.isolated import isolated_case_tests
from tests.harness.modes import _in_mode

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
SE = ["strict", "fused"]
ALL = ["strict", "fused", "compiled"]
X = torch.arange(24, dtype=torch.float32).reshape(4, 6)
SQ = torch.arange(36, dtype=torch.float32).reshape(6, 6)


def _fused():
    import torch_tpu

    return torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)


def _strict():
    import torch_tpu

    return torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER)


def _on(x):
    """``_fused()`` on the tpu, nothing on CPU (the mode is the tpu's; CPU runs the same code)."""
    import contextlib

    return _fused() if x.device.type == "tpu" else contextlib.nullcontext()


def _strict_on(x):
    import contextlib

    return _strict() if x.device.type == "tpu" else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------------
# 1. view chains and mutation (the harness compares the results and every input afterwards)


def _chain_every_link(x):
    v1 = x.t()
    v2 = v1.narrow(0, 1, 4)
    v3 = v2.diagonal()
    v3.mul_(-1)
    v2.add_(0.5)
    v1[0].fill_(7)
    return x, v1, v2, v3


def _chain_diag_offset(x):
    d = x.t()[1:].diagonal(offset=1)
    d.copy_(torch.arange(d.numel(), dtype=x.dtype, device=x.device) * 100)
    return x, d


def _old_views_after_base_write(x):
    v = x.t()[1:]
    w = v.diagonal()
    u = x.unfold(1, 3, 2)
    x.add_(1)
    x[2].zero_()
    return v, w, u


def _old_views_after_copy_(x):
    v = x[1:3, ::2]
    x.copy_(torch.ones_like(x) * 5)
    return v


def _unflatten_write(x):
    u = x.unflatten(1, (2, 3))
    u[:, 1].zero_()
    u[..., 0].add_(100)
    return x, u


def _movedim_write(x):
    m = x.reshape(2, 2, 6).movedim(0, 2)
    m[1].add_(1)
    m[..., 1].mul_(3)
    return x, m


def _split_every_output(x):
    parts = x.split([1, 2, 3], dim=1)
    for k, p in enumerate(parts):
        p.add_(10 ** k)
    return x, parts


def _chunk_then_view(x):
    a, b = x.chunk(2, 0)
    b.t()[2:].mul_(-1)
    a.view(-1)[::5].fill_(9)
    return x, a, b


def _expand_then_index(x):
    e = x[1].expand(3, 6)
    return e[[0, 2]], e[:, torch.tensor([5, 0], device=x.device)], e[1, 2:]


def _expand_then_index_after_write(x):
    e = x[1].expand(3, 6)
    x[1].add_(1000)
    return e[torch.tensor([2, 0], device=x.device)]


def _as_strided_overlap_read(x):
    return x.as_strided((3, 3), (1, 1), 2).sum(0), x.as_strided((4, 2), (2, 4), 3)


def _as_strided_overlap_fill(x):
    x.as_strided((3, 3), (1, 1), 2).fill_(-1)
    return x


def _as_strided_overlap_add_(x):
    x.as_strided((3, 3), (1, 1), 2).add_(1)
    return x


def _as_strided_of_view(x):
    v = x[1:]
    a = v.as_strided((2, 2), (6, 2), 1)  # offset relative to the storage, not to v
    a.mul_(10)
    return x, a


def _unfold_overlap_add_(x):
    x[0].unfold(0, 3, 1).add_(1)
    return x


def _unfold_overlap_read_after_write(x):
    u = x[0].unfold(0, 3, 1)
    x[0, 2] = -5
    return u.sum(1), u


def _view_dtype_write(x):
    i = x.view(torch.int32)
    i[1].bitwise_or_(1)
    return x, i


def _view_dtype_narrower(x):
    h = x.view(torch.int16)
    h[:, ::2].zero_()
    return x, h, h.shape


def _view_dtype_wider(x):
    d = x.view(torch.float64)
    d[0].fill_(1.0)
    return x, d


def _view_dtype_of_slice(x):
    return x[:, 2:].view(torch.int32).add(1), x[1:3].view(torch.uint8)


def _complex_real_imag(x):
    c = torch.view_as_complex(x.reshape(4, 3, 2))
    c.real.add_(1)
    c.imag.mul_(-2)
    c[1].mul_(1j)
    return x, c, c.real, c.imag


def _complex_real_of_conj(x):
    c = torch.complex(x[0], x[1])
    r = torch.view_as_real(c)
    r[:, 1].neg_()
    return c, c.conj().imag, c.abs()


def _conj_view_chain(x):
    c = torch.view_as_complex(x.reshape(4, 3, 2))
    j = c.conj()
    j.add_(1j)            # written through the conjugate view
    j.imag.mul_(2)        # through a negative view of it
    j[1:].copy_(c[:3] * 1j)
    return c, j, j.imag, j.real, j.is_conj(), (j @ c.t()), j.sum().item(), j.clone()


def _conj_then_base_write(x):
    c = torch.view_as_complex(x.reshape(4, 3, 2))
    j = c.conj()
    c.mul_(1j)
    return j * 1, torch.view_as_real(j.resolve_conj()), j.abs()


def _view_as_real_of_conj_raises(x):
    return torch.view_as_real(torch.view_as_complex(x.reshape(4, 3, 2)).conj())


def _detach_shares(x):
    d = x.detach()
    d[1].add_(1)
    x.t()[0].mul_(2)
    return d, x


def _data_shares(x):
    x.data.mul_(3)
    x.data[0].zero_()
    return x


def _data_assign(x):
    v = x[1]
    x.data = torch.full((2, 3), 7.0, device=x.device)
    x.add_(1)
    return x, v, x.shape


def _data_assign_other_dtype(x):
    v = x[0]
    x.data = torch.arange(5, device=x.device)
    return x, v, x.dtype


def _t_add_self(x):
    x.t().add_(x)
    return x


def _t_add_self_copy(x):
    x.t().add_(x.clone())
    return x


def _copy_from_transposed_self(x):
    x.copy_(x.t())
    return x


def _copy_from_shifted_self(x):
    x[1:].copy_(x[:-1])
    return x


def _copy_from_strided_self(x):
    x[::2].copy_(x[1::2])
    return x


def _mul_out_alias_view(x):
    torch.mul(x[0], 2, out=x[1])
    return x


def _resize_view_smaller(x):
    v = x[1:3]
    v.resize_(6)
    return v, x


def _resize_view_then_write(x):
    v = x.t()[1:]
    v.resize_(3, 4)  # a contiguous view at the same offset: its writes reach x
    v.mul_(-1)
    w = x[2]
    w.resize_(2, 3)
    w.add_(100)
    return v, w, x, v.stride(), w.storage_offset()


def _resize_t(x):
    return x.t().resize_(6, 4).stride()


def _inplace_on_view_of_pending(x):
    y = x * 2
    v = y.t()[2:]
    v.add_(1)
    return y, v


VIEW_CASES = {
    "chain_every_link": (_chain_every_link, SQ),
    "chain_diag_offset": (_chain_diag_offset, SQ),
    "old_views_after_base_write": (_old_views_after_base_write, SQ),
    "old_views_after_copy_": (_old_views_after_copy_, X),
    "unflatten_write": (_unflatten_write, X),
    "movedim_write": (_movedim_write, X),
    "split_every_output": (_split_every_output, X),
    "chunk_then_view": (_chunk_then_view, SQ),
    "expand_then_index": (_expand_then_index, X),
    "expand_then_index_after_write": (_expand_then_index_after_write, X),
    "as_strided_overlap_read": (_as_strided_overlap_read, X),
    "as_strided_overlap_fill": (_as_strided_overlap_fill, X),
    "as_strided_overlap_add_": (_as_strided_overlap_add_, X),
    "as_strided_of_view": (_as_strided_of_view, X),
    "unfold_overlap_add_": (_unfold_overlap_add_, X),
    "unfold_overlap_read_after_write": (_unfold_overlap_read_after_write, X),
    "view_dtype_write": (_view_dtype_write, X),
    "view_dtype_narrower": (_view_dtype_narrower, X),
    "view_dtype_wider": (_view_dtype_wider, X),
    "view_dtype_of_slice": (_view_dtype_of_slice, X),
    "complex_real_imag": (_complex_real_imag, X),
    "complex_real_of_conj": (_complex_real_of_conj, X),
    "conj_view_chain": (_conj_view_chain, X),
    "conj_then_base_write": (_conj_then_base_write, X),
    "view_as_real_of_conj_raises": (_view_as_real_of_conj_raises, X),
    "copy_into_overlapping_as_strided": (lambda x: x.view(-1).as_strided((3, 3), (1, 1), 2).copy_(
        torch.arange(9.0, device=x.device).reshape(3, 3) * 10), X),
    "copy_into_overlapping_unfold": (lambda x: (x[0].unfold(0, 3, 1).copy_(
        torch.arange(12.0, device=x.device).reshape(4, 3)), x)[1], X),
    "detach_shares": (_detach_shares, X),
    "data_shares": (_data_shares, X),
    "data_assign": (_data_assign, X),
    "data_assign_other_dtype": (_data_assign_other_dtype, X),
    "t_add_self": (_t_add_self, SQ),
    "t_add_self_copy": (_t_add_self_copy, SQ),
    "copy_from_transposed_self": (_copy_from_transposed_self, SQ),
    "copy_from_shifted_self": (_copy_from_shifted_self, X),
    "copy_from_strided_self": (_copy_from_strided_self, X),
    "mul_out_alias_view": (_mul_out_alias_view, X),
    "resize_view_smaller": (_resize_view_smaller, X),
    "resize_view_then_write": (_resize_view_then_write, X),
    "resize_t": (_resize_t, X),
    "inplace_on_view_of_pending": (_inplace_on_view_of_pending, X),
    # ``2 ** x``: CPU lays the result out contiguously, the meta kernel after x (the tpu followed it, so a
    # .view(-1) of it failed on the tpu only)
    "rpow_of_transposed": (lambda x: ((2 ** x.t()), (2 ** x.t()).view(-1), torch.pow(1.5, x.t()[1:])), X),
}


# ---------------------------------------------------------------------------------------------------
# 2. mode switches in the middle of a sequence


def _strict_view_fused_write_strict_read(x):
    with _strict_on(x):
        v = x.t()[1:4]
    with _on(x):
        v.add_(1)
        v.diagonal().mul_(-1)
        y = x * 2
    with _strict_on(x):
        return x, v, y


def _switch_with_pending(x):
    with _on(x):
        y = x + 1
        x.mul_(2)
        z = y.t()[0]
    with _strict_on(x):
        z.add_(100)  # a strict write into a view of a value computed in the fused graph
        return x, y, z


def _fused_view_used_after_flush(x):
    with _on(x):
        y = x * 3
        v = y[1:, ::2]
        w = v.t()
        if x.device.type == "tpu":
            import torch_tpu

            torch_tpu.sync()
        v.sub_(1)
        return y, v, w, (w @ v).sum()


def _nested_mode_switches(x):
    with _on(x):
        x.add_(1)
        with _strict_on(x):
            x.mul_(2)
            with _on(x):
                v = x[::2]
                v.neg_()
            s = x.sum()
        x.div_(4)
    return x, s


def _no_grad_in_fused(x):
    w = x.clone().requires_grad_(True)
    with _on(x):
        with torch.no_grad():
            w.add_(1)
            y = w * 2
        z = (w * y).sum()
        z.backward()
    return w.grad, y.requires_grad, z


def _inference_mode_in_fused(x):
    with _on(x):
        with torch.inference_mode():
            y = x @ x.t()
            y.relu_()
            v = y[1]
        z = v.sum()
    return y, v, z, y.is_inference()


def _view_layouts_same_key(x):
    outs = []
    with _on(x):
        for v in (x[:, ::2], x[:, 1::2], x.t()[::2, :3].t(), x[1:4, :3]):
            outs.append(v.exp() - v)
    return outs


def _view_layouts_inplace_same_key(x):
    with _on(x):
        x[:, ::2].add_(1)
        x[:, 1::2].add_(10)
        x[1:3, 1:4].add_(100)
        x[2:4, 2:5].add_(1000)
    return x


def _set_mode_between_views(x):
    outs = []
    for k in range(4):
        ctx = _on(x) if k % 2 else _strict_on(x)
        with ctx:
            v = x[:, k:k + 2]
            v.mul_(2)
            outs.append(v.sum(0))
    return x, outs


MODE_CASES = {
    "strict_view_fused_write_strict_read": (_strict_view_fused_write_strict_read, SQ),
    "switch_with_pending": (_switch_with_pending, X),
    "fused_view_used_after_flush": (_fused_view_used_after_flush, X),
    "nested_mode_switches": (_nested_mode_switches, X),
    "no_grad_in_fused": (_no_grad_in_fused, X),
    "inference_mode_in_fused": (_inference_mode_in_fused, X),
    "view_layouts_same_key": (_view_layouts_same_key, X),
    "view_layouts_inplace_same_key": (_view_layouts_inplace_same_key, X),
    "set_mode_between_views": (_set_mode_between_views, X),
}


# ---------------------------------------------------------------------------------------------------
# 3. cache-key collisions: variants of one op in alternating order (check_sequence on one input set)


def _variants(op):
    """Calls applying ``op`` to variants of a (4, 6) input that differ only in what a key could forget
    (the argument is (5, 6): ``x[:4]`` and ``x[1:]`` have equal shapes and strides, other offsets)."""
    return [
        D.named("f32", lambda x: op(x[:4])),
        D.named("f64", lambda x: op(x[:4].double())),
        D.named("bf16", lambda x: op(x[:4].bfloat16())),
        D.named("int32", lambda x: op(x[:4].int())),
        D.named("transposed", lambda x: op(x[:4].t().contiguous().t())),
        D.named("offset", lambda x: op(x[1:])),
        D.named("strided", lambda x: op(x[:4].repeat(1, 2)[:, ::2])),
        D.named("rg", lambda x: op(x[:4].detach().clone().requires_grad_(True))),
        D.named("f32_again", lambda x: op(x[:4])),
        D.named("offset_again", lambda x: op(x[1:])),
    ]


def _keyed(op):
    def run():
        D.check_both_orders(_variants(op), torch.arange(30, dtype=torch.float32).reshape(5, 6) - 7, modes=SE)
    return run


def _zero_dim_vs_one_elem(op):
    def run():
        calls = [D.named("0-dim", lambda x: op(x[0, 0])), D.named("1-elem", lambda x: op(x[0, :1])),
                 D.named("1x1", lambda x: op(x[:1, :1])), D.named("empty", lambda x: op(x[:0])),
                 D.named("empty2", lambda x: op(x[:, :0])), D.named("0-dim again", lambda x: op(x[1, 1]))]
        D.check_both_orders(calls, X.clone() - 5, modes=SE)
    return run


def _memory_formats():
    def op(x):
        # values only: the strides of elementwise results are a known gap (tensor/test_storage_views.py,
        # "channels_last_op")
        return (x * 2 + 1).sum(1), (x + x)[:, 1], x.mean((2, 3)), x.sum(1, keepdim=True)
    calls = [D.named("contiguous", lambda x: op(x)),
             D.named("channels_last", lambda x: op(x.contiguous(memory_format=torch.channels_last))),
             D.named("permuted", lambda x: op(x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)))]
    D.check_both_orders(calls, torch.arange(48, dtype=torch.float32).reshape(2, 3, 2, 4), modes=SE)


def _inplace_variants():
    def mut(v):
        v.mul_(2).add_(1)
        return v
    calls = [D.named("row", lambda x: mut(x[1])), D.named("col", lambda x: mut(x[:, 1])),
             D.named("row_off", lambda x: mut(x[2])), D.named("col_off", lambda x: mut(x[:, 4])),
             D.named("diag", lambda x: mut(x.diagonal())), D.named("whole", lambda x: mut(x)),
             D.named("t_row", lambda x: mut(x.t()[1])), D.named("row_again", lambda x: mut(x[1]))]
    D.check_both_orders(calls, SQ.clone(), modes=SE)


def _compiled_guards():
    """One compiled function reused on new dtypes, strides, offsets, requires_grad and 0-dim: guards
    must recompile, never serve a program built for another layout."""
    def f(x):
        return (x * 2 + x.sum(-1, keepdim=True)).t()[0] if x.dim() == 2 else x * 3
    torch._dynamo.reset()
    c = torch.compile(f, backend="tpu", dynamic=False)
    base = torch.arange(30, dtype=torch.float32).reshape(5, 6) - 10
    variants = {
        "f32": lambda b: b[:4],
        "f64": lambda b: b[:4].double(),
        "int64": lambda b: b[:4].long(),
        "offset": lambda b: b[1:],
        "strided": lambda b: b[::1, ::1][:, 1:][:4, :5],
        "transposed": lambda b: b[:5, :5].t(),
        "requires_grad": lambda b: b[:4].clone().requires_grad_(True),
        "0-dim": lambda b: b[0, 0],
        "f32 again": lambda b: b[:4],
        "offset again": lambda b: b[1:],
    }
    for name, mk in list(variants.items()) + list(variants.items())[::-1]:
        exp = f(mk(base.clone()))
        try:
            got = read(c(mk(base.clone().to(DEV))))
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"[tpu raised] compiled variant {name}: {_exc_text(e)}")
        assert_same(exp, got, where=f"compiled variant {name}")
    torch._dynamo.reset()


def _compiled_inplace_on_views():
    def f(v):
        v.mul_(2)
        return v.sum()
    torch._dynamo.reset()
    c = torch.compile(f, backend="tpu", dynamic=False)
    for name, mk in [("row1", lambda b: b[1]), ("row2", lambda b: b[2]), ("col1", lambda b: b[:, 1]),
                     ("row1", lambda b: b[1]), ("diag", lambda b: b.diagonal()), ("col5", lambda b: b[:, 5])]:
        bc, bt = SQ.clone(), SQ.clone().to(DEV)
        exp = c_cpu = f(mk(bc))
        try:
            got = read((c(mk(bt)), bt))
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"[tpu raised] compiled in-place on view {name}: {_exc_text(e)}")
        assert_same((c_cpu, bc), got, where=f"compiled in-place on view {name}")
        del exp
    torch._dynamo.reset()


KEY_CASES = {
    "key_add_scalar": _keyed(lambda x: x + 1),
    "key_sum": _keyed(lambda x: x.sum(0)),
    "key_matmul": _keyed(lambda x: x.t() @ x),
    "key_cumsum": _keyed(lambda x: x.cumsum(1)),
    "key_abs_inplace_clone": _keyed(lambda x: x.clone().abs_()),
    "key_index": _keyed(lambda x: x[torch.tensor([3, 0], device=x.device)]),
    "key_where": _keyed(lambda x: torch.where(x > 0, x, -x)),
    "zero_dim_vs_one_elem_mul": _zero_dim_vs_one_elem(lambda v: v * 2),
    "zero_dim_vs_one_elem_sum": _zero_dim_vs_one_elem(lambda v: (v.sum(), v.amax() if v.numel() else v.sum())),
    "zero_dim_vs_one_elem_item": _zero_dim_vs_one_elem(lambda v: v.sum().item()),
    "memory_formats": _memory_formats,
    "inplace_variants": _inplace_variants,
    "compiled_guards": _compiled_guards,
    "compiled_inplace_on_views": _compiled_inplace_on_views,
}


# ---------------------------------------------------------------------------------------------------
# 4. dynamic-shape ops in sequence (pending inputs in fused mode: the masks are computed in the case)


def _dyn(fn, *args, modes=ALL):
    return lambda: D.check(fn, *args, modes=modes)


def _dyn_c(fn, *args):
    """A case that makes a tensor constant on the tpu inside the function (strict and fused only: see
    ``compiled_tensor_constant``)."""
    return _dyn(fn, *args, modes=SE)


Y = torch.tensor([[3.0, -1.0, 0.0, 2.0], [0.0, 5.0, -2.0, 2.0], [3.0, 0.0, 0.0, -1.0]])

DYN_CASES = {
    "nonzero_then_ops": _dyn(lambda x: (lambda n: (n, n.float().mean(0), x[n[:, 0], n[:, 1]] * 2))(
        torch.nonzero(x * 2 > 1)), Y),
    "nonzero_empty": _dyn(lambda x: (lambda n: (n, n.shape, n.sum(0)))(torch.nonzero(x > 100)), Y),
    "nonzero_as_tuple": _dyn(lambda x: torch.nonzero(x.t() < 0, as_tuple=True), Y),
    "where_single_arg": _dyn(lambda x: (lambda w: (w, x[w] + 1))(torch.where(x[1] != 0)), Y),
    "masked_select_then_ops": _dyn(lambda x: (lambda s: (s, s.cumsum(0), s.sort().values))(
        torch.masked_select(x + 1, x > 0)), Y),
    "masked_select_empty": _dyn(lambda x: (lambda s: (s, s.sum(), s.shape))(torch.masked_select(x, x > 9)), Y),
    "masked_select_broadcast": _dyn_c(lambda x: torch.masked_select(x, torch.tensor([True, False, True, False],
                                                                                  device=x.device)), Y),
    "unique_sorted_counts": _dyn(lambda x: torch.unique(x, sorted=True, return_counts=True), Y),
    "unique_inverse": _dyn(lambda x: (lambda u: (u[0], u[1], u[0][u[1]]))(
        torch.unique(x * 1, return_inverse=True)), Y),
    "unique_dim": _dyn(lambda x: torch.unique(torch.cat([x, x[:1]]), dim=0, return_counts=True), Y),
    "unique_consecutive": _dyn(lambda x: torch.unique_consecutive(x.flatten(), return_counts=True,
                                                                  return_inverse=True), Y),
    "unique_empty": _dyn(lambda x: torch.unique(x[x > 100], return_counts=True), Y),
    "bool_mask_then_ops": _dyn(lambda x: (lambda s: (s, s.mean(), s.argmax()))(x[(x * 3).abs() > 2]), Y),
    "bool_mask_rows": _dyn(lambda x: x[x.sum(1) > 1], Y),
    "bool_mask_setitem": _dyn(lambda x: (x.__setitem__(x < 0, 0.5), x * 1)[1], Y),
    "bool_mask_setitem_tensor": _dyn(lambda x: (x.__setitem__(x > 2, x[x > 2] * 10), x * 1)[1], Y),
    "index_put_mask": _dyn_c(lambda x: x.index_put_((x == 0,), torch.tensor(-7.0, device=x.device)), Y),
    "index_put_mask_accumulate": _dyn_c(lambda x: x.index_put_((x > 1,), torch.tensor(1.0, device=x.device),
                                                             accumulate=True), Y),
    "bool_mask_view_write": _dyn(lambda x: (x.t()[x.t() > 0].sum(), x.t().__setitem__(x.t() > 0, 1.0), x)[2], Y),
    "repeat_interleave_tensor": _dyn_c(lambda x: (lambda r: (r, r.sum()))(
        torch.repeat_interleave(x[0], torch.tensor([2, 0, 1, 3], device=x.device))), Y),
    "repeat_interleave_from_values": _dyn(lambda x: torch.repeat_interleave(
        x[1], (x[2] > -1).long() * 2), Y),
    "repeat_interleave_only_repeats": _dyn_c(lambda x: torch.repeat_interleave(
        torch.tensor([1, 0, 3], device=x.device)), Y),
    "repeat_interleave_empty": _dyn_c(lambda x: torch.repeat_interleave(x[0], torch.zeros(4, dtype=torch.long,
                                                                                        device=x.device)), Y),
    "dyn_chain": _dyn(lambda x: (lambda s: torch.unique(s[s > 0], return_counts=True))(
        torch.masked_select(x * 2, x != 0)), Y),
    "argwhere_then_index_put": _dyn_c(lambda x: (lambda n: x.index_put_((n[:, 0], n[:, 1]),
                                                                      torch.tensor(0.0, device=x.device)))(
        torch.argwhere(x < 0)), Y),
}


def _dyn_sequence():
    """The same dynamic op with results of other sizes one after the other (a program cached for one
    output size must not serve another)."""
    calls = [D.named(f"thr{t}", (lambda t: lambda x: (torch.nonzero(x > t), x[x > t],
                                                      torch.unique(x[x > t])))(t)) for t in (1, -5, 100, 0, 1)]
    D.check_sequence(calls, Y, modes=SE)


DYN_CASES["dyn_sequence_sizes"] = _dyn_sequence
DYN_CASES["compiled_tensor_constant"] = _dyn(lambda x: (x + torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device),
                                                       torch.where(x > 0, x, torch.tensor(5.0, device=x.device))),
                                             Y, modes=["compiled"])
DYN_CASES["compiled_mask_and_values_as_inputs"] = _dyn(
    lambda x, m, v, r: (torch.masked_select(x, m), x.clone().index_put_((x == 0,), v),
                        torch.repeat_interleave(x[0], r)),
    Y, torch.tensor([True, False, True, False]), torch.tensor(-7.0), torch.tensor([2, 0, 1, 3]))


# ---------------------------------------------------------------------------------------------------
# 5. random sequences: self-consistency on the tpu (not CPU equality)


def _random_draws(dev):
    out = [torch.rand(3, device=dev), torch.randn(2, 3, device=dev), torch.randint(0, 100, (5,), device=dev),
           torch.nn.functional.dropout(torch.ones(8, device=dev), 0.5),
           torch.multinomial(torch.tensor([0.1, 0.5, 0.4], device=dev), 4, replacement=True),
           torch.bernoulli(torch.full((6,), 0.5, device=dev)), torch.randperm(7, device=dev),
           torch.empty(4, device=dev).uniform_(-1, 1), torch.empty(4, device=dev).normal_()]
    return [t.cpu() for t in out]


def _same(a, b, what):
    for i, (p, q) in enumerate(zip(a, b)):
        if not torch.equal(p, q):
            pytest.fail(f"[wrong value] {what}: draw {i} differs: {p.tolist()} vs {q.tolist()}")


def _rng_reseed():
    torch.manual_seed(123)
    a = _random_draws(DEV)
    torch.manual_seed(123)
    b = _random_draws(DEV)
    _same(a, b, "re-seeded strict sequence")
    torch.manual_seed(124)
    c = _random_draws(DEV)
    assert not all(torch.equal(p, q) for p, q in zip(a, c)), "[wrong value] another seed gave the same numbers"
    for v in a[2], a[4]:
        assert v.dtype == torch.int64
    assert sorted(a[6].tolist()) == list(range(7)), f"[wrong value] randperm is not a permutation: {a[6]}"


def _rng_reseed_fused():
    with _fused():
        torch.manual_seed(5)
        a = _random_draws(DEV)
        torch.manual_seed(5)
        b = _random_draws(DEV)
    _same(a, b, "re-seeded fused sequence")


def _rng_pending_then_reseed():
    """Fused: draws left pending when the seed is reset must keep the numbers of the old seed."""
    with _fused():
        torch.manual_seed(7)
        a = torch.rand(4, device=DEV)
        torch.manual_seed(7)
        b = torch.rand(4, device=DEV)
        _same([a.cpu()], [b.cpu()], "two pending draws after the same seed")


def _rng_state_roundtrip():
    torch.manual_seed(3)
    torch.rand(2, device=DEV)
    state = torch.tpu.get_rng_state()
    a = _random_draws(DEV)
    torch.tpu.set_rng_state(state)
    b = _random_draws(DEV)
    _same(a, b, "after set_rng_state")


def _rng_fork():
    torch.manual_seed(11)
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(5, device=DEV)
        torch.randn(5, device=DEV)
    a = torch.rand(3, device=DEV).cpu()
    torch.manual_seed(11)
    b = torch.rand(3, device=DEV).cpu()
    _same([a], [b], "draw after fork_rng (the fork must restore the tpu state)")


def _rng_generator_object():
    """torch.Generator('tpu'): a clear refusal (README: not available from a Python backend) or a
    generator that reproduces its own sequence."""
    try:
        g = torch.Generator(DEV)
    except Exception as e:  # noqa: BLE001
        assert is_clear(e), f"[unclear error] torch.Generator('tpu'): {_exc_text(e)}"
        return
    g.manual_seed(0)
    a = torch.rand(4, device=DEV, generator=g).cpu()
    g.manual_seed(0)
    b = torch.rand(4, device=DEV, generator=g).cpu()
    _same([a], [b], "tpu generator re-seeded")


def _rng_cpu_generator_on_tpu():
    """A CPU generator passed to a tpu random op: torch raises on CPU-vs-device mismatch for CUDA; the
    tpu must raise clearly or match the CPU generator's numbers."""
    g = torch.Generator().manual_seed(0)
    try:
        got = torch.rand(4, device=DEV, generator=g).cpu()
    except Exception as e:  # noqa: BLE001
        assert is_clear(e), f"[unclear error] {_exc_text(e)}"
        return
    exp = torch.rand(4, generator=torch.Generator().manual_seed(0))
    assert_same(exp, read(got), where="rand with a CPU generator on the tpu")


def _rng_dropout_in_module_reseeded():
    def run():
        torch.manual_seed(42)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5)).to(DEV)
        x = torch.ones(3, 4, device=DEV)
        return [m(x).detach().cpu(), m(x).detach().cpu()]
    _same(run(), run(), "module with dropout re-seeded")


RNG_CASES = {
    "rng_reseed": _rng_reseed,
    "rng_reseed_fused": _rng_reseed_fused,
    "rng_pending_then_reseed": _rng_pending_then_reseed,
    "rng_state_roundtrip": _rng_state_roundtrip,
    "rng_fork": _rng_fork,
    "rng_generator_object": _rng_generator_object,
    "rng_cpu_generator_on_tpu": _rng_cpu_generator_on_tpu,
    "rng_dropout_in_module_reseeded": _rng_dropout_in_module_reseeded,
}


# ---------------------------------------------------------------------------------------------------
# the cases, run in one child process


def _equal_or_refused(fn, data):
    """CPU runs writes into a view whose elements share memory one element after the other (each sees
    the earlier ones); the tpu must give CPU's result or refuse clearly, naming the overlap."""
    def run():
        for mode in SE:
            exp = fn(data.clone())
            x = data.clone().to(DEV)
            with _in_mode(mode):
                try:
                    got = read(fn(x))
                except Exception as e:  # noqa: BLE001
                    assert is_clear(e) and "share memory" in str(e), f"[unclear error] {_exc_text(e)}"
                    assert_same(data, read(x), where=f"input after the refusal ({mode})")
                    assert_device_works()
                    continue
            assert_same(exp, got, where=f"result ({mode})")
    return run


def _view_case(fn, data):
    return lambda: D.check(fn, data.clone(), modes=SE, check_stride=True, signed_zeros=True)


def _mode_case(fn, data):
    return lambda: D.check(fn, data.clone(), check_stride=True)


ISOLATED_CASES = {}
ISOLATED_CASES.update({f"view:{k}": _view_case(*v) for k, v in VIEW_CASES.items()})
for _k in ("as_strided_overlap_add_", "unfold_overlap_add_"):
    ISOLATED_CASES[f"view:{_k}"] = _equal_or_refused(*VIEW_CASES[_k])
ISOLATED_CASES.update({f"mode:{k}": _mode_case(*v) for k, v in MODE_CASES.items()})
ISOLATED_CASES.update({f"key:{k}": v for k, v in KEY_CASES.items()})
ISOLATED_CASES.update({f"dyn:{k}": v for k, v in DYN_CASES.items()})
ISOLATED_CASES.update({f"rng:{k}": v for k, v in RNG_CASES.items()})

results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=120)


def test_resize_of_a_view_past_its_storage_is_refused_clearly(eager_mode):
    """A limit: CPU grows a view's shared storage in place when ``resize_`` needs more; a tpu storage cannot
    grow, so the resize is refused with the sizes named, and the view and its base stay as they were."""
    x = X.clone().to("tpu")
    v = x[1]
    with pytest.raises(RuntimeError, match=r"cannot resize a view of shape \(6,\) at storage offset 6 to \(40,\): "
                                           r"it would need 46 elements and its base's storage has 24"):
        v.resize_(40)
    assert v.shape == (6,) and v.storage_offset() == 6
    torch.testing.assert_close(x.cpu(), X)
    torch.testing.assert_close(v.cpu(), X[1])
