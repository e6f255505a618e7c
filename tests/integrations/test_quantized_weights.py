"""Quantized weights on the tpu device in every mode (strict, fused, compiled), each against the same quantized
model on CPU torch: diffusers' GGUF Q8_0 (``GGUFParameter`` / ``GGUFLinear``, as ``GGUFQuantizationConfig``
loads them), torchao's int8 weight-only, optimum-quanto's qint8 and ``apply_layerwise_casting`` to float8.

Found here and fixed: a GGUF model could not move to the tpu (``GGUFParameter`` is made by
``torch.Tensor._make_subclass``, which cannot wrap a tpu tensor: ``integrations/gguf_weights.py``);
torch.compile of a torchao or quanto model fed the quantized tensor itself to the program ("Cannot copy out of
tpu tensor; no data!": the backend faked a quantized weight as a dense tensor, so the trace was a plain linear;
``compile/__init__._holds_tpu_tensors``); torch.compile of a model with layerwise casting inlined the tpu
tensor's ``.data`` setter with fake tensors (the weight's payload kept float8 while its metadata said
bfloat16: "Argument types differ"); module replay refused every block holding a quantized weight (a tensor
subclass wrapping tpu tensors), so strict eager ran the dequantization as an op of its own per weight. The
dequantization runs on the device, in the matmul's program: in compiled mode, in fused graphs, and in both eager
modes in each block's replayed program (the strict op path, which casts one weight at a time to the compute
dtype as an op of its own, runs only where a block runs its Python: grad mode, a refused block).

The libraries are optional (``pip install gguf torchao optimum-quanto``): a test whose library is missing is
skipped by ``pytest.importorskip``.
"""
import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import torch_tpu
from torch_tpu.testing import tiny_pipelines as tp

MODES = ["strict", "fused", "compiled"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("quantized-pipelines")


def _transformer(root, dtype):
    torch.manual_seed(0)
    t = tp.load_pipeline("flux", "tiny", dtype=dtype, root=root).transformer.eval()
    return t


def _inputs(t, dtype, device="cpu"):
    g = torch.Generator().manual_seed(1)
    c = t.config
    tokens, text = 16, 8
    x = dict(hidden_states=torch.randn(1, tokens, c.in_channels, generator=g),
             encoder_hidden_states=torch.randn(1, text, c.joint_attention_dim, generator=g),
             pooled_projections=torch.randn(1, c.pooled_projection_dim, generator=g),
             timestep=torch.tensor([0.5]), guidance=torch.tensor([3.5]),
             img_ids=torch.zeros(tokens, 3), txt_ids=torch.zeros(text, 3))
    return {k: v.to(device, dtype if k in ("hidden_states", "encoder_hidden_states", "pooled_projections") else v.dtype)
            for k, v in x.items()}


def _gguf(t):
    gguf = pytest.importorskip("gguf")
    from diffusers.quantizers.gguf.utils import GGUFParameter, _replace_with_gguf_linear

    sd, original = {}, dict(t.state_dict())
    for k, v in original.items():
        if v.dim() == 2 and v.shape[1] % 32 == 0 and k.endswith(".weight") and "norm" not in k:
            q = gguf.quants.quantize(v.float().numpy(), gguf.GGMLQuantizationType.Q8_0)
            sd[k] = GGUFParameter(torch.from_numpy(q), quant_type=gguf.GGMLQuantizationType.Q8_0)
    _replace_with_gguf_linear(t, torch.float32, sd)  # as GGUFQuantizationConfig loads a model
    for k in t.state_dict():  # the new GGUFLinear modules' parameters are empty (meta) until set
        module_name, name = k.rsplit(".", 1)
        module = t.get_submodule(module_name)
        value = sd.get(k, original[k])
        module._parameters[name] = value if isinstance(value, torch.nn.Parameter) else \
            torch.nn.Parameter(value, requires_grad=False)
    assert any(isinstance(p, GGUFParameter) for p in t.parameters())
    return t


def _torchao(t):
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    quantize_(t, Int8WeightOnlyConfig())
    return t


def _quanto(t):
    pytest.importorskip("optimum.quanto")
    from optimum.quanto import freeze, qint8, quantize

    quantize(t, weights=qint8)
    freeze(t)
    return t


def _float8(t):
    t.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    return t


SCHEMES = {"gguf_q8_0": (_gguf, torch.float32), "torchao_int8": (_torchao, torch.bfloat16),
           "quanto_int8": (_quanto, torch.bfloat16), "layerwise_float8": (_float8, torch.bfloat16)}


def _run(t, inputs, mode):
    if mode == "compiled":
        t = torch.compile(t, backend="tpu", dynamic=False)
    with torch.no_grad():
        t(**inputs, return_dict=False)[0]
        return t(**inputs, return_dict=False)[0].float().cpu()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_quantized_transformer_matches_cpu(root, scheme, mode):
    quantize, dtype = SCHEMES[scheme]
    ref_model = quantize(_transformer(root, dtype))
    with torch.no_grad():
        ref = ref_model(**_inputs(ref_model, dtype), return_dict=False)[0].float()
    model = quantize(_transformer(root, dtype)).to("tpu")
    if mode == "fused":
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            out = _run(model, _inputs(model, dtype, "tpu"), mode)
    else:
        out = _run(model, _inputs(model, dtype, "tpu"), mode)
    # float32 (GGUF dequantizes to float32 here): to float32's tolerance; bfloat16 compute: a few bf16 steps of
    # the output's scale (another matmul order rounds otherwise)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    scale = float(ref.abs().max())
    assert float((out - ref).abs().max()) <= tol * max(scale, 1.0), (scheme, mode, float((out - ref).abs().max()))
    # and back to the host as it came, without reading a weight back (layerwise casting computes its float8
    # weights again on the device after each forward: those are read)
    torch_tpu.reset_stats()
    model.to("cpu")
    if scheme != "layerwise_float8":
        assert torch_tpu.stats()["device_to_host_bytes"] == 0
    with torch.no_grad():
        back = model(**_inputs(model, dtype), return_dict=False)[0].float()
    torch.testing.assert_close(back, ref, rtol=0, atol=0)


def test_gguf_weights_keep_their_kind_on_the_device(root):
    pytest.importorskip("gguf")
    from diffusers.quantizers.gguf.utils import GGUFParameter

    model = _gguf(_transformer(root, torch.float32)).to("tpu")
    weights = [p for p in model.parameters() if isinstance(p, GGUFParameter)]
    assert weights and all(p.device.type == "tpu" and p.quant_type is not None and not p.requires_grad
                           for p in weights)
    w = weights[0]
    assert w.as_tensor().dtype == torch.uint8 and type(w.as_tensor()) is not type(w)
    assert isinstance(w.detach(), GGUFParameter)
    back = w.to("cpu")
    assert type(back) is GGUFParameter and back.quant_type == w.quant_type


def test_gguf_group_offload_with_streams_matches_cpu(root):
    pytest.importorskip("gguf")
    ref_model = _gguf(_transformer(root, torch.float32))
    with torch.no_grad():
        ref = ref_model(**_inputs(ref_model, torch.float32), return_dict=False)[0]
    model = _gguf(_transformer(root, torch.float32))
    model.enable_group_offload(onload_device=torch.device("tpu"), offload_type="block_level", num_blocks_per_group=1,
                               use_stream=True)
    with torch.no_grad():
        model(**_inputs(model, torch.float32, "tpu"), return_dict=False)
        torch_tpu.reset_stats()
        out = model(**_inputs(model, torch.float32, "tpu"), return_dict=False)[0].cpu()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert torch_tpu.stats()["device_to_host_bytes"] == out.nbytes


def _quantized_pair(root, scheme):
    """(the quantized model on CPU, the same on the tpu, a check that one call of each agrees to the scheme's
    tolerance)."""
    quantize, dtype = SCHEMES[scheme]
    ref_model = quantize(_transformer(root, dtype))
    model = quantize(_transformer(root, dtype)).to("tpu")
    tol = 1e-4 if dtype == torch.float32 else 3e-2

    def check():
        with torch.no_grad():
            want = ref_model(**_inputs(ref_model, dtype), return_dict=False)[0].float()
            got = model(**_inputs(model, dtype, "tpu"), return_dict=False)[0].float().cpu()
        assert float((got - want).abs().max()) <= tol * max(float(want.abs().max()), 1.0), scheme

    return ref_model, model, check


def _inner_weight_changed(weight, scheme):
    """Replace the first tensor a quantized weight wraps with a new one of other values (as a user who
    re-quantizes a layer in place does): torchao and quanto weights through ``__tensor_flatten__``, a GGUF
    weight (itself a tensor of bytes) written in place. Returns what was replaced (kept alive by the caller, so
    that only the weight's attributes tell the change)."""
    if scheme != "gguf_q8_0":
        name = weight.__tensor_flatten__()[0][0]
        inner = getattr(weight, name)
        setattr(weight, name, inner.flip(0).clone())
        return inner
    weight.data.copy_(weight.data.flip(0))
    return None


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("scheme", ["gguf_q8_0", "torchao_int8", "quanto_int8"])
def test_quantized_blocks_replay_and_see_a_changed_weight(root, scheme, mode, monkeypatch):
    """The eager modes replay a quantized model's blocks as one program each (the dequantization beside the
    matmul, no full-precision weight made by an op of its own), reading the quantized tensors the weights wrap,
    and a weight whose wrapped tensor is replaced records again. Replays checked here against CPU torch, not
    by the suite's replay verification."""
    from torch_tpu.eager import module_replay

    monkeypatch.delenv("TORCH_TPU_REPLAY_VERIFY", raising=False)  # (a verified replay records again: counted)
    ref_model, model, check = _quantized_pair(root, scheme)

    blocks = len(model.transformer_blocks) + len(model.single_transformer_blocks)
    with contextlib.ExitStack() as stack:
        if mode == "fused":
            stack.enter_context(torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE))
        check()
        torch_tpu.reset_stats()
        check()
        assert torch_tpu.stats()["module_replays"] >= blocks, torch_tpu.stats()
        assert not [line for line in module_replay.status(model) if "refused" in line], module_replay.status(model)
        replaced = [_inner_weight_changed(m.transformer_blocks[0].attn.to_q.weight, scheme) for m in (ref_model, model)]
        torch_tpu.reset_stats()
        check()
        check()
        assert replaced[1] is None or replaced[1].device.type == "tpu"  # (still held)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("scheme", ["gguf_q8_0", "torchao_int8", "quanto_int8"])
def test_a_quantized_model_moved_to_the_host_frees_the_device_and_replays_back(root, scheme, mode, monkeypatch):
    """Model offload's round trip with quantized weights: torch moves a weight that wraps tensors with
    ``swap_tensors`` (the same parameter object, another ``__dict__``). Once on the host, none of the device
    tensors it wrapped is alive (a recording that held the wrapped tensors' old dict kept every 8-bit weight on
    the device: FLUX.1 ran out of the chip's memory at the VAE); back on the tpu its blocks replay without
    recording again, and values changed on the host while it was there are the ones read."""
    import gc
    import weakref

    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    from torch_tpu.eager import module_replay

    monkeypatch.delenv("TORCH_TPU_REPLAY_VERIFY", raising=False)  # (a verified replay records again: counted)
    ref_model, model, check = _quantized_pair(root, scheme)

    def device_tensors():
        """Weak references to the tpu tensors the model's weights are or wrap."""
        found = []
        for p in model.parameters():
            inner = [getattr(p, n) for n in p.__tensor_flatten__()[0]] if is_traceable_wrapper_subclass(p) else [p]
            found += [weakref.ref(t) for t in inner if t.device.type == "tpu"]
        return found

    with contextlib.ExitStack() as stack:
        if mode == "fused":
            stack.enter_context(torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE))
        check()
        check()
        for round_trip in range(2):
            held = device_tensors()
            assert held
            model.to("cpu")
            gc.collect()
            assert not [r for r in held if r() is not None], f"{scheme}: device tensors kept after the move"
            if round_trip:  # a weight changed on the host, on both sides
                for m in (ref_model, model):
                    with torch.no_grad():
                        bias = m.transformer_blocks[0].attn.to_q.bias
                        bias.copy_(bias.flip(0))
            model.to("tpu")
            torch_tpu.reset_stats()
            check()
            recordings = torch_tpu.stats()["module_recordings"]
            assert recordings == 0, (scheme, round_trip, recordings, module_replay.status(model))


def test_a_gguf_weight_whose_kind_changes_is_not_replayed(root):
    """A GGUF weight's quantization kind is an attribute of the tensor itself: a recording over it holds only
    while the kind is the one recorded, moved or not (a replay would dequantize the bytes as the old kind)."""
    gguf = pytest.importorskip("gguf")
    from torch_tpu.eager.replay_guards import ModuleTree

    model = _gguf(_transformer(root, torch.float32)).to("tpu")
    block = model.transformer_blocks[0]
    tree = ModuleTree(block)
    assert tree.holds()
    model.to("cpu")
    model.to("tpu")
    assert tree.holds()  # moved, the same kind: followed
    weight = block.attn.to_q.weight
    weight.quant_type = gguf.GGMLQuantizationType.Q4_0
    assert not tree.holds() and "quantized" in tree.difference()
