"""Attention in diffusers' sequence-major layout against JAX's heads-major kernel, on the device, in JAX alone
(no torch: runs on a bare TPU host).

diffusers' FLUX attention projects q, k, v as (B, L, heads*E), applies the RMSNorm and the rotary embedding
per head, permutes to (B, heads, L, E) for SDPA and back after it. Timed here, per call:

  kernel/heads        JAX's Pallas flash-attention kernel alone on (B, heads, L, E) arrays
  kernel/seq TQxTK    torch_tpu's sequence-major kernel (torch_tpu/ops/attention_kernel.py) alone on (B, L, heads*E)
  piece/LAYOUT/ROPE   the attention piece of a FLUX block (q/k/v projections, RMSNorm, rotary, attention,
                      output projection); LAYOUT ``heads``: JAX's kernel and the permutes around it (what
                      torch_tpu lowers today), ``seq``: the sequence-major kernel, no permutes; ROPE ``pairs``:
                      diffusers' [..., 64, 2] formulation (torch_tpu's lowering today), ``roll``: jnp.roll and a
                      select, ``kernel``: RMSNorm and rotary embedding in one Pallas kernel per (tile, head)
                      (torch_tpu/ops/rotary_kernel.py),
                      ``rope_kernel``: the RMSNorm in XLA, the rotary embedding alone in that kernel (what a
                      lowering of torch_tpu's one rotary op could do, the norm being an op of its own)
  max_abs_diff        each piece's output against piece/heads/pairs (a wrong lane rotation shows here)
  rotary/LANES        the norm+rotary kernel alone on (L, heads*E) bf16 with per-token weights, taking LANES lanes
                      (LANES / E heads) per grid step (``rotary_kernel.MAX_BLOCK_LANES``); ``rotary/xla copy``:
                      XLA's x * 2 on the same array, what reading and writing it costs

    python bench/attention_layouts.py [--tokens 4608] [--heads 24] [--reps 20] [--out F.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from rope_layouts import _swap_pairs  # (bench/ is the script's directory: on sys.path)

ROOT = Path(__file__).resolve().parent.parent


def _module(name):
    """A JAX-only module of torch_tpu by its path (importing the package would import torch)."""
    spec = importlib.util.spec_from_file_location(f"torch_tpu_{name}", ROOT / "torch_tpu" / "ops" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Kernels:
    """torch_tpu's sequence-major kernels (ops/attention_kernel.py, ops/rotary_kernel.py)."""

    def __init__(self):
        self.attention, self.rotary = _module("attention_kernel"), _module("rotary_kernel")

    def flash_attention(self, *args, **kwargs):
        return self.attention.flash_attention(*args, **kwargs)

    def norm_rope(self, x, weight, cos, sin, *, heads):
        """RMSNorm (None: none) and the rotary embedding of x (L, heads*head_dim) by torch_tpu's kernel."""
        return self.rotary.rotate(x, cos, sin, head_dim=x.shape[1] // heads, weight=weight)


def _sequence_major_kernel():
    return _Kernels()


def _timed(fn, args, reps):
    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    for _ in range(reps):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / reps * 1e3


def _attend(layout, heads, tiles, ak):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    def heads_major(q, k, v):
        sizes = fa.BlockSizes(block_q=tiles[0], block_k_major=tiles[1], block_k=tiles[1], block_b=1,
                              block_q_major_dkv=tiles[0], block_k_major_dkv=tiles[1], block_k_dkv=tiles[1],
                              block_q_dkv=tiles[0], block_k_major_dq=tiles[1], block_k_dq=tiles[1], block_q_dq=tiles[0])
        return fa.flash_attention(q, k, v, sm_scale=q.shape[-1] ** -0.5, block_sizes=sizes)

    def sequence_major(q, k, v):
        return ak.flash_attention(q, k, v, heads=heads, kv_len=k.shape[1], causal=False,
                                  scale=(q.shape[-1] // heads) ** -0.5, tiles=tiles)

    return heads_major if layout == "heads" else sequence_major


def _piece(layout, rope, heads, tiles, ak):
    attend = _attend(layout, heads, tiles, ak)

    def piece(h, wq, wk, wv, wo, norm_w, cos, sin):
        length = h.shape[0]

        def project(w, norm):
            x = h @ w
            if norm and rope == "kernel":
                return ak.norm_rope(x, norm_w, cos, sin, heads=heads).reshape(1, length, heads, -1)
            x = x.reshape(1, length, heads, -1)
            if norm:
                xf = x.astype(jnp.float32)
                x = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6) * norm_w).astype(x.dtype)
                if rope == "rope_kernel":  # the norm in XLA, the rotation alone in Pallas
                    flat = ak.norm_rope(x.reshape(length, -1), None, cos, sin, heads=heads)
                    return flat.reshape(1, length, heads, -1)
                c, s_ = cos[None, :, None, :], sin[None, :, None, :]
                x = (x.astype(jnp.float32) * c + _swap_pairs(x, rope).astype(jnp.float32) * s_).astype(x.dtype)
            return x

        q, k, v = project(wq, True), project(wk, True), project(wv, False)
        if layout == "heads":
            t = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
            out = t(attend(t(q), t(k), t(v)))
        else:
            flat = lambda x: x.reshape(1, length, -1)  # noqa: E731
            out = attend(flat(q), flat(k), flat(v))
        return out.reshape(length, -1) @ wo

    return jax.jit(piece)


def _rotary_sweep(ak, n, heads, e, lanes, reps) -> dict:
    """ms of the norm+rotary kernel alone per block width, beside XLA reading and writing the same array."""
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    x = jax.random.normal(keys[0], (n, heads * e), jnp.bfloat16)
    weight = 1 + 0.1 * jax.random.normal(keys[1], (n, e), jnp.float32)
    angles = jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.repeat(jnp.linspace(0.0, 1.0, e // 2), 2)[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    ms = {"rotary/xla copy": _timed(jax.jit(lambda a: a * 2), (x,), reps)}
    default, first = ak.rotary.MAX_BLOCK_LANES, None
    try:
        for width in lanes:
            ak.rotary.MAX_BLOCK_LANES = width
            fn = jax.jit(lambda a, w, c, s: ak.rotary.rotate(a, c, s, head_dim=e, weight=w))  # traced anew
            try:
                ms[f"rotary/{width}"] = _timed(fn, (x, weight, cos, sin), reps)
                got = fn(x, weight, cos, sin).astype(jnp.float32)
                first = got if first is None else first
                ms[f"rotary/{width} max_abs_diff"] = float(jnp.max(jnp.abs(got - first)))
            except Exception as exc:  # noqa: BLE001 - a width the chip refuses is a result too
                ms[f"rotary/{width}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        ak.rotary.MAX_BLOCK_LANES = default
    return ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4608)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tiles", default="512x512,768x768,1152x1152,512x1536")
    parser.add_argument("--rotary-lanes", default="128,384,768,1536,3072",
                        help="block widths of the norm+rotary kernel to time (empty: none)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    ak = _sequence_major_kernel()
    n, heads, e = args.tokens, args.heads, 128
    width = heads * e
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    bf = jnp.bfloat16
    qh = jax.random.normal(keys[0], (1, heads, n, e), bf)
    qs = qh.transpose(0, 2, 1, 3).reshape(1, n, width)
    ms = {}
    ms["kernel/heads 512x512"] = _timed(jax.jit(_attend("heads", heads, (512, 512), ak)), (qh, qh, qh), args.reps)
    for spec in args.tiles.split(","):
        tiles = tuple(int(t) for t in spec.split("x"))
        try:
            ms[f"kernel/seq {spec}"] = _timed(jax.jit(_attend("seq", heads, tiles, ak)), (qs, qs, qs), args.reps)
        except Exception as exc:  # noqa: BLE001 - a tile the chip refuses is a result too
            ms[f"kernel/seq {spec}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    out_heads = jax.jit(_attend("heads", heads, (512, 512), ak))(qh, qh, qh)
    out_seq = jax.jit(_attend("seq", heads, (512, 512), ak))(qs, qs, qs)
    diff = float(jnp.max(jnp.abs(out_heads.transpose(0, 2, 1, 3).reshape(1, n, width).astype(jnp.float32)
                                 - out_seq.astype(jnp.float32))))
    h = jax.random.normal(keys[1], (n, width), bf)
    w = [jax.random.normal(keys[2 + i], (width, width), bf) * width ** -0.5 for i in range(4)]
    angles = jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.repeat(jnp.linspace(0.0, 1.0, e // 2), 2)[None, :]
    piece_args = (h, *w, jnp.ones((e,), jnp.float32), jnp.cos(angles), jnp.sin(angles))
    piece_diff = {}
    base = None
    for layout in ("heads", "seq"):
        for rope in ("pairs", "roll", "kernel", "rope_kernel"):
            name = f"piece/{layout}/{rope}"
            try:
                fn = _piece(layout, rope, heads, (512, 512), ak)
                ms[name] = _timed(fn, piece_args, args.reps)
                got = fn(*piece_args).astype(jnp.float32)
            except Exception as exc:  # noqa: BLE001 - a variant the chip refuses is a result too
                ms[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            base = got if base is None else base
            piece_diff[name] = float(jnp.max(jnp.abs(got - base)))
    if args.rotary_lanes:
        ms.update(_rotary_sweep(ak, n, heads, e, [int(v) for v in args.rotary_lanes.split(",")], args.reps))
    result = {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind, "tokens": n,
              "heads": heads, "ms": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in ms.items()},
              "max_abs_diff_seq_vs_heads": diff, "max_abs_diff_vs_heads_pairs": piece_diff}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
