"""``python -m torch_tpu generate``: the arguments checked (``arguments``), the pipeline loaded and placed
(``loading``), the timed calls (``timed_run``), the report (``report``)."""
from __future__ import annotations

import os
import time

from ..config import EAGER_MODE_NAMES
from . import arguments, loading, report, timed_run


def _quiet_output(args) -> None:
    """What the run prints besides its own lines: with --quiet no libraries' progress bars or warnings and no
    live compile status; torch_tpu's warnings as plain lines."""
    if args.quiet:
        loading.quiet_libraries()
    loading.plain_torch_tpu_warnings()
    # a status line on stderr while an XLA compilation takes more than a second (--quiet: none)
    os.environ["TORCH_TPU_COMPILE_STATUS"] = "0" if args.quiet else os.environ.get("TORCH_TPU_COMPILE_STATUS", "1")


def _enter_device(args, on_tpu: bool, say):
    """The eager mode set and the device opening in the background (~10 s for a TPU chip) while diffusers is
    imported and the pipeline loads; returns the run's device sync."""
    import torch

    if on_tpu:
        torch.tpu.eager_mode = args.mode if args.mode in EAGER_MODE_NAMES else arguments.MODES[args.mode]
        from ..runtime import platform as runtime_platform

        runtime_platform.start_in_background()
    say(f"mode: {args.mode}" + (f" ({arguments.MODES[args.mode]})" if on_tpu else "") + f"  dtype: {args.dtype}"
        + ("  offload: model cpu offload" if args.offload else ""))
    return torch.tpu.synchronize if on_tpu else (lambda: None)


def _to_device(pipe, args, on_tpu: bool, timer: timed_run.StageTimer, say) -> None:
    """The device started (what it took beyond the load it overlapped), the pipeline placed on it (timed, with
    the programs that built), the loaded heap frozen, the transformer compiled with --mode compile."""
    import torch
    import torch_tpu

    t0 = time.perf_counter()
    say(f"platform: {torch_tpu.platform()}  device: "
        + (f"tpu:0 ({torch.tpu.get_device_name()})" if on_tpu else "cpu (CPU torch)"))
    if on_tpu:
        timer.stages.append(("device start (after load)", time.perf_counter() - t0))
        torch.tpu.reset_peak_memory_stats()
    torch_tpu.reset_stats()
    t0 = time.perf_counter()
    stage = loading.place_pipeline(pipe, args, on_tpu)
    timer.sync()
    timer.stages.append((stage, time.perf_counter() - t0))
    timer.built["move to device"] = timer.programs()
    loading.loaded()
    loading.compile_for_mode(pipe, args, on_tpu)


def _report(say, timer, result: timed_run.Runs, total_s: float, on_tpu: bool) -> None:
    several = bool(result.warm_s) or len(result.runs) > 1
    for line in report.stage_table(timer.stages, result.last_steps, result.runs[-1][0], total_s, several):
        say(line)
    if several:
        for line in report.steady_state(result.warm_s, result.runs):
            say(line)
    if on_tpu:
        import torch
        import torch_tpu

        from ..runtime import disk_cache

        say(f"peak device memory: {report.mib(torch.tpu.max_memory_allocated())}")
        st = torch_tpu.stats()
        say(report.stats_line(st))
        say(report.programs_line(st["cache_misses"], timer.built))
        first_s = result.warm_s[0] if result.warm_s else result.runs[0][0]
        say(report.compile_summary(st, first_s, disk_cache.folder(), warm=bool(result.warm_s)))


def cmd_generate(args) -> int:
    notes = arguments.validate_generate(args)
    say = (lambda *a, **k: None) if args.quiet else print
    for note in notes:
        print(note)
    _quiet_output(args)

    import torch
    import torch_tpu

    on_tpu = args.device == "tpu"
    sync = _enter_device(args, on_tpu, say)
    loading.import_diffusers(quiet=not args.debug)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    t_total = t0 = time.perf_counter()
    pipe, height, width = loading.load_pipeline(args, dtype, say)
    timer = timed_run.StageTimer(sync, (lambda: torch_tpu.stats()["cache_misses"]) if on_tpu else (lambda: 0))
    timer.stages.append(("load", time.perf_counter() - t0))
    _to_device(pipe, args, on_tpu, timer, say)
    result = timed_run.timed_calls(pipe, args, height, width, timer, on_tpu)
    result.image.save(args.output)
    _report(say, timer, result, time.perf_counter() - t_total, on_tpu)
    print(report.saved_line(args.output, result.image.size, result.runs, args.quiet))
    return 0
