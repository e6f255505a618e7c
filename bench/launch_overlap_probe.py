"""Can a strict op's launch overlap the host work of the next ops? A JAX-only probe (no torch needed).

On the TPU host a launch (a jitted program's call) costs ~120 us, most of it inside PJRT's execute; torch_tpu's
own host work per strict op is ~60 us more. If JAX releases the GIL for most of the launch, a launcher thread
that takes ops from a line while the caller's thread does the next op's host work makes an op cost about
max(launch, host work) instead of their sum. This measures, for a chain of dependent adds on a small array:

- ``launch_us``: the launch alone, per op, on the calling thread;
- ``independent_launch_us``: launches of the same input (no launch waits on the one before);
- ``host_us``: the stand-in host work alone (pure Python, about one strict op's share: ``--host-us``);
- ``serial_us``: host work then launch, per op, on one thread (what strict eager does now);
- ``overlapped_us``: host work on the calling thread, launches on a launcher thread fed through a deque,
  woken only when it went idle (what a launch line would do);
- ``handoff_us``: one wake of a waiting thread and its answer (the cost of going idle and being woken);
- ``two_threads_us``: two threads launching independent chains at once, per op of both (whether launches
  themselves run side by side).

    python bench/launch_overlap_probe.py --out DIR     # DIR/launch_overlap.json
"""
from __future__ import annotations

import argparse
import collections
import json
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp


def _best(fn, reps=5):
    best = float("inf")
    for _ in range(reps):
        best = min(best, fn())
    return best


def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    n = 0
    while time.perf_counter() < end:
        n += 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--host-us", type=float, default=60.0)
    ap.add_argument("--switch-us", type=float, default=0.0,
                    help="sys.setswitchinterval for the run (0: Python's default, 5 ms): how long a thread that "
                         "wants the GIL waits before asking the running one to drop it")
    args = ap.parse_args(argv)
    if args.switch_us:
        import sys

        sys.setswitchinterval(args.switch_us * 1e-6)
    n, host = args.ops, args.host_us
    add = jax.jit(lambda a: a + 1.0)
    x0 = jnp.zeros((128,), jnp.float32)
    add(x0).block_until_ready()

    def launch_only():
        x = x0
        t0 = time.perf_counter()
        for _ in range(n):
            x = add(x)
        x.block_until_ready()
        return (time.perf_counter() - t0) / n * 1e6

    def independent():  # the same input each time: no launch depends on the one before
        t0 = time.perf_counter()
        for _ in range(n):
            y = add(x0)
        y.block_until_ready()
        return (time.perf_counter() - t0) / n * 1e6

    def host_only():
        t0 = time.perf_counter()
        for _ in range(n):
            _busy(host)
        return (time.perf_counter() - t0) / n * 1e6

    def serial():
        x = x0
        t0 = time.perf_counter()
        for _ in range(n):
            _busy(host)
            x = add(x)
        x.block_until_ready()
        return (time.perf_counter() - t0) / n * 1e6

    def overlapped():
        line = collections.deque()
        wake = threading.Event()
        state = {"x": x0, "idle": True, "stop": False}
        done = threading.Event()

        def launcher():
            while True:
                while line:
                    line.popleft()()
                state["idle"] = True
                if line:  # an op put between the drain and going idle
                    state["idle"] = False
                    continue
                if state["stop"]:
                    done.set()
                    return
                wake.wait()
                wake.clear()
                state["idle"] = False

        def step():
            state["x"] = add(state["x"])

        th = threading.Thread(target=launcher, daemon=True)
        th.start()
        t0 = time.perf_counter()
        for _ in range(n):
            _busy(host)
            line.append(step)
            if state["idle"]:
                wake.set()
        state["stop"] = True
        wake.set()
        done.wait()
        state["x"].block_until_ready()
        elapsed = (time.perf_counter() - t0) / n * 1e6
        th.join()
        return elapsed

    def handoff():
        ask, answer = threading.Event(), threading.Event()
        m = 500

        def other():
            for _ in range(m):
                ask.wait()
                ask.clear()
                answer.set()

        th = threading.Thread(target=other)
        th.start()
        t0 = time.perf_counter()
        for _ in range(m):
            ask.set()
            answer.wait()
            answer.clear()
        th.join()
        return (time.perf_counter() - t0) / m * 1e6

    def two_threads():
        def chain(out, i):
            x = x0
            for _ in range(n):
                x = add(x)
            x.block_until_ready()

        ths = [threading.Thread(target=chain, args=(None, i)) for i in range(2)]
        t0 = time.perf_counter()
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        return (time.perf_counter() - t0) / (2 * n) * 1e6

    result = {
        "platform": jax.devices()[0].platform,
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "ops": n,
        "host_us_asked": host,
        "switch_interval_us": args.switch_us or 5000.0,
    }
    for name, fn in (("launch_us", launch_only), ("independent_launch_us", independent),
                     ("host_us", host_only), ("serial_us", serial),
                     ("overlapped_us", overlapped), ("handoff_us", handoff), ("two_threads_us", two_threads)):
        result[name] = round(_best(fn), 2)
        print(f"{name:16s} {result[name]:8.2f}", flush=True)
    result["overlapped_over_serial"] = round(result["overlapped_us"] / result["serial_us"], 3)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_overlap.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
