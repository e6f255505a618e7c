"""The seed's FLUX.1 example at its real size on one chip, and SD3.5-Medium's pipeline, by each path that fits.

Random weights at the real architectures (FLUX.1-schnell's transformer: 19 double + 38 single blocks, 11.9 B
parameters; T5-XXL: 24 layers of d_model 4096; CLIP-L; FLUX's VAE. SD3.5-Medium: its 2.5 B MMDiT-X transformer,
CLIP-L, CLIP-G, T5-XXL). The two large models (FLUX's transformer, T5-XXL) are made on the meta device and
allocated on the host in bfloat16 (``to_empty``), then filled from one small random block: no float32 copy of
them ever exists (the TPU host has 40 GiB; FLUX.1 with T5 is 33.7 GB in bfloat16). Offline tokenizers
(``torch_tpu.testing``): the prompt's ids are not the real vocabulary's, which random weights do not care about.

Paths (``--paths``; each in a process of its own, one after the other: a TPU is held by one process at a time):
  flux_int8_model_offload  the transformer in 8-bit weights (torchao's Int8WeightOnlyConfig, else optimum-quanto
                           qint8), ``pipe.enable_model_cpu_offload()``: each model on the chip for its part
  flux_int8_resident       the 8-bit transformer resident on the chip; T5 group-offloaded (block level; streams
                           for a bfloat16 T5, none for an 8-bit one, see ``_group_offload``); CLIP and the VAE resident
  flux_bf16_group_offload  bfloat16; the transformer and T5 group-offloaded (block level, one block a group,
                           ``use_stream=True, record_stream=True``: the next block uploads while this one computes;
                           ``low_cpu_mem_usage=True``: diffusers' pinned copies of every weight would need 2x the
                           host memory, so each group is "pinned", a host copy for the tpu, as it goes up)
  flux_bf16_group_offload_nostream  the same without streams (uploads are asynchronous anyway: the host issues
                           the next group's while the device computes this one, unless something waits)
  flux_bf16_model_offload  the seed's line as written: bfloat16 and ``enable_model_cpu_offload()``; the 23.8 GB
                           transformer cannot fit a 15.7 GiB chip: the out-of-memory error is the result
  sd3_whole                SD3.5-Medium whole on the chip (``pipe.to("tpu")``), its transformer compiled
  sd3_model_offload        SD3.5-Medium with ``enable_model_cpu_offload()``, its transformer's blocks compiled
  blocks                   the 8-bit step against the bfloat16 step of the same FLUX blocks, both resident
                           (``--blocks D,S`` double and single blocks at FLUX.1's width): the 8-bit target's ratio
  transfers                host<->device rates of 512 MiB, bfloat16 and float32: torch_tpu's ``.to("tpu")`` and
                           ``.cpu()`` beside JAX's ``device_put`` and ``np.asarray``, and a read of bfloat16 as
                           uint32 pairs (the bits bitcast on the device)

Per pipeline path: the first call (compiles included), the second call's time per image and per step (a
``torch.tpu.synchronize()`` at each step's end), bytes moved each way during it (``host_to_device_bytes``,
``device_to_host_bytes``, ``host_copy_bytes_reused``), peak device memory, the upload bound (bytes uploaded at
6.4 GiB/s, the chip's measured rate), and the image (PNG beside the JSON). A path that fails records its error
(an out-of-memory error names what was asked and held).

    python bench/bench_real_size.py --out bench/results/tpu/real_size.json            # on the chip
    python bench/bench_real_size.py --tiny --out /tmp/real_size_tiny.json             # CPU smoke test: seconds
    python bench/bench_real_size.py --paths flux_bf16_group_offload --mode compiled   # one path, compiled blocks

``--mode`` strict|fused|compiled (compiled: FLUX's repeated blocks ``compile_repeated_blocks``, SD3's transformer
``compile``) applies to every path but ``sd3_*`` (always compiled, as the seed's second example).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import zlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
PATHS = ("flux_int8_model_offload", "flux_int8_resident", "flux_bf16_group_offload", "flux_bf16_group_offload_nostream",
         "flux_bf16_model_offload", "sd3_whole", "sd3_model_offload", "blocks", "transfers")
H2D_GIB_S = 6.4  # host->device on the v5e, measured (torch_tpu and JAX alike)
PROMPT = "a golden retriever surfing a wave at sunset, highly detailed"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(HERE / "results" / "tpu" / "real_size.json"))
    p.add_argument("--paths", default=",".join(PATHS), help="comma list of: " + ", ".join(PATHS))
    p.add_argument("--mode", default="fused", choices=("strict", "fused", "compiled"))
    p.add_argument("--tiny", action="store_true", help="tiny configs, 64x64, 2 steps: a CPU smoke test")
    p.add_argument("--res", type=int, default=None, help="image side (default 1024; --tiny: 64)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps (default 4; --tiny: 2)")
    p.add_argument("--blocks", default="4,8", help="double,single FLUX blocks of the 'blocks' path")
    p.add_argument("--t5-int8", action="store_true",
                   help="the FLUX paths make T5-XXL 8-bit (4.8 GB of host memory, not 9.5: the bfloat16 transformer "
                        "and T5 in bfloat16 are 33.3 GB of the TPU host's 40 GiB)")
    p.add_argument("--path-timeout", type=float, default=None,
                   help="seconds a path may take (its process is stopped, and the path records that); default none")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    return p


# ------------------------------------------------------------------------------------------------------------
# configurations


def _flux_configs(tiny: bool) -> dict:
    if tiny:
        return dict(
            transformer=dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
                             num_attention_heads=2, joint_attention_dim=64, pooled_projection_dim=32,
                             guidance_embeds=False, axes_dims_rope=(4, 4, 8)),
            t5=dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
            clip=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4),
            vae=dict(block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4))
    return dict(
        transformer=dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                         num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
                         guidance_embeds=False, axes_dims_rope=(16, 56, 56)),
        t5=dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64),
        clip=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12),
        vae=dict(block_out_channels=(128, 256, 512, 512), layers_per_block=2, latent_channels=16, norm_num_groups=32))


def _sd3_configs(tiny: bool) -> dict:
    if tiny:
        return dict(
            transformer=dict(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2,
                             attention_head_dim=16, num_attention_heads=2, joint_attention_dim=64,
                             caption_projection_dim=32, pooled_projection_dim=64, pos_embed_max_size=64,
                             dual_attention_layers=(0,), qk_norm="rms_norm"),
            t5=dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
            clip_l=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        projection_dim=32),
            clip_g=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        projection_dim=32),
            vae=dict(block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4))
    return dict(
        transformer=dict(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24,
                         attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
                         caption_projection_dim=1536, pooled_projection_dim=2048, pos_embed_max_size=384,
                         dual_attention_layers=tuple(range(13)), qk_norm="rms_norm"),
        t5=dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64),
        clip_l=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                    projection_dim=768),
        clip_g=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                    projection_dim=1280, hidden_act="gelu"),
        vae=dict(block_out_channels=(128, 256, 512, 512), layers_per_block=2, latent_channels=16, norm_num_groups=32))


# ------------------------------------------------------------------------------------------------------------
# random weights on the host, in bfloat16, without a float32 copy


def _fill(module, seed: int, recurse: bool = True) -> None:
    """Every parameter and buffer (``recurse=False``: the module's own) from one random block (normal * 0.02, made
    in float32 once: 16 Mi values), repeated; norm weights 1, biases 0. In place, in the module's dtype."""
    import torch

    tensors = list(module.named_parameters(recurse=recurse)) + list(module.named_buffers(recurse=recurse))
    floats = [(name, t) for name, t in tensors if t.is_floating_point()]
    if not floats:
        return
    g = torch.Generator().manual_seed(seed)
    block = (torch.randn(1 << 24, generator=g) * 0.02).to(floats[0][1].dtype)
    with torch.no_grad():
        for name, t in floats:
            flat = t.view(-1)
            if t.dim() == 1:
                flat.fill_(1.0 if "norm" in name else 0.0)
                continue
            offset = zlib.crc32(name.encode()) % block.numel()  # another start per tensor, the same every run
            for start in range(0, flat.numel(), block.numel()):
                n = min(block.numel(), flat.numel() - start)
                src = torch.roll(block, -offset)[:n] if start == 0 else block[:n]
                flat[start:start + n].copy_(src)


def _blocks(model) -> list:
    """(ModuleList, index) of every block of ``model``: each child of a ModuleList not inside another block, at any
    depth (FLUX's transformer blocks, T5's encoder layers)."""
    import torch

    found, inside = [], set()
    for m in model.modules():  # (parents before their children: a ModuleList inside a block is the block's)
        if isinstance(m, torch.nn.ModuleList) and id(m) not in inside:
            for i in range(len(m)):
                if next(m[i].parameters(), None) is not None:
                    found.append((m, i))
                    inside.update(id(x) for x in m[i].modules())
    return found


def _signature(block) -> tuple:
    return (type(block), tuple((n, tuple(t.shape), t.dtype) for n, t in block.state_dict(keep_vars=True).items()))


def _on_host(make, seed: int, dtype, big: bool, convert=None):
    """``make()`` (a model) in ``dtype`` on the host with random weights: a big one is made on the meta device and
    allocated in ``dtype`` (no float32 copy), a small one made as usual (its buffers computed) and cast.

    ``convert`` (8-bit weights) applies to a big model without churn: the first block of each kind is allocated,
    filled and converted, and the blocks like it are copies of it (the same random weights; a copy allocates only
    its final tensors), then the rest of the model is allocated and converted. On the TPU host, memory a process
    frees stays charged to its 40 GiB for a while: converting FLUX.1's transformer and T5-XXL block by block
    there ran it out. A small model is converted whole."""
    import copy

    import torch

    if not big:
        torch.manual_seed(seed)
        model = make().to(dtype).eval()
        if convert is not None:
            convert(model)
        return model
    with torch.device("meta"):
        model = make()
    model = model.to(dtype)
    slots: dict = {}  # id(parameter) -> its (module, name) slots: a tied weight stays tied
    for m in model.modules():
        for name, p in m._parameters.items():
            if p is not None:
                slots.setdefault(id(p), []).append((m, name))
    made: dict = {}
    inside: set = set()
    for holder, index in _blocks(model):
        block = holder[index]
        key = _signature(block)
        if key in made:
            holder[index] = copy.deepcopy(made[key])
        else:
            block.to_empty(device="cpu")
            _fill(block, seed)
            if convert is not None:
                convert(block)
            made[key] = block
        inside.update(id(m) for m in holder[index].modules())
    for m in model.modules():
        if id(m) not in inside:
            m.to_empty(device="cpu", recurse=False)
            _fill(m, seed, recurse=False)
    for (first, first_name), *others in (group for group in slots.values() if len(group) > 1):
        for m, name in others:
            setattr(m, name, getattr(first, first_name))
    if convert is not None:
        convert(model, skip=inside)
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.device.type == "meta"]
    if left:
        raise RuntimeError(f"{type(model).__name__}: {left[:4]} left unallocated")
    _phase(f"{type(model).__name__} allocated")
    return model.eval()


def _t5(cfg, seed, dtype, big, convert=None):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=32128, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      dropout_rate=0.0, feed_forward_proj="gated-gelu", is_encoder_decoder=False, pad_token_id=0,
                      eos_token_id=1, **cfg)
    return _on_host(lambda: T5EncoderModel(config), seed, dtype, big, convert)


def _clip(cfg, seed, dtype, tokenizer, projection: bool):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = dict(cfg)
    config = CLIPTextConfig(vocab_size=49408, max_position_embeddings=77, hidden_act=cfg.pop("hidden_act", "quick_gelu"),
                            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                            pad_token_id=tokenizer.pad_token_id, **cfg)
    cls = CLIPTextModelWithProjection if projection else CLIPTextModel
    return _on_host(lambda: cls(config), seed, dtype, big=False)


def _vae(cfg, seed, dtype, shift, scale):
    from diffusers import AutoencoderKL

    n = len(cfg["block_out_channels"])
    return _on_host(lambda: AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n, shift_factor=shift, scaling_factor=scale, use_quant_conv=False,
        use_post_quant_conv=False, **cfg), seed, dtype, big=False)


def flux_pipeline(tiny: bool, dtype, int8: bool = False, t5_int8: bool = False):
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    from torch_tpu.testing.tiny_pipelines.tokenizers import make_clip_tokenizer, make_t5_tokenizer

    c = _flux_configs(tiny)
    tok, tok2 = make_clip_tokenizer(), make_t5_tokenizer()
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False),  # schnell's
        vae=_vae(c["vae"], 4, dtype, shift=0.1159, scale=0.3611),
        text_encoder=_clip(c["clip"], 1, dtype, tok, projection=False), tokenizer=tok,
        text_encoder_2=_t5(c["t5"], 2, dtype, big=not tiny, convert=_int8 if t5_int8 else None), tokenizer_2=tok2,
        transformer=_on_host(lambda: FluxTransformer2DModel(**c["transformer"]), 3, dtype, big=not tiny,
                             convert=_int8 if int8 else None))


def sd3_pipeline(tiny: bool, dtype):
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    from torch_tpu.testing.tiny_pipelines.tokenizers import make_clip_tokenizer, make_t5_tokenizer

    c = _sd3_configs(tiny)
    tok, tok2, tok3 = make_clip_tokenizer(), make_clip_tokenizer(), make_t5_tokenizer()
    return StableDiffusion3Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_vae(c["vae"], 4, dtype, shift=0.0609, scale=1.5305),
        text_encoder=_clip(c["clip_l"], 1, dtype, tok, projection=True), tokenizer=tok,
        text_encoder_2=_clip(c["clip_g"], 5, dtype, tok2, projection=True), tokenizer_2=tok2,
        text_encoder_3=_t5(c["t5"], 2, dtype, big=not tiny), tokenizer_3=tok3,
        transformer=_on_host(lambda: SD3Transformer2DModel(**c["transformer"]), 3, dtype, big=False))


def _int8_method() -> str:
    try:
        import torchao.quantization  # noqa: F401

        return "torchao Int8WeightOnlyConfig"
    except ImportError:
        return "optimum-quanto qint8"


def _int8(model, skip=frozenset()) -> str:
    """``model``'s linear weights in 8 bits, on the host, but those of the modules whose ids ``skip`` holds:
    torchao's int8 weight-only, else optimum-quanto's."""
    import torch

    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig(),
                  filter_fn=lambda m, name: isinstance(m, torch.nn.Linear) and id(m) not in skip)
        return "torchao Int8WeightOnlyConfig"
    except ImportError:
        pass
    from optimum.quanto import freeze, qint8, quantize

    quantize(model, weights=qint8, exclude=[n for n, m in model.named_modules() if id(m) in skip and n] or None)
    freeze(model)
    return "optimum-quanto qint8"


def _model_bytes(model) -> int:
    import torch

    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        inner = [getattr(t, n) for n in getattr(type(t), "tensor_data_names", [])] or [t]
        total += sum(x.numel() * x.element_size() for x in inner if isinstance(x, torch.Tensor))
    return total


# ------------------------------------------------------------------------------------------------------------
# one path, in its own process


def _group_offload(model, streams: bool = True) -> None:
    """Block-level group offload, one block a group. T5's blocks are a ModuleList inside its ``encoder`` (a
    ``T5Stack``, which diffusers' block level would take whole, as one group: all of T5 on the chip at once), so
    T5 is offloaded from its encoder. torchao weights go without streams: with streams and ``low_cpu_mem_usage``,
    diffusers keeps the weight itself as its "host copy" (torchao's ``.cpu()`` of a host tensor is the tensor) and
    swaps it onto the device, so the next upload pins a device tensor (diffusers 0.42, any accelerator); without
    ``low_cpu_mem_usage`` its pinned copies would add 4.8 GB (8-bit T5) to a host near its 40 GiB."""
    from diffusers.hooks import apply_group_offloading
    from diffusers.hooks.group_offloading import _is_torchao_tensor

    target = model.encoder if hasattr(model, "encoder") and hasattr(model.encoder, "block") else model
    streams = streams and not any(_is_torchao_tensor(p) for p in model.parameters())
    apply_group_offloading(target, onload_device="tpu", offload_device="cpu", offload_type="block_level",
                           num_blocks_per_group=1, use_stream=streams, record_stream=streams,
                           low_cpu_mem_usage=streams)


def _compile_flux(pipe, mode: str, offloaded: bool) -> None:
    if mode == "compiled":
        pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=not offloaded, dynamic=False)


def _call(pipe, kind: str, args, step_times: list | None = None):
    import torch

    kw = dict(prompt=PROMPT, num_inference_steps=args.steps, height=args.res, width=args.res,
              generator=torch.Generator("cpu").manual_seed(0), output_type="pil")
    if kind == "flux":
        kw.update(guidance_scale=0.0, max_sequence_length=64 if args.tiny else 256)
    else:
        kw.update(guidance_scale=4.5, max_sequence_length=64 if args.tiny else 256)
    if step_times is not None:
        def on_step(p, i, t, k):
            torch.tpu.synchronize()
            step_times.append(time.perf_counter())
            return k

        kw["callback_on_step_end"] = on_step
    return pipe(**kw).images[0]


def _phase(name: str) -> None:
    """A line (time, the process's peak RSS, the phase) in the file ``REAL_SIZE_PHASES`` names, if any: where a
    path was when its machine ran out of host memory."""
    where = os.environ.get("REAL_SIZE_PHASES")
    if where:
        with open(where, "a") as f:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            f.write(f"{time.time():.1f} peak_rss={rss:.2f}GiB {name}\n")


def run_pipeline_path(path: str, args) -> dict:
    import torch

    import torch_tpu

    kind = path.split("_")[0]
    mode = "compiled" if kind == "sd3" else args.mode
    if mode == "fused":
        torch.tpu.eager_mode = torch_tpu.EagerMode.DEFER_AND_FUSE
    out = {"path": path, "mode": mode}
    t0 = time.perf_counter()
    if kind == "flux":
        int8 = "int8" in path  # (8-bit as it is built)
        pipe = flux_pipeline(args.tiny, torch.bfloat16, int8=int8, t5_int8=args.t5_int8)
        out["t5_int8"] = args.t5_int8
    else:
        pipe = sd3_pipeline(args.tiny, torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    out["build_s"] = time.perf_counter() - t0
    _phase(f"{path}: built")
    out["model_bytes"] = {n: _model_bytes(m) for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    if "int8" in path:
        out["int8"] = _int8_method()
    t0 = time.perf_counter()
    if path == "flux_int8_model_offload" or path == "flux_bf16_model_offload" or path == "sd3_model_offload":
        pipe.enable_model_cpu_offload(device="tpu")
        if kind == "flux":
            _compile_flux(pipe, mode, offloaded=True)
        else:
            for block in pipe.transformer.transformer_blocks:
                block.compile(backend="tpu", fullgraph=True, dynamic=False)
    elif path == "flux_int8_resident":
        pipe.transformer.to("tpu")
        pipe.text_encoder.to("tpu")
        pipe.vae.to("tpu")
        pipe.vae.enable_tiling()  # (the decoder's activations at 1024x1024 beside the resident 12 GB)
        _group_offload(pipe.text_encoder_2)
        _compile_flux(pipe, mode, offloaded=False)
    elif path.startswith("flux_bf16_group_offload"):
        streams = not path.endswith("nostream")
        pipe.text_encoder.to("tpu")
        pipe.vae.to("tpu")
        _group_offload(pipe.transformer, streams)
        _group_offload(pipe.text_encoder_2, streams)
        _compile_flux(pipe, mode, offloaded=True)
    elif path == "sd3_whole":
        pipe.to("tpu")
        pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    out["prepare_s"] = time.perf_counter() - t0
    _phase(f"{path}: prepared")
    t0 = time.perf_counter()
    _call(pipe, kind, args)
    _phase(f"{path}: first call")
    torch.tpu.synchronize()
    out["first_call_s"] = time.perf_counter() - t0
    torch_tpu.reset_stats()
    torch.tpu.reset_peak_memory_stats()
    steps: list = []
    t0 = time.perf_counter()
    image = _call(pipe, kind, args, steps)
    torch.tpu.synchronize()
    out["image_s"] = time.perf_counter() - t0
    stats = torch_tpu.stats()
    gaps = [b - a for a, b in zip([t0] + steps[:-1], steps)]
    out["step_s"] = gaps
    out["steady_step_s"] = sorted(gaps[1:])[len(gaps[1:]) // 2] if len(gaps) > 1 else None  # (the first step also encodes)
    for key in ("host_to_device_bytes", "device_to_host_bytes", "host_copy_bytes_reused", "executions", "compiles"):
        out[key] = stats.get(key)
    out["upload_bound_s"] = stats["host_to_device_bytes"] / (H2D_GIB_S * 2**30)
    out["peak_device_bytes"] = torch.tpu.max_memory_allocated()
    out["host_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    png = Path(args.out).with_name(Path(args.out).stem + f"_{path}.png")
    png.parent.mkdir(parents=True, exist_ok=True)
    image.save(png)
    out["image"] = str(png)
    return out


def run_blocks(args) -> dict:
    """The 8-bit transformer's step against the bfloat16 one of the same FLUX.1-width blocks, both resident."""
    import copy

    import torch
    from diffusers import FluxTransformer2DModel

    import torch_tpu

    if args.mode == "fused":
        torch.tpu.eager_mode = torch_tpu.EagerMode.DEFER_AND_FUSE
    double, single = (int(x) for x in args.blocks.split(","))
    cfg = dict(_flux_configs(args.tiny)["transformer"], num_layers=double, num_single_layers=single)
    base = _on_host(lambda: FluxTransformer2DModel(**cfg), 3, torch.bfloat16, big=not args.tiny)
    tokens = (args.res // 16) ** 2
    g = torch.Generator().manual_seed(0)
    inputs = dict(hidden_states=torch.randn(1, tokens, cfg["in_channels"], generator=g),
                  encoder_hidden_states=torch.randn(1, 64 if args.tiny else 512, cfg["joint_attention_dim"], generator=g),
                  pooled_projections=torch.randn(1, cfg["pooled_projection_dim"], generator=g),
                  timestep=torch.tensor([0.5]), img_ids=torch.zeros(tokens, 3), txt_ids=torch.zeros(64 if args.tiny else 512, 3))
    inputs = {k: v.to("tpu", torch.bfloat16 if v.is_floating_point() and k not in ("img_ids", "txt_ids") else v.dtype)
              for k, v in inputs.items()}
    out = {"path": "blocks", "mode": args.mode, "double": double, "single": single}
    results = {}
    for name in ("bf16", "int8"):
        model = copy.deepcopy(base) if name == "bf16" else base
        if name == "int8":
            out["int8"] = _int8(model)
        model.to("tpu")
        if args.mode == "compiled":
            model.compile(backend="tpu", fullgraph=True, dynamic=False)
        with torch.no_grad():
            model(**inputs, return_dict=False)[0].cpu()
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                y = model(**inputs, return_dict=False)[0]
                torch.tpu.synchronize()
                times.append(time.perf_counter() - t0)
            results[name] = y.float().cpu()
        out[f"{name}_step_s"] = sorted(times)[2]
        out[f"{name}_bytes"] = _model_bytes(model)
        model.to("cpu")
        del model
    out["int8_over_bf16"] = out["int8_step_s"] / out["bf16_step_s"]
    ref = results["bf16"]
    out["int8_rel_diff"] = float((results["int8"] - ref).abs().max() / ref.abs().max().clamp_min(1e-6))
    return out


def run_transfers(args) -> dict:
    """Host<->device rates of torch_tpu beside JAX's, bfloat16 and float32."""
    import numpy as np
    import torch

    from torch_tpu.runtime import platform

    jax = platform.jax()
    dev = platform.jax_device(0)
    n = (2 << 20) if args.tiny else (512 << 20)  # bytes
    out = {"path": "transfers", "bytes": n}

    def best(fn, reps=3):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).replace("torch.", "")
        host = torch.randn(n // dtype.itemsize, dtype=torch.float32).to(dtype)
        npy = host.view(torch.int16).numpy().view("bfloat16") if dtype == torch.bfloat16 else host.numpy()
        up_torch = best(lambda: (host.to("tpu"), torch.tpu.synchronize()))  # (synchronize waits for the upload)
        up_jax = best(lambda: jax.device_put(npy, dev).block_until_ready())
        on_dev = host.to("tpu")
        on_dev_jax = jax.device_put(npy, dev).block_until_ready()

        def read_torch():
            (on_dev + 0).cpu()  # a computed value: no host copy of an upload to hand back

        def read_jax():
            np.asarray(on_dev_jax + 0)

        out[f"{name}_h2d_gib_s_torch"] = n / up_torch / 2**30
        out[f"{name}_h2d_gib_s_jax"] = n / up_jax / 2**30
        out[f"{name}_d2h_gib_s_torch"] = n / best(read_torch) / 2**30
        out[f"{name}_d2h_gib_s_jax"] = n / best(read_jax) / 2**30
        if dtype == torch.bfloat16:
            # (the pairs' (n/2, 2) shape, its minor dimension padded to 128 lanes, needs 64x the array on a TPU:
            # rows of 256 pairs keep it small)
            packed = jax.jit(lambda a: jax.lax.bitcast_convert_type(a.reshape(-1, 256, 2), jax.numpy.uint32))
            try:
                packed(on_dev_jax).block_until_ready()

                def read_packed():
                    np.asarray(packed(on_dev_jax + 0)).view(np.uint16)

                out["bfloat16_d2h_gib_s_as_uint32_pairs"] = n / best(read_packed) / 2**30
            except Exception as exc:  # noqa: BLE001 - the probe's own limit, reported
                out["bfloat16_d2h_as_uint32_pairs_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def child(args) -> None:
    path = args.child
    try:
        if path == "blocks":
            result = run_blocks(args)
        elif path == "transfers":
            result = run_transfers(args)
        else:
            result = run_pipeline_path(path, args)
    except BaseException as exc:  # noqa: BLE001 - the parent records a path that cannot run
        result = {"path": path, "error": f"{type(exc).__name__}: {exc}"[:4000]}
    Path(args.child_out).write_text(json.dumps(result, indent=2, default=str))


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.res = args.res or (64 if args.tiny else 1024)
    args.steps = args.steps or (2 if args.tiny else 4)
    if args.child:
        child(args)
        return 0
    from _common import write

    results = {}
    for path in [p for p in args.paths.split(",") if p]:
        if path not in PATHS:
            raise SystemExit(f"unknown path {path!r}; one of {', '.join(PATHS)}")
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            child_out = f.name
        cmd = [sys.executable, __file__, "--child", path, "--child-out", child_out, "--out", args.out,
               "--mode", args.mode, "--res", str(args.res), "--steps", str(args.steps), "--blocks", args.blocks]
        if args.t5_int8:
            cmd.append("--t5-int8")
        if args.tiny:
            cmd.append("--tiny")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                                  timeout=args.path_timeout)
        except subprocess.TimeoutExpired as exc:
            proc = subprocess.CompletedProcess(cmd, -9, "", f"stopped after --path-timeout {args.path_timeout} s: "
                                               f"{(exc.stderr or b'')[-2000:]!r}")
        text = Path(child_out).read_text() if os.path.getsize(child_out) else "{}"
        os.unlink(child_out)
        result = json.loads(text) if text.strip() else {}
        result["process_s"] = time.perf_counter() - t0
        if proc.returncode != 0 or not result.get("path"):
            result.setdefault("error", f"exit {proc.returncode}: {proc.stderr[-3000:]}")
        results[path] = result
        status = result.get("error", "")[:200] or ", ".join(
            f"{k}={v:.3g}" for k, v in result.items() if isinstance(v, float) and k.endswith(("_s", "_gib_s_torch",
                                                                                              "_over_bf16")))
        print(f"{path}: {status}", flush=True)
    write("real_size", {"tiny": args.tiny, "res": args.res, "steps": args.steps, "mode": args.mode,
                        "paths": results}, path=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
