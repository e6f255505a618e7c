"""FLUX with model CPU offload on the tpu device (the seed's eager-mode snippet).

    python examples/flux_offload.py                       # offline tiny pipeline, random weights
    python examples/flux_offload.py black-forest-labs/FLUX.1-schnell --height 1024 --width 1024
"""
import argparse
import os

import torch

from diffusers import FluxPipeline

parser = argparse.ArgumentParser()
parser.add_argument("model", nargs="?", default=None, help="pipeline folder or Hub id (default: tiny offline)")
parser.add_argument("--height", type=int, default=64)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--output", default="output.png")
args = parser.parse_args()

model = args.model
if model is None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from torch_tpu.testing import tiny_pipelines

    model = str(tiny_pipelines.build_pipeline_dir("flux", "tiny"))

pipe = FluxPipeline.from_pretrained(model, dtype=torch.bfloat16)
pipe.enable_model_cpu_offload()  # detects the "tpu" device by itself
print("offload device:", pipe._offload_device)

image = pipe(
    prompt="a golden retriever surfing a wave, photorealistic",
    height=args.height,
    width=args.width,
    num_inference_steps=4,
    guidance_scale=0.0,
).images[0]

image.save(args.output)
print("saved", args.output)
