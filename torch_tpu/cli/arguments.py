"""The command line's arguments: the parser of ``python -m torch_tpu`` and every check of ``generate``'s
arguments that can fail before anything heavy is imported or loaded (a bad one is a ``UsageError``: one line,
exit status 2)."""
from __future__ import annotations

import argparse
import json
import os
import re
import tempfile

from ..config import EAGER_MODE_NAMES

# --mode: the eager modes by the names torch.tpu.eager_mode takes too, and compile: the transformer is
# compiled, everything else runs in strict eager
MODES = {**EAGER_MODE_NAMES, "compile": EAGER_MODE_NAMES["eager"]}


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default unless its help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and "(default" not in text and action.default is not None \
                and action.default is not False and action.default is not argparse.SUPPRESS:
            text += " (default: %(default)s)"
        return text


_PROMPT = "a golden retriever surfing a wave, photorealistic"
_DEMO_PROMPT = "a red circle"


def _demo_folder(args):
    """The demo model folder the run uses (the shipped one, or a --model folder the demo trainer wrote),
    else None."""
    from ..demo import shipped

    if args.model is None:
        return shipped.WEIGHTS if args.kind == "demo" else None
    return args.model if shipped.is_demo_folder(args.model) else None


def parser() -> argparse.ArgumentParser:
    fmt = _HelpFormatter
    p = argparse.ArgumentParser(prog="python -m torch_tpu", description="torch_tpu command line",
                                formatter_class=fmt)
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="platform, devices, memory, caches, settings and versions", formatter_class=fmt)
    sub.add_parser("bench", help="where the benchmarks are", formatter_class=fmt)

    g = sub.add_parser("generate", help="generate an image with a diffusers pipeline", formatter_class=fmt)
    g.add_argument("--model", default=None,
                   help="a local pipeline folder or a Hub id (default: the offline pipeline of --kind)")
    g.add_argument("--kind", choices=("demo", "flux", "sd3", "flux2"), default="demo",
                   help="the offline pipeline without --model: demo = the shipped trained demo model "
                        "(coloured shapes, 64x64); flux/sd3/flux2 = tiny pipelines with random weights")
    g.add_argument("--size", choices=("tiny", "small", "medium"), default="tiny",
                   help="size of the random offline pipelines")
    g.add_argument("--prompt", default=None,
                   help=f"the prompt (default: {_DEMO_PROMPT!r} for the demo model, else {_PROMPT!r})")
    g.add_argument("--height", type=int, default=None,
                   help="image height in pixels, rounded down to the pipeline's multiple (default: the "
                        "pipeline's; 64 for the tiny offline pipelines)")
    g.add_argument("--width", type=int, default=None, help="image width in pixels (default: as --height)")
    g.add_argument("--steps", type=int, default=None,
                   help="denoising steps (default: 4); a demo model folder's default is its own (20)")
    g.add_argument("--guidance", type=float, default=None, help="guidance scale (default: the pipeline's)")
    g.add_argument("--seed", type=int, default=0, help="seed of the CPU generator the pipeline draws from")
    g.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="weights and compute dtype (default: bfloat16 with --model, float32 for the offline "
                        "pipelines)")
    g.add_argument("--mode", choices=tuple(MODES), default="eager",
                   help="eager = strict eager (DEFER_NEVER); debug = DEFER_NEVER_AND_LAUNCH_BLOCKING; "
                        "fused = DEFER_AND_FUSE (the names torch.tpu.eager_mode takes too); compile = "
                        "torch.compile(backend='tpu') of the transformer (its repeated blocks with --offload)")
    g.add_argument("--offload", action="store_true", help="pipe.enable_model_cpu_offload()")
    g.add_argument("--output", default="output.png", help="where the image is saved (its extension picks "
                                                           "the format)")
    g.add_argument("--device", choices=("tpu", "cpu"), default="tpu", help="cpu: run on CPU torch to compare")
    g.add_argument("--warmup", type=int, default=0,
                   help="untimed pipeline calls first (compiles happen there), for steady-state numbers")
    g.add_argument("--runs", type=int, default=1, help="timed pipeline calls (the image is the last one's)")
    g.add_argument("--quiet", action="store_true", help="print only the result line (no stage table, no "
                                                          "progress bars)")
    g.add_argument("--debug", action="store_true", help="show the full traceback when something fails")
    return p


class UsageError(Exception):
    """A bad command line: reported as one line, exit status 2, before the model loads."""


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _check_output(path: str) -> None:
    from PIL import Image

    if os.path.isdir(path):
        raise UsageError(f"--output {path!r} is a directory; give a file name such as {path.rstrip('/')}/out.png")
    ext = os.path.splitext(path)[1].lower()
    fmt = Image.registered_extensions().get(ext)
    if not ext or fmt is None or fmt not in Image.SAVE:
        raise UsageError(f"--output {path!r}: unknown image extension {ext or '(none)'!r} "
                         "(use .png, .jpg, .webp ...)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"--output {path!r}: the folder {folder} does not exist")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError as exc:
        raise UsageError(f"--output {path!r}: cannot write there ({exc.strerror or exc})") from None


def _check_model(model: str) -> str:
    """'folder', 'cached' or 'download': where the pipeline will come from (or UsageError)."""
    path = os.path.expanduser(model)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise UsageError(f"--model {model!r} is a file; expected a pipeline folder (with model_index.json) "
                             "or a Hugging Face Hub id")
        if not os.path.isfile(os.path.join(path, "model_index.json")):
            raise UsageError(f"--model {model!r}: the folder has no model_index.json (not a diffusers pipeline)")
        return "folder"
    if model.startswith((".", "/", "~")) or not _HUB_ID.match(model):
        raise UsageError(f"--model {model!r}: no such folder (and not a Hub id like org/name)")
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(model, "model_index.json")
    if isinstance(cached, str):
        return "cached"
    if constants.HF_HUB_OFFLINE:
        raise UsageError(f"--model {model!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) "
                         "and HF_HUB_OFFLINE is set: download it first (huggingface-cli download "
                         f"{model}) or pass a local folder")
    return "download"


def _size_multiple(args) -> int:
    """Image sizes must be multiples of the VAE scale factor times the transformer's patch size (2)."""
    config_path = None
    if args.model is not None:
        config_path = os.path.join(os.path.expanduser(args.model), "vae", "config.json")
    try:
        with open(config_path or "") as f:
            channels = json.load(f).get("block_out_channels") or [0, 0, 0, 0]
    except (OSError, ValueError):
        channels = [0, 0, 0, 0]  # the offline pipelines and Flux/SD3/Flux2: VAE factor 8
    return 2 ** (len(channels) - 1) * 2


def _check_sizes(args) -> list[str]:
    """Validates --height/--width (rounding them down to what the pipeline accepts); returns notes."""
    notes = []
    multiple = _size_multiple(args)
    for name in ("height", "width"):
        value = getattr(args, name)
        if value is None:
            continue
        if value < multiple:
            raise UsageError(f"--{name} {value}: too small; the pipeline needs a multiple of {multiple} "
                             f"(at least {multiple})")
        if value % multiple:
            rounded = value - value % multiple
            notes.append(f"note: --{name} {value} is not a multiple of {multiple}; using {rounded}")
            setattr(args, name, rounded)
    return notes


def validate_generate(args) -> list[str]:
    """Every check that can fail before the model loads (raises UsageError); returns notes to print."""
    args.demo_call = {}  # FluxPipeline call arguments a demo model was trained for
    folder = _demo_folder(args)
    if folder is not None:
        from ..demo import shipped

        try:
            args.demo_call = shipped.generation_kwargs(folder)
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    if args.prompt is None:
        args.prompt = _DEMO_PROMPT if folder is not None else _PROMPT
    unknown = _unknown_demo_prompt(folder, args.prompt) if folder is not None else None
    args.prompt_warned = unknown is not None  # (the demo's tokenizer is told: it would warn again)
    if args.steps is None:
        args.steps = args.demo_call.get("num_inference_steps", 4)
    for name, minimum in (("steps", 1), ("runs", 1), ("warmup", 0)):
        if getattr(args, name) < minimum:
            raise UsageError(f"--{name} {getattr(args, name)}: must be at least {minimum}")
    if args.device == "cpu" and args.offload:
        raise UsageError("--offload needs --device tpu")
    if args.device == "cpu" and args.mode != "eager":
        raise UsageError(f"--mode {args.mode} needs --device tpu")
    notes = _check_sizes(args) + ([unknown] if unknown else [])
    _check_output(args.output)
    if args.model is not None:
        if _check_model(args.model) == "download":
            notes.append(f"note: {args.model} is not in the local Hugging Face cache; downloading it")
    if args.dtype is None:
        args.dtype = "bfloat16" if args.model is not None else "float32"
    return notes


def _unknown_demo_prompt(folder, prompt: str):
    from ..demo import shipped

    return shipped.unknown_prompt(prompt, folder)

