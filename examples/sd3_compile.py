"""Stable Diffusion 3 on the tpu device (the seed's compiled-mode snippet).

    python examples/sd3_compile.py                        # offline tiny pipeline, strict eager
    python examples/sd3_compile.py stabilityai/stable-diffusion-3.5-medium --height 1024 --width 1024
    python examples/sd3_compile.py --compile              # compiled mode: the seed's transformer.compile
"""
import argparse
import os

import torch

from diffusers import StableDiffusion3Pipeline

parser = argparse.ArgumentParser()
parser.add_argument("model", nargs="?", default=None, help="pipeline folder or Hub id (default: tiny offline)")
parser.add_argument("--height", type=int, default=64)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--compile", action="store_true", help="pipe.transformer.compile(backend='tpu', ...)")
parser.add_argument("--output", default="output.png")
args = parser.parse_args()

model = args.model
if model is None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from torch_tpu.testing import tiny_pipelines

    model = str(tiny_pipelines.build_pipeline_dir("sd3", "tiny"))

pipe = StableDiffusion3Pipeline.from_pretrained(model, dtype=torch.bfloat16)
pipe.to("tpu")
if args.compile:
    pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)

# Warmup: in compiled mode this triggers the static graph compilation.
pipe(prompt="warmup", height=args.height, width=args.width, num_inference_steps=args.steps, guidance_scale=4.5)

# Later calls with the same shapes reuse the compiled programs.
image = pipe(
    prompt="a golden retriever surfing a wave, photorealistic",
    height=args.height,
    width=args.width,
    num_inference_steps=args.steps,
    guidance_scale=4.5,
).images[0]

image.save(args.output)
print("saved", args.output)
