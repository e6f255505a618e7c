"""``python -m torch_tpu.demo``: train and evaluate the demo model (coloured shapes, 64x64).

    python -m torch_tpu.demo train --device cpu --out DIR
    python -m torch_tpu.demo train --device tpu --out DIR       # --mode auto: compiled training steps
    python -m torch_tpu.demo eval --model DIR --device cpu --seeds 4
    python -m torch_tpu.demo data --out grid.png          # a look at the data set
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

_MODES = {"eager": "DEFER_NEVER", "fused": "DEFER_AND_FUSE"}
# The fastest tpu mode of each training stage (bench/bench_demo_training.py): the transformer with its
# loss (forward and backward) and optimizer step under torch.compile (a few XLA programs a step instead of
# thousands of ops); the VAE with only its optimizer step compiled (its compiled convolution backward is
# no faster than strict eager's, and slower on a busy machine).
_AUTO = {"vae": "COMPILED_OPTIMIZER", "transformer": "COMPILED"}


def _parser() -> argparse.ArgumentParser:
    from .model import DemoConfig
    from .train import TrainConfig

    p = argparse.ArgumentParser(prog="python -m torch_tpu.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def common(q, train=False):
        q.add_argument("--device", choices=("cpu", "tpu"), default="cpu")
        if train:
            q.add_argument("--mode", choices=tuple(_MODES) + ("compiled", "auto"), default="auto",
                           help="how the tpu trains: eager = DEFER_NEVER, fused = DEFER_AND_FUSE, compiled = "
                                "torch.compile(backend='tpu') of the loss (forward + backward) and of the "
                                "optimizer step; auto: each stage in its fastest mode (transformer compiled, "
                                "VAE strict eager with its optimizer step compiled)")
        else:
            q.add_argument("--mode", choices=tuple(_MODES) + ("auto",), default="auto",
                           help="tpu eager mode: eager = DEFER_NEVER, fused = DEFER_AND_FUSE; auto = eager")
        q.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads (default: torch's; use 1 on a shared, busy machine)")

    t = sub.add_parser("train", help="train the VAE, then the transformer; save_pretrained to --out")
    common(t, train=True)
    t.add_argument("--out", required=True)
    t.add_argument("--stages", default="vae,transformer", help="comma-separated subset of vae,transformer")
    t.add_argument("--resume", default=None, help="take the components of stages not trained now from this saved demo folder")
    t.add_argument("--no-progress", action="store_true")
    for f in dataclasses.fields(TrainConfig):
        t.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    for f in dataclasses.fields(DemoConfig):
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            t.add_argument(flag, type=lambda v: v.lower() in ("1", "true", "yes"), default=f.default)
        elif isinstance(f.default, tuple):
            t.add_argument(flag, type=lambda v: tuple(int(x) for x in v.split(",")), default=f.default,
                           help="comma-separated integers")
        else:
            t.add_argument(flag, type=type(f.default), default=f.default)

    e = sub.add_parser("eval", help="judge generated images of the 12 prompts over several seeds")
    common(e)
    e.add_argument("--model", required=True)
    e.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1")
    e.add_argument("--steps", type=int, default=None, help="denoising steps (default: the model's)")
    e.add_argument("--max-sequence-length", type=int, default=None)
    e.add_argument("--grid", default=None, help="write a prompts x seeds PNG grid here")

    v = sub.add_parser("vae", help="judge the VAE's reconstructions of fresh data set images")
    common(v)
    v.add_argument("--model", required=True)
    v.add_argument("--n", type=int, default=240)

    d = sub.add_parser("data", help="write a grid of data set samples and judge them")
    d.add_argument("--out", default="demo-data.png")
    d.add_argument("--n", type=int, default=1200)
    return p


def _setup(args):
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "tpu":
        import torch_tpu

        torch.tpu.eager_mode = getattr(torch_tpu.EagerMode, _MODES.get(args.mode, "DEFER_NEVER"))


def cmd_train(args) -> int:
    from .model import DemoConfig
    from .train import TrainConfig, train

    _setup(args)
    tcfg = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})
    mkw = {f.name: getattr(args, f.name) for f in dataclasses.fields(DemoConfig) if hasattr(args, f.name)}
    mcfg = DemoConfig(**mkw)
    t0 = time.perf_counter()
    stages = tuple(s for s in args.stages.split(",") if s)
    modes = _stage_modes(args.mode)
    train(args.out, device=args.device, mcfg=mcfg, cfg=tcfg, stages=stages, resume=args.resume,
          progress=not args.no_progress, modes=modes)
    print(f"trained in {time.perf_counter() - t0:.1f} s; saved to {args.out}")
    return 0


def _stage_modes(mode: str) -> dict[str, str] | None:
    """--mode of ``train`` -> train()'s per-stage modes (None: the eager mode ``_setup`` set)."""
    from .train import COMPILED

    if mode == "auto":
        return dict(_AUTO)
    if mode == "compiled":
        return {"vae": COMPILED, "transformer": COMPILED}
    return None


def cmd_eval(args) -> int:
    import json
    import pathlib

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from diffusers import FluxPipeline

    from .evaluate import evaluate, grid

    _setup(args)
    info = json.loads((pathlib.Path(args.model) / "torch_tpu_demo.json").read_text())
    call = dict(info["generation"])
    if args.steps:
        call["num_inference_steps"] = args.steps
    if args.max_sequence_length:
        call["max_sequence_length"] = args.max_sequence_length
    pipe = FluxPipeline.from_pretrained(args.model, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    pipe.to(args.device)
    t0 = time.perf_counter()
    rep = evaluate(pipe, range(args.seeds), **call)
    print(f"{len(rep.results)} images in {time.perf_counter() - t0:.1f} s with {call}")
    print(rep.summary())
    if args.grid:
        grid(rep.images).save(args.grid)
        print(f"grid: {args.grid}")
    return 0


def cmd_vae(args) -> int:
    from diffusers import AutoencoderKL

    from .evaluate import vae_reconstructions

    _setup(args)
    vae = AutoencoderKL.from_pretrained(args.model, subfolder="vae", local_files_only=True).to(args.device)
    acc, mse, _ = vae_reconstructions(vae, args.device, n=args.n)
    print(f"VAE reconstructions of {args.n} images: judge accuracy {acc:.4f}, mse {mse:.5f}")
    return 0


def cmd_data(args) -> int:
    import numpy as np

    from . import judge, shapes
    from .evaluate import grid

    rng = np.random.Generator(np.random.PCG64(0))
    s = shapes.sample(rng, args.n)
    ok = sum(judge.matches(img, shapes.PROMPTS[l]) for img, l in zip(s.images, s.labels))
    print(f"judge on {args.n} data set images: {ok / args.n:.4f}")
    imgs = {}
    for j in range(8):
        ss = shapes.sample(rng, len(shapes.PROMPTS), labels=np.arange(len(shapes.PROMPTS)))
        for i, p in enumerate(shapes.PROMPTS):
            imgs[(p, j)] = ss.images[i]
    grid(imgs).save(args.out)
    print(f"grid: {args.out}")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return {"train": cmd_train, "eval": cmd_eval, "vae": cmd_vae, "data": cmd_data}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
