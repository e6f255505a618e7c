"""What an eager op costs next to JAX's own dispatch, and what a fused graph costs to compile, in one run.

    python bench/bench_eager_cost.py            # writes bench/results/eager_cost.json
    python bench/bench_eager_cost.py --quick    # fewer repeats, chains of 250/500 only (a minute on 2 cores)
    python bench/bench_eager_cost.py --out DIR/eager_cost.json   # somewhere else (the TPU lane)

The workload is a chain of adds on a (128,) float32 tensor, n times ``v = v + y`` (operand "tensor") and
``v = v + 0.5`` (operand "number": a Python number, which torch_tpu passes to a program as an input of its own
unless it bakes it in); every op is as small as an op can be, so what is measured is the host's cost per op,
not the device's. JAX runs the same chains: ``a + b`` on arrays, and ``a + 0.5`` with the number in the code.

- per op (n = --ops, 200): strict eager per op; fused eager per op in the steady state (the graph's program
  cached: recording the n ops, flushing, running, waiting) and the recording alone; beside JAX calling one
  jitted add n times (the same arrays, the same device), and JAX calling one jitted function of the whole chain.
- compile (n = --chains, 250/500/1000): the first flush of a fused chain whose only value alive at the end
  is the last one (tracing, lowering and XLA's compilation, then the run), beside JAX's ``jit(chain).lower()
  .compile()`` returning the last value, and returning every value (what a graph that kept every
  intermediate alive would cost), and the steady run of each.

Nothing comes from a disk cache: the programs are compiled in this process (TORCH_TPU_CACHE_DIR is set to an
empty folder of its own unless --keep-cache-dir). Runs on whatever platform JAX picks (the CPU here, the TPU
on a TPU VM); the ratios are what to compare across machines.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="chain length for the per-op costs")
    parser.add_argument("--chains", default="250,500,1000", help="chain lengths whose fused compile is timed")
    parser.add_argument("--repeat", type=int, default=7, help="timed blocks per per-op measurement")
    parser.add_argument("--quick", action="store_true", help="3 repeats, chains 250,500")
    parser.add_argument("--keep-cache-dir", action="store_true",
                        help="use TORCH_TPU_CACHE_DIR as set (a warm disk cache makes 'compile' a load)")
    parser.add_argument("--operands", default="tensor,number", help="which chains: tensor (v + y), number (v + 0.5)")
    parser.add_argument("--every", default="tensor", choices=("tensor", "all", "none"),
                        help="which chains JAX also compiles returning every value (XLA:CPU takes 10-20 s for a "
                             "500-step number chain)")
    parser.add_argument("--no-write", action="store_true", help="print only, do not write the JSON")
    parser.add_argument("--out", default=None, help="the JSON's path (default bench/results/eager_cost.json)")
    return parser


def _args():
    args = parser().parse_args()
    if args.quick:
        args.repeat = 3
        if args.chains == "250,500,1000":
            args.chains = "250,500"
    args.chains = [int(n) for n in args.chains.split(",") if n]
    args.operands = [o for o in args.operands.split(",") if o]
    return args


def _median_block(fn, repeat: int, sync) -> float:
    """Median seconds of ``fn(); sync()`` over ``repeat`` blocks, after one warm-up block."""
    fn()
    sync()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    args = _args()
    if not args.keep_cache_dir:
        os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="eager_cost_cache_")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jax
    import torch

    import torch_tpu
    from _common import write
    from torch_tpu import EagerMode
    from torch_tpu.engine import fused as fused_engine

    n = args.ops
    torch.manual_seed(0)
    x_cpu, y_cpu = torch.randn(128), torch.randn(128)
    x, y = x_cpu.to("tpu"), y_cpu.to("tpu")
    xj, yj = torch_tpu.to_jax(x), torch_tpu.to_jax(y)
    sync = torch.tpu.synchronize
    steps = {"tensor": (lambda v: v + y, lambda v: v + y_cpu, lambda a, b: a + b),
             "number": (lambda v: v + 0.5, lambda v: v + 0.5, lambda a, b: a + 0.5)}
    results: dict = {"per_op": {}, "compile": {}}

    for operand in args.operands:
        step_tpu, step_cpu, step_jax = steps[operand]

        def torch_chain(k, step=step_tpu):
            v = x
            for _ in range(k):
                v = step(v)
            return v

        def cpu_chain(k, step=step_cpu):
            v = x_cpu
            for _ in range(k):
                v = step(v)
            return v

        def chain_fn(k, every: bool, step=step_jax):
            def f(a, b):
                vals = []
                v = a
                for _ in range(k):
                    v = step(v, b)
                    vals.append(v)
                return tuple(vals) if every else v
            return f

        results["per_op"][operand] = _per_op(args, n, torch_chain, cpu_chain(n), chain_fn, step_jax, xj, yj,
                                             sync, torch, torch_tpu, jax, EagerMode)
        every = args.every == "all" or args.every == operand
        results["compile"][operand] = {str(k): _compile_row(args, k, torch_chain, cpu_chain(k), chain_fn, xj, yj,
                                                            torch, torch_tpu, jax, EagerMode, fused_engine, every)
                                       for k in args.chains}

    results["strict_layers"] = _layers(args, x, y, jax, torch)
    targets = {"strict_over_jax_op": 4.0, "fused_over_strict": 0.5, "fused_first_over_jax_compile": 2.0}
    print(f"platform {torch_tpu.platform()} ({torch.tpu.get_device_name()}), chains of adds on (128,) float32")
    for operand in args.operands:
        p = results["per_op"][operand]
        for suffix, what in (("_us", "wall, median"), ("_cpu_us", "thread CPU, fastest")):
            tail = "" if suffix == "_us" else "_cpu"
            print(f"[{operand}] per op (n={n}, {what}): jax jitted op {p['jax_jitted_op' + suffix]:.1f} us | strict "
                  f"{p['strict' + suffix]:.1f} us | fused steady {p['fused_steady' + suffix]:.1f} us (recording "
                  f"{p['fused_recording' + suffix]:.1f} us) | strict/jax op {p['strict_over_jax_op' + tail]:.2f}x "
                  f"(target <= 4 on CPU), fused/strict {p['fused_over_strict' + tail]:.2f}x (target <= 0.5)")
        print(f"[{operand}] jax whole chain {p['jax_whole_chain_per_op_us']:.2f} us per op")
        for k, r in results["compile"][operand].items():
            print(f"[{operand}] chain {k:>5}: fused first flush {r['fused_first_flush_s']:.2f} s (recording "
                  f"{r['fused_recording_s']:.2f} s, XLA {r['fused_compile_seconds_counter']:.2f} s, "
                  f"{r['fused_outputs_returned']} outputs) | jax compile last {r['jax_compile_last_value_s']:.2f} s"
                  + ("" if r["jax_compile_every_value_s"] is None else f", every {r['jax_compile_every_value_s']:.2f} s")
                  + f" | ratio {r['fused_first_over_jax_compile']:.2f}x (CPU time "
                  f"{r['fused_first_over_jax_compile_cpu']:.2f}x)"
                  f" (target <= 2) | run: fused {r['fused_steady_call_ms']:.2f} ms (with recording), jax "
                  f"{r['jax_run_last_value_ms']:.3f} ms")
    lay = results["strict_layers"]
    print("strict x + y, where the time goes (us; each layer includes the ones below it): " + ", ".join(
        f"{k} {v:.1f}" for k, v in lay["cumulative_us"].items()))
    print("  per layer: " + ", ".join(f"{k} {v:.1f}" for k, v in lay["own_us"].items()))
    if not args.no_write:
        write("eager_cost", {"workload": "chains of adds on (128,) float32: v + y (tensor), v + 0.5 (number)",
                             "results": results, "targets": targets, "quick": args.quick}, path=args.out)


def _layers(args, x, y, jax, torch):
    """Strict eager's ``x + y`` timed layer by layer on the cached path (thread CPU time, the fastest of many
    blocks: what the host spends, less what other processes take): JAX's own jitted add; the op's compiled
    program called with the arrays; wrapping a result as a tensor; the structural key; the op path (key,
    entry, launch, wrap); the ``__torch_dispatch__`` router; and the whole call from Python (torch's
    dispatcher included)."""
    from torch_tpu.eager import arguments, op_path, router
    from torch_tpu.runtime import platform
    from torch_tpu.tensor.tensor import TpuTensor, new_full

    func = torch.ops.aten.add.Tensor
    add = jax.jit(lambda a, b: a + b)
    x + y  # the entry and its program
    rounds = 10 if args.quick else 30

    def best(fn, n=300):
        fn()
        times = []
        for _ in range(rounds):
            t0 = time.thread_time()
            for _ in range(n):
                fn()
            times.append(time.thread_time() - t0)
        return min(times) / n * 1e6

    with platform.X64():
        key, arrays = arguments.key_and_inputs(func, (x, y), {})
        entry = op_path._ENTRIES[key]
        prog = entry.compiled
        out = prog(*arrays)[0]
        xj, yj = arrays
        cum = {"jax_jitted_add": best(lambda: add(xj, yj)),
               "program_call": best(lambda: prog(*arrays)),
               "wrap_result": best(lambda: new_full(out, torch.float32)),
               "structural_key": best(lambda: arguments.key_and_inputs(func, (x, y), {})),
               "op_path": best(lambda: op_path.run_op(func, (x, y), {})),
               "router": best(lambda: router.torch_dispatch(TpuTensor, func, (TpuTensor,), (x, y), None))}
    cum["whole_x_plus_y"] = best(lambda: x + y)
    own = {"jax_program_call": cum["program_call"], "wrap_result": cum["wrap_result"],
           "structural_key": cum["structural_key"],
           "entry_and_launch_glue": cum["op_path"] - cum["program_call"] - cum["wrap_result"] - cum["structural_key"],
           "router": cum["router"] - cum["op_path"], "torch_dispatcher": cum["whole_x_plus_y"] - cum["router"]}
    return {"cumulative_us": cum, "own_us": own, "whole_over_jax_jitted_add": cum["whole_x_plus_y"] / cum["jax_jitted_add"]}


def _timed(fn, repeat: int, sync) -> tuple:
    """(median wall seconds, least thread CPU seconds) of ``fn(); sync()`` over ``repeat`` blocks after a
    warm-up: the wall time is what a user waits; the CPU time of this thread is what the host spends on
    it, which other processes on a loaded machine inflate far less (each block's fastest run)."""
    fn()
    sync()
    wall, cpu = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        sync()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
    return statistics.median(wall), min(cpu)


def _per_op(args, n, torch_chain, want, chain_fn, step_jax, xj, yj, sync, torch, torch_tpu, jax, EagerMode):
    """Per-op costs of a chain of ``n`` steps: JAX op by op and whole, strict, fused steady and recording;
    each as wall time (``*_us``, medians) and as this thread's CPU time (``*_cpu_us``, the fastest block)."""
    add = jax.jit(step_jax)

    def jax_ops():
        v = xj
        for _ in range(n):
            v = add(v, yj)
        v.block_until_ready()

    jax_chain = jax.jit(chain_fn(n, False))
    rep = max(args.repeat, 5)
    jax_op = _timed(jax_ops, rep, lambda: None)
    jax_chain_s = _median_block(lambda: jax_chain(xj, yj).block_until_ready(), args.repeat, lambda: None) / n

    with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER):
        got = torch_chain(n).cpu()
        strict = _timed(lambda: torch_chain(n), rep, sync)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), "strict chain differs from CPU torch"

    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        record, whole, record_cpu, whole_cpu = [], [], [], []
        for k in range(rep + 2):  # the first two: compile, then the program found again
            t0, c0 = time.perf_counter(), time.thread_time()
            out = torch_chain(n)
            t1, c1 = time.perf_counter(), time.thread_time()
            torch_tpu.sync()
            t2, c2 = time.perf_counter(), time.thread_time()
            if k == 0:
                assert torch.allclose(out.cpu(), want, rtol=1e-5, atol=1e-5), "fused chain differs from CPU torch"
            if k >= 2:
                record.append(t1 - t0)
                whole.append(t2 - t0)
                record_cpu.append(c1 - c0)
                whole_cpu.append(c2 - c0)
        del out
    fused = (statistics.median(whole), min(whole_cpu))
    recording = (statistics.median(record), min(record_cpu))
    out = {"ops": n, "jax_whole_chain_per_op_us": jax_chain_s * 1e6}
    for name, (wall, cpu) in (("jax_jitted_op", jax_op), ("strict", strict), ("fused_steady", fused),
                              ("fused_recording", recording)):
        out[f"{name}_us"] = wall / n * 1e6
        out[f"{name}_cpu_us"] = cpu / n * 1e6
    for suffix in ("_us", "_cpu_us"):
        tail = "" if suffix == "_us" else "_cpu"
        out[f"strict_over_jax_op{tail}"] = out[f"strict{suffix}"] / out[f"jax_jitted_op{suffix}"]
        out[f"fused_over_strict{tail}"] = out[f"fused_steady{suffix}"] / out[f"strict{suffix}"]
        out[f"fused_over_jax_op{tail}"] = out[f"fused_steady{suffix}"] / out[f"jax_jitted_op{suffix}"]
    return out


def _compile_row(args, k, torch_chain, want, chain_fn, xj, yj, torch, torch_tpu, jax, EagerMode, fused_engine,
                 every: bool):
    """The first flush of a fused chain of ``k`` steps (only its last value alive) beside JAX compiling it
    (returning the last value; with ``every``, also returning every value)."""
    p0, t0 = time.process_time(), time.perf_counter()
    lowered = jax.jit(chain_fn(k, False)).lower(xj, yj)
    t1 = time.perf_counter()
    last_prog = lowered.compile()
    p2, t2 = time.process_time(), time.perf_counter()
    jax_last_run = _median_block(lambda: last_prog(xj, yj).block_until_ready(), args.repeat, lambda: None)
    jax_every_s = jax_every_run = None
    if every:
        t3 = time.perf_counter()
        every_prog = jax.jit(chain_fn(k, True)).lower(xj, yj).compile()
        jax_every_s = time.perf_counter() - t3
        jax_every_run = _median_block(lambda: every_prog(xj, yj)[-1].block_until_ready(), args.repeat, lambda: None)
        del every_prog

    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        torch_tpu.reset_stats()
        p4, t4 = time.process_time(), time.perf_counter()
        out = torch_chain(k)
        t5 = time.perf_counter()
        torch_tpu.sync()
        p6, t6 = time.process_time(), time.perf_counter()
        st = torch_tpu.stats()
        nodes, outputs = fused_engine.last_flush()
        got = out.cpu()

        def fused_again():
            torch_chain(k)
            torch_tpu.sync()
        fused_run = _median_block(fused_again, args.repeat, lambda: None)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), f"fused chain of {k} differs from CPU torch"
    return {"jax_compile_last_value_s": t2 - t0, "jax_lower_s": t1 - t0, "jax_compile_every_value_s": jax_every_s,
            "jax_run_last_value_ms": jax_last_run * 1e3,
            "jax_run_every_value_ms": None if jax_every_run is None else jax_every_run * 1e3,
            "fused_first_flush_s": t6 - t4, "fused_recording_s": t5 - t4,
            "fused_compile_seconds_counter": st["compile_seconds"], "fused_compiles": st["compiles"],
            "fused_cache_loads": st["cache_loads"], "fused_outputs_returned": outputs, "fused_nodes": nodes,
            "fused_steady_call_ms": fused_run * 1e3, "fused_first_over_jax_compile": (t6 - t4) / (t2 - t0),
            # the process's CPU time (every thread: XLA compiles on a compile thread in fused mode), which
            # other processes on a loaded machine inflate far less than the wall time
            "jax_compile_last_value_cpu_s": p2 - p0, "fused_first_flush_cpu_s": p6 - p4,
            "fused_first_over_jax_compile_cpu": (p6 - p4) / max(p2 - p0, 1e-9)}


if __name__ == "__main__":
    main()
