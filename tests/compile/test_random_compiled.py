"""Random small programs run through ``torch.compile(fn, backend="tpu")`` and compared with CPU torch eager,
from one seed: views of inputs, in-place writes on inputs and on views of inputs, returned inputs and
views of inputs, dtype mixes, Python scalars of each type, reductions, indexing with tensors and masks.

Each seed's compiled function is then called again with what a recompile guard must notice: new values
(the cached program reused), another shape, another dtype of the second input, another Python scalar
(value and type), and inputs that require grad (then ``backward`` and the gradients compared). Every
call's results, the inputs afterwards (in-place writes) and the gradients are compared with CPU; where
CPU raises, the tpu must raise a clear error. A stale program run for inputs it was not built for shows
as a wrong value, dtype or shape.

A found seed becomes a named case in compile/test_compile_*.py; this file keeps the sweep. More seeds:
``TORCH_TPU_FUZZ_SEEDS=N``."""
from __future__ import annotations

import os
import random

import pytest
import torch
import torch._dynamo

from tests.harness.compare import assert_same, read, sync
from tests.harness.errors import assert_device_works, _exc_text, is_clear
from tests.harness.inputs import DEV, fuzz_seeds

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]

SEEDS = fuzz_seeds(3)

# ---------------------------------------------------------------------------------------------------
# the program: a list of steps chosen from the seed, interpreted by one Python function that dynamo
# traces (the loop unrolls); the same function runs uncompiled on CPU

SCALARS = [2, -3, 1.5, -0.25, True, False, 0]


def _view(name, t):
    if name == "t":
        return t.transpose(0, -1)
    if name == "slice":
        return t[1:] if t.shape[0] > 1 else t
    if name == "step":
        return t[..., ::2]
    if name == "select":
        return t[0] if t.dim() > 1 else t
    if name == "diag":
        return t.diagonal() if t.dim() == 2 else t
    if name == "unsq":
        return t.unsqueeze(0)
    if name == "flat":
        return t.view(-1) if t.is_contiguous() else t.reshape(-1)
    if name == "narrow":
        return t.narrow(-1, 0, max(1, t.shape[-1] // 2))
    if name == "expand":
        return t.unsqueeze(0).expand(2, *t.shape)
    raise AssertionError(name)


VIEWS = ["t", "slice", "step", "select", "diag", "unsq", "flat", "narrow", "expand"]


def _op(name, t, y, s, idx):
    if name == "add_y":
        return t + y if y.dim() <= t.dim() and y.shape[-1:] in ((1,), t.shape[-1:], ()) else t + y.sum()
    if name == "mul_s":
        return t * s
    if name == "sub_s":
        return s - t
    if name == "div_s":
        return t / (s if s not in (0, False) else 3)
    if name == "pow":
        return t.abs() ** 1.5
    if name == "sum":
        return t.sum(-1)
    if name == "sum_keep":
        return t.sum(-1, keepdim=True) + t
    if name == "amax":
        return t.amax(0)
    if name == "mean":
        return t.float().mean() + t
    if name == "where":
        return torch.where(t > 0, t, s)
    if name == "mask_fill":
        return t.masked_fill(t < 0, s)
    if name == "index":
        return t[idx % t.shape[0]] if t.dim() >= 1 and t.shape[0] > 0 else t
    if name == "index_select":
        return t.index_select(-1, idx % t.shape[-1]) if t.dim() >= 1 and t.shape[-1] > 0 else t
    if name == "mask_index":
        return t[t > 0.1]  # data-dependent: a graph break
    if name == "to_int":
        return (t * 3).to(torch.int32)
    if name == "to_bf16":
        return t.to(torch.bfloat16)
    if name == "to_f64":
        return t.double()
    if name == "cmp":
        return t > s
    if name == "bool_mix":
        return (t != 0) & (t.sum() > 0)
    if name == "clamp":
        return t.clamp(min=s) if not isinstance(s, bool) else t.clamp(-1, 1)
    if name == "cumsum":
        return t.cumsum(-1)
    if name == "softmax":
        return t.float().softmax(-1)
    if name == "matmul":
        return t @ t.transpose(-1, -2) if t.dim() >= 2 and t.is_floating_point() else t * 2
    if name == "cat":
        return torch.cat([t, t.flip(-1)], -1)
    if name == "detach":
        return t.detach() * 2 + t
    if name == "no_grad":
        with torch.no_grad():
            u = t * 2
        return u + t
    if name == "same_twice":
        return t + t.view(t.shape)
    if name == "item":
        return t + float(t.sum().item() > 0)  # a graph break
    raise AssertionError(name)


OPS = ["add_y", "mul_s", "sub_s", "div_s", "pow", "sum", "sum_keep", "amax", "mean", "where", "mask_fill", "index",
       "index_select", "mask_index", "to_int", "to_bf16", "to_f64", "cmp", "bool_mix", "clamp", "cumsum",
       "softmax", "matmul", "cat", "item", "detach", "no_grad", "same_twice"]


def _inplace(name, t, y, s, idx):
    if name == "add_":
        return t.add_(s)
    if name == "mul_":
        return t.mul_(s)
    if name == "copy_":
        return t.copy_(y.expand_as(t) if y.dim() <= t.dim() else y.sum())
    if name == "fill_":
        return t.fill_(s)
    if name == "zero_":
        return t.zero_()
    if name == "clamp_":
        return t.clamp_(max=0.5)
    if name == "masked_fill_":
        return t.masked_fill_(t > 0, s)
    if name == "index_add_":
        i = idx % t.shape[0]
        return t.index_add_(0, i, torch.ones((i.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device))
    if name == "setitem":
        t[0] = s
        return t
    if name == "t_":
        return t.t_() if t.dim() == 2 else t.unsqueeze_(0)
    if name == "nograd_add_":
        with torch.no_grad():
            return t.add_(1)
    if name == "index_put_":
        t[idx % t.shape[0]] = 7
        return t
    raise AssertionError(name)


INPLACE = ["add_", "mul_", "copy_", "fill_", "zero_", "clamp_", "masked_fill_", "index_add_", "setitem", "index_put_",
           "t_", "nograd_add_"]


def make_program(seed: int):
    """The steps of seed ``seed`` and a function running them: ``fn(x, y, idx, s)``."""
    r = random.Random(seed)
    steps = []
    for _ in range(r.randint(2, 6)):
        k = r.random()
        src = r.choice(["x", "x", "t", "t", "t", "y"])
        if k < 0.25:
            steps.append(("view", src, r.choice(VIEWS)))
        elif k < 0.5:
            steps.append(("inplace", src, r.choice(INPLACE)))
        else:
            steps.append(("op", src, r.choice(OPS)))
    ret = r.choice(["t", "t_x", "t_view_x", "t_t", "t_y_view"])
    return steps, ret, program(steps, ret)


def program(steps, ret):
    """The function running ``steps`` and returning ``ret``."""
    def fn(x, y, idx, s):
        t = x
        for kind, src, name in steps:
            a = {"x": x, "y": y, "t": t}[src]
            if kind == "view":
                t = _view(name, a)
            elif kind == "inplace":
                if 0 in a.stride() and a.numel() > 1:
                    t = a  # an expanded view: CPU writes its shared elements (deprecated), tpu refuses
                else:
                    t = _inplace(name, a, y, s, idx)
            else:
                t = _op(name, a, y, s, idx)
        if ret == "t":
            return t
        if ret == "t_x":
            return t, x
        if ret == "t_view_x":
            return t, x[0]
        if ret == "t_t":
            return t, t[..., :1] if t.dim() else t
        return t, y.t() if y.dim() == 2 else y

    return fn


SHAPES = [(3, 4), (4, 4), (2, 5), (5, 1), (2, 3, 2)]
YDTYPES = [torch.float32, torch.int64, torch.bfloat16, torch.float64, torch.bool, torch.int32]


def make_calls(seed: int):
    """The inputs of each call of seed ``seed``: [(label, x, y, idx, s, requires_grad or layout of x)];
    CPU tensors."""
    r = random.Random(seed * 7919 + 1)
    g = torch.Generator().manual_seed(seed)
    shape = r.choice(SHAPES)
    ydt = r.choice(YDTYPES)
    s = r.choice(SCALARS)

    def inputs(shape, ydt, xdt=torch.float32):
        x = (torch.randn(shape, generator=g) * (3 if xdt == torch.int64 else 1)).to(xdt)
        yshape = r.choice([shape, shape[-1:], ()])
        y = (torch.randn(yshape, generator=g) * 3)
        y = y > 0 if ydt == torch.bool else y.to(ydt)
        idx = torch.randint(-3, 6, (r.randint(1, 3),), generator=g)
        return x, y, idx

    calls = [("first", *inputs(shape, ydt), s, False), ("again", *inputs(shape, ydt), s, False)]
    other_shape = r.choice([sh for sh in SHAPES if sh != shape])
    calls.append(("new shape", *inputs(other_shape, ydt), s, False))
    calls.append(("new y dtype", *inputs(shape, r.choice([d for d in YDTYPES if d != ydt])), s, False))
    s2 = r.choice([v for v in SCALARS if not (v == s and type(v) is type(s))])
    calls.append(("new scalar", *inputs(shape, ydt), s2, False))
    calls.append(("x float64", *inputs(shape, ydt, torch.float64), s, False))
    calls.append(("x bfloat16", *inputs(shape, ydt, torch.bfloat16), s, False))
    calls.append(("x int64", *inputs(shape, ydt, torch.int64), s, False))
    calls.append(("requires_grad", *inputs(shape, ydt), s, True))
    calls.append(("x transposed view", *inputs(shape, ydt), s, "t"))
    calls.append(("x at an offset", *inputs(shape, ydt), s, "offset"))
    calls.append(("first again", *inputs(shape, ydt), s, False))
    return calls


# ---------------------------------------------------------------------------------------------------
# running and comparing


def _placed(x, layout, device):
    """``x`` on ``device`` as a fresh tensor laid out as ``layout``: "dense", "t" (a transposed view of a
    contiguous tensor) or "offset" (a slice of a larger tensor: a storage offset)."""
    x = x.clone()  # ``.contiguous()`` and ``.to("cpu")`` may return x itself: never write the caller's x
    if layout == "t" and x.dim() >= 2:
        return x.transpose(0, -1).contiguous().to(device).transpose(0, -1)
    if layout == "offset":
        return torch.cat([x.reshape(-1)[:1] * 0 + 9, x.reshape(-1)]).to(device)[1:].view(x.shape)
    return x.clone().to(device)


def _run(fn, x, y, idx, s, rg, device):
    """Run one call on ``device``: (results read to the host, inputs afterwards, grad of x) or the
    exception. ``rg``: False, True (x is a non-leaf that requires grad) or a layout of x ("t", "offset")."""
    leaf = _placed(x, rg if isinstance(rg, str) else "dense", device)
    rg = rg is True
    if rg:
        leaf.requires_grad_(True)
        xin = leaf * 1  # a non-leaf that requires grad: in-place writes on it are legal
    else:
        xin = leaf
    yin, iin = y.clone().to(device), idx.clone().to(device)
    rd = (lambda v: v) if device == "cpu" else read
    try:
        out = fn(xin, yin, iin, s)
        res = rd(out)
        grad = None
        if rg:
            outs = [o for o in (out if isinstance(out, tuple) else (out,))
                    if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
            if outs:
                sum(o.float().sum() for o in outs).backward()
                grad = rd(leaf.grad)
        after = rd((xin.detach(), yin))
        sync()
    except Exception as exc:  # noqa: BLE001
        return exc
    return res, after, grad


def check_seed(seed: int, dynamic=False) -> list[str]:
    import torch._dynamo

    # every call compiles (no call falls back to eager for hitting dynamo's recompile limit)
    with torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=4096):
        return _check_seed(seed, dynamic)


def _check_seed(seed: int, dynamic) -> list[str]:
    steps, ret, fn = make_program(seed)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu", dynamic=dynamic)
    problems = []
    for label, x, y, idx, s, rg in make_calls(seed):
        where = f"seed {seed} call {label!r} (x {x.dtype}{list(x.shape)}, y {y.dtype}{list(y.shape)}, " \
                f"idx {idx.tolist()}, s {s!r}, requires_grad/layout {rg})"
        exp = _run(fn, x, y, idx, s, rg, "cpu")
        got = _run(compiled, x, y, idx, s, rg, DEV)
        if isinstance(exp, Exception) and not isinstance(got, Exception):
            # torch.compile drops ops whose results are unused (``s - x`` with a bool ``s``, ``x[bad]``):
            # their errors go with them in torch's own backends too. The reference is then CPU compiled
            # with backend="aot_eager", which must return a value for the case to pass
            ref = _run(torch.compile(fn, backend="aot_eager", dynamic=dynamic), x, y, idx, s, rg, "cpu")
            if isinstance(ref, Exception):
                problems.append(f"[silent] {where}: CPU raised {_exc_text(exp)}; tpu returned a value")
                continue
            exp = ref
        if isinstance(exp, Exception):
            if not is_clear(got):
                problems.append(f"[unclear error] {where}: {type(got).__module__}.{_exc_text(got)}")
            continue
        if isinstance(got, Exception):
            ref = _run(torch.compile(fn, backend="aot_eager", dynamic=dynamic), x, y, idx, s, rg, "cpu")
            if isinstance(ref, Exception) and is_clear(got):
                continue  # dynamo itself fails on this call (CPU backend="aot_eager" raises too)
            problems.append(f"[tpu raised] {where}: {type(got).__module__}.{_exc_text(got)}")
            try:
                assert_device_works()
            except pytest.fail.Exception as f:
                problems.append(str(f).splitlines()[0])
                break
            continue
        for what, e, g in zip(("result", "inputs after", "grad"), exp, got):
            try:
                assert_same(e, g, where=f"{where} {what}", signed_zeros=False,
                              atol={torch.bfloat16: 2e-2, torch.float32: 1e-4}, rtol={torch.float32: 1e-4})
            except pytest.fail.Exception as f:
                problems.append(str(f).splitlines()[0])
    if problems:
        problems.append(f"  steps {steps}, returns {ret}")
    return problems


@pytest.mark.parametrize("dynamic", [False, None])
def test_random_compiled_programs_match_cpu(dynamic):
    problems = []
    for seed in SEEDS:
        if dynamic is None and seed % 3:
            continue  # dynamic=None differs after a new shape only: a third of the seeds
        problems += check_seed(seed, dynamic)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------
# modules: random small stacks (Linear, BatchNorm with and without momentum, LayerNorm, in-place ReLU, a
# buffer updated in train mode) compiled as torch.compile(m), fullgraph or not, or m.compile(), then
# called with train()/eval() switches, batch sizes, inputs that require grad or not, under no_grad and
# inference_mode; outputs, buffers and gradients compared with the same module compiled with
# backend="aot_eager" on CPU (dynamo's own semantics: fullgraph refusals, graph breaks)


class _Count(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("seen", torch.zeros(n))

    def forward(self, x):
        if self.training:
            self.seen.add_(x.detach().mean(0))
        return x + self.seen


def _module(seed: int):
    r = random.Random(seed)
    n, mods = 4, []
    for _ in range(r.randint(2, 5)):
        k = r.choice(["linear", "bn", "ln", "relu", "gelu", "drop0", "inplace_relu", "count"])
        mods.append({"linear": lambda: torch.nn.Linear(n, n),
                     "bn": lambda: torch.nn.BatchNorm1d(n, momentum=r.choice([0.1, None])),
                     "ln": lambda: torch.nn.LayerNorm(n), "relu": torch.nn.ReLU, "gelu": torch.nn.GELU,
                     "drop0": lambda: torch.nn.Dropout(0.0), "inplace_relu": lambda: torch.nn.ReLU(inplace=True),
                     "count": lambda: _Count(n)}[k]())
    return torch.nn.Sequential(*mods)


def _module_calls(seed: int):
    r = random.Random(seed + 1000)
    return [(r.choice(["train", "eval"]), r.choice([3, 5]), r.choice([True, False]),
             r.choice(["grad", "no_grad", "inference_mode"])) for _ in range(6)]


def _module_run(seed: int, device: str, how: str) -> list:
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(seed)
    m = _module(seed).to(device)
    backend = "tpu" if device == DEV else "aot_eager"
    if how == "method":
        m.compile(backend=backend, dynamic=False)
        f = m
    else:
        f = torch.compile(m, backend=backend, fullgraph=how == "fullgraph")
    rows = []
    for j, (mode, batch, rg, grad_mode) in enumerate(_module_calls(seed)):
        getattr(m, mode)()
        x = torch.randn(batch, 4, generator=torch.Generator().manual_seed(seed * 10 + j)).to(device).requires_grad_(rg)
        m.zero_grad(set_to_none=True)
        try:
            if grad_mode == "grad":
                y = f(x)
                if y.requires_grad:
                    (y * torch.arange(y.numel(), device=device).reshape(y.shape)).sum().backward()
            else:
                with getattr(torch, grad_mode)():
                    y = f(x)
            row = [y.detach(), y.requires_grad, *[b.detach().clone() for b in m.buffers()],
                   *[p.grad for p in m.parameters()], x.grad]
            rows.append(row if device == "cpu" else read(row))
            if device != "cpu":
                sync()
        except Exception as exc:  # noqa: BLE001
            rows.append(exc)
    return rows


@pytest.mark.parametrize("how", ["fullgraph", "graph_breaks", "method"])
def test_random_compiled_modules_match_cpu(how):
    problems = []
    with torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=4096):
        # one seed per variant by default (a different one each), more with TORCH_TPU_FUZZ_SEEDS
        offset = ["fullgraph", "graph_breaks", "method"].index(how)
        for seed in range(offset, offset + max(1, len(SEEDS) // 3) * 3, 3):
            exp, got = _module_run(seed, "cpu", how), _module_run(seed, DEV, how)
            for j, (e, g) in enumerate(zip(exp, got)):
                where = f"seed {seed} ({how}) call {j} {_module_calls(seed)[j]}"
                if isinstance(e, Exception) or isinstance(g, Exception):
                    if not isinstance(e, Exception):
                        problems.append(f"[tpu raised] {where}: {_exc_text(g)}")
                    elif not isinstance(g, Exception):
                        problems.append(f"[silent] {where}: CPU raised {_exc_text(e)}")
                    elif not is_clear(g):
                        problems.append(f"[unclear error] {where}: {_exc_text(g)}")
                    continue
                try:
                    assert_same(e, g, where=where, atol=1e-4, rtol=1e-4)
                except pytest.fail.Exception as f:
                    problems.append(str(f).splitlines()[0])
            if problems:
                problems.append(f"  module {_module(seed)}")
                break
    assert not problems, "\n".join(problems)
