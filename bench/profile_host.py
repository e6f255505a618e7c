"""Where a small eager op's host time goes on this machine: a cProfile of strict and fused chains of adds, and
the cost of the host primitives an op is made of (a clock read, a lock, a weak reference, a frame walk, torch's
wrapper subclass, JAX's jitted call), each against the same primitive's cost here.

    python bench/profile_host.py --out DIR     # DIR/profile_host.json

Written for the TPU host, whose sandbox makes some system calls cost far more than on a plain machine (JAX's own
dispatch of a jitted add: ~130 us there, ~5 us on a 2-core VM): the profile says which Python calls pay for it.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
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
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _callers) in stats.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}:{name}", "calls_per_op": nc / (chains * n_ops),
                     "own_us_per_op": tt / (chains * n_ops) * 1e6, "cum_us_per_op": ct / (chains * n_ops) * 1e6})
    rows.sort(key=lambda r: -r["own_us_per_op"])
    return {"wall_us_per_op": round(wall_us, 2), "top_own": rows[:30],
            "profiled_us_per_op": round(sum(r["own_us_per_op"] for r in rows), 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile_host.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
