"""A compiled graph's RMSNorm feeding the rotary embedding, rewritten as one op, ``tpu::rms_norm_rotary``.

FLUX's attention normalises q and k per head (``torch.nn.RMSNorm``) and then rotates them
(``tpu::rotary_embedding``); a double block normalises its text and image tokens with weights of their own
and concatenates them along the sequence first. AOTAutograd hands the norm over decomposed (float32 copy,
``pow``, ``mean``, ``add`` eps, ``rsqrt``, two ``mul``, the copy back to x's dtype). Left so, XLA:TPU
writes the normalised q and k to memory for the rotary kernel to read back: 0.84 ms of a FLUX.1-width
block's 4.9 ms attention piece on a v5e (``bench/results/tpu/attention_layouts.json``, variants ``rope_kernel`` and
``kernel``). ``fuse`` finds::

    rotary_embedding(norm(x), cos, sin)
    rotary_embedding(cat([norm_a(x_a), norm_b(x_b), ...], dim=1), cos, sin)   # x (batch, length, heads, head_dim)

where every intermediate has no other user, and writes ``rms_norm_rotary(x, weight, eps, cos, sin)`` (the
concatenation taken before the norm, which is per token, with one weight row per token). The new op
computes what the nodes computed, in their order (``ops/position_embeddings.py``): on a TPU one Pallas
kernel, elsewhere the same float32 steps. A graph without the pattern (another torch's decomposition,
diffusers' own RMSNorm, which rounds twice) is left as it is.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_HALF = (torch.float16, torch.bfloat16)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _to_dtype(node, dtype) -> bool:
    """``node`` is a plain dtype conversion to ``dtype`` (no other argument changes the value)."""
    if not _is(node, aten._to_copy.default) or set(node.kwargs) - {"dtype", "layout", "device"}:
        return False
    return node.kwargs.get("dtype") == dtype


def _operands(node, target):
    """The two arguments of a binary ``target`` node in either order, or None."""
    return tuple(node.args[:2]) if _is(node, target) and len(node.args) == 2 and not node.kwargs else None


class _Norm:
    """torch's ``rms_norm`` over the last dimension, as AOTAutograd decomposes it:
    ``[to(x.dtype)] (mul(mul(c, rsqrt(add(mean(pow(c, 2), [-1], True), eps))), weight))`` with
    ``c = [to(float32)](x)``, the copies present exactly when x is float16/bfloat16."""

    def __init__(self, node):
        self.nodes = []  # every node of the pattern, the output first
        self.source = self.weight = self.eps = None
        self.ok = self._match(node)

    def _match(self, out) -> bool:
        val = _val(out)
        if val is None or val.dtype not in (*_HALF, torch.float32) or val.dim() < 1:
            return False
        node = out
        if val.dtype in _HALF:
            if not _to_dtype(out, val.dtype):
                return False
            self.nodes.append(out)
            node = out.args[0]
        pair = _operands(node, aten.mul.Tensor)
        if pair is None:
            return False
        if _val(node) is None or _val(node).dtype != torch.float32:
            return False
        self.nodes.append(node)
        for scaled, weight in (pair, pair[::-1]):
            w = _val(weight)
            if (w is not None and w.dim() == 1 and w.shape[0] == val.shape[-1] and w.dtype in (*_HALF, torch.float32)
                    and self._scaled(scaled, val)):
                self.weight = weight
                return True
        return False

    def _scaled(self, node, val) -> bool:
        pair = _operands(node, aten.mul.Tensor)
        if pair is None:
            return False
        for c, inverse in (pair, pair[::-1]):
            if not _is(inverse, aten.rsqrt.default):
                continue
            shifted = inverse.args[0]
            if not _is(shifted, aten.add.Scalar) or len(shifted.args) != 2 or shifted.kwargs:
                continue
            mean, eps = shifted.args
            if not _is(mean, aten.mean.dim) or mean.kwargs or len(mean.args) != 3 or mean.args[2] is not True:
                continue
            if list(mean.args[1]) not in ([-1], [val.dim() - 1]) or not isinstance(eps, (int, float)):
                continue
            square = mean.args[0]
            if not (_is(square, aten.pow.Tensor_Scalar) and square.args[0] is c and square.args[1] == 2):
                continue
            source = self._source(c, val)
            if source is None:
                continue
            self.nodes += [node, inverse, shifted, mean, square] + ([c] if source is not c else [])
            self.source, self.eps = source, float(eps)
            return True
        return False

    @staticmethod
    def _source(c, val):
        """x, the norm's input: c itself (float32) or what c converts to float32 (x of the output's dtype)."""
        if val.dtype == torch.float32:
            return c if _val(c) is not None and _val(c).dtype == torch.float32 else None
        if _to_dtype(c, torch.float32) and _val(c.args[0]) is not None and _val(c.args[0]).dtype == val.dtype:
            return c.args[0]
        return None

    def private(self, consumer) -> bool:
        """Every node of the pattern feeds only the pattern (or ``consumer``, for its output)."""
        inside = set(self.nodes) | {consumer}
        return all(set(n.users) <= inside for n in self.nodes)


def _parts(x, rotary):
    """The norms feeding ``rotary`` (one, or the parts of a concatenation along the sequence), or None."""
    norm = _Norm(x)
    if norm.ok:
        return [norm] if norm.private(rotary) else None
    if not _is(x, aten.cat.default) or len(x.users) != 1 or _val(x) is None or _val(x).dim() != 4:
        return None
    dim = x.args[1] if len(x.args) > 1 else x.kwargs.get("dim", 0)
    if dim not in (1, -3):
        return None
    parts = [_Norm(p) for p in x.args[0]]
    if not parts or not all(p.ok and p.private(x) for p in parts) or len(set(x.args[0])) != len(parts):
        return None
    if len({p.eps for p in parts}) != 1:
        return None
    return parts


def _fake(fn, *args):
    """``fn`` over the fake values of ``args`` (nodes) in their fake mode: the new node's ``meta['val']``."""
    from torch._guards import detect_fake_mode

    vals = torch.fx.node.map_arg(args, _val)
    with detect_fake_mode(vals):
        return fn(*vals)


def _call(graph, target, *args, **kwargs):
    node = graph.call_function(target, args, kwargs)
    node.meta["val"] = _fake(lambda *a: target(*a, **kwargs), *args)
    return node


def fuse(gm: torch.fx.GraphModule) -> int:
    """Rewrite every match in ``gm`` (in place, recompiled); returns how many."""
    graph = gm.graph
    count = 0
    for rotary in list(graph.nodes):
        if not _is(rotary, torch.ops.tpu.rotary_embedding.default) or rotary.kwargs:
            continue
        x, cos, sin = rotary.args
        parts = _parts(x, rotary)
        if parts is None or _val(rotary) is None:
            continue
        with graph.inserting_before(rotary):
            if len(parts) == 1:
                source, weight = parts[0].source, parts[0].weight
            else:
                source = _call(graph, aten.cat.default, [p.source for p in parts], 1)
                rows = []
                for p in parts:
                    batch, length, heads, head_dim = _val(p.source).shape
                    w = _call(graph, aten._to_copy.default, p.weight, dtype=torch.float32)
                    w = _call(graph, aten.view.default, w, [1, 1, 1, head_dim])
                    rows.append(_call(graph, aten.expand.default, w, [1, length, 1, head_dim]))
                weight = _call(graph, aten.cat.default, rows, 1)
            fused = _call(graph, torch.ops.tpu.rms_norm_rotary.default, source, weight, parts[0].eps, cos, sin)
        rotary.replace_all_uses_with(fused)
        graph.erase_node(rotary)
        if len(parts) > 1:
            graph.erase_node(x)
        for p in parts:
            for node in p.nodes:  # output first: each is unused once those before it are gone
                graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
