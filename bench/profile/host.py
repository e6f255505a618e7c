"""Where a small eager op's host time goes on this machine: a cProfile of strict and fused chains of adds, and
the cost of the host primitives an op is made of (a clock read, a lock, a weak reference, a frame walk, torch's
wrapper subclass, JAX's jitted call), each against the same primitive's cost here.

    python bench/profile/host.py --out DIR     # DIR/profile_host.json
    python bench/profile/host.py --out DIR --flux fused,strict,compiled [--small]   # and a FLUX.1-width call per mode

With ``--flux``, also the FLUX.1-width transformer of ``bench/bench_model_width.py`` (2 double + 4 single blocks;
``--small``: width 128 and 24 tokens, the same ops at a size a CPU runs at once) in each mode: the call
and the time until it returned (the host's share), with Python's collector running and with the loaded heap
frozen (``gc.freeze()``, as ``python -m torch_tpu generate`` does), collections per call, and a cProfile of
calls: where a call's host time goes, op by op. In compiled mode, also the time dynamo's guards take to accept a
call (142 tpu inputs), beside the same model's guards on CPU tensors in the same run.

Written for the TPU host, whose sandbox makes some system calls cost far more than on a plain machine (JAX's own
dispatch of a jitted add: ~130 us there, ~5 us on a 2-core VM): the profile says which Python calls pay for it.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import threading
import time
from pathlib import Path


def _per_call_us(fn, n=2000):
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def _primitives(torch, jax):
    import threading
    import weakref

    lock = threading.Lock()
    rlock = threading.RLock()

    class Box:
        pass

    class Wrapper(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError

    box = Box()
    a = jax.numpy.ones((128,), jax.numpy.float32)
    add = jax.jit(lambda p, q: p + q)
    add(a, a).block_until_ready()
    x = torch.ones(128, device="tpu")
    out = {
        "perf_counter": _per_call_us(time.perf_counter),
        "thread_time": _per_call_us(time.thread_time),
        "lock_acquire_release": _per_call_us(lambda: (lock.acquire(), lock.release())),
        "rlock_with": _per_call_us(lambda: rlock.__enter__() and rlock.__exit__(None, None, None)),
        "threading_local_get": _per_call_us(lambda: threading.current_thread()),
        "weakref_ref": _per_call_us(lambda: weakref.ref(box)),
        "getframe": _per_call_us(lambda: sys._getframe(1)),
        "make_wrapper_subclass": _per_call_us(lambda: torch.Tensor._make_wrapper_subclass(
            Wrapper, (128,), dtype=torch.float32, device=x.device)),
        "jax_jitted_add": _per_call_us(lambda: add(a, a), n=500),
        "jax_device_put_scalar": _per_call_us(lambda: jax.device_put(0.5), n=500),
        "tpu_add_strict": _per_call_us(lambda: x + x, n=500),
    }
    return {k: round(v, 3) for k, v in out.items()}


def _profile_chain(torch, torch_tpu, mode, n_ops=200, chains=5):
    x = torch.ones(128, device="tpu")
    y = torch.ones(128, device="tpu")

    def chain():
        v = x
        for _ in range(n_ops):
            v = v + y
        torch_tpu.sync()
        return v

    for _ in range(3):
        chain()
    t0 = time.perf_counter()
    for _ in range(chains):
        chain()
    wall_us = (time.perf_counter() - t0) / (chains * n_ops) * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(chains):
        chain()
    prof.disable()
    rows = _rows(prof, chains * n_ops, "op")
    return {"wall_us_per_op": round(wall_us, 2), "top_own": rows[:30],
            "profiled_us_per_op": round(sum(r["own_us_per_op"] for r in rows), 2)}


def _rows(prof, per: int, unit: str) -> list:
    """A cProfile's functions, each with its calls, own and cumulative microseconds per ``unit`` (``per`` of
    them ran), the largest own time first."""
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _callers) in pstats.Stats(prof).stats.items():
        rows.append({"function": f"{Path(file).name}:{line}:{name}", f"calls_per_{unit}": nc / per,
                     f"own_us_per_{unit}": tt / per * 1e6, f"cum_us_per_{unit}": ct / per * 1e6})
    rows.sort(key=lambda r: -r[f"own_us_per_{unit}"])
    return rows


def _guard_check_us(torch, model, kwargs, repeat: int = 5, n: int = 200):
    """The time dynamo's guards take to accept a call of ``model`` (compiled with ``Module.compile``), in us:
    its one cache entry's guards checked against the frame's locals, best of ``repeat`` blocks of ``n``;
    None where the model's frame has another number of entries or the guards refuse these locals."""
    import inspect

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    forward = type(model).forward  # the frame dynamo compiled (diffusers wraps forward: it is the wrapper's)
    entries = _debug_get_cache_entry_list(forward.__code__)
    if len(entries) != 1:
        return None
    bound = inspect.signature(forward, follow_wrapped=False).bind(model, **kwargs)
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    f_locals.update(zip(forward.__code__.co_freevars, (c.cell_contents for c in forward.__closure__ or ())))
    check = entries[0].guard_manager.check
    with torch.no_grad():
        if not check(f_locals):
            return None
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(n):
                check(f_locals)
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return round(best, 1)


def _cpu_guard_check_us(torch, flux, args):
    """``_guard_check_us`` of the same model on CPU tensors (float32, torch's own eager backend): the guards
    of the same module tree without tpu tensors. Built at the small width (the guards are per tensor, not per
    element: the same module tree at any width), so the full-width run does not run FLUX on the host."""
    args = argparse.Namespace(**{**vars(args), "heads": 1, "image_tokens": 16, "text_tokens": 8})
    model = flux._model(args).float()
    kwargs = {k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
              for k, v in flux._inputs(args).items()}
    model.compile(backend="eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        model(**kwargs)
    return _guard_check_us(torch, model, kwargs)


def _profile_flux(torch, torch_tpu, mode, small: bool, calls: int = 10) -> dict:
    import gc
    import statistics

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: bench_model_width
    import bench_model_width as flux

    shape = dict(kind="flux", layers=2, single_layers=4, heads=1 if small else 24, image_tokens=16 if small else 4096,
                 text_tokens=8 if small else 512)
    args = argparse.Namespace(**shape)
    model = flux._model(args).to("tpu")
    kwargs = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in flux._inputs(args).items()}
    compiled = mode == "compiled"
    if compiled:  # compiled mode: one program per call, the rest of the call is the host's
        model.compile(backend="tpu", fullgraph=True, dynamic=False)
        mode = torch_tpu.EagerMode.DEFER_NEVER
    collections_seen = []
    gc.callbacks.append(lambda phase, info: phase == "start" and collections_seen.append(info["generation"]))

    def timed(n):
        walls, dispatched, main_cpu = [], [], []
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            c0 = time.thread_time()
            t0 = time.perf_counter()
            model(**kwargs)
            t1 = time.perf_counter()
            main_cpu.append(time.thread_time() - c0)
            torch.tpu.synchronize()
            dispatched.append(t1 - t0)
            walls.append(time.perf_counter() - t0)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        # The main thread's CPU time until the call returned, against that wall time: a gap means the thread
        # waited (for the GIL, a lock, a blocking system call), not that its Python was slow.
        out["main_thread_cpu_ms"] = round(1e3 * statistics.median(main_cpu), 2)
        out["process_cpu_ms_per_call"] = round(
            1e3 * ((usage.ru_utime + usage.ru_stime) - (usage0.ru_utime + usage0.ru_stime)) / n, 2)
        out["system_cpu_ms_per_call"] = round(1e3 * (usage.ru_stime - usage0.ru_stime) / n, 2)
        out["context_switches_per_call"] = [round((usage.ru_nvcsw - usage0.ru_nvcsw) / n, 1),
                                            round((usage.ru_nivcsw - usage0.ru_nivcsw) / n, 1)]
        return 1e3 * statistics.median(walls), 1e3 * statistics.median(dispatched)

    out = {"shape": shape, "threads": None}
    with torch.tpu.set_eager_mode(mode), torch.no_grad():
        timed(3)  # compiles
        collections_seen.clear()
        out["call_ms"], out["dispatch_ms"] = timed(calls)
        out["threads"] = sorted(t.name for t in threading.enumerate())
        out["collections_per_call"] = len(collections_seen) / calls
        out["gen2_collections"] = collections_seen.count(2)
        gc.freeze()
        try:
            out["frozen_call_ms"], out["frozen_dispatch_ms"] = timed(calls)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(calls):
                model(**kwargs)
            torch.tpu.synchronize()
            prof.disable()
        finally:
            gc.unfreeze()
    if compiled:
        with torch.tpu.set_eager_mode(mode):  # (the eager mode is part of what the guards check)
            out["guard_check_us"] = _guard_check_us(torch, model, kwargs)
        torch._dynamo.reset()  # (the CPU model's entry is then the only one of the frame's code)
        out["cpu_tensors_guard_check_us"] = _cpu_guard_check_us(torch, flux, args)
    rows = _rows(prof, calls, "call")
    out["profiled_ms_per_call"] = round(sum(r["own_us_per_call"] for r in rows) / 1e3, 2)
    out["top_own"] = rows[:40]
    out["top_cumulative"] = sorted(rows, key=lambda r: -r["cum_us_per_call"])[:60]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--flux", default="",
                        help="also profile a FLUX.1-width call in these modes (strict,fused,compiled; compiled also "
                             "times dynamo's guard check, beside the same model's on CPU tensors)")
    parser.add_argument("--small", action="store_true", help="the FLUX call at width 128 with 24 tokens")
    args = parser.parse_args()
    import jax
    import torch
    import torch_tpu

    result = {"platform": torch_tpu.platform(), "cpus": os.cpu_count(), "primitives_us": _primitives(torch, jax)}
    print("primitives (us):", result["primitives_us"], flush=True)
    for name, mode in (("strict", torch_tpu.EagerMode.DEFER_NEVER), ("fused", torch_tpu.EagerMode.DEFER_AND_FUSE)):
        with torch.tpu.set_eager_mode(mode):
            result[name] = _profile_chain(torch, torch_tpu, mode)
        print(name, "wall us/op", result[name]["wall_us_per_op"], "top:",
              [(r["function"], round(r["own_us_per_op"], 1)) for r in result[name]["top_own"][:12]], flush=True)
    modes = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "fused": torch_tpu.EagerMode.DEFER_AND_FUSE,
             "compiled": "compiled"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in filter(None, args.flux.split(",")):
        result[f"flux_{name}"] = flux = _profile_flux(torch, torch_tpu, modes[name], args.small)
        print(f"flux {name}: call {flux['call_ms']:.1f} ms (returned at {flux['dispatch_ms']:.1f}), heap frozen "
              f"{flux['frozen_call_ms']:.1f} ms ({flux['frozen_dispatch_ms']:.1f}); main thread cpu "
              f"{flux['main_thread_cpu_ms']:.1f} ms, process cpu {flux['process_cpu_ms_per_call']:.1f} (system "
              f"{flux['system_cpu_ms_per_call']:.1f}), switches {flux['context_switches_per_call']}, threads "
              f"{flux['threads']}; {flux['collections_per_call']:.1f} "
              f"collections per call; profiled {flux['profiled_ms_per_call']:.1f} ms per call; top:",
              [(r["function"], round(r["own_us_per_call"])) for r in flux["top_own"][:12]], flush=True)
        if "guard_check_us" in flux:
            print(f"flux {name}: dynamo's guard check {flux['guard_check_us']} us per call, the same model on CPU "
                  f"tensors {flux['cpu_tensors_guard_check_us']} us", flush=True)
        (out / "profile_host.json").write_text(json.dumps(result, indent=1))  # (a mode cut short keeps the rest)
    (out / "profile_host.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
