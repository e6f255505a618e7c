"""One denoising step of the small and medium Flux transformers, four ways:
compiled tpu (torch.compile backend="tpu"), strict-eager tpu, CPU torch eager, CPU torch.compile (inductor).
Also the cold compile time of the first two compiled variants. Writes bench/results/compile.json.

    python bench/bench_compile.py [--sizes small,medium] [--no-inductor]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# cold compile means cold: no persistent XLA cache unless the caller sets one
os.environ.setdefault("TORCH_TPU_CACHE_DIR", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from _common import time_call, write  # noqa: E402
from torch_tpu.testing import tiny_pipelines  # noqa: E402

RES = {"small": 256, "medium": 512}


def step_inputs(pipe, res: int) -> dict:
    """The transformer's inputs for one step, built with FluxPipeline's own helpers."""
    g = torch.Generator("cpu").manual_seed(0)
    prompt_embeds, pooled, text_ids = pipe.encode_prompt(prompt="a photo of a red cat", prompt_2=None,
                                                         device="cpu", max_sequence_length=64)
    tr = pipe.transformer
    latents, image_ids = pipe.prepare_latents(1, tr.config.in_channels // 4, res, res, prompt_embeds.dtype,
                                              "cpu", g, None)
    guidance = torch.full([1], 3.5) if tr.config.guidance_embeds else None
    return dict(hidden_states=latents, timestep=torch.full((1,), 0.5), guidance=guidance,
                pooled_projections=pooled, encoder_hidden_states=prompt_embeds, txt_ids=text_ids,
                img_ids=image_ids, return_dict=False)


def to(d, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def bench_size(size: str, inductor: bool) -> dict:
    pipe = tiny_pipelines.load_pipeline("flux", size)
    res = RES[size]
    cpu_model = pipe.transformer.eval()
    inputs = step_inputs(pipe, res)
    out = {"resolution": res, "inner_width": cpu_model.inner_dim,
           "parameters": sum(p.numel() for p in cpu_model.parameters()),
           "tokens": inputs["hidden_states"].shape[1] + inputs["encoder_hidden_states"].shape[1]}
    with torch.no_grad():
        ref = cpu_model(**inputs)[0]
        out["cpu_eager_s"] = time_call(lambda: cpu_model(**inputs), repeat=3, target_s=0.3)

        tpu_model = __import__("copy").deepcopy(cpu_model).to("tpu")
        tin = to(inputs, "tpu")
        sync = torch_tpu.sync
        out["tpu_strict_eager_s"] = time_call(lambda: tpu_model(**tin), repeat=3, target_s=0.3, sync=sync)

        torch._dynamo.reset()
        compiled = torch.compile(tpu_model, backend="tpu", fullgraph=True, dynamic=False)
        torch_tpu.reset_stats()
        t0 = time.perf_counter()
        got = compiled(**tin)[0]
        sync()
        out["tpu_compiled_cold_s"] = time.perf_counter() - t0
        s = torch_tpu.stats()
        out["tpu_compiled_cold_xla_compile_s"] = s["compile_seconds"]
        out["tpu_compiled_graph_compiles"] = s["graph_compiles"]
        out["tpu_compiled_max_abs_err_vs_cpu"] = float((got.cpu() - ref).abs().max())
        out["tpu_compiled_s"] = time_call(lambda: compiled(**tin), repeat=5, target_s=0.3, sync=sync)

        if inductor:
            torch._dynamo.reset()
            ind = torch.compile(cpu_model, backend="inductor", fullgraph=True, dynamic=False)
            t0 = time.perf_counter()
            ind(**inputs)
            out["cpu_inductor_cold_s"] = time.perf_counter() - t0
            out["cpu_inductor_s"] = time_call(lambda: ind(**inputs), repeat=3, target_s=0.3)
    for k in ("tpu_strict_eager_s", "cpu_eager_s", "cpu_inductor_s"):
        if k in out:
            out["compiled_speedup_vs_" + k[:-2]] = out[k] / out["tpu_compiled_s"]
    print(size, out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="small,medium")
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    results = {size: bench_size(size, not args.no_inductor) for size in args.sizes.split(",")}
    write("compile", {"what": "one Flux transformer denoising step (batch 1), seconds per call",
                      "results": results})


if __name__ == "__main__":
    main()
