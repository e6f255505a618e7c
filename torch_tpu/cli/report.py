"""The report ``generate`` prints: the time per stage and per denoising step, the steady state over several
runs, the device's peak memory and counters, the programs built per stage, and what compiling cost. Plain
functions from numbers to lines: nothing here touches the device."""
from __future__ import annotations

# the counters of torch_tpu.stats() the report shows, in this order
STATS_SHOWN = ("compiles", "compile_seconds", "cache_loads", "cache_load_seconds", "cache_rejects",
               "graph_compiles", "cache_hits", "cache_misses", "executions", "flushes", "cpu_fallbacks")


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def stage_table(stages, step_times, call_s: float, total_s: float, of_last_run: bool) -> list[str]:
    """The time per stage (s): the setup stages and text encoding, each denoising step, the VAE's decode, the
    pipeline call and the whole run."""
    lines = ["--- time per stage (s)" + (" of the last run" if of_last_run else "") + " ---"]
    lines += [f"{name:<32s}{s:9.3f}" for name, s in stages if name != "vae decode"]
    for i, s in enumerate(step_times):
        note = "  (includes latent preparation)" if i == 0 else ""
        lines.append(f"{'denoising step ' + str(i + 1):<32s}{s:9.3f}{note}")
    lines += [f"{name:<32s}{s:9.3f}" for name, s in stages if name == "vae decode"]
    lines.append(f"{'pipeline call':<32s}{call_s:9.3f}")
    lines.append(f"{'total':<32s}{total_s:9.3f}")
    return lines


def steady_state(warm_s, runs) -> list[str]:
    """Several calls: the warm-up calls' seconds, the median call and the median denoising step (steps 2 on:
    step 1 also prepares the latents)."""
    calls = [r[0] for r in runs]
    steps = [s for r in runs for s in r[1][1:]]
    lines = [f"--- steady state: {len(runs)} timed run(s) after {len(warm_s)} warm-up call(s) ---"]
    if warm_s:
        lines.append(f"{'warm-up calls':<32s}" + " ".join(f"{s:.3f}" for s in warm_s))
    lines.append(f"{'pipeline call median':<32s}{median(calls):9.3f}   (min {min(calls):.3f}, max {max(calls):.3f})")
    if steps:
        lines.append(f"{'denoising step median':<32s}{median(steps):9.3f}   (steps 2.., all timed runs)")
    return lines


def stats_line(st: dict) -> str:
    return "torch_tpu stats: " + ", ".join(
        f"{k}={st[k]:.2f}" if isinstance(st.get(k), float) else f"{k}={st.get(k)}" for k in STATS_SHOWN if k in st)


def programs_line(total: int, built: dict) -> str:
    """'programs: N distinct (text encoding a, denoising b, vae decode c)': the XLA programs the run
    built or loaded (one per op and shapes in eager, per graph in fused and compiled mode), by stage."""
    stages = {k: n for k, n in built.items() if n}
    stages["denoising"] = total - sum(built.values())  # what no other stage built: the pipeline's loop
    order = ("move to device", "text encoding", "denoising", "vae decode")
    parts = [f"{k} {stages[k]}" for k in order if stages.get(k)]
    return f"programs: {total} distinct" + (f" ({', '.join(parts)})" if parts else "")


def compile_summary(st: dict, call_s: float, folder, warm: bool = False) -> str:
    """'compiled N programs, loaded M from cache (folder)', and on a cold run why it was slow. ``call_s`` is
    the first pipeline call's time (where the compiles happened: the first warm-up call with ``warm``);
    ``folder`` the disk cache's (None: off)."""
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


def saved_line(output: str, size, runs, quiet: bool) -> str:
    """The one line every run prints (with --quiet, with the pipeline call's time: median of several)."""
    line = f"saved: {output} ({size[0]}x{size[1]})"
    if quiet:
        line += f"  pipeline call {median([r[0] for r in runs]):.3f} s" + (" (median)" if len(runs) > 1 else "")
    return line
