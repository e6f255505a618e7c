"""Loading the pipeline ``generate`` runs: the shipped demo model, an offline pipeline of random weights or a
``--model`` folder or Hub id, with the libraries' import-time notices kept off stderr and Python's collector
paused while it loads; then its place on the device (moved, offloaded, its transformer compiled)."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import sys

_COLLECTOR_PAUSED = [False]


@contextlib.contextmanager
def collector_paused_while_loading(program: bool):
    """When this process is the program (``python -m torch_tpu``, ``torch-tpu``): Python's collector is paused
    while the libraries import and the pipeline loads, and the loaded heap is then frozen (``loaded``).
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


def loaded() -> None:
    """The pipeline is loaded and on its device: what is alive now lives to the end; one collection, then
    those objects are frozen out of later collections (``gc.freeze()``) and the collector runs again."""
    if _COLLECTOR_PAUSED[0]:
        _COLLECTOR_PAUSED[0] = False
        gc.collect()
        gc.freeze()
        gc.enable()


def quiet_libraries() -> None:
    """--quiet: no progress bars or warnings from diffusers, transformers and the Hub client."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import diffusers.utils.logging as diffusers_logging
    import transformers.utils.logging as transformers_logging

    for lib in (diffusers_logging, transformers_logging):
        lib.set_verbosity_error()
        lib.disable_progress_bar()


@contextlib.contextmanager
def import_notices_kept_off(quiet: bool):
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


def plain_torch_tpu_warnings() -> None:
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
    with import_notices_kept_off(quiet):
        import diffusers

        getattr(diffusers, str(name), None)


def import_diffusers(quiet: bool) -> None:
    """diffusers imported (seconds on a slow host), its import-time notices kept off stderr unless ``--debug``:
    before the run's clock starts, as ``load`` times the pipeline's load alone."""
    with import_notices_kept_off(quiet):
        import diffusers  # noqa: F401


def load_pipeline(args, dtype, say):
    """The pipeline ``args`` name, loaded in ``dtype`` on the host, and the image size the run asks it for
    (None: the pipeline's own). ``say`` prints a line (nothing with --quiet)."""
    with import_notices_kept_off(not args.debug):
        from diffusers import DiffusionPipeline

    height, width = args.height, args.width
    if args.model is None and args.kind == "demo":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # shipped in the package: never reach for the Hub
        from ..demo import shipped

        with import_notices_kept_off(not args.debug):
            from diffusers import FluxPipeline
        say(f"model: the shipped demo model (coloured shapes, trained on the tpu device) at {shipped.WEIGHTS}")
        pipe = FluxPipeline.from_pretrained(str(shipped.WEIGHTS), dtype=dtype, local_files_only=True)
    elif args.model is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built offline: never reach for the Hub
        from ..testing import tiny_pipelines

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
        pipe.tokenizer_2.already_warned(args.prompt)  # (printed before the model loaded)
    if args.demo_call:  # a demo model: its training size and T5 length unless given
        height = height or args.demo_call["height"]
        width = width or args.demo_call["width"]
    say(f"pipeline: {type(pipe).__name__}")
    if args.quiet:
        pipe.set_progress_bar_config(disable=True)
    return pipe, height, width


def place_pipeline(pipe, args, on_tpu: bool) -> str:
    """Puts the pipeline where the run computes: on the tpu (``pipe.to``), offloaded to it
    (``enable_model_cpu_offload``) or left on the CPU. Returns the stage's name for the table."""
    if args.offload:
        pipe.enable_model_cpu_offload()  # finds the "tpu" device through torch.accelerator
    elif on_tpu:
        pipe.to("tpu")
    return "move to device (offload hooks)" if args.offload else "move to device"


def compile_for_mode(pipe, args, on_tpu: bool) -> None:
    """``--mode compile``: the transformer under ``torch.compile(backend="tpu")`` (its repeated blocks when
    offloaded); static shapes: the first call compiles (its time shows in the first step), later calls reuse."""
    if args.mode != "compile" or not on_tpu:
        return
    if args.offload:  # offload hooks cannot be traced: compile only the repeated blocks (the seed's recipe)
        pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    else:
        pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
