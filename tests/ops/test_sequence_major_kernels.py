"""The sequence-major Pallas kernels (ops/attention_kernel.py, ops/rotary_kernel.py; TORCH_TPU_SEQUENCE_MAJOR_KERNELS)
by themselves: their values through Pallas' TPU interpret mode against plain JAX, and their lowering for a TPU at
FLUX.1's size (jax.export, any platform). Their use by the lowerings: test_rotary_kernel.py and
tests/runtime/test_tpu_lowering.py."""
import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas import tpu as pltpu

from torch_tpu.ops import attention_kernel, rotary_kernel


def _heads_major(x, heads):
    b, length, width = x.shape
    return x.reshape(b, length, heads, width // heads).transpose(0, 2, 1, 3).astype(jnp.float32)


def _attention(q, k, v, heads, kv_len, causal, scale):
    qh, kh, vh = (_heads_major(x, heads) for x in (q, k, v))
    kh, vh = kh[:, :, :kv_len], vh[:, :, :kv_len]
    s = jnp.einsum("bhqe,bhke->bhqk", qh, kh, precision="highest") * scale
    if causal:
        s = jnp.where(jnp.arange(kv_len)[None, :] <= jnp.arange(q.shape[1])[:, None], s, -jnp.inf)
    out = jnp.einsum("bhqk,bhke->bhqe", jax.nn.softmax(s, axis=-1), vh, precision="highest")
    return out.transpose(0, 2, 1, 3).reshape(q.shape)


# (the lowering's use of it, whole tiles included, is tested in tests/runtime/test_tpu_lowering.py)
@pytest.mark.parametrize("lq,lk,kv_len,causal,heads", [(256, 384, 300, False, 3), (256, 256, 200, True, 1)],
                         ids=["padded-keys", "causal-padded"])
def test_sequence_major_attention_matches_softmax_attention(lq, lk, kv_len, causal, heads):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(keys[0], (2, lq, heads * 128)).astype(jnp.bfloat16)
    k = jax.random.normal(keys[1], (2, lk, heads * 128)).astype(jnp.bfloat16)
    v = jax.random.normal(keys[2], (2, lk, heads * 128)).astype(jnp.bfloat16)
    with pltpu.force_tpu_interpret_mode():
        out = jax.jit(lambda q, k, v: attention_kernel.flash_attention(q, k, v, heads=heads, kv_len=kv_len, causal=causal,
                                                               scale=0.1, tiles=(128, 128)))(q, k, v)
    want = _attention(q, k, v, heads, kv_len, causal, 0.1)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert float(jnp.max(jnp.abs(out.astype(jnp.float32) - want))) < 2e-2  # bf16 probabilities, as JAX's kernel


def _norm_rope_reference(x, weight, cos, sin, heads):
    """float32 (length, heads, head_dim): RMSNorm of each head of x (length, heads*head_dim) with ``weight``
    ((head_dim,) or one row per position; None: no norm), rounded to x's dtype, then diffusers' pairs rotation."""
    length, e = x.shape[0], cos.shape[1]
    normed = x.reshape(length, heads, e)
    if weight is not None:
        xf = normed.astype(jnp.float32)
        w = weight.reshape(length, 1, e) if weight.ndim == 2 else weight
        normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6) * w).astype(x.dtype)
    normed = normed.astype(jnp.float32)
    pairs = normed.reshape(length, heads, e // 2, 2)
    rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(length, heads, e)
    return normed * cos[:, None] + rotated * sin[:, None]


@pytest.mark.parametrize("normalize", [True, False], ids=["norm_rope", "rope"])
def test_norm_rope_matches_rmsnorm_then_the_pairs_rotation(normalize):
    heads, length, e = 3, 256, 128
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    x = (3 * jax.random.normal(keys[0], (length, heads * e))).astype(jnp.bfloat16)
    weight = 1 + 0.1 * jax.random.normal(keys[1], (e,))
    angles = jax.random.uniform(keys[2], (length, e // 2), maxval=50.0)
    cos, sin = jnp.repeat(jnp.cos(angles), 2, axis=1), jnp.repeat(jnp.sin(angles), 2, axis=1)
    with pltpu.force_tpu_interpret_mode():
        got = jax.jit(lambda x, w, c, s: rotary_kernel.rotate(x, c, s, head_dim=e, weight=w))(
            x, weight if normalize else None, cos, sin)
    want = _norm_rope_reference(x, weight if normalize else None, cos, sin, heads)
    diff = jnp.abs(got.astype(jnp.float32).reshape(length, heads, e) - want)
    assert float(jnp.max(diff / (1 + jnp.abs(want)))) <= 2 ** -8  # one bf16 rounding of the result


@pytest.mark.parametrize("heads,per_block", [(24, 6), (8, 4), (7, 1), (1, 1)])
def test_norm_rope_takes_several_heads_per_grid_step(heads, per_block):
    """One grid step takes as many heads as fit its lanes (a head per step was half grid overhead on the chip);
    every head of a block gets its own norm and the block's shared tables, per-token weights included."""
    e, length = 128, 64
    assert rotary_kernel.heads_per_block(heads * e, e) == per_block
    keys = jax.random.split(jax.random.PRNGKey(heads), 4)
    x = (3 * jax.random.normal(keys[0], (length, heads * e))).astype(jnp.bfloat16)
    weight = 1 + 0.1 * jax.random.normal(keys[1], (length, e))  # a weight per token (FLUX's double blocks)
    angles = jax.random.uniform(keys[2], (length, e // 2), maxval=50.0)
    cos, sin = jnp.repeat(jnp.cos(angles), 2, axis=1), jnp.repeat(jnp.sin(angles), 2, axis=1)
    with pltpu.force_tpu_interpret_mode():
        got = jax.jit(lambda x, w, c, s: rotary_kernel.rotate(x, c, s, head_dim=e, weight=w))(x, weight, cos, sin)
    want = _norm_rope_reference(x, weight, cos, sin, heads)
    diff = jnp.abs(got.astype(jnp.float32).reshape(length, heads, e) - want)
    assert float(jnp.max(diff / (1 + jnp.abs(want)))) <= 2 ** -8  # one bf16 rounding of the result


def test_both_kernels_lower_for_a_tpu_at_flux_size():
    x = jax.ShapeDtypeStruct((1, 4608, 24 * 128), jnp.bfloat16)
    for causal in (False, True):
        exported = jax.export.export(jax.jit(lambda q, k, v: attention_kernel.flash_attention(
            q, k, v, heads=24, kv_len=4429, causal=causal, scale=128 ** -0.5, tiles=(512, 512))),
            platforms=("tpu",))(x, x, x)
        assert "tpu_custom_call" in exported.mlir_module()
    flat = jax.ShapeDtypeStruct((4608, 24 * 128), jnp.bfloat16)
    table = jax.ShapeDtypeStruct((4608, 128), jnp.float32)
    exported = jax.export.export(jax.jit(lambda x, w, c, s: rotary_kernel.rotate(x, c, s, head_dim=128, weight=w)),
                                 platforms=("tpu",))(flat, jax.ShapeDtypeStruct((128,), jnp.float32), table, table)
    assert "tpu_custom_call" in exported.mlir_module()
    exported = jax.export.export(jax.jit(lambda x, c, s: rotary_kernel.rotate(x, c, s, head_dim=128)),
                                 platforms=("tpu",))(flat, table, table)
    assert "tpu_custom_call" in exported.mlir_module()
