"""``python -m torch_tpu``: generate an image with a diffusers pipeline, show the platform, point to benchmarks.

    python -m torch_tpu info
    python -m torch_tpu generate                          # the shipped demo model draws "a red circle"
    python -m torch_tpu generate --kind flux --steps 2 --height 64 --width 64 --output out.png
    python -m torch_tpu generate --model black-forest-labs/FLUX.1-schnell --dtype bfloat16 --offload
    python -m torch_tpu bench

Without ``--model`` the pipeline is the demo model shipped in the package (``--kind demo``, the default: a
small FluxPipeline trained on the tpu device to draw coloured shapes, ``torch_tpu.demo``), or with
``--kind flux|sd3|flux2`` a tiny/small/medium offline pipeline with random weights
(``torch_tpu.testing.tiny_pipelines``), built on first use and cached.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import sys
import tempfile
import time

from .config import EAGER_MODE_NAMES

# --mode: the eager modes by the names torch.tpu.eager_mode takes too, and compile: the transformer is
# compiled, everything else runs in strict eager
_MODES = {**EAGER_MODE_NAMES, "compile": EAGER_MODE_NAMES["eager"]}


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
    from .demo import shipped

    if args.model is None:
        return shipped.WEIGHTS if args.kind == "demo" else None
    return args.model if shipped.is_demo_folder(args.model) else None


def _parser() -> argparse.ArgumentParser:
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
    g.add_argument("--mode", choices=tuple(_MODES), default="eager",
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


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "jax", "jaxlib", "diffusers", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    import torch_tpu

    out["torch_tpu"] = torch_tpu.__version__
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def cmd_info(args) -> int:
    import torch
    import torch_tpu
    from .runtime import platform

    print(f"platform: {torch_tpu.platform()}")
    n = len(platform.devices())
    print(f"devices: {n} on this host (a process uses one, as tpu:0: torch.tpu.device_count() is "
          f"{torch.tpu.device_count()})")
    for i, dev in enumerate(platform.devices()):
        print(f"  [{i}] {dev}  name: {platform.device_name(i)}")
    free, total = torch.tpu.mem_get_info()
    print(f"memory: total {_mib(total)}, free {_mib(free)}, allocated {_mib(torch.tpu.memory_allocated())}")
    print(f"eager mode: {torch.tpu.eager_mode.name}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()))
    _print_info_extras()
    return 0


# PJRT plugins JAX may load (TPU: libtpu; NVIDIA: the CUDA plugin and its PJRT part; AMD: ROCm)
_PLUGINS = ("libtpu", "libtpu-nightly", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "jax-rocm7-plugin", "jax-rocm7-pjrt")


def _folder_size(path: str) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return total, files


def _print_info_extras() -> None:
    """Caches (where, how big), the TORCH_TPU_* settings in effect, and the PJRT plugins installed."""
    from importlib import metadata

    from . import config
    from .testing.tiny_pipelines import specs

    cache = config.compile_cache_dir()
    if cache is None:
        print("compile cache: off (TORCH_TPU_CACHE_DIR is empty)")
    else:
        size, files = _folder_size(cache)
        print(f"compile cache: {cache} ({_mib(size)}, {files} files)")
    tiny = str(specs.default_root())
    size, files = _folder_size(tiny)
    print(f"offline pipelines: {tiny} ({_mib(size)}, {files} files)")
    settings = config.in_effect()
    print("TORCH_TPU_* settings: " + (", ".join(f"{k}={v}" for k, v in settings.items()) if settings
                                       else "none set (defaults)"))
    found = []
    for name in _PLUGINS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    print("PJRT plugins: " + (", ".join(found) if found else "none (JAX's built-in CPU platform only)"))


def cmd_bench(args) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"Benchmarks live in bench/ of the torch_tpu source tree ({os.path.join(here, 'bench')}); "
          "run them from there. For a single timed image use `python -m torch_tpu generate`.")
    return 0


class _Timer:
    """Stage times with a device sync at every boundary, so asynchronous work is counted where it ran."""

    def __init__(self, sync, programs=lambda: 0):
        self.sync = sync
        self.stages: list[tuple[str, float]] = []
        self.programs = programs  # distinct programs built or loaded so far (torch_tpu.stats())
        self.built: dict[str, int] = {}  # stage -> programs it built or loaded, over every call

    def wrap(self, name, fn):
        def timed(*a, **kw):
            self.sync()
            t0, p0 = time.perf_counter(), self.programs()
            out = fn(*a, **kw)
            self.sync()
            self.stages.append((name, time.perf_counter() - t0))
            self.built[name] = self.built.get(name, 0) + self.programs() - p0
            self.mark = time.perf_counter()
            return out
        return timed


# --- generate: checks that run before anything heavy is imported or loaded -------------------------
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
        from .demo import shipped

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
    from .demo import shipped

    return shipped.unknown_prompt(prompt, folder)


# --- generate: Python's garbage collector while the pipeline loads ---------------------------------------
_COLLECTOR_PAUSED = [False]


@contextlib.contextmanager
def _collector_paused_while_loading(program: bool):
    """When this process is the program (``python -m torch_tpu``, ``torch-tpu``): Python's collector is paused
    while the libraries import and the pipeline loads, and the loaded heap is then frozen (``_loaded``).
    Otherwise each full collection walks the growing heap of modules, functions and weights again: 8 of them,
    ~2 s of a 13 s warm demo run on 2 CPU cores. (Not when ``main`` is called from another program: its heap
    is its own.)"""
    if not program or not gc.isenabled():
        yield
        return
    gc.disable()
    _COLLECTOR_PAUSED[0] = True
    try:
        yield
    finally:
        if _COLLECTOR_PAUSED[0]:
            _COLLECTOR_PAUSED[0] = False
            gc.enable()


def _loaded() -> None:
    """The pipeline is loaded and on its device: what is alive now lives to the end; one collection, then
    those objects are frozen out of later collections (``gc.freeze()``) and the collector runs again."""
    if _COLLECTOR_PAUSED[0]:
        _COLLECTOR_PAUSED[0] = False
        gc.collect()
        gc.freeze()
        gc.enable()


# --- generate: the run -------------------------------------------------------------------------------
def _quiet_libraries() -> None:
    """--quiet: no progress bars or warnings from diffusers, transformers and the Hub client."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import diffusers.utils.logging as diffusers_logging
    import transformers.utils.logging as transformers_logging

    for lib in (diffusers_logging, transformers_logging):
        lib.set_verbosity_error()
        lib.disable_progress_bar()


@contextlib.contextmanager
def _import_notices_kept_off(quiet: bool):
    """While diffusers and a pipeline's module are imported: their import-time notices (optional packages
    they do without, deprecations inside them or torch, transformers' "requires torchvision (not
    installed); falling back to CLIPImageProcessorPil", for an image processor FluxPipeline never uses)
    concern the libraries, not this run, and stay off stderr (``--debug`` shows them). Warnings and log
    records of the loading itself (weights, the prompt) are not touched."""
    if not quiet:
        yield
        return
    import warnings

    import diffusers.utils.logging as diffusers_logging
    import transformers.utils.logging as transformers_logging

    import logging

    levels = [(lib, lib.get_verbosity()) for lib in (diffusers_logging, transformers_logging)]
    was_disabled = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lib, _ in levels:
            lib.set_verbosity_error()
        # log records of the other libraries diffusers imports (torchao's "Failed to load ..._C_mxfp8" for a
        # CUDA extension, torch's pytree deprecation it triggers): below ERROR, none is about this run
        logging.disable(max(was_disabled, logging.WARNING))
        try:
            yield
        finally:
            logging.disable(was_disabled)
            for lib, level in levels:
                lib.set_verbosity(level)


def _plain_torch_tpu_warnings() -> None:
    """torch_tpu's warnings (a prompt cut, an op run on the CPU: they begin "torch_tpu: ") printed as the line
    they are, like this program's other lines: the code running them is this program, so the file:line a
    warning names would be torch_tpu's own. Others' warnings keep Python's form."""
    import warnings

    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith("torch_tpu: "):
            try:
                print(str(message), file=file or sys.stderr, flush=True)
            except (ValueError, OSError):
                pass
            return
        original(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _import_pipeline_class(folder: str, quiet: bool) -> None:
    """The pipeline class a local folder's model_index.json names, imported with its notices kept off."""
    try:
        with open(os.path.join(folder, "model_index.json")) as f:
            name = json.load(f).get("_class_name")
    except (OSError, ValueError):
        return  # (a Hub id: diffusers imports the class while it loads)
    with _import_notices_kept_off(quiet):
        import diffusers

        getattr(diffusers, str(name), None)


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def cmd_generate(args) -> int:
    notes = validate_generate(args)
    say = (lambda *a, **k: None) if args.quiet else print
    for note in notes:
        print(note)
    if args.quiet:
        _quiet_libraries()
    _plain_torch_tpu_warnings()
    # a status line on stderr while an XLA compilation takes more than a second (--quiet: none)
    os.environ["TORCH_TPU_COMPILE_STATUS"] = "0" if args.quiet else os.environ.get("TORCH_TPU_COMPILE_STATUS", "1")

    import torch
    import torch_tpu

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    on_tpu = args.device == "tpu"
    if on_tpu:
        torch.tpu.eager_mode = args.mode if args.mode in EAGER_MODE_NAMES else _MODES[args.mode]
        sync = torch.tpu.synchronize
    else:
        def sync():
            pass

    if on_tpu:  # the device opens (~10 s for a TPU chip) while diffusers is imported and the pipeline loads
        from .runtime import platform as runtime_platform

        runtime_platform.start_in_background()
    say(f"mode: {args.mode}" + (f" ({_MODES[args.mode]})" if on_tpu else "") + f"  dtype: {args.dtype}"
        + ("  offload: model cpu offload" if args.offload else ""))

    with _import_notices_kept_off(not args.debug):
        from diffusers import DiffusionPipeline

    t_total = time.perf_counter()
    t0 = time.perf_counter()
    height, width = args.height, args.width
    if args.model is None and args.kind == "demo":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # shipped in the package: never reach for the Hub
        from .demo import shipped

        with _import_notices_kept_off(not args.debug):
            from diffusers import FluxPipeline
        say(f"model: the shipped demo model (coloured shapes, trained on the tpu device) at {shipped.WEIGHTS}")
        pipe = FluxPipeline.from_pretrained(str(shipped.WEIGHTS), dtype=dtype, local_files_only=True)
    elif args.model is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built offline: never reach for the Hub
        from .testing import tiny_pipelines

        path = tiny_pipelines.build_pipeline_dir(args.kind, args.size)
        say(f"model: offline {args.size} {args.kind} pipeline (random weights) at {path}")
        _import_pipeline_class(str(path), quiet=not args.debug)
        pipe = DiffusionPipeline.from_pretrained(str(path), dtype=dtype, local_files_only=True)
        default_res = tiny_pipelines.SIZE_SPECS[args.size]["default_image"]
        height = height or default_res
        width = width or default_res
    else:
        say(f"model: {args.model}")
        _import_pipeline_class(os.path.expanduser(args.model), quiet=not args.debug)
        pipe = DiffusionPipeline.from_pretrained(args.model, dtype=dtype)
    if getattr(args, "prompt_warned", False) and hasattr(pipe.tokenizer_2, "already_warned"):
        pipe.tokenizer_2.already_warned(args.prompt)  # (printed above, before the model loaded)
    if args.demo_call:  # a demo model: its training size and T5 length unless given
        height = height or args.demo_call["height"]
        width = width or args.demo_call["width"]
    say(f"pipeline: {type(pipe).__name__}")
    if args.quiet:
        pipe.set_progress_bar_config(disable=True)
    timer = _Timer(sync, (lambda: torch_tpu.stats()["cache_misses"]) if on_tpu else (lambda: 0))
    timer.stages.append(("load", time.perf_counter() - t0))
    t0 = time.perf_counter()
    say(f"platform: {torch_tpu.platform()}  device: "
        + (f"tpu:0 ({torch.tpu.get_device_name()})" if on_tpu else "cpu (CPU torch)"))
    if on_tpu:  # what opening the device took beyond the load it overlapped
        timer.stages.append(("device start (after load)", time.perf_counter() - t0))

    if on_tpu:
        torch.tpu.reset_peak_memory_stats()
    torch_tpu.reset_stats()
    t0 = time.perf_counter()
    if args.offload:
        pipe.enable_model_cpu_offload()  # finds the "tpu" device through torch.accelerator
    elif on_tpu:
        pipe.to("tpu")
    sync()
    timer.stages.append(("move to device" if not args.offload else "move to device (offload hooks)",
                         time.perf_counter() - t0))
    timer.built["move to device"] = timer.programs()
    _loaded()
    if args.mode == "compile" and on_tpu:
        # static shapes: the first call compiles (its time shows in the first step), later calls reuse
        if args.offload:  # offload hooks cannot be traced: compile only the repeated blocks (the seed's recipe)
            pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
        else:
            pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)

    pipe.encode_prompt = timer.wrap("text encoding", pipe.encode_prompt)
    pipe.vae.decode = timer.wrap("vae decode", pipe.vae.decode)
    step_times: list[float] = []

    def on_step_end(p, i, t, kwargs):
        sync()
        now = time.perf_counter()
        step_times.append(now - timer.mark)
        timer.mark = now
        return kwargs

    def call_once():
        call = dict(prompt=args.prompt, num_inference_steps=args.steps, height=height, width=width,
                    generator=torch.Generator("cpu").manual_seed(args.seed), callback_on_step_end=on_step_end)
        if args.guidance is not None:
            call["guidance_scale"] = args.guidance
        if "max_sequence_length" in args.demo_call:
            call["max_sequence_length"] = args.demo_call["max_sequence_length"]
        timer.mark = time.perf_counter()
        t_call = time.perf_counter()
        image = pipe(**call).images[0]
        sync()
        if on_tpu:  # the totals of the stages whose compilation was announced, before the stage table
            from .runtime import compile_status

            compile_status.close_stages()
        return image, time.perf_counter() - t_call

    setup_stages = len(timer.stages)  # load, device start, move: kept; each run records its own stages
    warm_s = []
    for _ in range(args.warmup):
        step_times.clear()
        del timer.stages[setup_stages:]
        warm_s.append(call_once()[1])
    runs = []  # (call seconds, step seconds) of each timed run
    for _ in range(args.runs):
        step_times.clear()
        del timer.stages[setup_stages:]
        image, call_s = call_once()
        runs.append((call_s, list(step_times)))
    image.save(args.output)

    say("--- time per stage (s)" + (" of the last run" if len(runs) > 1 or warm_s else "") + " ---")
    for name, s in timer.stages:
        if name == "vae decode":
            continue
        say(f"{name:<32s}{s:9.3f}")
    for i, s in enumerate(step_times):
        note = "  (includes latent preparation)" if i == 0 else ""
        say(f"{'denoising step ' + str(i + 1):<32s}{s:9.3f}{note}")
    for name, s in timer.stages:
        if name == "vae decode":
            say(f"{name:<32s}{s:9.3f}")
    say(f"{'pipeline call':<32s}{runs[-1][0]:9.3f}")
    say(f"{'total':<32s}{time.perf_counter() - t_total:9.3f}")
    if warm_s or len(runs) > 1:
        _print_steady_state(say, warm_s, runs)
    if on_tpu:
        say(f"peak device memory: {_mib(torch.tpu.max_memory_allocated())}")
        st = torch_tpu.stats()
        keys = ("compiles", "compile_seconds", "cache_loads", "cache_load_seconds", "cache_rejects",
                "graph_compiles", "cache_hits", "cache_misses", "executions", "flushes", "cpu_fallbacks")
        say("torch_tpu stats: " + ", ".join(
            f"{k}={st[k]:.2f}" if isinstance(st.get(k), float) else f"{k}={st.get(k)}" for k in keys if k in st))
        say(_programs_line(st["cache_misses"], timer.built))
        say(_compile_summary(st, warm_s[0] if warm_s else runs[0][0], warm=bool(warm_s)))
    median_call = _median([r[0] for r in runs])
    print(f"saved: {args.output} ({image.size[0]}x{image.size[1]})"
          + (f"  pipeline call {median_call:.3f} s" + (" (median)" if len(runs) > 1 else "") if args.quiet else ""))
    return 0


def _print_steady_state(say, warm_s, runs) -> None:
    calls = [r[0] for r in runs]
    steps = [s for r in runs for s in r[1][1:]]  # step 1 also prepares latents
    say(f"--- steady state: {len(runs)} timed run(s) after {len(warm_s)} warm-up call(s) ---")
    if warm_s:
        say(f"{'warm-up calls':<32s}" + " ".join(f"{s:.3f}" for s in warm_s))
    say(f"{'pipeline call median':<32s}{_median(calls):9.3f}   (min {min(calls):.3f}, max {max(calls):.3f})")
    if steps:
        say(f"{'denoising step median':<32s}{_median(steps):9.3f}   (steps 2.., all timed runs)")


def _fail(message: str, code: int) -> int:
    print(f"torch_tpu: error: {message}", file=sys.stderr)
    return code


def _programs_line(total: int, built: dict) -> str:
    """'programs: N distinct (text encoding a, denoising b, vae decode c)': the XLA programs the run
    built or loaded (one per op and shapes in eager, per graph in fused and compiled mode), by stage."""
    stages = {k: n for k, n in built.items() if n}
    stages["denoising"] = total - sum(built.values())  # what no other stage built: the pipeline's loop
    order = ("move to device", "text encoding", "denoising", "vae decode")
    parts = [f"{k} {stages[k]}" for k in order if stages.get(k)]
    return f"programs: {total} distinct" + (f" ({', '.join(parts)})" if parts else "")


def _compile_summary(st: dict, call_s: float, warm: bool = False) -> str:
    """'compiled N programs, loaded M from cache (dir)', and on a cold run why it was slow. ``call_s`` is
    the first pipeline call's time (where the compiles happened: the first warm-up call with ``warm``)."""
    from .runtime import disk_cache

    folder = disk_cache.folder()
    where = folder if folder else "disk cache off: TORCH_TPU_CACHE_DIR is empty"
    line = (f"compiled {st['compiles']} programs ({st['compile_seconds']:.1f} s), "
            f"loaded {st['cache_loads']} from cache ({where})")
    if st["cache_rejects"]:
        line += f"; ignored {st['cache_rejects']} bad cache entries (rebuilt)"
    if st["compiles"] and st["compile_seconds"] > 0.25 * call_s:
        share = min(st["compile_seconds"] / call_s, 1.0) if call_s else 1.0
        which = "the first (warm-up) pipeline call" if warm else "the pipeline call"
        if st["cache_loads"] == 0:
            why = (f"\nthis was a cold run: {share:.0%} of {which} was XLA compilation of programs "
                   "this machine had not seen; ")
            why += ("they are now on disk, so the next run with the same model, sizes and settings loads them "
                    "instead" if folder else "set TORCH_TPU_CACHE_DIR to keep them for the next run")
        else:
            why = (f"\n{share:.0%} of {which} was XLA compilation of programs not in the cache yet "
                   "(new shapes or settings); the next run loads them")
        line += why
    return line


def main(argv=None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, with its usage (the top-level one showed its own)
        parser._subparsers._group_actions[0].choices[args.command].error(
            f"unrecognized arguments: {' '.join(unknown)}")
    command = {"info": cmd_info, "bench": cmd_bench, "generate": cmd_generate}[args.command]
    # generate, run as the program (the entry points pass no argv; a caller passing arguments keeps its heap
    # as it is): the collector waits while the pipeline loads
    with _collector_paused_while_loading(argv is None and args.command == "generate"):
        if getattr(args, "debug", False):
            return command(args)
        try:
            return command(args)
        except UsageError as exc:
            return _fail(str(exc), 2)
        except KeyboardInterrupt:
            return _fail("interrupted", 130)
        except Exception as exc:  # one line; --debug shows the traceback
            text = str(exc).strip().splitlines()
            first = text[0] if text else ""
            return _fail(f"{type(exc).__name__}: {first} (run with --debug for the traceback)", 1)


if __name__ == "__main__":
    sys.exit(main())
