"""Each linear-algebra op of tests/ops/test_linalg.py's chip failures, alone, per mode, against CPU torch.

    python3 bench/tpu_linalg_probe.py --out bench/results/tpu/linalg_probe.json

On a TPU v5e, test_linalg.py failed three ways that the CPU (with the TPU's choices of lowering) does not show:
float64 eigh eigenvalues NaN in strict mode (test_spectral_family), float64 matrix_exp in the orthogonal
parametrization 6e-8 from CPU (test_matrix_exp_and_orthogonal_parametrization), and float32 gradients wrt the
symmetric input wrong by 0.5 in fused mode (test_gradients: cholesky and eigvalsh). JAX's own float64 eigh and
matmul are exact on that chip, so the difference is in what torch_tpu builds around them. This runs each op
(and its gradient) on its own in strict and fused mode and records the largest difference from CPU torch, so one
chip call says which op and which mode. The ``grad_combined_without_*`` cases leave one op out of the combined
float32 gradient each: they showed it needed eigvalsh and svdvals together (XLA:TPU's eigh returning sorted values
unsorted beside its SVD's unsorted one; bench/results/tpu/eigh_sort_probe.json, fixed 2026-12-07).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


def _cases(torch):
    def spd(n=4, batch=2, dtype=torch.float64, seed=0):
        g = torch.Generator().manual_seed(seed)
        a = torch.rand(batch, n, n, generator=g, dtype=torch.float64) * 2 - 1
        return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)

    def square(dtype, seed=0):
        g = torch.Generator().manual_seed(seed)
        return ((torch.rand(2, 4, 4, generator=g, dtype=torch.float64) * 2 - 1) + 4 * torch.eye(4)).to(dtype)

    def grad_of(fn):
        def run(a):
            a = a.clone().requires_grad_()
            out = fn(a)
            w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape)
            (g,) = torch.autograd.grad((out * w).sum(), a)
            return [out.detach(), g]
        return run

    cases = {}
    for dt, name in ((torch.float64, "float64"), (torch.float32, "float32")):
        s, a = spd(dtype=dt), square(dt)
        cases[f"eigh_values.{name}"] = (lambda x: [torch.linalg.eigh(x)[0]], s)
        cases[f"eigh_upper_values.{name}"] = (lambda x: [torch.linalg.eigh(x.triu(), UPLO="U")[0]], s)
        cases[f"eigvalsh.{name}"] = (lambda x: [torch.linalg.eigvalsh(x)], s)
        cases[f"eigh_reconstruct.{name}"] = (lambda x: [(lambda w, v: (v * w[..., None, :]) @ v.mT)(*torch.linalg.eigh(x))], s)
        cases[f"svdvals.{name}"] = (lambda x: [torch.linalg.svdvals(x)], a)
        cases[f"qr_r.{name}"] = (lambda x: [torch.linalg.qr(x)[1].abs()], a)
        cases[f"matrix_exp.{name}"] = (lambda x: [torch.linalg.matrix_exp(x * 0.5 / 4)], a)
        cases[f"matrix_exp_skew.{name}"] = (lambda x: [torch.linalg.matrix_exp(x - x.mT)], a)
        cases[f"grad_cholesky.{name}"] = (grad_of(torch.linalg.cholesky), s)
        cases[f"grad_eigvalsh.{name}"] = (grad_of(torch.linalg.eigvalsh), s)
        cases[f"grad_det.{name}"] = (grad_of(torch.linalg.det), a)
        cases[f"grad_inv.{name}"] = (grad_of(torch.linalg.inv), a)
        cases[f"grad_svdvals.{name}"] = (grad_of(torch.linalg.svdvals), a)
        cases[f"grad_matrix_exp.{name}"] = (grad_of(lambda x: torch.linalg.matrix_exp(x * 0.1)), a)
        ops = {"det": (torch.linalg.det, 0), "inv": (torch.linalg.inv, 0), "cholesky": (torch.linalg.cholesky, 1),
               "eigvalsh": (torch.linalg.eigvalsh, 1), "svdvals": (torch.linalg.svdvals, 0)}

        def combined(a, s, names=tuple(ops)):  # test_gradients' float32 loss: every op's output weighted, one backward
            a, s = a.clone().requires_grad_(), s.clone().requires_grad_()
            outs = [ops[n][0]((a, s)[ops[n][1]]) for n in names]
            loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).reshape(o.shape)).sum()
                       for o in outs)
            return list(torch.autograd.grad(loss, (a, s), allow_unused=True, materialize_grads=True))

        cases[f"grad_combined.{name}"] = (lambda x, c=combined: c(x[:2], x[2:]), torch.cat([a, s]))
        for left_out in ops:  # which op the fused-mode float32 difference on the chip needs (2026-12-06: 0.68)
            rest = tuple(n for n in ops if n != left_out)
            cases[f"grad_combined_without_{left_out}.{name}"] = (
                lambda x, c=combined, rest=rest: c(x[:2], x[2:], rest), torch.cat([a, s]))

        def orthogonal(x, dt=dt):
            torch.manual_seed(0)
            m = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(4, 4, dtype=dt)).to(x.device)
            return [m(x), m.weight]

        cases[f"orthogonal_parametrization.{name}"] = (orthogonal, square(dt)[0])
    return cases


def _max_diff(got, want):
    import torch

    got, want = got.detach().to("cpu"), want.detach()
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if torch.isnan(got).any() and not torch.isnan(want).any():
        return "nan"
    return float((got.double() - want.double()).abs().max()) if want.numel() else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    args = parser.parse_args()
    import torch
    import torch_tpu

    report = {"platform": torch_tpu.platform(), "cases": {}}
    start = time.perf_counter()
    for name, (fn, x) in _cases(torch).items():
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        want = fn(x)
        row = {}
        for mode in ("strict", "fused"):
            eager = torch_tpu.EagerMode.DEFER_NEVER if mode == "strict" else torch_tpu.EagerMode.DEFER_AND_FUSE
            try:
                with torch.tpu.set_eager_mode(eager):
                    got = fn(x.to("tpu"))
                    got = [g.detach().to("cpu") for g in got]
                row[mode] = [_max_diff(g, w) for g, w in zip(got, want)]
            except Exception as e:  # noqa: BLE001 -- recorded, the probe goes on
                row[mode] = f"{type(e).__name__}: {str(e)[:300]}"
        report["cases"][name] = row
        print(name, json.dumps(row), flush=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
