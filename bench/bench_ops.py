"""Strict-eager cost per op on the tpu device beside plain CPU torch, in one run.

    python bench/bench_ops.py            # writes bench/results/ops.json

Each case is timed as a median over blocks of many calls; "tpu" includes dispatch and the device
work, synchronised at the end of each block (so asynchronous dispatch cannot hide device time).
"""
from __future__ import annotations

import copy

import torch

import torch_tpu
from _common import time_call, write


def _cases():
    torch.manual_seed(0)
    small_a, small_b = torch.randn(4, 8), torch.randn(4, 8)
    mat = torch.randn(256, 256)
    ln_x = torch.randn(8, 64, 256)
    ln = torch.nn.LayerNorm(256)
    mlp = torch.nn.Sequential(*[m for _ in range(15) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())])
    mlp_x = torch.randn(16, 256)
    return {
        "add_4x8": (lambda a, b: a + b, (small_a, small_b), None),
        "add_views_4x8": (lambda a, b: a[1:3].t() + b[::2].t(), (small_a, small_b), None),
        "mul_scalar_4x8": (lambda a: a * 2.5, (small_a,), None),
        "matmul_256": (lambda a: a @ a, (mat,), None),
        "layer_norm_8x64x256": (lambda x, m: m(x), (ln_x,), ln),
        "mlp15_forward_16x256": (lambda x, m: m(x), (mlp_x,), mlp),
    }


def main() -> None:
    results = {}
    with torch.inference_mode():
        for name, (fn, inputs, module) in _cases().items():
            dev_inputs = tuple(t.to("tpu") for t in inputs)
            if module is not None:
                dev_module = copy.deepcopy(module).to("tpu")
                cpu_call = lambda: fn(*inputs, module)  # noqa: E731
                tpu_call = lambda: fn(*dev_inputs, dev_module)  # noqa: E731
            else:
                cpu_call = lambda: fn(*inputs)  # noqa: E731
                tpu_call = lambda: fn(*dev_inputs)  # noqa: E731
            cpu_s = time_call(cpu_call)
            tpu_s = time_call(tpu_call, sync=torch.tpu.synchronize)
            n_ops = _count_ops(tpu_call)
            results[name] = {
                "cpu_torch_us": cpu_s * 1e6,
                "tpu_strict_eager_us": tpu_s * 1e6,
                "ratio_tpu_over_cpu": tpu_s / cpu_s,
                "aten_ops_per_call": n_ops,
                "tpu_us_per_op": tpu_s * 1e6 / max(n_ops, 1),
            }
            print(f"{name:24s} cpu {cpu_s*1e6:9.1f} us   tpu {tpu_s*1e6:9.1f} us   "
                  f"({n_ops} ops, {tpu_s*1e6/max(n_ops,1):.1f} us/op)")
    write("ops", {"results": results, "target_us_per_small_op": 15})


def _count_ops(call) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        call()
    return Count.n


if __name__ == "__main__":
    torch_tpu  # the backend is autoloaded by import torch; imported here for clarity
    main()
