"""Views and in-place ops behave exactly like CPU torch: every case mutates through views and we
compare ALL tensors involved (bases and views) against the same code run on CPU."""
import pytest
import torch

import torch_tpu


def _base(dev, shape=(4, 6), dtype=torch.float32):
    return torch.arange(torch.Size(shape).numel(), dtype=dtype).reshape(shape).to(dev)


def c_ellipsis_slice(d):
    y = _base(d)
    y[..., :2] = 0
    return [y]


def c_view_mul(d):
    y = _base(d, (2, 4))
    v = y.view(8)
    v.mul_(3)
    return [y, v]


def c_select_zero(d):
    y = _base(d)
    r = y[0]
    y[0].zero_()
    return [y, r]


def c_transpose_sees_add(d):
    y = _base(d)
    z = y.t()
    y.add_(1)
    return [y, z]


def c_view_of_view(d):
    y = _base(d, (4, 6))
    a = y[1:]
    b = a[:, 2:5]
    c = b.t()[1]
    c.fill_(-1)
    b.mul_(2)
    return [y, a, b, c]


def c_unbind(d):
    y = _base(d, (3, 4))
    parts = y.unbind(0)
    parts[1].add_(100)
    return [y, *parts]


def c_split_chunk(d):
    y = _base(d, (6, 4))
    s = y.split(2)
    s[2].neg_()
    ch = y.chunk(2, dim=1)
    ch[0].sub_(1)
    return [y, *s, *ch]


def c_diagonal_fill(d):
    y = _base(d, (4, 4))
    dg = y.diagonal()
    dg.fill_(7)
    return [y, dg]


def c_as_strided(d):
    y = _base(d, (16,))
    v = y.as_strided((3, 3), (4, 1), 2)
    v.mul_(-1)
    return [y, v]


def c_unfold(d):
    y = _base(d, (10,))
    u = y.unfold(0, 4, 3)
    u[:, 0].fill_(-5)
    return [y, u]


def c_view_dtype(d):
    y = _base(d, (4,), torch.int32)
    v = y.view(torch.float32)
    v.zero_()
    y2 = torch.ones(4, dtype=torch.float32, device=d)
    w = y2.view(torch.int32)
    w.add_(1)
    return [y, v, y2, w]


def c_view_real_complex(d):
    y = torch.arange(8, dtype=torch.float32).reshape(4, 2).to(d)
    c = torch.view_as_complex(y)
    c.mul_(2)
    r = torch.view_as_real(c)
    r[:, 1].fill_(9)
    return [y, c.real.clone(), c.imag.clone(), r]


def c_transpose_contiguous(d):
    y = _base(d, (3, 5))
    t = y.t().contiguous()
    t.add_(1)  # contiguous() made a copy: y must not change
    return [y, t, y.t().contiguous().view(-1)]


def c_index_put(d):
    y = _base(d, (5, 3))
    idx = torch.tensor([0, 3], device=d)
    y.index_put_((idx,), torch.tensor(-1.0, device=d))
    v = y[1:]
    v.index_put_((torch.tensor([1], device=d), torch.tensor([2], device=d)),
                 torch.tensor([50.0], device=d), accumulate=True)
    return [y, v]


def c_masked_fill(d):
    y = _base(d, (4, 4))
    v = y[:, 1:3]
    v.masked_fill_(v > 10, 0.5)
    return [y, v]


def c_bool_mask_setitem(d):
    y = _base(d, (4, 4))
    m = y % 3 == 0
    y[m] = -2.0
    z = y.t()
    z[z > 10] = 1.0
    rows = torch.tensor([True, False, True, False])  # a CPU mask and CPU row values
    y[rows] = torch.tensor([7.0, 8.0, 9.0, 10.0])
    w = torch.zeros(3, 2, device=d)
    w[w.sum(1) == 0] = torch.arange(6.0, device=d).reshape(3, 2)  # one value per selected row
    return [y, z, w, y[y > 8], y[:, torch.tensor([True, False, True, True])]]


def c_cpu_into_slice(d):
    y = _base(d, (5, 3))
    y[1:3] = torch.full((2, 3), 4.0)
    y[4] = torch.tensor([1.0, 2.0, 3.0])
    y[:, 0] = torch.tensor(8.0)
    return [y]


def c_out_arg(d):
    a = _base(d, (2, 3))
    b = torch.ones(2, 3, device=d)
    c = torch.empty(2, 3, device=d)
    r = torch.add(a, b, out=c)
    big = torch.zeros(4, 3, device=d)
    torch.mul(a, 2, out=big[1:3])
    return [a, c, r, big]


def c_data_copy(d):
    p = torch.nn.Parameter(_base(d, (3, 3)))
    w = torch.full((3, 3), 2.0, device=d)
    v = p.data
    p.data.copy_(w)
    p.data[0].fill_(5)
    return [p.detach(), v]


def c_data_assign(d):
    p = torch.nn.Parameter(_base(d, (3, 3)))
    w = torch.full((3, 3), 2.0, device=d)
    p.data = w
    w.add_(1)  # p shares w's storage now
    p.data.fill_(1.5) if False else None
    return [p.detach(), w]


def c_data_fill(d):
    p = torch.nn.Parameter(_base(d, (3, 3)))
    p.data.fill_(0.25)
    return [p.detach()]


def c_inplace_metadata(d):
    y = _base(d, (1, 3, 4))
    z = y.view(12)
    y.squeeze_(0)
    y.unsqueeze_(2)
    y.transpose_(0, 1)
    y.add_(1)
    w = _base(d, (2, 5))
    w.t_()
    w[0].mul_(10)
    return [y, z, w]


def c_index_loop(d):
    y = _base(d, (6, 4))
    for i in range(6):
        y[i].add_(i)
        y[i] = y[i] * 2
    return [y]


def c_swap_views(d):
    y = _base(d, (2, 3))
    a, b = y[0], y[1]
    a.copy_(b + 1)
    b.copy_(a * 2)
    return [y, a, b]


def c_expand_source(d):
    y = _base(d, (3, 4))
    row = torch.tensor([1.0, 2.0, 3.0, 4.0], device=d)
    y.copy_(row.expand(3, 4))
    y[:, 1:3] += row[None, 1:3]
    return [y]


def c_narrow_zero(d):
    y = _base(d, (4, 5))
    y.narrow(1, 1, 2).zero_()
    y.select(1, 4).clamp_(max=3)
    return [y]


def c_permute_reshape(d):
    y = _base(d, (2, 3, 4))
    p = y.permute(2, 0, 1)
    p[1].mul_(-1)
    q = y.view(6, 4)[2:4]
    q.add_(1000)
    return [y, p, q]


def c_view_dtype_sizes(d):
    y = _base(d, (2, 4), torch.float32)
    b = y.view(torch.uint8)
    b[:, :4].zero_()  # clears the low bytes of y[:, 0]
    h = torch.ones(4, dtype=torch.bfloat16, device=d)
    i = h.view(torch.int16)
    i[1] += 1  # the next bfloat16 after 1.0
    return [y, b, h, i]


def c_inplace_metadata_on_view(d):
    y = _base(d, (4, 3))
    v = y[1:3]
    v.unsqueeze_(0)
    v.mul_(2)
    v.squeeze_()
    v.t_()
    v[0].fill_(-1)
    return [y, v]


def c_clone_keeps_layout(d):
    y = _base(d, (3, 4))
    c = y.t().clone()  # preserve_format: the clone is transposed-dense too, and not a view
    c.add_(1)
    e = torch.empty_like(y.t())
    e.copy_(y.t())
    z = torch.zeros_like(y[:, ::2])
    return [y, c, e, z]


CASES = [(n[2:], f) for n, f in list(globals().items()) if n.startswith("c_")]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_aliasing(name, fn, eager_mode):
    ref = fn("cpu")
    out = fn("tpu")
    assert len(ref) == len(out)
    for k, (r, o) in enumerate(zip(ref, out)):
        assert o.device.type == "tpu", (name, k)
        assert o.shape == r.shape and o.stride() == r.stride() and o.dtype == r.dtype, (name, k)
        torch.testing.assert_close(o.cpu(), r, msg=lambda m: f"{name} tensor {k}: {m}")


def test_expand_inplace_errors_like_cpu():
    for d in ("cpu", "tpu"):
        x = torch.zeros(1, 3, device=d).expand(4, 3)
        with pytest.raises(RuntimeError, match="single memory location"):
            x.add_(1)


def test_leaf_requires_grad_inplace_errors_like_cpu():
    for d in ("cpu", "tpu"):
        w = torch.ones(3, device=d, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            w.add_(1)
        with torch.no_grad():
            w.add_(1)
        assert w.detach().cpu().tolist() == [2.0, 2.0, 2.0]


def test_out_wrong_shape():
    a = torch.ones(2, 3)
    for d in ("cpu", "tpu"):
        c = torch.empty(5, device=d)
        try:
            r = torch.add(a.to(d), a.to(d), out=c)
        except RuntimeError as e:
            assert d == "tpu" and "resize" in str(e)
        else:
            assert r.shape == (2, 3) and torch.equal(r.cpu(), a * 2)


def test_index_loop_one_program():
    y = torch.arange(40.0).reshape(10, 4).to("tpu")
    # warm up: the add_ program (it reads y[i] itself, the offset an input), the write-back, and the
    # read of a view at a non-zero offset
    y[1].cpu(), y[1].add_(1)
    torch_tpu.reset_stats()
    for i in range(2, 10):
        y[i].add_(1)
        y[i].cpu()
    assert torch_tpu.stats()["compiles"] == 0
    ref = torch.arange(40.0).reshape(10, 4)
    ref[1:] += 1
    torch.testing.assert_close(y.cpu(), ref)


# Writes whose inputs share part of the written memory: CPU torch refuses them (the result would depend
# on the order of the writes); the same view, disjoint views and ops CPU does not check go through.
_IDX = [0, 1]
OVERLAP_CASES = {
    "index_copy_self_source": lambda x, d: x.index_copy_(0, torch.tensor(_IDX, device=d), x[2:]),
    "index_add_self_source": lambda x, d: x.index_add_(0, torch.tensor(_IDX, device=d), x[2:]),
    "add_shifted": lambda x, d: x[1:].add_(x[:-1]),
    "copy_shifted": lambda x, d: x[1:].copy_(x[:-1]),
    "mul_out_shifted": lambda x, d: torch.mul(x[:2], 2, out=x[1:3]),
    "index_put_self_values": lambda x, d: x.index_put_((torch.tensor(_IDX, device=d),), x[2:]),
    "add_itself": lambda x, d: x.add_(x),
    "add_same_view": lambda x, d: x[1:].add_(x[1:]),
    "add_disjoint": lambda x, d: x[:2].add_(x[2:]),
    "masked_scatter_overlap": lambda x, d: x[:2].masked_scatter_(x[:2] > 2, x[1:3]),
    "fill_expanded": lambda x, d: x[:1].expand(4, 3).fill_(7.0),
    "zero_expanded": lambda x, d: x[:1].expand(4, 3).zero_(),
    "fill_tensor_expanded": lambda x, d: x[:1].expand(4, 3).fill_(torch.tensor(2.0, device=d)),
}


@pytest.mark.parametrize("case", sorted(OVERLAP_CASES))
def test_overlapping_writes_like_cpu(case):
    results = []
    for d in ("cpu", "tpu"):
        x = torch.arange(12.0).reshape(4, 3).to(d)
        try:
            OVERLAP_CASES[case](x, d)
            results.append(("value", x.cpu()))
        except RuntimeError as e:
            results.append(("raised", str(e).split(".")[0]))
    (kind_c, cpu), (kind_t, tpu) = results
    assert kind_c == kind_t, results
    if kind_c == "value":
        torch.testing.assert_close(tpu, cpu)
    else:
        assert tpu == cpu
