"""TORCH_TPU_SEQUENCE_MAJOR_KERNELS=rotary: programs built for a TPU apply FLUX's rotary embedding with the Pallas kernel of
ops/rotary_kernel.py. Checked here without a TPU: the kernel's values through Pallas' TPU interpret mode
against the XLA formulation (what every program computes with the setting off), the calls it does not take,
its lowering for a TPU at FLUX.1's size, and a strict-mode FLUX call with the TPU lowering check on."""
import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental.pallas import tpu as pltpu

import torch_tpu
from torch_tpu.ops import position_embeddings
from torch_tpu.runtime import platform, tpu_lowering


@pytest.fixture
def kernel_on(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "rotary")
    platform.jax()


def _case(batch, length, heads, head_dim, dtype, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 2)
    x = (3 * jax.random.normal(keys[0], (batch, length, heads, head_dim))).astype(dtype)
    angles = jax.random.uniform(keys[1], (length, head_dim // 2), maxval=4000.0)
    cos = jnp.repeat(jnp.cos(angles), 2, axis=1).reshape(1, length, 1, head_dim)
    sin = jnp.repeat(jnp.sin(angles), 2, axis=1).reshape(1, length, 1, head_dim)
    return x, cos, sin


def _fresh():
    """A new function each time: JAX serves a trace it made for the same function and arguments, whatever
    platform the lowering was targeting then."""
    return lambda *args: position_embeddings.rotary_embedding(*args)


def _lowered(x, cos, sin, target):
    with platform.Targeting(target):
        jaxpr = str(jax.make_jaxpr(_fresh())(x, cos, sin))
        with pltpu.force_tpu_interpret_mode():
            return jax.jit(_fresh())(x, cos, sin), "pallas_call" in jaxpr


@pytest.mark.parametrize("dtype,batch,length", [(jnp.bfloat16, 1, 256), (jnp.bfloat16, 2, 96), (jnp.float16, 2, 96),
                                                (jnp.float32, 1, 256)],
                         ids=["bf16-one", "bf16-two-batches", "fp16-two-batches", "fp32-one"])
def test_kernel_matches_the_xla_formulation(kernel_on, dtype, batch, length):
    x, cos, sin = _case(batch, length, 2, 128, dtype)
    got, by_kernel = _lowered(x, cos, sin, "tpu")
    want, by_xla = _lowered(x, cos, sin, "cpu")
    assert by_kernel and not by_xla
    assert got.dtype == want.dtype == dtype
    # the same float32 products and sum, rounded once to x's dtype: at most that rounding apart (an FMA)
    diff = jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))
    assert float(jnp.max(diff / (1 + jnp.abs(want.astype(jnp.float32))))) <= float(jnp.finfo(dtype).eps)


@pytest.mark.parametrize("call", ["setting_off", "head_dim_64", "float64_tables", "heads_major_tables",
                                  "three_dims", "odd_length"])
def test_calls_it_does_not_take_keep_the_xla_formulation(monkeypatch, call):
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "attention" if call == "setting_off" else "rotary")
    platform.jax()
    x, cos, sin = _case(1, 64, 2, 64 if call == "head_dim_64" else 128, jnp.float32)
    if call == "float64_tables":
        with platform.X64():
            cos, sin = cos.astype(jnp.float64), sin.astype(jnp.float64)
    elif call == "heads_major_tables":  # (batch, heads, length, head_dim): tables (1, 1, length, head_dim)
        x = x.transpose(0, 2, 1, 3)
        cos, sin = cos.reshape(1, 1, 64, 128), sin.reshape(1, 1, 64, 128)
    elif call == "three_dims":
        x, cos, sin = x[0], cos[0], sin[0]
    elif call == "odd_length":  # no row tile divides 3 x 7 tokens
        x, cos, sin = _case(1, 21, 2, 128, jnp.float32)
    with platform.Targeting("tpu"), platform.X64():
        jaxpr = str(jax.make_jaxpr(_fresh())(x, cos, sin))
    assert "pallas_call" not in jaxpr


def test_kernel_lowers_for_a_tpu_at_flux_size(kernel_on):
    x = jax.ShapeDtypeStruct((1, 4608, 24, 128), jnp.bfloat16)
    table = jax.ShapeDtypeStruct((1, 4608, 1, 128), jnp.float32)
    with platform.Targeting("tpu"), platform.X64():  # as every program of the backend is traced
        exported = jax.export.export(jax.jit(_fresh()), platforms=("tpu",))(x, table, table)
    assert "tpu_custom_call" in exported.mlir_module()


def test_a_flux_call_with_the_tpu_lowering_check(kernel_on, monkeypatch, fresh_programs):
    """diffusers' apply_rotary_emb on tpu tensors in strict mode with every program also lowered for a TPU
    (the kernel's program then): the check passes, and the values are CPU torch's."""
    from diffusers.models import embeddings

    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    assert tpu_lowering.enabled()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 256, 2, 128, generator=g).bfloat16()
    angles = torch.rand(256, 64, generator=g) * 100
    cos, sin = angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)
    want = embeddings.apply_rotary_emb.__torch_tpu_original__(x, (cos, sin), sequence_dim=1)
    before = torch_tpu.stats()["tpu_lowerings"]
    with torch.no_grad():
        got = embeddings.apply_rotary_emb(x.to("tpu"), (cos.to("tpu"), sin.to("tpu")), sequence_dim=1).cpu()
    assert torch_tpu.stats()["tpu_lowerings"] > before
    torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)
