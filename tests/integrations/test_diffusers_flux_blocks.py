"""diffusers' FLUX transformer blocks on tpu tensors are ONE op each (tpu::flux_block for FluxTransformerBlock,
tpu::flux_single_block for FluxSingleTransformerBlock; 25 and 9 programs before in strict mode, 52 and 21 without
the attention and norm ops): diffusers' own values on CPU in both eager modes and every float dtype; a single
block's two results are views of one tensor as in diffusers; every call the ops do not serve exactly (hooks,
other feed-forwards or processors, joint_attention_kwargs, gradients, other dtypes) is diffusers' own forward,
errors included; a tiny FLUX transformer gives diffusers' values with a program per block."""
import pytest
import torch

import torch_tpu
from tests.harness.differential import module_calls_seen, programs_run

from diffusers.models.attention import FeedForward  # noqa: E402
from diffusers.models.transformers import transformer_flux  # noqa: E402  (after torch_tpu: the hook patches it)

from torch_tpu.integrations import diffusers_flux, diffusers_hook

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

TOL = {torch.float32: dict(atol=1e-4, rtol=2e-5), torch.float16: dict(atol=6e-2, rtol=4e-3),
       torch.bfloat16: dict(atol=0.5, rtol=2e-2)}  # outputs up to ~50: a few of their last bits

DIM, HEADS, HEAD_DIM, LENGTH, CONTEXT = 64, 4, 16, 10, 5
KINDS = ("double", "single")


def _block(kind, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cls = transformer_flux.FluxTransformerBlock if kind == "double" else transformer_flux.FluxSingleTransformerBlock
    block = cls(DIM, HEADS, HEAD_DIM)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    return block.to(dtype).eval()


def _inputs(dtype, batch=2, rotary=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, LENGTH, DIM, generator=g).to(dtype)
    c = torch.randn(batch, CONTEXT, DIM, generator=g).to(dtype)
    temb = torch.randn(batch, DIM, generator=g).to(dtype)
    tables = None
    if rotary:
        angles = torch.randn(LENGTH + CONTEXT, HEAD_DIM // 2, generator=g) * 3
        tables = (angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1))
    return x, c, temb, tables


def _to(t, device):
    if isinstance(t, (tuple, list)):
        return type(t)(_to(u, device) for u in t)
    return t.to(device) if isinstance(t, torch.Tensor) else t


def _call(block, inputs, device, **kwargs):
    x, c, temb, tables = _to(inputs, device)
    return block.to(device)(x, c, temb, tables, **kwargs)


def _compare(got, want, dtype):
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride() and g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), w, **TOL[dtype])


def test_diffusers_blocks_hold_the_serving_forwards():
    assert diffusers_flux.installed(), diffusers_hook.failure(diffusers_flux.TARGET)
    for cls in (transformer_flux.FluxTransformerBlock, transformer_flux.FluxSingleTransformerBlock):
        assert cls.forward.__name__ == "forward" and hasattr(cls.forward, "__torch_tpu_original__")


@pytest.mark.parametrize("rotary", [True, False], ids=["rotary", "no_rotary"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", KINDS)
def test_one_program_matching_diffusers_on_cpu(eager_mode, kind, dtype, rotary):
    block = _block(kind, dtype)
    inputs = _inputs(dtype, rotary=rotary)
    with torch.no_grad():
        want = _call(block, inputs, "cpu")
        got, programs = programs_run(lambda: _call(block, inputs, "tpu"))
    _compare(got, want, dtype)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1


def test_a_single_blocks_results_are_views_of_one_tensor(eager_mode):
    """As diffusers returns them: the context's and x's tokens of one tensor; writing into one reaches that
    tensor and leaves the other alone, on either device."""
    block = _block("single")
    inputs = _inputs(torch.float32)
    seen = {}
    for device in ("cpu", "tpu"):
        with torch.no_grad():
            text, image = _call(block, inputs, device)
            assert text._base is not None and text._base is image._base
            assert text._base.shape == (2, CONTEXT + LENGTH, DIM)
            text.mul_(0)
            seen[device] = (text._base.cpu(), image.cpu())
    assert float(seen["tpu"][0][:, :CONTEXT].abs().sum()) == 0.0
    for g, w in zip(seen["tpu"], seen["cpu"]):
        torch.testing.assert_close(g, w, **TOL[torch.float32])


def test_fused_mode_records_one_op():
    from torch_tpu.engine import fused as fused_engine

    block = _block("double").to("tpu")
    x, c, temb, tables = _to(_inputs(torch.float32), "tpu")
    with torch.no_grad(), torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        out = block(x, c, temb, tables)
        torch_tpu.sync()
        assert fused_engine.last_flush()[0] == 1
    assert len(out) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_with_autograd_diffusers_own_ops_and_gradients_match_cpu(eager_mode, kind):
    block = _block(kind)
    x, c, temb, tables = _inputs(torch.float32)
    grads = {}
    for device in ("cpu", "tpu"):
        b = block.to(device)
        xd = x.detach().clone().to(device).requires_grad_()
        out, programs = programs_run(lambda: b(xd, c.to(device), temb.to(device), _to(tables, device)))
        sum(o.square().mean() for o in out).backward()
        grads[device] = (xd.grad.cpu(), b.attn.to_k.weight.grad.cpu(), b.norm.linear.weight.grad.cpu()
                         if kind == "single" else b.ff.net[2].weight.grad.cpu())
        b.zero_grad()
        if device == "tpu" and eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
            assert programs > 1
    for g, w in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


class _OtherProcessor(transformer_flux.FluxAttnProcessor):
    """A user's processor (a subclass): the block must call it."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        out = super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        return tuple(o * 0.5 for o in out) if isinstance(out, tuple) else out * 0.5


def _not_served(case):
    kind = "single" if case.startswith("single_") else "double"
    block = _block(kind)
    inputs = list(_inputs(torch.float32))
    kwargs = {}
    if case in ("hook_on_ff_linear", "single_hook_on_proj_mlp"):
        target = block.ff.net[2] if kind == "double" else block.proj_mlp
        target.register_forward_hook(lambda mod, args, out: out * 2)
    elif case == "instance_forward_on_norm2":
        plain = block.norm2.forward
        block.norm2.forward = lambda t: plain(t) * 0.5
    elif case == "erf_feed_forward":
        torch.manual_seed(2)
        block.ff = FeedForward(dim=DIM, dim_out=DIM, activation_fn="gelu")
    elif case == "geglu_feed_forward":
        torch.manual_seed(2)
        block.ff_context = FeedForward(dim=DIM, dim_out=DIM, activation_fn="geglu")
    elif case == "affine_norm2":
        torch.manual_seed(2)
        block.norm2 = torch.nn.LayerNorm(DIM, eps=1e-6)
    elif case in ("other_processor", "single_other_processor"):
        block.attn.set_processor(_OtherProcessor())
    elif case == "joint_attention_kwargs":  # diffusers warns that the processor ignores it
        kwargs["joint_attention_kwargs"] = {"unused": 1}
    elif case == "single_erf_gelu":
        block.act_mlp = torch.nn.GELU()
    elif case == "temb_float64":  # diffusers' linear refuses float64 with float32 weights
        inputs[2] = inputs[2].double()
    elif case == "single_context_wider":  # cat refuses other widths
        inputs[1] = torch.randn(2, CONTEXT, DIM + 4)
    elif case == "tables_wrong_length":
        inputs[3] = tuple(t[:-1] for t in inputs[3])
    elif case in ("empty_context", "single_empty_context"):  # no text tokens: diffusers' ops on empty tensors
        inputs[1], inputs[3] = inputs[1][:, :0], tuple(t[CONTEXT:] for t in inputs[3])
    elif case == "batch_zero":
        inputs[:3] = [t[:0] for t in inputs[:3]]
    elif case in ("temb_batch_one", "single_temb_batch_one"):  # one conditioning row broadcast over the batch
        inputs[2] = inputs[2][:1]
    return block, inputs, kwargs


NOT_SERVED = ["hook_on_ff_linear", "single_hook_on_proj_mlp", "instance_forward_on_norm2", "erf_feed_forward",
              "geglu_feed_forward", "affine_norm2", "other_processor", "single_other_processor",
              "joint_attention_kwargs", "single_erf_gelu", "temb_float64", "single_context_wider",
              "tables_wrong_length", "empty_context", "single_empty_context", "batch_zero", "temb_batch_one",
              "single_temb_batch_one"]


@pytest.mark.parametrize("case", NOT_SERVED)
def test_calls_it_does_not_serve_are_diffusers_own(case):
    block, inputs, kwargs = _not_served(case)
    try:
        with torch.no_grad():
            want = _call(block, inputs, "cpu", **kwargs)
    except Exception as exc:  # noqa: BLE001 - the tpu call must raise the same
        with pytest.raises(type(exc)):
            with torch.no_grad():
                _call(block, inputs, "tpu", **kwargs)
        return
    with torch.no_grad():
        got, programs = programs_run(lambda: _call(block, inputs, "tpu", **kwargs))
    assert programs > 1
    _compare(got, want, torch.float32)


def test_a_global_module_hook_sees_every_submodule_call(eager_mode):
    block = _block("double")
    inputs = _inputs(torch.float32)
    seen = {device: module_calls_seen(lambda: _call(block, inputs, device)) for device in ("cpu", "tpu")}
    assert seen["tpu"] == seen["cpu"] and "FeedForward" in seen["tpu"] and "FluxAttention" in seen["tpu"]


@pytest.mark.parametrize("bad, message", [
    (dict(temb=torch.zeros(3, DIM)), "of one batch"),
    (dict(context=torch.zeros(2, CONTEXT, DIM + 2)), "context's features 66 must be x's 64"),
    (dict(layer_norm_eps=[1e-6] * 3), "takes 4 layer norm eps"),
    (dict(drop=11), "ff.out's weight must be \\(64, 256\\)"),
    (dict(temb=torch.zeros(2, DIM, dtype=torch.float64)), "temb of torch.float64"),
    (dict(weights_len=13), "takes 14 weights and biases"),
    (dict(context=torch.zeros(2, 0, DIM)), "need a batch row, a token and a feature"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_op_names_what_was_wrong(bad, message, device):
    w = [torch.zeros(6 * DIM, DIM), torch.zeros(6 * DIM, DIM)] + [torch.zeros(DIM, DIM)] * 8
    w += [torch.zeros(4 * DIM, DIM), torch.zeros(DIM, 4 * DIM)] * 2
    args = dict(x=torch.zeros(2, LENGTH, DIM), context=torch.zeros(2, CONTEXT, DIM), temb=torch.zeros(2, DIM),
                weights=w, biases=[None] * 14, norm_weights=[torch.ones(HEAD_DIM)] * 4, eps=[1e-6] * 4,
                layer_norm_eps=[1e-6] * 4, cos=None, sin=None, head_dim=HEAD_DIM)
    if "drop" in bad:
        args["weights"] = w[:11] + [torch.zeros(DIM, 4 * DIM + 1)] + w[12:]
    elif "weights_len" in bad:
        args["weights"], args["biases"] = w[:13], [None] * 13
    else:
        args.update(bad)
    with pytest.raises(RuntimeError, match=f"tpu::flux_block: .*{message}"):
        torch.ops.tpu.flux_block(*_to(list(args.values()), device))


def test_a_refused_call_in_the_middle_of_a_sequence(eager_mode):
    """The one op, a call diffusers refuses (its error raised at the call), then the results used and changed in
    place: as on CPU."""
    block = _block("double")
    x, c, temb, tables = _inputs(torch.float32)

    def run(device):
        b = block.to(device)
        xd, cd, td, tabs = _to((x, c, temb, tables), device)
        with torch.no_grad():
            out = b(xd * 2 - 1, cd, td, tabs)
            with pytest.raises(RuntimeError):
                b(xd, cd, td[:, :-1], tabs)  # temb narrower than the norms' linears: diffusers' linear raises
            out[0].add_(cd)
            out[1].mul_(0.5)
            return [(o * 3).cpu() for o in out]

    for g, w in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(g, w, **TOL[torch.float32])


@pytest.mark.parametrize("kind", KINDS)
def test_strided_inputs_and_inference_mode(eager_mode, kind):
    """Every other token of a longer x, a feature slice of a wider context and temb (views with strides and
    offsets), under inference_mode: one program, diffusers' values."""
    block = _block(kind)
    g = torch.Generator().manual_seed(3)
    big_x, big_c = torch.randn(2, 2 * LENGTH, DIM, generator=g), torch.randn(2, CONTEXT, DIM + 16, generator=g)
    big_t = torch.randn(2, DIM + 8, generator=g)
    angles = torch.randn(LENGTH + CONTEXT, HEAD_DIM // 2, generator=g)
    tables = (angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1))

    def run(device):
        bx, bc, bt = (t.to(device) for t in (big_x, big_c, big_t))
        return block.to(device)(bx[:, ::2], bc[..., 16:], bt[:, 8:], _to(tables, device))

    with torch.inference_mode():
        want = run("cpu")
        got, programs = programs_run(lambda: run("tpu"))
    _compare(got, want, torch.float32)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1


def _transformer():
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                   pooled_projection_dim=12, axes_dims_rope=[4, 6, 6]).eval()
    g = torch.Generator().manual_seed(1)
    grid = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.), torch.arange(4.), indexing="ij"), -1)
    inputs = dict(hidden_states=torch.randn(1, 16, 8, generator=g),
                  encoder_hidden_states=torch.randn(1, 5, 24, generator=g),
                  pooled_projections=torch.randn(1, 12, generator=g), timestep=torch.tensor([0.5]),
                  img_ids=grid.reshape(16, 3), txt_ids=torch.zeros(5, 3))
    return model, inputs


def _programs_per_block(model, inputs):
    """The programs each block call runs in a steady call of the model (hooks on the blocks themselves, which
    the ops do not skip, sync before and after each)."""
    counts, handles = [], []

    def before(module, args):
        torch_tpu.sync()
        module._programs_before = torch_tpu.stats()["executions"]

    def after(module, args, out):
        torch_tpu.sync()
        counts.append(torch_tpu.stats()["executions"] - module._programs_before)

    for block in (*model.transformer_blocks, *model.single_transformer_blocks):
        handles += [block.register_forward_pre_hook(before), block.register_forward_hook(after)]
    on_tpu = {k: v.to("tpu") for k, v in inputs.items()}
    try:
        with torch.no_grad():
            model(**on_tpu, return_dict=False)  # (the first call builds every program)
            counts.clear()
            out = model(**on_tpu, return_dict=False)[0]
    finally:
        for handle in handles:
            handle.remove()
    return out, counts


def test_a_flux_transformer_gives_diffusers_values_with_a_program_per_block(eager_mode):
    """A tiny FLUX transformer (two double, two single blocks) on tpu: diffusers' values on CPU; in strict mode
    each block call is one program (diffusers' forwards: 25 and 9 with the attention and norms as one op each)."""
    model, inputs = _transformer()
    with torch.no_grad():
        want = model(**inputs, return_dict=False)[0]
    model.to("tpu")
    got, counts = _programs_per_block(model, inputs)
    torch.testing.assert_close(got.cpu(), want, atol=5e-5, rtol=5e-5)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert counts == [1, 1, 1, 1]
    classes = (transformer_flux.FluxTransformerBlock, transformer_flux.FluxSingleTransformerBlock)
    served = [cls.forward for cls in classes]
    try:
        for cls, method in zip(classes, served):
            cls.forward = method.__torch_tpu_original__
        got, counts = _programs_per_block(model, inputs)
    finally:
        for cls, method in zip(classes, served):
            cls.forward = method
    torch.testing.assert_close(got.cpu(), want, atol=5e-5, rtol=5e-5)  # (diffusers' forwards: the same values)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert all(c > 1 for c in counts), counts


@pytest.mark.parametrize("kind", KINDS)
def test_for_a_tpu_the_blocks_take_the_rotary_and_attention_kernels(kind):
    """Lowered for a TPU at a real head width (bf16, 2 heads of 128, 1024 image and 512 text tokens), each block's
    program holds the q/k norm-rotary kernels and the flash-attention kernel: every value between the block's
    parts keeps bf16 (a float32 one, as a composed lowering returns without an executor to round it, made the
    attention fall back to XLA and every later matmul a float32 one: 3.5x slower on the chip)."""
    import re

    from torch_tpu.ops import flux_blocks
    from torch_tpu.runtime import platform

    jax = platform.jax()
    bf16 = jax.numpy.bfloat16
    dim, head_dim, image, text = 256, 128, 1024, 512

    def spec(*shape, dtype=bf16):
        return jax.ShapeDtypeStruct(shape, dtype)

    if kind == "double":
        weights = [spec(6 * dim, dim)] * 2 + [spec(dim, dim)] * 8 + [spec(4 * dim, dim), spec(dim, 4 * dim)] * 2
        norms, eps, layer_norm_eps, fn = [spec(head_dim)] * 4, [1e-6] * 4, [1e-6] * 4, flux_blocks.flux_block
    else:
        weights = [spec(3 * dim, dim), spec(4 * dim, dim)] + [spec(dim, dim)] * 3 + [spec(dim, 5 * dim)]
        norms, eps, layer_norm_eps, fn = [spec(head_dim)] * 2, [1e-6] * 2, [1e-6], flux_blocks.flux_single_block
    biases = [spec(w.shape[0]) for w in weights]
    table = spec(image + text, head_dim, dtype=jax.numpy.float32)

    def block(x, context, temb, weights, biases, norms, cos, sin):
        return fn(x, context, temb, weights, biases, norms, eps, layer_norm_eps, cos, sin, head_dim)

    with platform.Targeting("tpu"), platform.X64():
        exported = jax.export.export(jax.jit(block), platforms=("tpu",))(
            spec(1, image, dim), spec(1, text, dim), spec(1, dim), weights, biases, norms, table, table)
    kernels = re.findall(r'kernel_name = "(\w+)"', exported.mlir_module())
    assert sorted(kernels) == ["flash_attention_sequence_major", "norm_rope_sequence_major",
                               "norm_rope_sequence_major"], kernels
    assert all(str(out.dtype) == "bfloat16" for out in exported.out_avals)


def test_parameters_changed_in_place_between_calls(eager_mode):
    """A weight multiplied and a norm weight shifted in place between two calls (an optimizer step, a LoRA merge):
    the second call reads them, as diffusers' forward does on CPU."""
    block = _block("double")
    inputs = _inputs(torch.float32)
    results = {}
    for device in ("cpu", "tpu"):
        b = block.to(device)
        with torch.no_grad():
            first = _call(b, inputs, device)
            b.ff.net[2].weight.mul_(2)
            b.attn.norm_k.weight.add_(0.5)
            second = _call(b, inputs, device)
            b.ff.net[2].weight.div_(2)
            b.attn.norm_k.weight.sub_(0.5)
        results[device] = [o.cpu() for o in (*first, *second)]
    for g, w in zip(results["tpu"], results["cpu"]):
        torch.testing.assert_close(g, w, **TOL[torch.float32])
    assert not torch.allclose(results["cpu"][1], results["cpu"][3])  # (the change reaches x's stream)


def test_layer_norm_eps_is_part_of_the_programs_key(eager_mode):
    """Blocks that differ only in their layer norms' eps, at the same shapes, one after another in one process:
    each computes its own values, none reuses another's program."""
    inputs = _inputs(torch.float32, rotary=False)
    for eps in (1e-6, 0.5, 1e-6):
        block = _block("double")
        for norm in (block.norm2, block.norm2_context, block.norm1.norm, block.norm1_context.norm):
            norm.eps = eps
        with torch.no_grad():
            want = _call(block, inputs, "cpu")
            got = _call(block, inputs, "tpu")
        _compare(got, want, torch.float32)
