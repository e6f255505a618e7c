"""scaled_dot_product_attention is ONE op (tpu::attention) in every mode (strict, fused, compiled) and
matches CPU torch, forward and gradients: masks, causal, GQA, scale; dropout keeps torch's
decomposition."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from tests.harness.counting import programs_run
from torch_tpu.compile import lowering
from torch_tpu.ops import attention as attention_lowering

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

ATOL = 1e-5
GRAD_ATOL = 1e-4


def _tpu(kw):
    return {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def _qkv(b=2, h=4, lq=24, lk=40, e=16, hk=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    hk = hk or h
    return (torch.randn(b, h, lq, e, generator=g), torch.randn(b, hk, lk, e, generator=g),
            torch.randn(b, hk, lk, e, generator=g))


def _masks(lq=24, lk=40):
    g = torch.Generator().manual_seed(1)
    bool_mask = torch.rand(lq, lk, generator=g) > 0.3
    bool_mask[3] = False  # a fully masked row: torch 2.13 gives zeros
    return {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": bool_mask},
            "float_per_batch": {"attn_mask": torch.randn(2, 1, lq, lk, generator=g)},
            "scale": {"scale": 0.3}, "bool_and_causal": {"attn_mask": bool_mask, "is_causal": True}}


@pytest.mark.parametrize("case", list(_masks()))
def test_forward_is_one_program_and_matches_cpu(eager_mode, case):
    q, k, v = _qkv()
    kw = _masks()[case]
    ref = F.scaled_dot_product_attention(q, k, v, **kw)
    got, n = programs_run(lambda: F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), **_tpu(kw)))
    torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert n == 1


def test_gqa_and_3d_inputs():
    q, k, v = _qkv(hk=2)
    for kw in ({}, {"is_causal": True}):
        ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), enable_gqa=True, **kw)
        torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)
    q, k, v = _qkv()
    ref = F.scaled_dot_product_attention(q[0], k[0], v[0])
    torch.testing.assert_close(F.scaled_dot_product_attention(q[0].to("tpu"), k[0].to("tpu"), v[0].to("tpu")).cpu(),
                               ref, atol=ATOL, rtol=ATOL)


def _layouts():
    """name: a function of the device giving (q, k, v): the views are taken on that device (a transfer
    makes a tensor contiguous)."""
    g = torch.Generator().manual_seed(2)
    bshd, wide = torch.randn(2, 6, 4, 8, generator=g), torch.randn(2, 6, 4, 16, generator=g)
    plain = [torch.randn(2, 4, 6, 8, generator=g) for _ in range(3)]
    other, seq3, k16 = torch.randn(2, 8, 6, 4, generator=g), torch.randn(6, 4, 8, generator=g), torch.randn(2, 4, 6, 16)
    at = lambda t, d: t.to(d)  # noqa: E731
    return {
        "contiguous": lambda d: tuple(at(t, d) for t in plain),
        "sequence_major": lambda d: (at(bshd, d).transpose(1, 2),) * 3,  # diffusers' (B, L, H, E) as (B, H, L, E)
        "sequence_major_sliced": lambda d: (at(bshd, d).transpose(1, 2)[:, :, :5],) * 3,
        "only_query_sequence_major": lambda d: (at(bshd, d).transpose(1, 2), at(plain[1], d), at(plain[2], d)),
        "value_width_differs": lambda d: (at(bshd, d).transpose(1, 2),) * 2 + (at(wide, d).transpose(1, 2),),
        "key_last_dim_strided": lambda d: (at(bshd, d).transpose(1, 2), at(k16, d)[..., ::2],
                                           at(bshd, d).transpose(1, 2)),
        "other_order": lambda d: (at(other, d).permute(0, 3, 2, 1),) * 3,
        "three_dims": lambda d: (at(seq3, d).transpose(0, 1),) * 3,
    }


@pytest.mark.parametrize("layout", list(_layouts()))
def test_output_layout_is_cpu_torchs(eager_mode, layout):
    """The output's strides are CPU torch's (its flash kernel returns a sequence-major query's layout), so
    diffusers' ``out.transpose(1, 2).flatten(2, 3)`` is a view, as on CPU, not a copy program."""
    make = _layouts()[layout]
    ref = F.scaled_dot_product_attention(*make("cpu"))
    with torch.no_grad():
        got = F.scaled_dot_product_attention(*make("tpu"))
    assert got.stride() == ref.stride() and got.is_contiguous() == ref.is_contiguous()
    torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)
    if got.dim() == 4:
        with torch.no_grad():
            merged, programs = programs_run(lambda: got.transpose(1, 2).flatten(2, 3))
        torch.testing.assert_close(merged.cpu(), ref.transpose(1, 2).flatten(2, 3), atol=ATOL, rtol=ATOL)
        if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
            assert programs == (0 if ref.transpose(1, 2).is_contiguous() else 1)


def test_sequence_major_gradients_match_cpu(eager_mode):
    """diffusers' order end to end with autograd: (B, L, H, E) projections viewed as heads-first, attention,
    back to (B, L, H * E) by a view, a weighted sum; the projections' gradients as on CPU."""
    g = torch.Generator().manual_seed(5)
    bases = [torch.randn(2, 6, 4, 8, generator=g) for _ in range(3)]
    weight = torch.randn(2, 6, 32, generator=g)

    def run(device):
        leaves = [b.to(device).detach().requires_grad_() for b in bases]
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in leaves))
        (out.transpose(1, 2).flatten(2, 3) * weight.to(device)).sum().backward()
        return out, [t.grad for t in leaves]

    ref, ref_grads = run("cpu")
    got, grads = run("tpu")
    assert got.stride() == ref.stride()
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=ATOL, rtol=ATOL)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a.cpu(), b, atol=GRAD_ATOL, rtol=GRAD_ATOL)


def test_sliced_and_row_chunked_paths(monkeypatch):
    # small budgets: the per-(batch x head) loop and the query-row chunks run on small shapes
    monkeypatch.setattr(attention_lowering, "SMALL_BYTES", 0)
    monkeypatch.setattr(attention_lowering, "SLICE_BYTES", 4 * 37 * 40)
    q, k, v = _qkv(lq=101, lk=37, seed=3)
    for kw in ({}, {"is_causal": True}, {"attn_mask": torch.rand(101, 37) > 0.2},
               {"attn_mask": torch.randn(2, 4, 101, 37)}):
        ref = F.scaled_dot_product_attention(q, k, v, **kw)
        got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), **_tpu(kw))
        torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("case", ["none", "causal", "bool", "gqa"])
def test_gradients_match_cpu(eager_mode, case):
    q, k, v = _qkv(hk=2 if case == "gqa" else None)
    kw = {"enable_gqa": True} if case == "gqa" else _masks()[case]
    go = torch.randn(q.shape[:-1] + (v.shape[-1],))
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*cpu, **kw).backward(go)
    dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*dev, **_tpu(kw))
    out.backward(go.to("tpu"))
    for a, b in zip(dev, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=GRAD_ATOL, rtol=GRAD_ATOL)


@pytest.mark.parametrize("case", ["none", "causal", "bool", "gqa"])
def test_double_backward_matches_cpu_math(eager_mode, case):
    """create_graph=True (gradient penalties): the backward is differentiable (it was once_differentiable:
    'trying to differentiate twice'). CPU reference: its math kernel (CPU's flash kernel has no double
    backward)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _qkv(hk=2 if case == "gqa" else None)
    kw = {"enable_gqa": True} if case == "gqa" else _masks()[case]
    results = []
    for device, args in (("cpu", kw), ("tpu", _tpu(kw))):
        leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(*leaves, **args)
        gq, gk = torch.autograd.grad(out.pow(2).sum(), leaves[:2], create_graph=True)
        (gq.pow(2).sum() + (gk * 0.5).sum()).backward()
        results.append([gq.detach().cpu(), gk.detach().cpu()] + [t.grad.cpu() for t in leaves])
    for got, ref in zip(results[1], results[0]):
        torch.testing.assert_close(got, ref, atol=GRAD_ATOL, rtol=GRAD_ATOL)


def test_strict_backward_is_one_program():
    q, k, v = (t.to("tpu").requires_grad_() for t in _qkv())
    out = F.scaled_dot_product_attention(q, k, v)
    g = torch.ones_like(out)
    torch_tpu.sync()
    _, n = programs_run(lambda: torch.autograd.grad(out, (q, k, v), g))
    assert n == 1


def test_inference_mode_and_no_grad():
    q, k, v = _qkv()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.inference_mode():
        got, n = programs_run(
            lambda: F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True))
    torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)
    with torch.no_grad():
        got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True)
    torch.testing.assert_close(got.cpu(), ref, atol=ATOL, rtol=ATOL)


def test_dropout_keeps_torch_decomposition():
    q, k, v = (t.to("tpu") for t in _qkv())
    torch.manual_seed(0)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    b = F.scaled_dot_product_attention(q, k, v)
    assert a.shape == b.shape
    assert not torch.equal(a.cpu(), b.cpu())  # dropout did something (it is random, not the plain result)
    with torch.inference_mode():
        c = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert c.shape == b.shape and not torch.equal(c.cpu(), b.cpu())


def test_errors_like_cpu():
    q, k, v = _qkv()
    _, k2, v2 = _qkv(hk=3)
    for dev in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="must match the size"):
            F.scaled_dot_product_attention(q.to(dev), k2.to(dev), v2.to(dev))


def test_compiled_graph_holds_tpu_attention(monkeypatch):
    seen = []
    original = lowering._Plan.__init__

    def record(self, gm):
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        original(self, gm)

    monkeypatch.setattr(lowering._Plan, "__init__", record)

    class Block(torch.nn.Module):
        def forward(self, q, k, v, m):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2

    q, k, v = _qkv(seed=5)
    m = torch.rand(24, 40) > 0.2
    torch._dynamo.reset()
    compiled = torch.compile(Block(), backend="tpu", fullgraph=True, dynamic=False)
    dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    out = compiled(*dev, m.to("tpu"))
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = Block()(*cpu, m)
    torch.testing.assert_close(out.cpu(), ref, atol=ATOL, rtol=ATOL)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(dev, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=GRAD_ATOL, rtol=GRAD_ATOL)
    assert any("tpu.attention.default" in s for s in seen)
    assert any("tpu.attention_backward.default" in s for s in seen)
    assert not any("aten._safe_softmax.default" in s or "aten.bmm.default" in s for s in seen)


def test_compiled_dropout_keeps_decomposition():
    q, k, v = (t.to("tpu") for t in _qkv(seed=6))
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5),
                       backend="tpu", fullgraph=True, dynamic=False)
    out = fn(q, k, v)
    plain = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == plain.shape and not torch.equal(out.cpu(), plain.cpu())


@pytest.mark.parametrize("poison", ["inf key", "nan query", "nan key", "inf value", "masked rows"])
def test_overflowed_inputs_give_cpu_nans_and_masked_rows_zeros(eager_mode, poison):
    """An overflowed input (a float16 block whose stream overflowed) makes its rows NaN on CPU, where a row of
    scores that are all NaN is 0 as a fully masked row is: a row with a NaN or +inf score beside numbers
    became 0 here (its max was not finite), as if it were masked."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 16, generator=g) for _ in range(3))
    mask = None
    if poison == "inf key":
        k[0, 0, 3, :] = float("inf")
    elif poison == "nan query":
        q[0, 1, 2, 4] = float("nan")
    elif poison == "nan key":
        k[0, 1, 4, 0] = float("nan")
    elif poison == "inf value":
        v[0, 1, 2, 5] = float("inf")
    else:
        mask = torch.ones(1, 1, 6, 6, dtype=torch.bool)
        mask[..., 3:, :] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with torch.no_grad():
        got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"),
                                             attn_mask=None if mask is None else mask.to("tpu")).cpu()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=1e-5, rtol=1e-5)
