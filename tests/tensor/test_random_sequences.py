"""Random sequences of views, in-place writes, value reads and ops, run on CPU torch and on tpu (strict and
fused eager) from one seed, compared after every step that keeps a result: values, dtypes, shapes,
strides and storage offsets, and that both raise where one does.

Single ops are covered op by op elsewhere; what breaks is what happens between ops (a cache key that
leaves out what decides a result's layout, a view whose base was written, a value read in the middle).
A found seed becomes a named case in the test file of its family; this file keeps the sweep."""
from __future__ import annotations

import random

import pytest
import torch

from tests.harness.inputs import fuzz_seeds
import torch_tpu
from torch_tpu.engine import fused

pytestmark = pytest.mark.fuzz

SEEDS = fuzz_seeds(50)

# each entry: (name, function of (tensor, rng) -> tensor); names make failures readable
VIEWS = [
    ("t", lambda t, r: t.t() if t.dim() == 2 else t.transpose(0, -1)),
    ("step", lambda t, r: t[..., ::2] if t.shape[-1] > 1 else t),
    ("slice", lambda t, r: t[1:] if t.shape[0] > 1 else t),
    ("expand", lambda t, r: t.unsqueeze(0).expand(2, *t.shape)),
    ("flatten", lambda t, r: t.reshape(-1)),
    ("diagonal", lambda t, r: t.diagonal() if t.dim() == 2 else t),
    ("narrow", lambda t, r: t.narrow(-1, r.randrange(max(1, t.shape[-1] // 2)), max(1, t.shape[-1] // 2))),
    ("permute", lambda t, r: t.permute(*reversed(range(t.dim())))),
    ("select", lambda t, r: t.select(0, r.randrange(t.shape[0])) if t.dim() > 1 else t),
    ("as_int", lambda t, r: t.view(torch.int32) if t.dtype == torch.float32 and t.is_contiguous() else t),
    ("as_strided", lambda t, r: t.as_strided((2, 2), (1, 2), 1) if t.is_contiguous() and t.numel() >= 6 else t),
    ("unsqueeze", lambda t, r: t.unsqueeze(-1)),
    ("movedim", lambda t, r: t.movedim(0, -1)),
    ("unflatten", lambda t, r: t.unflatten(-1, (2, -1)) if t.shape[-1] % 2 == 0 else t),
]
OPS = [
    ("add", lambda t, o, r: t + o), ("mul_scalar", lambda t, o, r: t * r.choice([2.5, 2, -1, True])),
    ("sum_keep", lambda t, o, r: t.sum(-1, keepdim=True) + t), ("where", lambda t, o, r: torch.where(t > 0, t, o)),
    ("clamp", lambda t, o, r: t.clamp(-0.5, 0.5)), ("exp_log1p", lambda t, o, r: t.exp().log1p()),
    ("cumsum", lambda t, o, r: t.cumsum(-1)), ("flip", lambda t, o, r: t.flip(-1)),
    ("max_minus", lambda t, o, r: t.max(-1).values.unsqueeze(-1) - t),
    ("bf16_round_trip", lambda t, o, r: t.to(torch.bfloat16).float()), ("abs_sqrt", lambda t, o, r: t.abs().sqrt()),
    ("softmax", lambda t, o, r: t.softmax(-1)), ("gelu", lambda t, o, r: torch.nn.functional.gelu(t)),
    ("matmul_t", lambda t, o, r: t @ t.transpose(-1, -2) if t.dim() >= 2 else t * t),
    ("mean", lambda t, o, r: t.mean(0)), ("cat", lambda t, o, r: torch.cat([t, o], -1)),
    ("stack", lambda t, o, r: torch.stack([t, o])), ("contiguous", lambda t, o, r: t.contiguous()),
    ("clone_keep", lambda t, o, r: t.clone()), ("int_floor", lambda t, o, r: (t * 4).long().float() / 4),
    ("index", lambda t, o, r: t[torch.tensor([0, -1], device=t.device)]),
    ("mask_fill", lambda t, o, r: t.masked_fill(t < 0, 0.0)), ("to_half", lambda t, o, r: t.half().float()),
    ("empty_like_fill", lambda t, o, r: torch.empty_like(t).fill_(1.5) + t),
    ("argmax", lambda t, o, r: t.argmax(-1).float()),
]
INPLACE = [
    ("add_", lambda t, r: t.add_(1)), ("mul_", lambda t, r: t.mul_(-1)), ("zero_", lambda t, r: t.zero_()),
    ("fill_", lambda t, r: t.fill_(3.0)), ("copy_", lambda t, r: t.copy_(torch.ones_like(t) * 7)),
    ("clamp_", lambda t, r: t.clamp_(max=0.25)), ("neg_", lambda t, r: t.neg_()),
    ("index_fill_", lambda t, r: t.index_fill_(-1, torch.tensor([0], device=t.device), -2.0)),
    ("masked_fill_", lambda t, r: t.masked_fill_(t > 0.5, 0.5)),
    ("addcmul_", lambda t, r: t.addcmul_(t, t, value=0.5)),
]
SHAPES = [(4, 6), (3, 5), (6, 4), (2, 3, 4), (8,), (1, 4), (4, 1, 2)]


def _snapshot(t):
    # strides and offsets are part of the result: a .view() that works on CPU must work on tpu (a size-1
    # dimension's stride is arbitrary: torch ignores it, so does this comparison)
    strides = tuple(st if n > 1 else None for n, st in zip(t.shape, t.stride()))
    return t.detach().cpu().clone(), tuple(t.shape), strides, t.storage_offset(), t.dtype  # (CPU: no alias)


def program(seed: int, device: str, log: list | None = None):
    r = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    shape = r.choice(SHAPES)
    base = torch.randn(*shape, generator=g).to(device)
    other = torch.randn(64, generator=g).to(device)
    kept, t = [], base
    for _ in range(r.randint(2, 8)):
        k = r.random()
        try:
            if k < 0.3:
                name, f = r.choice(VIEWS)
                t = f(t, r)
            elif k < 0.55:
                name, f = r.choice(INPLACE)
                if name in ("index_fill_", "masked_fill_") and 0 in t.stride():
                    name = "skipped"  # CPU writes an expanded view's shared row (deprecated); tpu refuses
                elif t.dtype == torch.float32:
                    t = f(t, r)
            elif k < 0.62:
                name = "read"
                if t.dtype == torch.float32:
                    t.cpu()  # a value read in the middle (kept by the view, reused by the next op)
            elif k < 0.68:
                name = "flush"  # fused eager: the graph so far ends (and may wait for its program)
                if device == "tpu":
                    fused.flush()
            else:
                name, f = r.choice(OPS)
                if t.dtype == torch.int32:
                    t = t.view(torch.float32)
                o = other[: t.numel()].reshape(t.shape) if t.numel() <= 64 else 1.0
                t = f(t, o, r)
        except (RuntimeError, IndexError, ValueError, TypeError) as exc:  # both raise it (the message may differ)
            kept.append(("raised", name, type(exc).__name__))
            if log is not None:
                log.append((name, "raised", str(exc).splitlines()[0][:120]))
            break
        if log is not None:
            log.append((name, tuple(t.shape), t.stride()))
        if r.random() < 0.3:
            kept.append(_snapshot(t))
    kept += [_snapshot(t), _snapshot(base)]
    return kept


def _compare(seed, a, b):
    assert len(a) == len(b), (seed, a, b)
    for i, (x, y) in enumerate(zip(a, b)):
        if x[0] == "raised" or y[0] == "raised":
            assert x == y, (seed, i, x, y)
            continue
        assert x[1:] == y[1:], f"seed {seed}, result {i}: CPU (shape, strides, offset, dtype) {x[1:]}, tpu {y[1:]}"
        cx, cy = x[0], y[0]
        if cx.dtype == torch.int32:  # a float's bits: compare the floats
            cx, cy = cx.view(torch.float32), cy.view(torch.float32)
        torch.testing.assert_close(cy, cx, atol=1e-5, rtol=1e-4, equal_nan=True,
                                   msg=lambda m: f"seed {seed}, result {i}: {m}")


@pytest.mark.parametrize("mode", ["strict", "fused", "fused-background-compile"])
def test_random_sequences_match_cpu(mode, monkeypatch):
    if mode == "fused-background-compile":  # every graph compiles on a compile thread and waits for it
        monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "2")
        monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "")
        torch_tpu.reset_caches()
    ctx = (torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER) if mode == "strict"
           else torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE))
    with ctx:
        for seed in SEEDS:
            expected = program(seed, "cpu")
            try:
                got = program(seed, "tpu")
            except Exception as exc:  # noqa: BLE001 - name the seed and its steps
                log = []
                program(seed, "cpu", log)
                raise AssertionError(f"seed {seed} raised on tpu only ({exc}); steps on CPU: {log}") from exc
            try:
                _compare(seed, expected, got)
            except AssertionError as exc:
                log_cpu, log_tpu = [], []
                program(seed, "cpu", log_cpu)
                program(seed, "tpu", log_tpu)
                raise AssertionError(f"{exc}\nsteps on CPU: {log_cpu}\nsteps on tpu: {log_tpu}") from None
