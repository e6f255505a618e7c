"""FLUX's q/k RMSNorm and rotary embedding in one TPU kernel. Compiled graphs: ``tpu::rms_norm_rotary``
(compile/norm_rope.py rewrites them to it): the rewrite fires where it should and nowhere else, results stay
CPU torch's in every case, the op itself checks its arguments, and its TPU kernel matches its XLA formulation
(Pallas' interpret mode) and lowers for a TPU at FLUX.1's size. Fused eager: the op table's whole ``rms_norm``
(and a concatenation of such along the sequence) noted while a program is traced for a TPU, so the rotary
embedding after it takes the norm into its kernel; only when the values are exactly those norms."""
import re

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental.pallas import tpu as pltpu

from torch_tpu.compile import lowering, norm_rope
from torch_tpu.ops import nn, position_embeddings, rotary_kernel, shape
from torch_tpu.runtime import platform

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)


@pytest.fixture
def rewrites(monkeypatch):
    """How many patterns each compiled graph had rewritten."""
    counts = []
    original = norm_rope.fuse

    def counting(gm):
        counts.append(original(gm))
        return counts[-1]

    monkeypatch.setattr(lowering.norm_rope, "fuse", counting)
    return counts


def _tables(length, head_dim=128, seed=0):
    angles = torch.rand(length, head_dim // 2, generator=torch.Generator().manual_seed(seed)) * 100
    return angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)


def _flux_attention(double, dtype):
    from diffusers.models.transformers.transformer_flux import FluxAttention

    torch.manual_seed(0)
    attn = FluxAttention(query_dim=256, heads=2, dim_head=128, added_kv_proj_dim=256 if double else None, bias=True,
                         eps=1e-6, pre_only=not double).to(dtype)
    for norm in (attn.norm_q, attn.norm_k, getattr(attn, "norm_added_q", None), getattr(attn, "norm_added_k", None)):
        if norm is not None:  # weights of their own, so a text/image mix-up shows
            norm.weight.data = (1 + 0.3 * torch.randn(norm.weight.shape)).to(dtype)
    return attn


def _run_compiled(module, *args, **kwargs):
    def tpu(v):
        if isinstance(v, tuple):
            return tuple(tpu(t) for t in v)
        return v.to("tpu") if isinstance(v, torch.Tensor) else v

    with torch.no_grad():
        want = module(*args, **kwargs)
        module.to("tpu")
        got = torch.compile(module, backend="tpu")(*tpu(args), **{k: tpu(v) for k, v in kwargs.items()})
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    return [g.cpu() for g in got], list(want)


@pytest.mark.parametrize("double", [True, False], ids=["double-block", "single-block"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_flux_attention_compiles_to_the_fused_op_with_cpu_values(rewrites, double, dtype):
    attn = _flux_attention(double, dtype)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(1, 16, 256, generator=g).to(dtype)
    e = torch.randn(1, 8, 256, generator=g).to(dtype) if double else None
    cos, sin = _tables(24 if double else 16)
    got, want = _run_compiled(attn, h, e, image_rotary_emb=(cos, sin))
    assert rewrites == [2]  # q and k
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **tol)


class _NormUsedTwice(torch.nn.Module):
    """The normalised q is also returned: the norm must stay, so nothing is rewritten."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.RMSNorm(128, eps=1e-6)

    def forward(self, x, cos, sin):
        q = self.norm(x)
        return torch.ops.tpu.rotary_embedding(q, cos, sin), q


class _DiffusersRMSNorm(torch.nn.Module):
    """diffusers' own RMSNorm rounds to the weight's dtype before the weight: not torch's rms_norm."""

    def __init__(self):
        super().__init__()
        from diffusers.models.normalization import RMSNorm

        self.norm = RMSNorm(128, eps=1e-6).to(torch.bfloat16)

    def forward(self, x, cos, sin):
        return torch.ops.tpu.rotary_embedding(self.norm(x), cos, sin)


class _MixedEps(torch.nn.Module):
    """Two norms of different eps concatenated: one op cannot hold both."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.RMSNorm(128, eps=1e-6), torch.nn.RMSNorm(128, eps=1e-3)

    def forward(self, x, cos, sin):
        return torch.ops.tpu.rotary_embedding(torch.cat([self.a(x[:, :8]), self.b(x[:, 8:])], dim=1), cos, sin)


class _ConcatOverHeads(torch.nn.Module):
    """Norms concatenated along the heads, not the sequence: the per-token weight table would be wrong."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.RMSNorm(128, eps=1e-6), torch.nn.RMSNorm(128, eps=1e-6)

    def forward(self, x, cos, sin):
        return torch.ops.tpu.rotary_embedding(torch.cat([self.a(x[:, :, :1]), self.b(x[:, :, 1:])], dim=2), cos, sin)


@pytest.mark.parametrize("module", [_NormUsedTwice, _DiffusersRMSNorm, _MixedEps, _ConcatOverHeads],
                         ids=["norm-used-twice", "diffusers-rmsnorm", "mixed-eps", "concat-over-heads"])
def test_graphs_outside_the_pattern_are_left_alone(rewrites, module):
    m = module().to(torch.bfloat16)
    for p in m.parameters():
        p.data = (1 + 0.3 * torch.randn(p.shape)).to(p.dtype)
    x = torch.randn(1, 16, 2, 128).bfloat16()
    cos, sin = _tables(16)
    got, want = _run_compiled(m, x, cos.reshape(1, 16, 1, 128), sin.reshape(1, 16, 1, 128))
    assert rewrites == [0]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def test_training_keeps_the_norm_and_the_gradients_are_cpus(rewrites):
    """With gradients the forward graph keeps the normalised values for the backward: no rewrite, CPU grads."""
    attn = _flux_attention(True, torch.float32)
    h, e = torch.randn(1, 16, 256), torch.randn(1, 8, 256)
    cos, sin = _tables(24)
    out = attn(h, e, image_rotary_emb=(cos, sin))
    (out[0].sum() + out[1].square().sum()).backward()
    want = [p.grad.clone() for p in attn.parameters()]
    attn.zero_grad(set_to_none=True)
    attn.to("tpu")
    out = torch.compile(attn, backend="tpu")(h.to("tpu"), e.to("tpu"), image_rotary_emb=(cos.to("tpu"), sin.to("tpu")))
    (out[0].sum() + out[1].square().sum()).backward()
    assert 0 in rewrites
    for p, w in zip(attn.parameters(), want):
        torch.testing.assert_close(p.grad.cpu(), w, atol=1e-4, rtol=1e-4)


def _op_case(dtype, weight_shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (3 * torch.randn(2, 16, 2, 128, generator=g)).to(dtype)
    weight = (1 + 0.3 * torch.randn(weight_shape, generator=g)).to(dtype if len(weight_shape) == 1 else torch.float32)
    cos, sin = _tables(16, seed=seed)
    return x, weight, cos.reshape(1, 16, 1, 128), sin.reshape(1, 16, 1, 128)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("weight_shape", [(128,), (1, 16, 1, 128)], ids=["weight", "weight-per-token"])
def test_the_op_in_strict_mode_matches_torch(dtype, weight_shape):
    x, weight, cos, sin = _op_case(dtype, weight_shape)
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(dtype)
    want = position_embeddings.reference(normed, cos, sin)
    got = torch.ops.tpu.rms_norm_rotary(x.to("tpu"), weight.to("tpu"), 1e-6, cos.to("tpu"), sin.to("tpu")).cpu()
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got, want, atol=4 * eps, rtol=4 * eps)


def test_the_op_differentiates_as_its_two_steps():
    x, weight, cos, sin = _op_case(torch.float32, (128,))
    grads = []
    for device in ("cpu", "tpu"):
        leaves = [t.detach().to(device).requires_grad_() for t in (x, weight)]
        out = torch.ops.tpu.rms_norm_rotary(leaves[0], leaves[1], 1e-6, cos.to(device), sin.to(device))
        (out * torch.linspace(-1, 1, 128, device=device)).sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case,message", [
    ("float64", "must be float16, bfloat16 or float32"),
    ("weight_width", "weight must be (head_dim,)"),
    ("weight_rows", "must broadcast to x's shape"),
    ("negative_eps", "eps must be a non-negative number"),
    ("odd_tables", "do not broadcast"),
])
def test_bad_arguments_name_the_op_and_what_is_wrong(case, message):
    x, weight, cos, sin = _op_case(torch.float32, (128,))
    eps = 1e-6
    if case == "float64":
        x = x.double()
    elif case == "weight_width":
        weight = weight[:64]
    elif case == "weight_rows":
        weight = torch.ones(1, 17, 1, 128)
    elif case == "negative_eps":
        eps = -1.0
    elif case == "odd_tables":
        cos = cos[:, :15]
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match=f"tpu::(rms_norm_rotary|rotary_embedding).*{re.escape(message)}"):
            torch.ops.tpu.rms_norm_rotary(x.to(device), weight.to(device), eps, cos.to(device), sin.to(device))


def _fresh():
    """A new function each time (JAX serves a trace it made for the same function whatever the target)."""
    return lambda x, w, c, s: position_embeddings.rms_norm_rotary(x, w, 1e-6, c, s)


@pytest.mark.parametrize("per_token", [False, True], ids=["weight", "weight-per-token"])
def test_tpu_kernel_matches_the_xla_formulation(per_token):
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    x = (3 * jax.random.normal(keys[0], (2, 96, 2, 128))).astype(jnp.bfloat16)
    weight = 1 + 0.3 * jax.random.normal(keys[1], (1, 96, 1, 128) if per_token else (128,))
    angles = jax.random.uniform(keys[2], (96, 64), maxval=4000.0)
    cos = jnp.repeat(jnp.cos(angles), 2, axis=1).reshape(1, 96, 1, 128)
    sin = jnp.repeat(jnp.sin(angles), 2, axis=1).reshape(1, 96, 1, 128)
    results = {}
    for target in ("tpu", "cpu"):
        with platform.Targeting(target):
            jaxpr = str(jax.make_jaxpr(_fresh())(x, weight, cos, sin))
            with pltpu.force_tpu_interpret_mode():
                results[target] = (jax.jit(_fresh())(x, weight, cos, sin), "pallas_call" in jaxpr)
    (got, by_kernel), (want, by_xla) = results["tpu"], results["cpu"]
    assert by_kernel and not by_xla
    diff = jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))
    # the norm rounds to bf16 in both (a summation order apart), the rotation rounds once more
    assert float(jnp.max(diff / (1 + jnp.abs(want.astype(jnp.float32))))) <= 2 * float(jnp.finfo(jnp.bfloat16).eps)


def test_tpu_kernel_lowers_at_flux_size_with_a_weight_per_token():
    x = jax.ShapeDtypeStruct((1, 4608, 24, 128), jnp.bfloat16)
    table = jax.ShapeDtypeStruct((1, 4608, 1, 128), jnp.float32)
    with platform.Targeting("tpu"), platform.X64():  # as every program of the backend is traced
        exported = jax.export.export(jax.jit(_fresh()), platforms=("tpu",))(x, table, table, table)
    assert "norm_rope_sequence_major" in exported.mlir_module()


def _eager_case(seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    text = (3 * jax.random.normal(k[0], (1, 8, 2, 128))).astype(jnp.bfloat16)
    image = (3 * jax.random.normal(k[1], (1, 16, 2, 128))).astype(jnp.bfloat16)
    wa, wb = ((1 + 0.3 * jax.random.normal(key, (128,))).astype(jnp.bfloat16) for key in k[2:4])
    angles = jax.random.uniform(k[4], (24, 64), maxval=100.0)
    cos = jnp.repeat(jnp.cos(angles), 2, 1).reshape(1, 24, 1, 128)
    sin = jnp.repeat(jnp.sin(angles), 2, 1).reshape(1, 24, 1, 128)
    return text, image, wa, wb, cos, sin


def _eager_q(case):
    """A new function each time: the op table's lowerings as fused eager traces them for one query."""
    def q(text, image, wa, wb, cos, sin):
        if case == "single":
            return position_embeddings.rotary_embedding(nn.rms_norm(image, [128], wb, 1e-6), cos[:, 8:], sin[:, 8:])
        if case == "no_weight":
            return position_embeddings.rotary_embedding(nn.rms_norm(image, [128], None, 1e-6), cos[:, 8:], sin[:, 8:])
        second = nn.rms_norm(image, [128], wb, 1e-3 if case == "two_eps" else 1e-6)
        if case == "over_heads":
            return position_embeddings.rotary_embedding(
                shape.cat([nn.rms_norm(text[:, :, :1], [128], wa, 1e-6), nn.rms_norm(text[:, :, 1:], [128], wb, 1e-6)],
                          2), cos[:, :8], sin[:, :8])
        if case == "norm_kept":  # the norm's own value used besides: computed for that use, the kernel from x
            normed = nn.rms_norm(image, [128], wb, 1e-6)
            return position_embeddings.rotary_embedding(normed, cos[:, 8:], sin[:, 8:]) + normed
        if case == "other_value":  # the rotation of the image tokens' own projection, not of their norm
            return position_embeddings.rotary_embedding(shape.cat([text, image], 1), cos, sin) + 0 * second.sum()
        return position_embeddings.rotary_embedding(shape.cat([nn.rms_norm(text, [128], wa, 1e-6), second], 1), cos, sin)

    return q


@pytest.mark.parametrize("case,fused", [("double", True), ("single", True), ("no_weight", True), ("norm_kept", True),
                                        ("two_eps", False),
                                        ("over_heads", False), ("other_value", False)])
def test_eager_norms_before_the_rotary_embedding_go_into_its_kernel(case, fused):
    args = _eager_case()
    results = {}
    for target in ("tpu", "cpu"):
        with platform.Targeting(target):
            jaxpr = str(jax.make_jaxpr(_eager_q(case))(*args))
            with pltpu.force_tpu_interpret_mode():
                results[target] = jax.jit(_eager_q(case))(*args)
        if target == "tpu":
            assert ("norm_rope_sequence_major" in jaxpr) == fused
            assert "rope_sequence_major" in jaxpr
        else:
            assert "rope_sequence_major" not in jaxpr
    diff = jnp.abs(results["tpu"].astype(jnp.float32) - results["cpu"].astype(jnp.float32))
    assert float(jnp.max(diff / (1 + jnp.abs(results["cpu"].astype(jnp.float32))))) <= float(jnp.finfo(jnp.bfloat16).eps)


def test_fused_eager_flux_attention_checked_for_a_tpu_takes_the_norm_into_the_kernel(monkeypatch, fresh_programs):
    """A FLUX double-block attention in fused eager with every program also lowered for a TPU: q's and k's
    rotary kernels each normalise their tokens (text and image weights), and the values are CPU torch's."""
    import torch_tpu

    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    calls = []
    original = rotary_kernel.rotate

    def rotate(*args, weight=None, **kwargs):
        calls.append(weight is not None)
        return original(*args, weight=weight, **kwargs)

    monkeypatch.setattr(rotary_kernel, "rotate", rotate)
    attn = _flux_attention(True, torch.bfloat16)
    g = torch.Generator().manual_seed(2)
    h, e = torch.randn(1, 16, 256, generator=g).bfloat16(), torch.randn(1, 8, 256, generator=g).bfloat16()
    cos, sin = _tables(24)
    with torch.no_grad():
        want = attn(h, e, image_rotary_emb=(cos, sin))
        attn.to("tpu")
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            got = attn(h.to("tpu"), e.to("tpu"), image_rotary_emb=(cos.to("tpu"), sin.to("tpu")))
            got = [t.cpu() for t in got]
    # (q's and k's kernels, traced for the check; under TORCH_TPU_BUILD_FOR=tpu the programs themselves too)
    assert len(calls) >= 2 and all(calls), calls
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
