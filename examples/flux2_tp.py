"""FLUX.2 on one tpu device (single process version of the seed's tensor-parallel snippet).

The seed shards the text encoder (transformers' DistributedConfig(tp_plan="auto")) and the transformer
(diffusers' TensorParallelConfig(mesh=mesh)) over a DeviceMesh("tpu", ...) under torchrun with
dist.init_process_group(backend="tpu_dist"). Run plainly, this script runs the same pipeline in one
process (text encoder + transformer + pipe.vae.to("tpu")); under torchrun it is the seed's
tensor-parallel version, one process per device:

    python examples/flux2_tp.py                           # offline tiny pipeline, random weights
    python examples/flux2_tp.py black-forest-labs/FLUX.2-dev --steps 28
    eval $(python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper | sed 's/^/export /')
    torchrun --nproc_per_node=2 examples/flux2_tp.py --steps 2   # tensor parallel (tiny: 2 heads -> 2 ranks)
"""
import argparse
import os

import torch

from diffusers import Flux2Pipeline, Flux2Transformer2DModel
from transformers import Mistral3ForConditionalGeneration

parser = argparse.ArgumentParser()
parser.add_argument("model", nargs="?", default=None, help="pipeline folder or Hub id (default: tiny offline)")
parser.add_argument("--height", type=int, default=64)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--steps", type=int, default=28)
parser.add_argument("--output", default="output.png")
args = parser.parse_args()

parallel = "RANK" in os.environ  # started by torchrun: tensor parallel
if parallel:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    dist.init_process_group(backend="tpu_dist")
    mesh = DeviceMesh("tpu", list(range(dist.get_world_size())))

repo_id = args.model
if repo_id is None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from torch_tpu.testing import tiny_pipelines

    if parallel and dist.get_rank() != 0:
        dist.barrier()  # rank 0 builds the folder once
    repo_id = str(tiny_pipelines.build_pipeline_dir("flux2", "tiny"))
    if parallel and dist.get_rank() == 0:
        dist.barrier()

if parallel:
    from diffusers import TensorParallelConfig
    from transformers import DistributedConfig

    text_encoder = Mistral3ForConditionalGeneration.from_pretrained(
        repo_id, subfolder="text_encoder", dtype=torch.bfloat16,
        distributed_config=DistributedConfig(tp_plan="auto"), device_mesh=mesh,
    )
    transformer = Flux2Transformer2DModel.from_pretrained(
        repo_id, subfolder="transformer", dtype=torch.bfloat16, parallel_config=TensorParallelConfig(mesh=mesh)
    )
else:
    text_encoder = Mistral3ForConditionalGeneration.from_pretrained(
        repo_id, subfolder="text_encoder", dtype=torch.bfloat16
    ).to("tpu")
    transformer = Flux2Transformer2DModel.from_pretrained(
        repo_id, subfolder="transformer", dtype=torch.bfloat16
    ).to("tpu")
pipe = Flux2Pipeline.from_pretrained(repo_id, text_encoder=text_encoder, transformer=transformer, dtype=torch.bfloat16)
pipe.vae.to("tpu")

image = pipe(
    prompt="a golden retriever surfing a wave, photorealistic",
    height=args.height,
    width=args.width,
    num_inference_steps=args.steps,
    generator=torch.Generator("cpu").manual_seed(0),
).images[0]
if not parallel or dist.get_rank() == 0:
    image.save(args.output)
    print("saved", args.output)
