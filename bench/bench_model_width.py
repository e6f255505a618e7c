"""A diffusers denoiser at its real width in each execution mode, beside compiled mode (and, for FLUX.1, the
floor) measured in the same run.

Models (``--kind``; random weights, seeded, 1/sqrt(fan-in); bf16; batch 1; a 1024x1024 image):
  flux   FluxTransformer2DModel at FLUX.1's width (24 heads x 128 = 3072), 2 double + 4 single blocks (1.3 B
         parameters), 4096 image + 512 text tokens
  flux2  Flux2Transformer2DModel at FLUX.2's width (48 heads x 128 = 6144), 1 double + 2 single blocks, 4096 image +
         512 text tokens
  sd3    SD3Transformer2DModel at SD3.5-large's width (38 heads x 64 = 2432, RMS q/k norms), 4 joint blocks, 4096
         image + 333 text tokens
  sdxl   SDXL's whole UNet2DConditionModel (2.6 B parameters), 128x128 latents, 77 text tokens

Each mode runs in its own process (a TPU is held by one process at a time):
  strict    EagerMode.DEFER_NEVER          fused     EagerMode.DEFER_AND_FUSE
  compiled  m.compile(backend="tpu", fullgraph=True, dynamic=False)
  regional  m.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False), strict glue
  regional_fused  the same with the glue between blocks in fused eager
  floor     (flux only) JAX alone: the model's GEMMs (same shapes, one program) + the attention kernel
Per mode: the first call (compiles included), the median of ``--reps`` steady calls (each followed by
``torch.tpu.synchronize()``) and of the time until the call returned before that wait (the host's share:
near the whole call when the device waits on the host), ``--reps`` calls back to back with one wait at the
end, per call (``pipelined_ms``: how a denoising loop runs, the host preparing the next call while the device
runs this one), programs launched per call, and the largest difference from CPU torch (float32 from the same
bf16 weights, computed once by the parent process), relative to the output's scale. ``--profile`` adds the
device's timeline of two steady calls (JAX's profiler): how long the device was busy and how long it waited
for the host between programs.

    python bench/bench_model_width.py [--kind flux] [--modes strict,fused,compiled] [--reps 5] [--out F]
    python bench/bench_model_width.py --layers 1 --single-layers 1 --image-tokens 1024 --text-tokens 512  # smaller

Writes bench/results/tpu/<kind>_width.json by default (ratios against compiled mode, and the floor's).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_INHERITED = {k: os.environ[k] for k in ("TORCH_DEVICE_BACKEND_AUTOLOAD", "JAX_PLATFORMS") if k in os.environ}
MODES = ("strict", "fused", "compiled", "regional", "regional_fused", "floor")
# (with "_noreplay" appended, an eager mode runs with TORCH_TPU_MODULE_REPLAY=0: every module call its Python)
KINDS = ("flux", "flux2", "sd3", "sdxl")


def _config(args):
    if args.kind == "flux":
        return dict(patch_size=1, in_channels=64, num_layers=args.layers, num_single_layers=args.single_layers,
                    attention_head_dim=128, num_attention_heads=args.heads, joint_attention_dim=4096,
                    pooled_projection_dim=768, guidance_embeds=False, axes_dims_rope=(16, 56, 56))
    if args.kind == "flux2":
        return dict(patch_size=1, in_channels=128, num_layers=args.layers, num_single_layers=args.single_layers,
                    attention_head_dim=128, num_attention_heads=args.heads, joint_attention_dim=15360,
                    timestep_guidance_channels=256, axes_dims_rope=(32, 32, 32, 32), guidance_embeds=True)
    if args.kind == "sd3":
        return dict(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=args.layers,
                    attention_head_dim=64, num_attention_heads=args.heads, joint_attention_dim=4096,
                    caption_projection_dim=64 * args.heads, pooled_projection_dim=2048, pos_embed_max_size=192,
                    qk_norm="rms_norm")
    return dict(sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
                block_out_channels=(320, 640, 1280), transformer_layers_per_block=(1, 2, 10),
                attention_head_dim=(5, 10, 20), cross_attention_dim=2048, addition_embed_type="text_time",
                addition_time_embed_dim=256, projection_class_embeddings_input_dim=2816, use_linear_projection=True)


# (layers, single layers, heads) by default per kind
_SIZES = {"flux": (2, 4, 24), "flux2": (1, 2, 48), "sd3": (4, 0, 38), "sdxl": (0, 0, 0)}


def _model(args):
    """The model on the CPU in bf16 with seeded weights (the same in every process) and the buffers its
    constructor computed (SD3's position embedding)."""
    import math

    import torch

    model = _empty_model(args)
    # ``to_empty`` leaves every tensor uninitialized, buffers too: SD3's pos_embed held whatever the heap held
    # (NaN in some runs, another garbage in each model built), so the values the constructor computed are put back
    computed = dict(model.named_buffers())
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(computed[name])
    model = model.to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * math.prod(p.shape[1:]) ** -0.5)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    return model.eval()


def _ids(side, text, axes):
    import torch

    img_ids = torch.zeros(side, side, axes)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    txt_ids = torch.zeros(text, axes)
    if axes == 4:
        txt_ids[:, 3] = torch.arange(text)
    return img_ids.reshape(-1, axes), txt_ids


def _inputs(args):
    import torch

    g = torch.Generator().manual_seed(1)
    side = int(args.image_tokens ** 0.5)
    if args.kind == "flux":
        img_ids, txt_ids = _ids(side, args.text_tokens, 3)
        return dict(hidden_states=torch.randn(1, side * side, 64, generator=g).bfloat16(),
                    encoder_hidden_states=torch.randn(1, args.text_tokens, 4096, generator=g).bfloat16(),
                    pooled_projections=torch.randn(1, 768, generator=g).bfloat16(),
                    timestep=torch.tensor([0.5]).bfloat16(), img_ids=img_ids, txt_ids=txt_ids, return_dict=False)
    if args.kind == "flux2":
        img_ids, txt_ids = _ids(side, args.text_tokens, 4)
        return dict(hidden_states=torch.randn(1, side * side, 128, generator=g).bfloat16(),
                    encoder_hidden_states=torch.randn(1, args.text_tokens, 15360, generator=g).bfloat16(),
                    timestep=torch.tensor([0.5]).bfloat16(), img_ids=img_ids, txt_ids=txt_ids,
                    guidance=torch.tensor([4.0]).bfloat16(), return_dict=False)
    latent = 2 * side  # patches of 2x2 latents (SD3); SDXL's UNet takes the latents whole
    if args.kind == "sd3":
        return dict(hidden_states=torch.randn(1, 16, latent, latent, generator=g).bfloat16(),
                    encoder_hidden_states=torch.randn(1, args.text_tokens, 4096, generator=g).bfloat16(),
                    pooled_projections=torch.randn(1, 2048, generator=g).bfloat16(),
                    timestep=torch.tensor([500.0]).bfloat16(), return_dict=False)
    return dict(sample=torch.randn(1, 4, latent, latent, generator=g).bfloat16(), timestep=torch.tensor([500.0]),
                encoder_hidden_states=torch.randn(1, args.text_tokens, 2048, generator=g).bfloat16(),
                added_cond_kwargs={"text_embeds": torch.randn(1, 1280, generator=g).bfloat16(),
                                   "time_ids": torch.tensor([[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0]]).bfloat16()},
                return_dict=False)


def _on(device, value):
    """``value`` (tensors, dicts of them, anything else) with its tensors moved to ``device`` (float32 on the CPU
    for the reference)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.float() if device == "cpu-float" else value.to(device)
    if isinstance(value, dict):
        return {k: _on(device, v) for k, v in value.items()}
    return value


def _empty_model(args):
    import diffusers
    from accelerate import init_empty_weights

    cls = {"flux": diffusers.FluxTransformer2DModel, "flux2": diffusers.Flux2Transformer2DModel,
           "sd3": diffusers.SD3Transformer2DModel, "sdxl": diffusers.UNet2DConditionModel}[args.kind]
    with init_empty_weights():
        return cls(**_config(args))


def _load_model(args):
    """The weights the parent saved (faster than drawing 1.3 B numbers again in every process)."""
    import torch
    from safetensors.torch import load_file

    model = _empty_model(args)
    model.load_state_dict(load_file(args.weights), assign=True)
    # the buffers the file does not hold (non-persistent: SD3's pos_embed) as the constructor computed them, in
    # bf16 like the parent's model (``_model``)
    return model.to(torch.bfloat16).eval()


def _reference(args, path):
    import torch
    from safetensors.torch import save_file

    model = _model(args)
    save_file(model.state_dict(), args.weights)
    model = model.float()
    kwargs = _on("cpu-float", _inputs(args))
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model(**kwargs)[0]
    torch.save(out, path)
    return time.perf_counter() - t0


def _worker_torch(args, modes):
    """Each of ``modes`` on one model moved to the device once, one after the other; yields (mode, result)."""
    import torch

    model = _load_model(args)
    t0 = time.perf_counter()
    model = model.to("tpu")
    kwargs = _on("tpu", _inputs(args))
    torch.tpu.synchronize()
    move_s = time.perf_counter() - t0
    for mode in modes:
        result = {"move_s": move_s}
        replay = "0" if mode.endswith("_noreplay") else "1"
        os.environ["TORCH_TPU_MODULE_REPLAY"] = replay  # (read at every call)
        result.update(_mode_run(args, model, kwargs, mode.replace("_noreplay", "")))
        result["module_replay"] = replay == "1"
        yield mode, result


def _mode_run(args, model, kwargs, mode) -> dict:
    import torch

    import torch_tpu

    result = {}
    fn = model
    if mode == "compiled":
        fn = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
    elif mode in ("regional", "regional_fused"):
        model.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    eager = torch_tpu.EagerMode.DEFER_AND_FUSE if mode in ("fused", "regional_fused") else torch_tpu.EagerMode.DEFER_NEVER

    dispatched = []  # seconds until the call returned, before waiting for the device

    def call():
        t0 = time.perf_counter()
        with torch.tpu.set_eager_mode(eager), torch.no_grad():
            out = fn(**kwargs)[0]
            # inside the block: leaving it synchronizes (the mode's block waits for its work)
            dispatched.append(time.perf_counter() - t0)
        torch.tpu.synchronize()
        return out

    stats_start = torch_tpu.stats()
    firsts = []
    for _ in range(2):  # the first call compiles; a fused second call may compile the glue once more
        t0 = time.perf_counter()
        out = call()
        firsts.append(time.perf_counter() - t0)
    stats0 = torch_tpu.stats()
    times = []
    dispatched.clear()
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    stats1 = torch_tpu.stats()
    # back to back, one wait at the end, as a denoising loop runs its steps: the host records or launches
    # the next call while the device runs this one (per call: the throughput, not the latency above)
    t0 = time.perf_counter()
    with torch.tpu.set_eager_mode(eager), torch.no_grad():
        for _ in range(args.reps):
            fn(**kwargs)
    torch.tpu.synchronize()
    result["pipelined_ms"] = 1e3 * (time.perf_counter() - t0) / args.reps
    if args.profile:
        result["device_timeline"] = _profile(call, args)
    result.update(first_call_s=firsts[0], second_call_s=firsts[1], call_ms=1e3 * statistics.median(times),
                  call_ms_all=[1e3 * t for t in times], dispatch_ms=1e3 * statistics.median(dispatched),
                  programs_per_call=(stats1["executions"] - stats0["executions"]) / args.reps,
                  replays_per_call=(stats1["module_replays"] - stats0["module_replays"]) / args.reps,
                  compiles=stats1["compiles"] - stats_start["compiles"],
                  compile_seconds=stats1["compile_seconds"] - stats_start["compile_seconds"],
                  cache_loads=stats1["cache_loads"] - stats_start["cache_loads"],
                  peak_mib=torch.tpu.max_memory_allocated() / 2 ** 20)
    if args.reference and os.path.exists(args.reference):
        ref = torch.load(args.reference)
        got = out.cpu().float()
        result["max_abs_err"] = float((got - ref).abs().max())
        result["ref_scale"] = float(ref.abs().max())
        result["rel_err"] = result["max_abs_err"] / max(result["ref_scale"], 1e-30)
    return result


def _profile(call, args) -> dict:
    """The device's timeline over two steady calls: busy and idle per call, the longest waits for the host."""
    import jax

    sys.path.insert(0, str(HERE / "profile"))
    from device_ops import _summarise  # bench/profile/device_ops.py

    logdir = tempfile.mkdtemp(prefix="width-profile-")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # the host at its own speed
    jax.profiler.start_trace(logdir, profiler_options=options)
    for _ in range(2):
        call()
    jax.profiler.stop_trace()
    lines = _summarise(logdir, 2, 12)
    return {name: value for name, value in lines.items() if name.endswith("timeline") or "XLA Modules" in name}


def _gemms(args):
    """(M, K, N) of every matmul in the model's blocks (the modulation linears on one token left out)."""
    img, txt, width = args.image_tokens, args.text_tokens, 128 * args.heads
    both = img + txt
    double = [(m, width, width) for m in (img, txt) for _ in range(4)] + \
             [(m, width, 4 * width) for m in (img, txt)] + [(m, 4 * width, width) for m in (img, txt)]
    single = [(both, width, width)] * 3 + [(both, width, 4 * width), (both, 5 * width, width)]
    return double * args.layers + single * args.single_layers


def _worker_floor(args):
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(HERE.parent))
    from torch_tpu.ops import attention as attention_lowering  # the same kernel and tiles as the modes

    shapes = _gemms(args)
    key = jax.random.PRNGKey(0)
    xs = [jax.random.normal(key, (m, k), jnp.bfloat16) for m, k, _ in shapes]
    ws = [jax.random.normal(key, (k, n), jnp.bfloat16) for _, k, n in shapes]
    heads, length = args.heads, args.image_tokens + args.text_tokens
    q = jax.random.normal(key, (1, heads, length, 128), jnp.bfloat16)
    n_attn = args.layers + args.single_layers

    @jax.jit
    def gemms(xs, ws):
        return [jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16) for x, w in zip(xs, ws)]

    @jax.jit
    def attend(q):
        return [attention_lowering.attention(q + i, q, q) for i in range(n_attn)]

    def timed(fn, *a):
        jax.block_until_ready(fn(*a))
        samples = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*a))
            samples.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(samples)

    import torch_tpu.runtime.platform as plat

    plat.jax()  # JAX configured as the backend does (its x64 switch; the kernel turns it off itself)
    g_ms = timed(gemms, xs, ws)
    a_ms = timed(attend, q)
    flops = sum(2 * m * k * n for m, k, n in shapes)
    return {"gemm_ms": g_ms, "attention_ms": a_ms, "call_ms": g_ms + a_ms, "gemm_tflops": flops / g_ms / 1e9,
            "gemms": len(shapes), "attention_calls": n_attn}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, default="flux")
    parser.add_argument("--modes", default=None, help="default: strict,fused,compiled (flux: every mode)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=None, help="double-stream (sd3: joint) blocks")
    parser.add_argument("--single-layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--image-tokens", type=int, default=4096)
    parser.add_argument("--text-tokens", type=int, default=None, help="default 512 (sd3: 333, sdxl: 77)")
    parser.add_argument("--no-reference", action="store_true", help="skip CPU torch's output")
    parser.add_argument("--profile", action="store_true", help="record the device's timeline of two calls")
    parser.add_argument("--out", default=None, help="default: bench/results/tpu/<kind>_width.json")
    parser.add_argument("--one-process", action="store_true",
                        help="run the modes one after the other in one process (imports and the move paid once; "
                             "programs a mode shares with an earlier one come from memory)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reference", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--weights", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per mode")
    parser.add_argument("--log-dir", default=None,
                        help="write each mode's stderr there as MODE.log, with its compile log "
                             "(TORCH_TPU_LOG=compiles)")
    args = parser.parse_args()
    layers, single, heads = _SIZES[args.kind]
    args.layers = layers if args.layers is None else args.layers
    args.single_layers = single if args.single_layers is None else args.single_layers
    args.heads = heads if args.heads is None else args.heads
    if args.text_tokens is None:
        args.text_tokens = {"sd3": 333, "sdxl": 77}.get(args.kind, 512)
    if args.modes is None:
        args.modes = ",".join(MODES) if args.kind == "flux" else "strict,fused,compiled"
    if args.out is None:
        args.out = str(HERE / f"results/tpu/{args.kind}_width.json")
    if not args.worker:
        # the parent computes on CPU torch only: the backend stays out of it, so it never opens the TPU
        # (one process at a time can hold it; the workers need it)
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.worker:
        if args.worker == "floor":
            print("RESULT floor " + json.dumps(_worker_floor(args)), flush=True)
            return
        for mode, result in _worker_torch(args, args.worker.split(",")):
            print(f"RESULT {mode} " + json.dumps(result), flush=True)
        return
    shape_args = ["--kind", args.kind, *(["--profile"] if args.profile else []), "--layers", str(args.layers), "--single-layers", str(args.single_layers), "--heads",
                  str(args.heads), "--image-tokens", str(args.image_tokens), "--text-tokens", str(args.text_tokens),
                  "--reps", str(args.reps)]
    summary = {"kind": args.kind, "model": {**_config(args), "image_tokens": args.image_tokens, "text_tokens": args.text_tokens,
                         "dtype": "bfloat16"}, "date": time.strftime("%Y-%m-%d %H:%M"), "modes": {}}
    work = tempfile.mkdtemp()
    ref_path = os.path.join(work, "reference.pt")
    args.weights = os.path.join(work, "weights.safetensors")
    if args.no_reference:
        from safetensors.torch import save_file

        save_file(_model(args).state_dict(), args.weights)
    else:
        summary["reference_cpu_s"] = _reference(args, ref_path)
        print(f"CPU torch reference (float32): {summary['reference_cpu_s']:.1f} s", flush=True)
    modes = args.modes.split(",")
    groups = ([[m for m in modes if m != "floor"]] + ([["floor"]] if "floor" in modes else [])
              if args.one_process else [[m] for m in modes])
    for group in groups:
        name = "+".join(group)
        cmd = [sys.executable, __file__, "--worker", ",".join(group), "--reference", ref_path, "--weights",
               args.weights, *shape_args]
        t0 = time.perf_counter()
        results = {}
        try:
            env = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp())  # every process compiles cold
            if args.log_dir:
                env["TORCH_TPU_LOG"] = "compiles"
            for var in ("TORCH_DEVICE_BACKEND_AUTOLOAD", "JAX_PLATFORMS"):
                env.pop(var, None)
                if var in _INHERITED:
                    env[var] = _INHERITED[var]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout * len(group), env=env)
            for line in proc.stdout.splitlines():
                if line.startswith("RESULT "):
                    mode, text = line[7:].split(" ", 1)
                    results[mode] = json.loads(text)
            for mode in group:
                results.setdefault(mode, {"error": (proc.stderr or proc.stdout)[-3000:]})
            if args.log_dir:
                Path(args.log_dir).mkdir(parents=True, exist_ok=True)
                Path(args.log_dir, f"{name}.log").write_text(proc.stderr)
        except subprocess.TimeoutExpired as timeout:
            for mode in group:
                results.setdefault(mode, {"error": f"timed out after {args.timeout * len(group)} s"})
            if args.log_dir:
                Path(args.log_dir).mkdir(parents=True, exist_ok=True)
                err = timeout.stderr or b""  # bytes even in text mode on some Pythons
                text = err.decode(errors="replace") if isinstance(err, bytes) else err
                Path(args.log_dir, f"{name}.log").write_text(text)
        for mode in group:
            results[mode]["process_s"] = time.perf_counter() - t0
            summary["modes"][mode] = results[mode]
            print(mode, json.dumps(results[mode])[:600], flush=True)
    modes = summary["modes"]
    floor = modes.get("floor", {}).get("call_ms")
    compiled = modes.get("compiled", {}).get("call_ms")
    compiled_pipelined = modes.get("compiled", {}).get("pipelined_ms")
    summary["ratios"] = {m: {"vs_floor": (r["call_ms"] / floor) if floor and "call_ms" in r else None,
                             "vs_compiled": (r["call_ms"] / compiled) if compiled and "call_ms" in r else None,
                             "pipelined_vs_compiled": (r["pipelined_ms"] / compiled_pipelined)
                             if compiled_pipelined and "pipelined_ms" in r else None}
                         for m, r in modes.items()}
    print("ratios", json.dumps(summary["ratios"]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
