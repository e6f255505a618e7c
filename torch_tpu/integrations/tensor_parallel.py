"""Load a diffusers pipeline tensor-parallel over a ``DeviceMesh("tpu", ...)``, the seed's way.

The transformer is read with diffusers' ``TensorParallelConfig(mesh=mesh)`` as ``parallel_config`` (each
rank reads only its slice of every planned weight); Flux2's Mistral3 text encoder with transformers'
``DistributedConfig(tp_plan="auto")`` and the same mesh; everything else is replicated on this rank's
device.
"""
from __future__ import annotations

import torch


def load_tp_pipeline(kind: str, path: str, mesh, dtype: torch.dtype = torch.bfloat16):
    from diffusers import TensorParallelConfig

    if mesh.device_type != "tpu":
        raise ValueError(f"load_tp_pipeline: the mesh must be a DeviceMesh('tpu', ...), got device type "
                         f"{mesh.device_type!r}")
    common = dict(dtype=dtype, local_files_only=True)
    if kind == "flux2":
        from diffusers import Flux2Pipeline, Flux2Transformer2DModel
        from transformers import DistributedConfig, Mistral3ForConditionalGeneration

        text_encoder = Mistral3ForConditionalGeneration.from_pretrained(
            path, subfolder="text_encoder", distributed_config=DistributedConfig(tp_plan="auto"),
            device_mesh=mesh, **common)
        transformer = Flux2Transformer2DModel.from_pretrained(
            path, subfolder="transformer", parallel_config=TensorParallelConfig(mesh=mesh), **common)
        pipe = Flux2Pipeline.from_pretrained(path, text_encoder=text_encoder, transformer=transformer, **common)
        pipe.vae.to("tpu")
    elif kind == "flux":
        from diffusers import FluxPipeline, FluxTransformer2DModel

        transformer = FluxTransformer2DModel.from_pretrained(
            path, subfolder="transformer", parallel_config=TensorParallelConfig(mesh=mesh), **common)
        pipe = FluxPipeline.from_pretrained(path, transformer=transformer, **common)
        for name in ("text_encoder", "text_encoder_2", "vae"):
            getattr(pipe, name).to("tpu")
    else:
        raise ValueError(f"load_tp_pipeline: unknown pipeline kind {kind!r} (flux, flux2)")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate(pipe, prompt: str = "a red cube on a table", steps: int = 2, size: int = 64, seed: int = 0):
    """One image as a float numpy array (H, W, 3) in [0, 1]."""
    out = pipe(prompt=prompt, num_inference_steps=steps, height=size, width=size,
               generator=torch.Generator("cpu").manual_seed(seed), output_type="np")
    return out.images[0]
