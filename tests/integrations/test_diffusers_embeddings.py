"""diffusers' position embeddings on tpu tensors are ONE op each: apply_rotary_emb (tpu::rotary_embedding, 8
programs before in strict mode), get_1d_rotary_pos_embed (tpu::rotary_table, 13) and get_timestep_embedding
(tpu::timestep_embedding, 11): one program in strict mode,
one recorded op in fused mode, the values and dtypes of diffusers' own functions on CPU for every mix of
dtypes and both layouts; every call they do not serve exactly (gradients, other options, odd shapes, CPU
tensors) is diffusers' own function, errors included. The ops check their arguments and have CPU kernels;
tpu::rotary_embedding has a backward."""
import pytest
import torch

import torch_tpu
from tests.harness.counting import programs_run
from tests.harness.isolated import run_isolated

from diffusers.models import embeddings  # noqa: E402  (after torch_tpu: the import hook patches it)
import diffusers.models.transformers.transformer_flux as transformer_flux  # noqa: E402

from torch_tpu.integrations import diffusers_embeddings, diffusers_hook

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

# what stopped the patch, if it failed (rather than an AttributeError below)
assert diffusers_embeddings.installed(), diffusers_hook.failure(diffusers_embeddings.TARGET)
ORIGINAL = embeddings.apply_rotary_emb.__torch_tpu_original__
TABLE_ORIGINAL = embeddings.get_1d_rotary_pos_embed.__torch_tpu_original__
TIMESTEP_ORIGINAL = embeddings.get_timestep_embedding.__torch_tpu_original__
TOL = {torch.float32: 1e-6, torch.float64: 1e-12, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def _case(dtype, table_dtype, sequence_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (2, 6, 3, 8) if sequence_dim == 1 else (2, 3, 6, 8)
    x = (torch.randn(shape, generator=g) * 2).to(dtype)
    angles = torch.rand(6, 4, generator=g) * 6.28
    cos = angles.cos().repeat_interleave(2, dim=1).to(table_dtype)
    sin = angles.sin().repeat_interleave(2, dim=1).to(table_dtype)
    return x, cos, sin


def test_diffusers_modules_hold_the_wrapper():
    assert diffusers_embeddings.installed()
    assert transformer_flux.apply_rotary_emb is embeddings.apply_rotary_emb
    assert transformer_flux.get_1d_rotary_pos_embed is embeddings.get_1d_rotary_pos_embed
    assert hasattr(embeddings.get_timestep_embedding, "__torch_tpu_original__")
    assert embeddings.apply_rotary_emb.__name__ == "apply_rotary_emb"


# (embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period): FLUX's, SD3's, an odd width (zero
# pad), and other numbers
TIMESTEP_CASES = [(256, True, 0, 1, 10000), (256, True, 1, 1, 10000), (33, False, 1, 2.0, 10000),
                  (32, True, 0.5, 0.25, 333)]


@pytest.mark.parametrize("case", TIMESTEP_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_timestep_embedding_one_program_matching_diffusers_on_cpu(eager_mode, dtype, case):
    timesteps = torch.tensor([0.0, 1.5, 250.0, 999.0]).to(dtype)  # FLUX passes timestep * 1000 in bf16
    ref = TIMESTEP_ORIGINAL(timesteps, *case)
    tt = timesteps.to("tpu")
    with torch.no_grad():
        got, programs = programs_run(lambda: embeddings.get_timestep_embedding(tt, *case))
    assert got.dtype == ref.dtype == torch.float32 and got.shape == ref.shape
    # float32 sin/cos of angles up to ~1000: one ulp of the angle is 6e-5
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-5)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (diffusers' own: 11)


@pytest.mark.parametrize("call", ["two_dims", "dim_one", "period_zero", "divisor_zero", "flip_as_int", "keywords"])
def test_timestep_calls_it_does_not_serve_are_diffusers_own(call):
    timesteps = torch.tensor([1.0, 20.0])
    args, kwargs = (timesteps, 16), {}
    if call == "two_dims":
        args = (timesteps[None], 16)
    elif call == "dim_one":
        args = (timesteps, 1)
    elif call == "period_zero":
        kwargs = {"max_period": 0}
    elif call == "divisor_zero":
        kwargs = {"downscale_freq_shift": 8}
    elif call == "flip_as_int":
        kwargs = {"flip_sin_to_cos": 1}
    else:
        kwargs = {"flip_sin_to_cos": True, "scale": 3, "max_period": 50}
    _same_as_diffusers(embeddings.get_timestep_embedding, TIMESTEP_ORIGINAL, args, kwargs)


@pytest.mark.parametrize("pos_dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("freqs_dtype", [torch.float32, torch.float64])
def test_position_table_one_program_matching_diffusers_on_cpu(eager_mode, freqs_dtype, pos_dtype):
    pos = (torch.arange(0, 40) * 3 // 2).to(pos_dtype)
    kwargs = dict(theta=10000, use_real=True, repeat_interleave_real=True, freqs_dtype=freqs_dtype)
    ref = TABLE_ORIGINAL(16, pos, **kwargs)
    pt = pos.to("tpu")
    with torch.no_grad():
        got, programs = programs_run(lambda: embeddings.get_1d_rotary_pos_embed(16, pt, **kwargs))
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype == torch.float32 and g.shape == r.shape == (40, 16)
        torch.testing.assert_close(g.cpu(), r)  # float32 (the angles grow with the position)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (diffusers' own: 13)


def test_flux_position_embedding_positional_arguments_and_factors():
    """FluxPosEmbed's call (positional dim and pos, keywords), and theta/factor values that round."""
    ids = torch.stack([torch.zeros(12), torch.arange(12.0) % 4, torch.arange(12.0) // 4], dim=1)
    embed = transformer_flux.FluxPosEmbed(theta=10000, axes_dim=[4, 6, 6])
    ref = embed(ids)
    got = embed(ids.to("tpu"))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r)  # float32 (the angles grow with the position)
    args = (8, torch.arange(5.0), 333.3, True, 0.7, 1.3)
    for g, r in zip(embeddings.get_1d_rotary_pos_embed(args[0], args[1].to("tpu"), *args[2:]),
                    TABLE_ORIGINAL(*args)):
        torch.testing.assert_close(g.cpu(), r)  # float32 (the angles grow with the position)


@pytest.mark.parametrize("call", ["complex", "concatenated", "odd_dim", "pos_2d", "dim_twice", "int_pos"])
def test_position_table_calls_it_does_not_serve_are_diffusers_own(call):
    pos = torch.arange(6.0)
    args, kwargs = (8, pos), {"use_real": True}
    if call == "complex":
        kwargs = {}
    elif call == "concatenated":
        kwargs["repeat_interleave_real"] = False
    elif call == "odd_dim":
        args = (7, pos)
    elif call == "pos_2d":
        args = (8, pos[None])
    elif call == "dim_twice":
        kwargs["dim"] = 8
    else:
        args = (8, 6)
    _same_as_diffusers(embeddings.get_1d_rotary_pos_embed, TABLE_ORIGINAL, args, kwargs)


# (input, table) dtype pairs: FLUX's (bf16 and float32 inputs, float32 tables), half inputs, tables in float64
# (the products and sum then in float64) and in bf16 (promoted to float32)
DTYPE_PAIRS = [(torch.bfloat16, torch.float32), (torch.float32, torch.float32), (torch.float16, torch.float32),
               (torch.float64, torch.float32), (torch.bfloat16, torch.float64), (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("sequence_dim", [1, 2])
@pytest.mark.parametrize("dtype, table_dtype", DTYPE_PAIRS)
def test_one_program_matching_diffusers_on_cpu(eager_mode, dtype, table_dtype, sequence_dim):
    x, cos, sin = _case(dtype, table_dtype, sequence_dim)
    ref = ORIGINAL(x, (cos, sin), sequence_dim=sequence_dim)
    xt, ct, st = x.to("tpu"), cos.to("tpu"), sin.to("tpu")
    with torch.no_grad():
        got, programs = programs_run(lambda: embeddings.apply_rotary_emb(xt, (ct, st), sequence_dim=sequence_dim))
    assert got.dtype == ref.dtype == dtype and got.shape == ref.shape
    tol = max(TOL[dtype], TOL[torch.promote_types(torch.float32, table_dtype)])  # computed in that type
    torch.testing.assert_close(got.cpu(), ref, atol=tol, rtol=tol)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (diffusers' own: 8)


def test_strided_input_tables_on_cpu_and_inference_mode(eager_mode):
    """x a transposed view (FLUX passes (B, S, H, D) made by unflatten), the tables still on the CPU (diffusers
    moves them itself), inference_mode; then the output written in place while the input is reused."""
    x, cos, sin = _case(torch.float32, torch.float32, 2)
    base = x.transpose(1, 2).contiguous()  # (2, 6, 3, 8): x is its transposed view
    ref = ORIGINAL(base.transpose(1, 2), (cos, sin), sequence_dim=2)
    with torch.inference_mode():
        bt = base.to("tpu")
        got = embeddings.apply_rotary_emb(bt.transpose(1, 2), (cos, sin), sequence_dim=2)
        got.mul_(2)
        again = embeddings.apply_rotary_emb(bt.transpose(1, 2), (cos.to("tpu"), sin.to("tpu")), sequence_dim=2)
    torch.testing.assert_close(got.cpu(), ref * 2, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(again.cpu(), ref, atol=1e-6, rtol=1e-6)


def test_with_autograd_diffusers_own_ops_and_gradients_match_cpu(eager_mode):
    x, cos, sin = _case(torch.float32, torch.float32, 1)
    x.requires_grad_()
    ref = ORIGINAL(x, (cos, sin), sequence_dim=1)
    (ref * torch.arange(8.0)).sum().backward()
    xt = x.detach().to("tpu").requires_grad_()
    got, programs = programs_run(lambda: embeddings.apply_rotary_emb(xt, (cos.to("tpu"), sin.to("tpu")),
                                                                     sequence_dim=1))
    (got * torch.arange(8.0).to("tpu")).sum().backward()
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=1e-6, rtol=1e-6)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs > 1  # diffusers' pieces, recorded by autograd


@pytest.mark.parametrize("call", ["use_real_false", "unbind_minus_2", "sequence_dim_0", "table_broadcasts",
                                  "odd_channels", "three_dims"])
def test_calls_it_does_not_serve_are_diffusers_own(call):
    x, cos, sin = _case(torch.float32, torch.float32, 2)
    kwargs = {"sequence_dim": 2}
    if call == "use_real_false":
        freqs = torch.polar(torch.ones(6, 4), torch.rand(6, 4))
        args = (x, freqs)
        kwargs = {"use_real": False}
    elif call == "unbind_minus_2":
        args, kwargs = (x, (cos, sin)), {"use_real_unbind_dim": -2, "sequence_dim": 2}
    elif call == "sequence_dim_0":
        args, kwargs = (x, (cos, sin)), {"sequence_dim": 0}
    elif call == "table_broadcasts":
        args = (x, (cos[:1], sin[:1]))
    elif call == "odd_channels":
        args = (x[..., :7], (cos[:, :7], sin[:, :7]))
    else:
        args = (x[0], (cos, sin))
    _same_as_diffusers(embeddings.apply_rotary_emb, ORIGINAL, args, kwargs)


def _same_as_diffusers(wrapper, original, args, kwargs):
    """The wrapper on tpu arguments gives what diffusers' function gives on CPU: its values, or its error."""
    try:
        ref = original(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the same error must come from the tpu call
        with pytest.raises(type(exc)):
            wrapper(*[_to_tpu(a) for a in args], **kwargs)
        return
    with torch.no_grad():
        got = wrapper(*[_to_tpu(a) for a in args], **kwargs)
    for g, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(g.cpu(), r, atol=1e-5, rtol=1e-5, equal_nan=True)


def _to_tpu(a):
    if isinstance(a, tuple):
        return tuple(t.to("tpu") for t in a)
    return a.to("tpu") if isinstance(a, torch.Tensor) else a


def test_cpu_tensors_are_untouched():
    x, cos, sin = _case(torch.bfloat16, torch.float32, 1)
    assert torch.equal(embeddings.apply_rotary_emb(x, (cos, sin), sequence_dim=1),
                       ORIGINAL(x, (cos, sin), sequence_dim=1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_op_forward_and_backward_on_tpu_and_cpu(dtype):
    """The op called directly: its CPU kernel is diffusers' formula; its backward (cos and sin included) matches
    autograd through that formula."""
    x, cos, sin = _case(dtype, torch.float32, 1, seed=3)
    cos4, sin4 = cos[None, :, None, :], sin[None, :, None, :]
    leaves = [t.clone().requires_grad_() for t in (x, cos4, sin4)]
    ref = ORIGINAL(leaves[0], (leaves[1][0, :, 0], leaves[2][0, :, 0]), sequence_dim=1)
    weight = torch.linspace(-1, 1, ref.numel()).reshape(ref.shape)
    (ref.float() * weight).sum().backward()
    for device in ("cpu", "tpu"):
        mine = [t.detach().to(device).requires_grad_() for t in (x, cos4, sin4)]
        out = torch.ops.tpu.rotary_embedding(*mine)
        (out.float() * weight.to(device)).sum().backward()
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=TOL[dtype], rtol=TOL[dtype])
        for got, want in zip(mine, leaves):
            torch.testing.assert_close(got.grad.cpu(), want.grad, atol=2e-2 if dtype is torch.bfloat16 else 1e-5,
                                       rtol=2e-2 if dtype is torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("bad, message", [
    ((torch.zeros(2, 3, 7), torch.zeros(1, 3, 7), torch.zeros(1, 3, 7)), "must be even"),
    ((torch.zeros(2, 3, 8), torch.zeros(3, 8), torch.zeros(3, 8)), "rank 3"),
    ((torch.zeros(2, 3, 8), torch.zeros(1, 4, 8), torch.zeros(1, 4, 8)), "do not broadcast"),
    ((torch.zeros(1, 3, 8), torch.zeros(2, 3, 8), torch.zeros(2, 3, 8)), "not widen"),
    ((torch.zeros(2, 3, 8, dtype=torch.int32), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8)), "x must be a floating"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_op_names_what_was_wrong(bad, message, device):
    with pytest.raises(RuntimeError, match=f"tpu::rotary_embedding: .*{message}"):
        torch.ops.tpu.rotary_embedding(*[t.to(device) for t in bad])


@pytest.mark.parametrize("args, message", [
    ((torch.zeros(2, 3), 8, True, 0.0, 1.0, 1e4), "1-d real tensor"),
    ((torch.zeros(3), 1, True, 0.0, 1.0, 1e4), "at least 2"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_timestep_op_names_what_was_wrong(args, message, device):
    with pytest.raises(RuntimeError, match=f"tpu::timestep_embedding: .*{message}"):
        torch.ops.tpu.timestep_embedding(args[0].to(device), *args[1:])


@pytest.mark.parametrize("args, message", [
    ((torch.zeros(2, 3), 8, 1e4, 1.0, torch.float32), "1-d real tensor"),
    ((torch.zeros(3), 7, 1e4, 1.0, torch.float32), "even and positive"),
    ((torch.zeros(3), 8, 1e4, 1.0, torch.float16), "float32 or float64"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_table_op_names_what_was_wrong(args, message, device):
    with pytest.raises(RuntimeError, match=f"tpu::rotary_table: .*{message}"):
        torch.ops.tpu.rotary_table(args[0].to(device), *args[1:])


def test_patched_when_diffusers_was_imported_before_torch_tpu():
    """TORCH_DEVICE_BACKEND_AUTOLOAD=0, diffusers' FLUX model imported first: ``import torch_tpu`` patches the
    loaded modules (the one that imported the name too), and a FLUX attention call on tpu uses the op."""
    out = run_isolated("""
        import diffusers.models.transformers.transformer_flux as tf
        from diffusers.models import embeddings
        assert not hasattr(tf.apply_rotary_emb, "__torch_tpu_original__")
        import torch
        import torch_tpu
        assert tf.apply_rotary_emb is embeddings.apply_rotary_emb
        original = tf.apply_rotary_emb.__torch_tpu_original__
        x, cos, sin = torch.randn(1, 4, 2, 8), torch.randn(4, 8), torch.randn(4, 8)
        xt, ct, st = x.to("tpu"), cos.to("tpu"), sin.to("tpu")
        torch_tpu.sync()
        before = torch_tpu.stats()["executions"]
        with torch.no_grad():
            got = tf.apply_rotary_emb(xt, (ct, st), sequence_dim=1)
        torch_tpu.sync()
        assert torch_tpu.stats()["executions"] - before == 1, torch_tpu.stats()["executions"] - before
        torch.testing.assert_close(got.cpu(), original(x, (cos, sin), sequence_dim=1))
        print("patched")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, prelude=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "patched" in out.stdout


def test_static_numbers_are_part_of_the_programs_key(eager_mode):
    """Calls that differ only in the numbers the lowerings take as constants (theta, the factors, the timestep
    shift, scale, period and order) in one process: each computes its own values, none reuses another's
    program."""
    pos, timesteps = torch.arange(12.0), torch.tensor([3.0, 400.0])
    pt, tt = pos.to("tpu"), timesteps.to("tpu")
    with torch.no_grad():
        for theta, linear, ntk in [(10000, 1.0, 1.0), (500.0, 1.0, 1.0), (10000, 2.0, 1.0), (10000, 1.0, 3.0)]:
            args = (8, pos, theta, True, linear, ntk)
            for g, r in zip(embeddings.get_1d_rotary_pos_embed(args[0], pt, *args[2:]), TABLE_ORIGINAL(*args)):
                torch.testing.assert_close(g.cpu(), r)
        for case in [(16, True, 0, 1, 10000), (16, True, 1, 1, 10000), (16, True, 0, 3.0, 10000),
                     (16, True, 0, 1, 50), (16, False, 0, 1, 10000)]:
            torch.testing.assert_close(embeddings.get_timestep_embedding(tt, *case).cpu(),
                                       TIMESTEP_ORIGINAL(timesteps, *case), atol=1e-4, rtol=1e-5)


def test_a_refused_call_in_the_middle_of_a_sequence(eager_mode):
    """Ops before, the one op, a call diffusers refuses (its error raised at the call), then the values from
    before used again: as on CPU."""
    x, cos, sin = _case(torch.float32, torch.float32, 1)

    def run(device, fn):
        xd, cd, sd = x.to(device), cos.to(device), sin.to(device)
        with torch.no_grad():
            y = fn(xd * 2 + 1, (cd, sd), sequence_dim=1)
            with pytest.raises(RuntimeError):
                fn(xd[..., :7], (cd, sd), sequence_dim=1)  # odd channels: reshape(..., -1, 2) fails
            y.add_(xd)
            return (y.sum(dim=2) * cd[:, :1]).cpu()

    torch.testing.assert_close(run("tpu", embeddings.apply_rotary_emb), run("cpu", ORIGINAL), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("freqs_dtype", [torch.float64, torch.float32])
def test_position_table_far_and_non_finite_positions_match_cpu(freqs_dtype):
    """Float64 frequencies reduce the float64 angle to [-pi, pi] and take float32 cos/sin of it: far positions
    (angles up to ~5e6 radians), negative and fractional ones, nan and infinities, every width FLUX uses."""
    positions = torch.cat([torch.arange(0, 4096.0), torch.linspace(-5e6, 5e6, 257), torch.arange(64.0) * 1.37,
                           torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])])
    for dim, theta, factor in [(128, 10000, 1.0), (56, 10000, 1.0), (16, 256, 2.0), (8, 333.3, 0.7)]:
        ref = TABLE_ORIGINAL(dim, positions, theta, True, factor, 1.0, True, freqs_dtype)
        with torch.no_grad():
            got = embeddings.get_1d_rotary_pos_embed(dim, positions.to("tpu"), theta, True, factor, 1.0, True,
                                                     freqs_dtype)
        for g, r in zip(got, ref):
            # float64 frequencies: a few float32 ulps of values <= 1; float32 ones round as torch's float32 ops
            # do, and far angles (5e6 rad) carry float32's own error of the angle (~0.25 rad): compared where
            # torch's float32 result is meaningful
            near = positions.abs() < 1e4
            if freqs_dtype == torch.float64:
                torch.testing.assert_close(g.cpu(), r, atol=5e-7, rtol=0, equal_nan=True)
            else:
                torch.testing.assert_close(g.cpu()[near], r[near], atol=2e-4, rtol=0, equal_nan=True)


def test_float64_table_program_has_no_float64_trigonometry():
    """XLA:TPU emulates float64: float64 cos/sin in the table's program took 7-11 s to compile on the chip.
    The program keeps float64 for the products and the reduction only."""
    import jax

    from torch_tpu.ops import position_embeddings
    from torch_tpu.runtime import platform

    jnp = platform.jax().numpy
    with platform.X64():
        text = jax.jit(lambda p: position_embeddings.rotary_table(p, 56, 10000.0, 1.0, torch.float64)).lower(
            jnp.arange(64, dtype=jnp.float32)).as_text()
    trig = [line for line in text.splitlines() if ("cosine" in line or "sine" in line)]
    assert trig and all("f64" not in line for line in trig), trig
    assert "f64" in text  # the angles are float64 products


def _flux(grad=False):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                   pooled_projection_dim=20, axes_dims_rope=(4, 6, 6), guidance_embeds=True)
    g = torch.Generator().manual_seed(1)
    seq, txt = 16, 5
    inputs = dict(hidden_states=torch.randn(1, seq, 16, generator=g),
                  encoder_hidden_states=torch.randn(1, txt, 24, generator=g),
                  pooled_projections=torch.randn(1, 20, generator=g), timestep=torch.tensor([0.5]),
                  img_ids=torch.stack([torch.zeros(seq), torch.arange(seq) // 4, torch.arange(seq) % 4], -1),
                  txt_ids=torch.zeros(txt, 3), guidance=torch.tensor([3.5]), return_dict=False)
    return model, inputs


def _compiled_with_graph_targets(model):
    """``torch.compile(model, backend="tpu")`` and the set of op names in the graphs dynamo gave it."""
    targets = set()
    tpu_backend = torch._dynamo.lookup_backend("tpu")

    def backend(gm, example_inputs, **kwargs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return tpu_backend(gm, example_inputs, **kwargs)

    return torch.compile(model, backend=backend, fullgraph=True, dynamic=False), targets


def test_compiled_mode_uses_the_one_ops_and_matches_cpu():
    """Under torch.compile(backend="tpu") diffusers' calls become the three ops, one node each in the graph
    dynamo traces (lowered by the same table as the eager modes), with no graph break."""
    import copy

    model, inputs = _flux()
    with torch.no_grad():
        ref = model(**inputs)[0]
        compiled, targets = _compiled_with_graph_targets(copy.deepcopy(model).to("tpu"))
        got = compiled(**{k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})[0]
    assert {"tpu.rotary_embedding.default", "tpu.rotary_table.default", "tpu.timestep_embedding.default"} <= targets
    torch.testing.assert_close(got.cpu(), ref, atol=2e-5, rtol=2e-5)


def test_compiled_training_keeps_diffusers_ops_and_gradients_match_cpu():
    """With gradients needed, the compiled graph traces diffusers' own ops (their derivatives are torch's)."""
    import copy

    model, inputs = _flux()
    inputs["hidden_states"].requires_grad_()
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled, targets = _compiled_with_graph_targets(tpu_model)
    tpu_inputs = {k: v.detach().to("tpu").requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
                  for k, v in inputs.items()}
    compiled(**tpu_inputs)[0].square().mean().backward()
    model(**inputs)[0].square().mean().backward()
    assert "tpu.rotary_embedding.default" not in targets
    torch.testing.assert_close(tpu_inputs["hidden_states"].grad.cpu(), inputs["hidden_states"].grad,
                               atol=1e-5, rtol=1e-4)
    for (name, p), (_, q) in zip(tpu_model.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("sequence_dim", [1, 2])
def test_strided_tables_on_the_device(eager_mode, sequence_dim):
    """Tables that are strided views on the device (every other column of a wider table, a transposed one):
    the one op reads them as diffusers' ops do."""
    x, cos, sin = _case(torch.float32, torch.float32, sequence_dim)
    wide_cos = torch.stack([cos, cos * 3], dim=-1).flatten(-2)  # cos in the even columns
    transposed_sin = sin.t().contiguous()
    ref = ORIGINAL(x, (cos, sin), sequence_dim=sequence_dim)
    with torch.no_grad():
        got = embeddings.apply_rotary_emb(x.to("tpu"), (wide_cos.to("tpu")[:, ::2], transposed_sin.to("tpu").t()),
                                          sequence_dim=sequence_dim)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-6, rtol=1e-6)
