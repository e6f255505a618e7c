"""Cases the chip got wrong, each against CPU torch, one line per case: a regression check for the TPU lane.

    python3 bench/lane/chip_regressions.py --out bench/results/tpu/regression_probe.json

Run on a TPU v5e (bench/results/tpu/regression_probe.json holds the last run, with the commit in the note) it
found: float64 copysign, signbit, fmod and division by a 0-dim tensor not compiling (a shift of a float64's bits;
fixed, and refused by TORCH_TPU_CHECK_LOWERING), ``int % 0.7`` computed in float64 (fixed: float32, as torch),
float32 fmod/remainder rounded by XLA:TPU's remainder (fixed: exact for a TPU), the trunc division (off by one on
the CPU platform), sinh 2e-6 off CPU, 64-bit integer shifts compiling (only a float64's bits fail), and on
2026-12-07 floor_divide(3e38, 3e38) 0 (a division by a reciprocal flushed to zero; fixed). CPU torch computes on
the inputs as read back from the chip, where float64 values lose mantissa bits on the way. "ok" is equal to CPU (or
close, for the functions XLA computes its own way); WRONG and FAIL say how not.
"""
import argparse
import json
import math
import time

t0 = time.time()
import numpy as np  # noqa: E402

_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_parser.add_argument("--out", required=True)
OUT = _parser.parse_args().out
res = {}
# 1. pure JAX: plain 64-bit integer shifts (is every s64 shift broken on XLA:TPU, or only a float64's bits?)
import jax, jax.numpy as jnp
from jax import lax
jax.config.update("jax_enable_x64", True)
i = np.array([-(2 ** 40) - 5, -3, 0, 7, 2 ** 50 + 9], np.int64)
for name, fn, want in [("i64.shr_arith", lambda a: a >> 3, i >> 3), ("i64.shl", lambda a: a << 3, i << 3),
                       ("i64.shr_logical", lambda a: lax.shift_right_logical(a, jnp.int64(3)), (i.view(np.uint64) >> np.uint64(3)).view(np.int64)),
                       ("u64.shr", lambda a: a.view(jnp.uint64) >> jnp.uint64(3), i.view(np.uint64) >> np.uint64(3))]:
    try:
        got = np.asarray(jax.jit(fn)(i)); res[name] = "ok" if np.array_equal(got, want) else f"WRONG {got.tolist()}"
    except Exception as e:
        res[name] = "FAIL " + str(e).splitlines()[0][:160]
import torch, torch_tpu
from torch_tpu import EagerMode
def cmp(name, fn, *args, exact=True):
    try:
        on_device = [a.to("tpu") for a in args]
        # CPU torch on the values as the chip holds them: XLA:TPU stores float64 with fewer mantissa bits (1e30 comes
        # back 2 ulps off; bench/results/tpu/tpu_float64_round_trip.json), which is the storage, not the op
        want = fn(*[a.cpu() for a in on_device])
        got = fn(*on_device)
        got = [g.cpu() for g in got] if isinstance(got, (tuple, list)) else [got.cpu()]
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        bad = []
        for g, w in zip(got, want):
            if g.dtype != w.dtype:
                bad.append(f"dtype {g.dtype} vs {w.dtype}"); continue
            try:
                torch.testing.assert_close(g, w, rtol=0 if exact else None, atol=0 if exact else None, equal_nan=True)
                if w.is_floating_point():
                    z = w == 0
                    if not torch.equal(g[z].signbit(), w[z].signbit()): bad.append("zero signs")
            except AssertionError as e:
                bad.append(" ".join(str(e).split())[:200])
        res[name] = "ok" if not bad else "WRONG " + "; ".join(bad)
    except Exception as e:
        res[name] = "FAIL " + " ".join(str(e).split())[:200]
    print(name, res[name], round(time.time() - t0, 1), flush=True)
d = torch.tensor([-0.0, 0.0, 1.5, -2.25, math.inf, -math.inf, 5.5, 1e30], dtype=torch.float64)
ints = torch.cat([torch.arange(-1000, 1000, 7), torch.tensor([16777217, -16777219])]).int()
u8 = torch.arange(0, 256, 3, dtype=torch.uint8)
for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
    with torch.tpu.set_eager_mode(EagerMode[mode]):
        m = mode[6:].lower()
        cmp(f"{m}.f64.copysign", lambda a: torch.copysign(a, -a), d)
        cmp(f"{m}.f64.signbit", torch.signbit, d)
        cmp(f"{m}.f64.div_by_0dim", lambda a, b: a / b, d, torch.tensor(4.0, dtype=torch.float64))
        cmp(f"{m}.f64.fmod", lambda a: torch.fmod(a, 0.7), d[:-1])
        cmp(f"{m}.f64.sinh_expm1", lambda a: (torch.sinh(a[:4]), torch.expm1(a[:4])), d, exact=False)
        cmp(f"{m}.f64.matrix_exp", lambda a: torch.linalg.matrix_exp(a * 0.5 / 4),
            torch.eye(4, dtype=torch.float64) + 0.1 * torch.arange(16, dtype=torch.float64).reshape(4, 4) / 16, exact=False)
        cmp(f"{m}.int.fmod_0.7", lambda a: torch.fmod(a, 0.7), ints)
        cmp(f"{m}.int.mul_0.1", lambda a: a * 0.1, ints)
        cmp(f"{m}.int.remainder_0.7", lambda a: torch.remainder(a, 0.7), ints)
        cmp(f"{m}.uint8.fmod_1.0", lambda a: torch.fmod(a, 1.0), u8)
        cmp(f"{m}.uint8.fmod_inf", lambda a: torch.fmod(a, math.inf), u8)
        cmp(f"{m}.bool.remainder_-3.0", lambda a: torch.remainder(a, -3.0), u8 > 100)
        cmp(f"{m}.int64.floor_divide_inf", lambda a: torch.floor_divide(a, -math.inf), ints.long())
        cmp(f"{m}.int.gt_16777216.5", lambda a: a > 16777216.5, ints)
        # the float64 NaN of the orthogonal parametrization: matrix_exp of zero, and the log of zero it suspects
        cmp(f"{m}.f64.matrix_exp_of_zero", torch.linalg.matrix_exp, torch.zeros(2, 4, 4, dtype=torch.float64))
        cmp(f"{m}.f64.log_log2_of_zero", lambda a: (torch.log(a), torch.log2(a)), torch.zeros(3, dtype=torch.float64))

        def orthogonal(x):
            torch.manual_seed(0)
            lin = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(4, 4, dtype=torch.float64))
            return lin.to(x.device)(x).detach()

        cmp(f"{m}.f64.orthogonal_parametrization", orthogonal, torch.eye(4, dtype=torch.float64)[:3], exact=False)
        cmp(f"{m}.f32.div_trunc", lambda a: torch.div(a, 0.3, rounding_mode="trunc"), torch.arange(-1000, 1000, 7.0))
        cmp(f"{m}.f32.fmod_exact", lambda a: (torch.fmod(a, 0.7), torch.remainder(a, -0.1)),
            torch.linspace(-1e4, 1e4, 1001))
# 3. special values in float32 on the chip (tests/ops/test_tpu_special_values.py's cases, on the chip itself)
S = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.5, 250.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 3.0e38, -3.0e38, 1e20, -1e20]
pairs = [(x, y) for x in S for y in S if not (math.isfinite(x) and math.isfinite(y) and y != 0 and abs(x / y) > 2.0 ** 24)]
px = torch.tensor([p[0] for p in pairs]); py = torch.tensor([p[1] for p in pairs])
for op in ("fmod", "remainder", "floor_divide"):
    cmp(f"special.{op}", getattr(torch, op), px, py)
cmp("special.div", torch.div, px, py, exact=False)  # (3e38 / 3e38 was 0 on the chip before 2026-12-07)
cmp("special.atan2", torch.atan2, px, py, exact=False)
cmp("special.hypot", torch.hypot, px, py, exact=False)
cmp("special.sinh", torch.sinh, torch.tensor(S), exact=False)
cmp("special.expm1", torch.expm1, torch.tensor(S), exact=False)
cmp("special.cosh", torch.cosh, torch.tensor(S), exact=False)
res["seconds"] = round(time.time() - t0, 1)
json.dump(res, open(OUT, "w"), indent=1)
for k, v in res.items(): print(k, v)
# 4. test_gradients[float32]'s wrong gradient in fused mode (0.68 on the chip): which pair of ops
def spd(n=4, batch=2):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(batch, n, n, generator=g, dtype=torch.float64) * 2 - 1
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).float()
def grads(fns, sync=False):
    def run(s):
        s = s.clone().requires_grad_()
        outs = [f(s) for f in fns]
        if sync and s.device.type == "tpu":
            torch.tpu.synchronize()
        loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).reshape(o.shape)).sum() for o in outs)
        return torch.autograd.grad(loss, s)[0]
    return run
with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
    s = spd()
    cmp("fused.grad.cholesky+eigvalsh", grads([torch.linalg.cholesky, torch.linalg.eigvalsh]), s, exact=False)
    cmp("fused.grad.cholesky+eigvalsh.sync", grads([torch.linalg.cholesky, torch.linalg.eigvalsh], sync=True), s, exact=False)
    cmp("fused.grad.eigvalsh+eigvalsh", grads([torch.linalg.eigvalsh, lambda x: torch.linalg.eigvalsh(x) * 2]), s, exact=False)
    cmp("fused.grad.cholesky+cholesky", grads([torch.linalg.cholesky, lambda x: torch.linalg.cholesky(x * 2)]), s, exact=False)
with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER):
    cmp("strict.grad.cholesky+eigvalsh", grads([torch.linalg.cholesky, torch.linalg.eigvalsh]), s, exact=False)
res["seconds"] = round(time.time() - t0, 1)
json.dump(res, open(OUT, "w"), indent=1)
for k, v in list(res.items())[-6:]: print(k, v)
