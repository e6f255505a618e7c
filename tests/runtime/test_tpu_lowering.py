"""Programs lower for a TPU, checked on any platform: TORCH_TPU_CHECK_LOWERING=tpu, the Pallas attention kernel
at real diffusers sizes (traced without 64-bit index arithmetic, padded to whole tiles, forward and backward),
its numerics through Pallas' TPU interpret mode, and its fallback to XLA where it does not apply.

The attention, pipeline and real-width transformer files (and this one) are marked check_lowering: they run with
TORCH_TPU_CHECK_LOWERING=tpu (tests/conftest.py); the tests here also switch it on themselves where they need it."""
import jax
import numpy as np
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.ops import attention as attention_lowering
from torch_tpu.runtime import platform, tpu_lowering

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

# the FLUX.1 transformer's attention at 1024x1024: 4096 image + 512 text tokens, 24 heads of 128; SD3's at
# 1024x1024 with CFG: 4096 + 333 tokens (not a multiple of any tile), heads of 64
FLUX_1024 = (1, 24, 4608, 128)
SD3_1024_CFG = (2, 24, 4429, 64)


def test_a_file_marked_check_lowering_builds_its_programs_checked(fresh_programs):
    """The mark is what runs this file under the check in CI (tests/conftest.py sets the variable per file): a
    program built here is also lowered for a TPU, unless the run turned the check off from outside (=0)."""
    import os

    if os.environ.get("TORCH_TPU_CHECK_LOWERING") == "0":
        pytest.skip("TORCH_TPU_CHECK_LOWERING=0 was set for this run (as on a TPU host)")
    before = torch_tpu.stats()["tpu_lowerings"]
    x = torch.randn(5, 3)
    torch.testing.assert_close((x.to("tpu") * 7 - 1).cpu(), x * 7 - 1)
    assert torch_tpu.stats()["tpu_lowerings"] > before


def _exported(fn, shape, dtype=jnp.bfloat16):
    s = jax.ShapeDtypeStruct(shape, dtype)
    with platform.Targeting("tpu"), platform.X64():  # as every program of the backend is traced
        return jax.export.export(jax.jit(fn), platforms=("tpu",))(s, s, s).mlir_module()


@pytest.mark.parametrize("shape", [FLUX_1024, SD3_1024_CFG], ids=["flux-1024", "sd3-1024-cfg"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_kernel_lowers_for_tpu_at_real_sizes(shape, causal):
    platform.jax()
    fwd = _exported(lambda q, k, v: attention_lowering.attention(q, k, v, None, causal), shape)
    bwd = _exported(lambda q, k, v: attention_lowering.attention_backward(q, q, k, v, None, causal), shape)
    assert "tpu_custom_call" in fwd and "tpu_custom_call" in bwd  # the Pallas kernel, not XLA's attention


def test_kernel_tiles_follow_the_measured_table():
    platform.jax()
    q = jax.ShapeDtypeStruct(FLUX_1024, jnp.bfloat16)
    assert attention_lowering._kernel_shapes(q, q, q, None, False, None) == (512, 512)  # 4608: 1024 pads to 5120
    long = jax.ShapeDtypeStruct((1, 24, 8192, 128), jnp.bfloat16)
    assert attention_lowering._kernel_shapes(long, long, long, None, False, None) == (1024, 1024)
    short = jax.ShapeDtypeStruct((1, 24, 1024, 128), jnp.bfloat16)
    assert attention_lowering._kernel_shapes(short, short, short, None, False, None) is None  # XLA's is faster
    f32 = jax.ShapeDtypeStruct(FLUX_1024, jnp.float32)
    # float32 at torch's default "highest" precision: the kernel's bf16 passes are not that
    assert attention_lowering._kernel_shapes(f32, f32, f32, None, False, None) is None
    assert attention_lowering._kernel_shapes(f32, f32, f32, None, False, "high") == (512, 512)
    mask = jax.ShapeDtypeStruct((4608, 4608), jnp.bool_)
    assert attention_lowering._kernel_shapes(q, q, q, mask, False, None) is None


@pytest.fixture
def kernel_in_interpret_mode(monkeypatch):
    """The kernel path on the CPU: Pallas' TPU interpret mode, small tiles so it stays quick."""
    from jax.experimental.pallas import tpu as pltpu

    platform.jax()
    monkeypatch.setattr(attention_lowering, "KERNEL_MIN_SCORES", 1)
    monkeypatch.setattr(attention_lowering, "KERNEL_MIN_LENGTH", 1)
    monkeypatch.setattr(attention_lowering, "_tile", lambda length, head_dim: 128)
    # interpret mode lowers for the CPU, so the once-per-shape TPU lowering check cannot run here
    monkeypatch.setattr(attention_lowering, "_kernel_lowers", lambda *a: True)
    with pltpu.force_tpu_interpret_mode(), platform.Targeting("tpu"), platform.X64():
        yield


@pytest.mark.parametrize("lq,lk,causal", [(256, 256, False), (200, 328, False), (300, 300, True)],
                         ids=["tiles", "padded-cross", "padded-causal"])
def test_kernel_path_matches_xla_forward_and_backward(kernel_in_interpret_mode, lq, lk, causal):
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q = jax.random.normal(keys[0], (1, 2, lq, 64), jnp.float32).astype(jnp.bfloat16)
    k = jax.random.normal(keys[1], (1, 2, lk, 64), jnp.float32).astype(jnp.bfloat16)
    v = jax.random.normal(keys[2], (1, 2, lk, 64), jnp.float32).astype(jnp.bfloat16)
    g = jax.random.normal(keys[3], (1, 2, lq, 64), jnp.float32).astype(jnp.bfloat16)

    def reference(q, k, v):  # XLA's attention in float32: what CPU torch computes from these bf16 values
        return attention_lowering._core(q, k, v, None, causal, 1 / 8, jax.lax.Precision.HIGHEST)

    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    out = jax.jit(lambda q, k, v: attention_lowering.attention(q, k, v, None, causal))(q, k, v)
    assert "pallas_call" in str(jax.make_jaxpr(lambda q, k, v: attention_lowering.attention(q, k, v, None, causal))(q, k, v))
    ref, pull = jax.vjp(reference, *f32)
    assert float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref))) < 2e-2
    grads = jax.jit(lambda g, q, k, v: attention_lowering.attention_backward(g, q, k, v, None, causal))(g, q, k, v)
    for got, want in zip(grads, pull(g.astype(jnp.float32))):
        scale = float(jnp.max(jnp.abs(want)))
        assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))) < 2e-2 * max(scale, 1.0)


@pytest.mark.parametrize("lq,lk,causal", [(256, 256, False), (200, 328, False), (300, 300, True)],
                         ids=["tiles", "padded-cross", "padded-causal"])
def test_sequence_major_kernel_path_matches_xla_forward_and_backward(kernel_in_interpret_mode, monkeypatch, lq, lk,
                                                                     causal):
    """TORCH_TPU_SEQUENCE_MAJOR_KERNELS=attention: heads of 128 channels take the kernel that reads
    (batch, length, heads x 128) arrays (its gradient by JAX's kernel), with XLA's values."""
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "attention")
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    # diffusers' layout: (batch, length, heads, head_dim) projections seen heads-major
    q, g = (jax.random.normal(keys[i], (1, lq, 2, 128), jnp.float32).astype(jnp.bfloat16).transpose(0, 2, 1, 3)
            for i in (0, 3))
    k, v = (jax.random.normal(keys[i], (1, lk, 2, 128), jnp.float32).astype(jnp.bfloat16).transpose(0, 2, 1, 3)
            for i in (1, 2))

    def reference(q, k, v):
        return attention_lowering._core(q, k, v, None, causal, 128 ** -0.5, jax.lax.Precision.HIGHEST)

    def attend(q, k, v):
        return attention_lowering.attention(q, k, v, None, causal)

    assert "flash_attention_sequence_major" in str(jax.make_jaxpr(attend)(q, k, v))
    out = jax.jit(attend)(q, k, v)
    ref, pull = jax.vjp(reference, *(x.astype(jnp.float32) for x in (q, k, v)))
    assert out.shape == q.shape and out.dtype == q.dtype
    assert float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref))) < 2e-2
    grads = jax.jit(lambda g, q, k, v: attention_lowering.attention_backward(g, q, k, v, None, causal))(g, q, k, v)
    for got, want in zip(grads, pull(g.astype(jnp.float32))):
        scale = float(jnp.max(jnp.abs(want)))
        assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))) < 2e-2 * max(scale, 1.0)


def test_sequence_major_kernel_lowers_at_flux_size_and_leaves_other_heads_to_jaxs(monkeypatch):
    """With the setting, FLUX.1's attention (heads of 128) lowers for a TPU through the sequence-major kernel, and
    its gradient through JAX's; SD3's heads of 64 keep JAX's kernel."""
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "all")
    platform.jax()
    attention_lowering._LOWERS.clear()
    fwd = _exported(lambda q, k, v: attention_lowering.attention(q, k, v), FLUX_1024)
    bwd = _exported(lambda q, k, v: attention_lowering.attention_backward(q, q, k, v), FLUX_1024)
    # (the backward's program needs no forward output: JAX's kernels compute the gradient alone)
    assert "flash_attention_sequence_major" in fwd and "tpu_custom_call" in bwd
    sd3 = _exported(lambda q, k, v: attention_lowering.attention(q, k, v), SD3_1024_CFG)
    assert "tpu_custom_call" in sd3 and "flash_attention_sequence_major" not in sd3
    attention_lowering._LOWERS.clear()


@pytest.fixture
def checking(monkeypatch, fresh_programs):
    # (fresh programs: those checked by an earlier run would be found by key, and not counted again)
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")


def _sdpa_step(q, k, v, attend=F.scaled_dot_product_attention):
    q = q.detach().requires_grad_()
    out = attend(q, k, v)
    out.float().square().sum().backward()
    return out.detach(), q.grad


@pytest.mark.parametrize("kernels,head_dim", [("", 64), ("all", 128)], ids=["jax-kernel", "sequence-major"])
def test_check_lowering_counts_every_program_in_each_mode(checking, monkeypatch, kernels, head_dim):
    """Strict, fused and compiled SDPA at a size where a TPU takes a Pallas kernel (JAX's, or with
    TORCH_TPU_SEQUENCE_MAJOR_KERNELS the sequence-major one): every program built is lowered for a TPU too
    (counted), and values still match CPU torch."""
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", kernels)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 1536, head_dim, generator=g).bfloat16() for _ in range(3))
    ref, ref_grad = _sdpa_step(q.float(), k.float(), v.float())
    tq, tk, tv = (t.to("tpu") for t in (q, k, v))
    for mode in ("DEFER_NEVER", "DEFER_AND_FUSE", "compiled"):
        before = torch_tpu.stats()["tpu_lowerings"]
        if mode == "compiled":
            attend = torch.compile(F.scaled_dot_product_attention, backend="tpu", fullgraph=True, dynamic=False)
            out, grad = _sdpa_step(tq, tk, tv, attend)
        else:
            with torch.tpu.set_eager_mode(torch_tpu.EagerMode[mode]):
                out, grad = _sdpa_step(tq, tk, tv)
                torch_tpu.sync()
        assert torch_tpu.stats()["tpu_lowerings"] > before, mode
        torch.testing.assert_close(out.cpu().float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(grad.cpu().float(), ref_grad, atol=5e-2, rtol=5e-2)


def test_check_lowering_catches_a_kernel_traced_with_64_bit_indices(checking, monkeypatch):
    """The bug the check exists for: the kernel traced under JAX's 64-bit mode lowers on the CPU (which
    runs XLA's attention) but not for a TPU. With the per-shape guard out of the way, the check raises,
    naming the op."""
    monkeypatch.setattr(platform, "traced_without_x64", lambda fn, *args: fn(*args))
    monkeypatch.setattr(attention_lowering, "_kernel_lowers", lambda *a: True)
    q = torch.randn(1, 1, 1536, 64).bfloat16().to("tpu")
    with pytest.raises(tpu_lowering.TpuLoweringError, match=r"attention.*does not lower for TPU"):
        F.scaled_dot_product_attention(q, q, q).cpu()


def test_a_lowerings_own_error_is_not_called_a_tpu_lowering_failure(checking, monkeypatch):
    """The check lowers for a TPU before the platform does; an error the lowering raises while tracing is the
    op's own error (OpError naming the op), as with the check off, not TpuLoweringError."""
    import dataclasses

    from torch_tpu.errors import OpError
    from torch_tpu.ops import load, registry

    x = torch.randn(3, 5).to("tpu")
    load()
    op = torch.ops.aten.sinh.default

    def broken(a):
        raise ValueError("the lowering's own error")

    monkeypatch.setitem(registry.LOWERINGS, op, dataclasses.replace(registry.LOWERINGS[op], fn=broken))
    with pytest.raises(OpError, match="aten.sinh.*the lowering's own error") as info:
        torch.sinh(x).cpu()
    assert not isinstance(info.value, tpu_lowering.TpuLoweringError)


def test_a_shape_the_kernel_refuses_falls_back_to_xla(monkeypatch):
    """A Mosaic refusal found by the once-per-shape check: XLA's attention, a warning, the right values."""
    platform.jax()
    attention_lowering._LOWERS.clear()

    def refuse(*args, **kwargs):
        raise ValueError("Mosaic says no")

    monkeypatch.setattr(attention_lowering, "_kernel", refuse)
    q = jax.ShapeDtypeStruct((1, 2, 1536, 64), jnp.bfloat16)
    with pytest.warns(UserWarning, match="does not lower"):
        txt = _exported(lambda q, k, v: attention_lowering.attention(q, k, v), q.shape)
    assert "tpu_custom_call" not in txt
    attention_lowering._LOWERS.clear()


def test_check_lowering_setting_is_validated(monkeypatch):
    from torch_tpu import config

    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "gpu")
    with pytest.raises(config.ConfigError, match="TORCH_TPU_CHECK_LOWERING='gpu'"):
        config.settings()


def _tpu_module_text(fn, example) -> str:
    """The StableHLO that ``fn`` lowers to for a TPU (64-bit mode on, as every program of this backend)."""
    with platform.Targeting("tpu"), platform.X64():
        exported = jax.export.export(jax.jit(fn), platforms=("tpu",))(jax.ShapeDtypeStruct(example.shape, example.dtype))
    return exported.mlir_module()


def test_a_32_bit_svd_built_for_a_tpu_holds_no_64_bit_float():
    """On a TPU v5e every program holding the SVD aborted XLA:TPU's compiler ('Check failed: buffer !=
    nullptr'; torch.linalg.pinv at every shape), traced with 64-bit mode off or not: the SVD primitive's TPU
    lowering is a Python algorithm traced when the program is lowered, with 64-bit mode on, so float64
    constants and loop state reached the program. Programs for a TPU now trace that algorithm themselves
    with 64-bit mode off: no float64 value in a float32 SVD or pseudo-inverse (a float64 one keeps its
    precision), and the results are CPU torch's."""
    import re

    import numpy as np

    from torch_tpu.ops import linalg as linalg_lowering

    platform.jax()
    a = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    f64 = re.compile(r"tensor<[0-9x]*f64>")
    programs = {"svd": lambda x: linalg_lowering.linalg_svd(x),
                "svdvals": lambda x: linalg_lowering.linalg_svd(x, compute_uv=False),
                "pinv": lambda x: linalg_lowering.linalg_pinv(x),
                "pinv.hermitian": lambda x: linalg_lowering.linalg_pinv(x[..., :4, :], hermitian=True)}
    for name, fn in programs.items():
        assert not f64.search(_tpu_module_text(fn, a)), f"{name}: a float64 value in a float32 program for a TPU"
    assert f64.search(_tpu_module_text(programs["svdvals"], a.astype(np.float64)))
    with platform.Targeting("tpu"), platform.X64():
        pinv = jax.jit(programs["pinv"])(a)
        _, s, _ = jax.jit(programs["svd"])(a)
        _, s64, _ = jax.jit(programs["svd"])(a.astype(np.float64))
    want = torch.from_numpy(a)
    torch.testing.assert_close(torch.from_numpy(np.asarray(pinv)), torch.linalg.pinv(want), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.from_numpy(np.asarray(s)), torch.linalg.svdvals(want), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.from_numpy(np.asarray(s64)), torch.linalg.svdvals(want.double()))


@pytest.mark.parametrize("shape,full", [((5, 4), False), ((5, 4), True), ((3, 6), True), ((2, 4, 4), False),
                                        ("rank-2", False), ("rank-2", True), ("zero", False)],
                         ids=["tall", "tall-full", "wide-full", "batched", "rank-deficient", "rank-deficient-full",
                              "zero"])
def test_a_64_bit_svd_built_for_a_tpu_has_no_64_bit_integer_product(shape, full):
    """JAX's own TPU SVD multiplies float64 vectors by an int64 matrix of signs (its rank-deficiency
    correction), a dot XLA:TPU does not compile: the lowering check refused torch.linalg.svd, pinv and the
    other SVD-based ops of float64 in programs for a TPU. Their SVD is now a polar decomposition and an eigh
    (ops/linalg.py): no such dot, CPU torch's singular values, orthonormal factors that rebuild the input."""
    import numpy as np

    from torch_tpu.ops import linalg as linalg_lowering

    platform.jax()
    g = torch.Generator().manual_seed(0)
    if shape == "rank-2":
        a = torch.randn(6, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 5, generator=g, dtype=torch.float64)
    elif shape == "zero":
        a = torch.zeros(4, 3, dtype=torch.float64)
    else:
        a = torch.randn(shape, generator=g, dtype=torch.float64)
    fn = lambda x: linalg_lowering.linalg_svd(x, full)  # noqa: E731
    tpu_lowering.check(fn, (a.numpy(),), "float64 svd")  # raises on a 64-bit integer product
    with platform.Targeting("tpu"), platform.X64():
        u, s, vh = (torch.from_numpy(np.array(t)) for t in jax.jit(fn)(a.numpy()))
    m, n = a.shape[-2:]
    k = min(m, n)
    assert u.shape[-2:] == ((m, m) if full else (m, k)) and vh.shape[-2:] == ((n, n) if full else (k, n))
    # on a TPU itself float64 is emulated, and JAX's float64 eigh there rebuilds its input to ~4e-8
    # (bench/results/tpu/tpu_signbit_probe.json): float64's default tolerance there, 1e-12 elsewhere
    tol = 1e-7 if jax.default_backend() == "tpu" else 1e-12
    torch.testing.assert_close(s, torch.linalg.svdvals(a), atol=tol, rtol=tol)
    torch.testing.assert_close((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=tol, rtol=tol)
    for q in (u, vh.mT):
        torch.testing.assert_close(q.mT @ q, torch.eye(q.shape[-1], dtype=q.dtype).expand_as(q.mT @ q),
                                   atol=tol, rtol=0)


def test_a_shift_of_float64_bits_is_refused_and_the_ops_that_did_one_no_longer_do():
    """On a v5e XLA:TPU failed to compile jnp.signbit and jnp.copysign of float64 (a shift of the float's bits read
    as an int64: "Binary op shift-right-arithmetic with different element types"), so torch.copysign, torch.signbit,
    fmod, remainder and a division by a 0-dim tensor of float64, and ``uint8 % 0.7`` (then computed in float64),
    failed there; any other 64-bit integer shift compiled. The check refuses the pattern, and the ops no longer
    build it."""
    import numpy as np

    f64 = np.ones(4, np.float64)  # (numpy's: a jnp array made outside the checks' 64-bit mode would be float32)
    for name, fn in (("signbit", jnp.signbit), ("copysign", lambda x: jnp.copysign(1.0, x)),
                     ("reshaped bits", lambda x: jax.lax.bitcast_convert_type(x, jnp.int64).reshape(2, 2) >> 63)):
        with pytest.raises(tpu_lowering.TpuLoweringError, match="a shift of a float64's bits"):
            tpu_lowering.check(fn, (f64,), name)
    tpu_lowering.check(lambda x: x.astype(jnp.int64) >> 3, (f64,), "an int64 shift")
    tpu_lowering.check(jnp.signbit, (f64.astype(np.float32),), "a float32 signbit")
    x = torch.tensor([-0.0, 0.0, 1.5, -2.25, float("inf"), float("nan")], dtype=torch.float64)
    u8 = torch.arange(0, 256, 3, dtype=torch.uint8)
    for fn, arg in ((lambda t: torch.copysign(t, -t), x), (torch.signbit, x), (lambda t: torch.fmod(t, 0.7), x),
                    (lambda t: torch.remainder(t, -0.7), x), (lambda t: t / torch.tensor(4.0, dtype=t.dtype), x),
                    (lambda t: torch.fmod(t, 0.7), u8)):
        torch.testing.assert_close(fn(arg.to("tpu")).cpu(), fn(arg), rtol=0, atol=0, equal_nan=True)
    for fn in (torch.sinh, torch.expm1):  # (XLA's and C's functions: an ulp apart)
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True)


def test_eigh_asking_xla_tpu_to_sort_beside_an_unsorted_one_is_refused_and_the_ops_no_longer_ask():
    """On a v5e, XLA:TPU's Jacobi eigh returned a sorted call's eigenvalues unsorted in a program that also held an
    unsorted call, as XLA:TPU's own SVD algorithm makes: ``eigvalsh(s)`` beside ``svdvals(a)`` in one fused graph gave
    permuted eigenvalues and a gradient 0.68 off (bench/results/tpu/eigh_sort_probe.json). The check refuses the
    mix; every eigh built for a TPU asks for unsorted values and sorts them, so the pair passes the check and equals
    CPU torch in every mode."""
    from torch_tpu.ops import linalg as linalg_lowering

    s = jnp.eye(4, dtype=jnp.float32)[None].repeat(2, 0)

    def raw_pair(s, a):  # jax's own eigh (sorted by XLA) beside XLA:TPU's SVD algorithm (unsorted inside)
        return jax.lax.linalg.eigh(s, symmetrize_input=False), linalg_lowering._svd(a, compute_uv=False)

    with pytest.raises(tpu_lowering.TpuLoweringError, match="sorted and for unsorted eigenvalues"):
        tpu_lowering.check(raw_pair, (s, s), "eigh beside svd")
    tpu_lowering.check(lambda s, a: (linalg_lowering._eigh(s), linalg_lowering._svd(a, compute_uv=False)), (s, s),
                       "our eigh beside svd")

    g = torch.Generator().manual_seed(0)
    raw = torch.rand(2, 4, 4, generator=g) * 2 - 1
    a, spd = raw + 4 * torch.eye(4), raw @ raw.mT + 4 * torch.eye(4)

    def run(a, spd):
        a, spd = a.clone().requires_grad_(), spd.clone().requires_grad_()
        outs = [torch.linalg.eigvalsh(spd), torch.linalg.svdvals(a), torch.linalg.eigh(spd)[1].abs()]
        loss = sum((o * torch.linspace(-1, 1, o.numel()).to(o.device).reshape(o.shape)).sum() for o in outs)
        return [o.detach() for o in outs] + list(torch.autograd.grad(loss, (a, spd)))

    want = run(a, spd)
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode), platform.Targeting("tpu"):
            got = run(a.to("tpu"), spd.to("tpu"))
        for g_, w in zip(got, want):
            torch.testing.assert_close(g_.cpu(), w, rtol=1e-4, atol=1e-4)


def test_eigh_for_a_tpu_sorts_what_xla_returns_unsorted(monkeypatch):
    """With XLA:TPU's behaviour in a mixed program emulated (eigenvalues in no order whatever was asked), the eigh
    family built for a TPU still returns them ascending, with their vectors, as CPU torch."""
    from torch_tpu.ops import linalg as linalg_lowering

    xla_eigh = jax.lax.linalg.eigh

    def unsorted_eigh(x, **kwargs):
        kwargs["sort_eigenvalues"] = True
        vecs, vals = xla_eigh(x, **kwargs)
        order = jnp.array([2, 0, 3, 1])  # (4x4 inputs here)
        return vecs[..., order], vals[..., order]

    monkeypatch.setattr(jax.lax.linalg, "eigh", unsorted_eigh)
    jax.clear_caches()
    try:
        g = torch.Generator().manual_seed(1)
        raw = torch.rand(3, 4, 4, generator=g, dtype=torch.float64) * 2 - 1
        spd = (raw @ raw.mT + 4 * torch.eye(4, dtype=torch.float64)).float()
        with platform.Targeting("tpu"), platform.X64():
            vecs, vals = jax.jit(linalg_lowering._eigh)(jnp.asarray(spd.numpy()))
            _, pinv = jax.jit(lambda m: (0, linalg_lowering._pinv(m, None, None, True, jnp.float32)))(
                jnp.asarray(spd.numpy()))
        want_vals, want_vecs = torch.linalg.eigh(spd)
        torch.testing.assert_close(torch.from_numpy(np.array(vals)), want_vals, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.from_numpy(np.array(vecs)).abs(), want_vecs.abs(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(torch.from_numpy(np.array(pinv)), torch.linalg.pinv(spd, hermitian=True),
                                   rtol=1e-4, atol=1e-4)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
