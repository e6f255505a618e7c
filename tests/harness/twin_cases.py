"""Hand-written twin families for eager/test_cache_keys.py (see twins.py): each entry differs from its
twin in exactly one attribute."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.harness.inputs import per_device, rand
from tests.harness.twins import Twin

PD = per_device


def _r(*s, dtype=torch.float32, seed=0):
    t = rand(*s, seed=seed)
    if dtype.is_complex:
        return torch.complex(t, rand(*s, seed=seed + 9)).to(dtype)
    if dtype == torch.bool:
        return t > 0
    if not dtype.is_floating_point:
        return (t * 4).round().to(dtype) if dtype != torch.uint8 else (t.abs() * 4).round().to(dtype)
    return t.to(dtype)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool,
          torch.uint8, torch.complex64]


def _pairs(name, family, fn, variants, **kw):
    """Twins between the first variant and every other: variants = [(label, args)]."""
    (la, aa) = variants[0]
    return [Twin(f"{name}[{la}|{lb}]", (fn, aa), (fn, ab), family=family, **kw) for lb, ab in variants[1:]]


def _fpairs(name, family, args, fns, **kw):
    """Twins between the first function and every other on the same arguments: fns = [(label, fn)]."""
    (la, fa) = fns[0]
    return [Twin(f"{name}[{la}|{lb}]", (fa, args), (fb, args), family=family, **kw) for lb, fb in fns[1:]]


def _layouts(shape, dtype=torch.float32, seed=0):
    """Same shape and values kind, other strides / offsets / bits."""
    t = _r(*shape, dtype=dtype, seed=seed)
    out = [("contig", t)]
    if len(shape) >= 2:
        tt = t.transpose(-1, -2).contiguous()
        out.append(("transposed", PD(lambda d, tt=tt: tt.clone().to(d).transpose(-1, -2))))
        row = t[..., :1, :]
        out.append(("expanded", PD(lambda d, row=row: row.clone().to(d).expand(*shape))))
    wide = torch.stack([t, -t], -1).reshape(*shape[:-1], shape[-1] * 2)
    out.append(("step2", PD(lambda d, w=wide: w.clone().to(d)[..., ::2])))
    flat = torch.cat([torch.zeros(3, dtype=t.dtype), t.reshape(-1)])
    out.append(("offset3", PD(lambda d, f=flat: f.clone().to(d)[3:].view(*shape))))
    return out


def dtype_twins():
    out = []
    ops = [("add", lambda a, b: a + b), ("mul_scalar", lambda a, b: a * 3), ("neg", lambda a, b: -a if a.dtype != torch.bool else ~a),
           ("sum", lambda a, b: a.sum(0)), ("eq", lambda a, b: a == b), ("where", lambda a, b: torch.where(b > 0, a, b)),
           ("max", lambda a, b: a.amax(1)), ("cumsum", lambda a, b: a.cumsum(1)), ("exp", lambda a, b: a.exp() if a.is_floating_point() or a.is_complex() else a.float().exp()),
           ("div", lambda a, b: a / 2), ("floor_div", lambda a, b: a // 3 if not a.is_complex() else a),
           ("abs", lambda a, b: a.abs() if a.dtype != torch.bool else a), ("cat", lambda a, b: torch.cat([a, a])),
           ("to_f", lambda a, b: a.to(torch.float32)), ("sort", lambda a, b: a.sort(1).values if not a.is_complex() else a)]
    for name, fn in ops:
        variants = [(str(dt).split(".")[1], [_r(3, 4, dtype=dt), _r(3, 4, seed=1)]) for dt in DTYPES]
        out += _pairs(f"dtype_{name}", "dtype of a tensor", fn, variants)
    return out


def layout_twins():
    out = []
    ops = [("exp", lambda a: a.exp()), ("add1", lambda a: a + 1), ("sum1", lambda a: a.sum(1)),
           ("view_after", lambda a: (a * 2).reshape(-1)), ("mm", lambda a: a @ a.transpose(0, 1)),
           ("clone", lambda a: a.clone()), ("contig", lambda a: a.contiguous()), ("add_inplace", lambda a: a.add_(1)),
           ("mul_inplace_view", lambda a: a.mul_(2)), ("copy_", lambda a: a.copy_(torch.ones_like(a))),
           ("cumsum0", lambda a: a.cumsum(0)), ("softmax", lambda a: a.softmax(-1)), ("t_sum", lambda a: a.t().sum(0))]
    for name, fn in ops:
        out += _pairs(f"layout_{name}", "strides/offset", fn, [(l, [a]) for l, a in _layouts((4, 4))])
    return out


def shape_twins():
    out = []
    for name, fn in [("sum0", lambda a: a.sum(0)), ("exp", lambda a: a.exp()), ("softmax", lambda a: a.softmax(0)),
                     ("flatten", lambda a: a.flatten() * 2), ("argmax", lambda a: a.argmax())]:
        out += _pairs(f"shape_{name}", "shape equal numel", fn,
                      [("3x4", [_r(3, 4)]), ("4x3", [_r(4, 3)]), ("12", [_r(12)]), ("2x2x3", [_r(2, 2, 3)])])
    for name, fn in [("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("exp", lambda a, b: a.exp() + b),
                     ("sum", lambda a, b: a.sum() + b), ("index", lambda a, b: b[a.long().clamp(0, 0)])]:
        out += _pairs(f"zerodim_{name}", "0-dim vs 1-element", fn,
                      [("0d", [torch.tensor(1.5), _r(3)]), ("1d", [torch.tensor([1.5]), _r(3)]),
                       ("1x1", [torch.tensor([[1.5]]), _r(3)])])
    for name, fn in [("sum", lambda a: a.sum(0)), ("amax", lambda a: a.amax(0) if a.shape[0] else a.sum(0)),
                     ("mean", lambda a: a.mean(0)), ("cat", lambda a: torch.cat([a, a]) * 2), ("prod", lambda a: a.prod(0))]:
        out += _pairs(f"empty_{name}", "empty tensors", fn, [("3x4", [_r(3, 4)]), ("0x4", [torch.zeros(0, 4)]),
                                                             ("0x12", [torch.zeros(0, 12)])])
    return out


def bit_twins():
    out = []
    c = _r(3, 3, dtype=torch.complex64)
    plain = [("plain", [c])]
    conj = ("conj", [PD(lambda d: c.clone().to(d).conj())])
    neg = ("neg", [PD(lambda d: torch._neg_view(c.clone().to(d)))])
    for name, fn in [("exp", lambda a: a.exp()), ("mul", lambda a: a * a), ("sum", lambda a: a.sum(0)),
                     ("mm", lambda a: a @ a), ("real", lambda a: a.real * 1), ("imag", lambda a: a.imag * 1),
                     ("add_", lambda a: a.add_(1)), ("abs", lambda a: a.abs()), ("clone", lambda a: a.clone()),
                     ("resolve", lambda a: a.resolve_conj().resolve_neg() * 1), ("angle", lambda a: a.angle())]:
        out += _pairs(f"bits_{name}", "conj/neg bit", fn, plain + [conj, neg])
    f = _r(3, 3)
    out += _pairs("negbit_float_exp", "conj/neg bit", lambda a: a.exp(), [("plain", [f]), ("neg", [PD(lambda d: torch._neg_view(f.clone().to(d)))])])
    out += _pairs("negbit_float_add_", "conj/neg bit", lambda a: a.add_(1), [("plain", [f]), ("neg", [PD(lambda d: torch._neg_view(f.clone().to(d)))])])
    return out


def grad_twins():
    out = []
    for name, fn in [("exp", lambda a: a.exp()), ("mul", lambda a: a * 2), ("sum", lambda a: a.sum()),
                     ("grad", lambda a: torch.autograd.grad(a.exp().sum(), a)[0] if a.requires_grad else a.exp())]:
        out += _pairs(f"reqgrad_{name}", "requires_grad", fn,
                      [("nograd", [_r(3, 3)]), ("grad", [PD(lambda d: _r(3, 3).to(d).requires_grad_())])])
    x4 = _r(2, 3, 4, 4)
    cl = ("channels_last", [PD(lambda d: x4.clone().to(d).contiguous(memory_format=torch.channels_last))])
    w = _r(5, 3, 3, 3, seed=2)
    for name, fn in [("conv", lambda a: F.conv2d(a, w.to(a.device))), ("add", lambda a: a + 1),
                     ("avgpool", lambda a: F.avg_pool2d(a, 2)), ("bn", lambda a: F.batch_norm(a, None, None, training=True)),
                     ("interp", lambda a: F.interpolate(a, scale_factor=2.0)), ("relu_view", lambda a: a.relu().view(-1))]:
        out += _pairs(f"memfmt_{name}", "memory_format", fn, [("contig", [x4]), cl])
    return out


_NUM = [("int1", 1), ("float1", 1.0), ("bool", True), ("cplx", 1 + 0j), ("negzero", -0.0), ("zero", 0.0), ("nan", float("nan")),
        ("inf", float("inf")), ("ninf", float("-inf")), ("big", 2 ** 40), ("huge", 2 ** 62), ("int0", 0), ("false", False)]


def scalar_twins():
    out = []
    xf = _r(3, 4)
    xi = _r(3, 4, dtype=torch.int64)
    xb = _r(3, 4, dtype=torch.bool)
    xh = _r(3, 4, dtype=torch.float16)
    ops = [("add", lambda a, s: a + s), ("mul", lambda a, s: a * s), ("rsub", lambda a, s: s - a),
           ("div", lambda a, s: a / s), ("pow", lambda a, s: a ** s), ("rpow", lambda a, s: s ** a),
           ("fill", lambda a, s: torch.full_like(a, s)), ("full", lambda a, s: torch.full((2,), s, device=a.device)),
           ("masked_fill", lambda a, s: a.masked_fill(a > 0, s)), ("clamp_min", lambda a, s: a.clamp(min=s)),
           ("where", lambda a, s: torch.where(a > 0, a, s)), ("eq", lambda a, s: a == s), ("lt", lambda a, s: a < s),
           ("add_alpha", lambda a, s: torch.add(a, a, alpha=s)), ("fill_", lambda a, s: a.fill_(s)),
           ("maximum", lambda a, s: torch.maximum(a, torch.tensor(s, device=a.device))),
           ("pad", lambda a, s: F.pad(a, (1, 1), value=s)), ("nan_to_num", lambda a, s: torch.nan_to_num(a / 0, nan=s)),
           ("threshold", lambda a, s: F.threshold(a, 0.5, s)), ("leaky", lambda a, s: F.leaky_relu(a, s)),
           ("hardtanh", lambda a, s: F.hardtanh(a, -s, s)), ("div_floor", lambda a, s: torch.div(a, s, rounding_mode="floor")),
           ("fmod", lambda a, s: torch.fmod(a, s)), ("remainder", lambda a, s: torch.remainder(a, s)),
           ("lerp", lambda a, s: torch.lerp(a, a * 0, s)), ("addcmul", lambda a, s: torch.addcmul(a, a, a, value=s)),
           ("sub_", lambda a, s: a.sub_(s)), ("tensor", lambda a, s: torch.tensor(s, device=a.device) * 1),
           ("clamp_max", lambda a, s: a.clamp(max=s)), ("ne", lambda a, s: a != s),
           ("mul_", lambda a, s: a.mul_(s)), ("softplus_beta", lambda a, s: F.softplus(a, beta=s) if a.is_floating_point() else a),
           ("copysign", lambda a, s: torch.copysign(a, s)), ("atan2", lambda a, s: torch.atan2(a, torch.full_like(a, s)) if a.is_floating_point() else a),
           ]
    for xname, x in (("f32", xf), ("i64", xi), ("bool", xb), ("f16", xh)):
        for name, fn in ops:
            out += _pairs(f"scalar_{name}_{xname}", "scalar type/value", fn, [(l, [x, v]) for l, v in _NUM])
            # as a Python-closure constant too (compiled: a graph constant, not an input)
            out += _fpairs(f"scalarconst_{name}_{xname}", "scalar constant", [x],
                           [(l, (lambda a, v=v, fn=fn: fn(a, v))) for l, v in _NUM[:8]])
    return out


def kwarg_twins():
    out = []
    x = _r(3, 4, 5)
    dims = [("int1", 1), ("neg2", -2), ("list1", [1]), ("tuple1", (1,)), ("list12", [1, 2]), ("tuple21", (2, 1)),
            ("none", None), ("emptylist", [])]
    for name, f in [("sum", torch.sum), ("mean", torch.mean), ("amax", torch.amax), ("std", torch.std),
                    ("var", torch.var), ("logsumexp", torch.logsumexp), ("nansum", torch.nansum),
                    ("count_nonzero", torch.count_nonzero), ("norm", lambda a, dim, keepdim=False: torch.linalg.vector_norm(a, dim=dim, keepdim=keepdim))]:
        for kd in (False, True):
            out += _fpairs(f"dim_{name}_kd{kd}", "dim int/list/tuple/None", [x],
                           [(l, (lambda a, d=d, f=f, kd=kd: f(a, d, keepdim=kd) if name != "count_nonzero" else f(a, d))) for l, d in dims])
        out += _fpairs(f"keepdim_{name}", "keepdim", [x],
                       [("kdF", lambda a, f=f: f(a, 1, keepdim=False) if name != "count_nonzero" else f(a, 1)),
                        ("kdT", lambda a, f=f: f(a, 1, keepdim=True) if name != "count_nonzero" else f(a, 1)),
                        ("default", lambda a, f=f: f(a, 1))])
    out += _fpairs("std_correction", "None vs default vs explicit", [x],
                   [("default", lambda a: a.std(1)), ("none", lambda a: a.std(1, correction=None)),
                    ("c1", lambda a: a.std(1, correction=1)), ("c0", lambda a: a.std(1, correction=0)),
                    ("c1f", lambda a: a.std(1, correction=1.0)), ("c2", lambda a: a.std(1, correction=2)),
                    ("unbiasedF", lambda a: a.std(1, unbiased=False))])
    out += _fpairs("sum_dtype", "None vs default vs explicit", [_r(3, 4, dtype=torch.int32)],
                   [("default", lambda a: a.sum(1)), ("none", lambda a: a.sum(1, dtype=None)),
                    ("i64", lambda a: a.sum(1, dtype=torch.int64)), ("f32", lambda a: a.sum(1, dtype=torch.float32)),
                    ("i32", lambda a: a.sum(1, dtype=torch.int32))])
    out += _fpairs("softmax_dtype", "None vs default vs explicit", [x],
                   [("default", lambda a: a.softmax(1)), ("f64", lambda a: a.softmax(1, dtype=torch.float64)),
                    ("neg", lambda a: a.softmax(-2))])
    out += _fpairs("div_mode", "None vs default vs explicit", [x * 5],
                   [("default", lambda a: torch.div(a, 2)), ("none", lambda a: torch.div(a, 2, rounding_mode=None)),
                    ("floor", lambda a: torch.div(a, 2, rounding_mode="floor")), ("trunc", lambda a: torch.div(a, 2, rounding_mode="trunc"))])
    y = _r(3, 4, 5, seed=1)
    for red in ("mean", "sum", "none"):
        pass
    out += _fpairs("mse_reduction", "reduction string", [x, y],
                   [(r, lambda a, b, r=r: F.mse_loss(a, b, reduction=r)) for r in ("mean", "sum", "none")])
    out += _fpairs("l1_reduction", "reduction string", [x, y],
                   [(r, lambda a, b, r=r: F.l1_loss(a, b, reduction=r)) for r in ("mean", "sum", "none")])
    logits, tgt = _r(4, 5), torch.tensor([0, 3, 4, 1])
    out += _fpairs("ce_reduction", "reduction string", [logits, tgt],
                   [(r, lambda a, b, r=r: F.cross_entropy(a, b, reduction=r)) for r in ("mean", "sum", "none")]
                   + [("ls0.1", lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1)),
                      ("ignore3", lambda a, b: F.cross_entropy(a, b, ignore_index=3))])
    out += _fpairs("nll_reduction", "reduction string", [logits.log_softmax(1), tgt],
                   [(r, lambda a, b, r=r: F.nll_loss(a, b, reduction=r)) for r in ("mean", "sum", "none")])
    out += _fpairs("smoothl1_beta", "scalar kwarg", [x, y],
                   [(str(b), lambda a, c, b=b: F.smooth_l1_loss(a, c, beta=b)) for b in (1.0, 0.5, 0.0, -0.0, 1, 2.0)])
    out += _fpairs("gelu_approx", "string kwarg", [x], [("none", lambda a: F.gelu(a)), ("tanh", lambda a: F.gelu(a, approximate="tanh"))])
    out += _fpairs("interp_mode", "string kwarg", [_r(1, 2, 4, 4)],
                   [(m, lambda a, m=m: F.interpolate(a, size=(6, 6), mode=m)) for m in ("nearest", "bilinear", "bicubic", "nearest-exact", "area")]
                   + [("bilinear_ac", lambda a: F.interpolate(a, size=(6, 6), mode="bilinear", align_corners=True))])
    return out


def out_twins():
    out = []
    x, y = _r(3, 4), _r(3, 4, seed=1)

    def outf(f):
        def g(a, b):
            o = torch.zeros_like(a)
            r = f(a, b, out=o)
            return r, o
        return g
    for name, f in [("add", torch.add), ("mul", torch.mul), ("maximum", torch.maximum), ("atan2", torch.atan2),
                    ("mm", lambda a, b, out=None: torch.mm(a, b.t(), out=out if out is None else out[:, :3]))]:
        out += _fpairs(f"out_{name}", "out= vs none vs in-place", [x, y],
                       [("plain", lambda a, b, f=f: f(a, b)), ("out", outf(f))])
    out += _fpairs("out_wrong_shape", "out= vs none vs in-place", [x, y],
                   [("plain", lambda a, b: torch.add(a, b)), ("out_resize", lambda a, b: (lambda o: (torch.add(a, b, out=o), o))(torch.empty(0, device=a.device)))])
    out += _fpairs("out_dtype", "out= vs none vs in-place", [x, y],
                   [("plain", lambda a, b: torch.add(a, b)), ("out_f64", lambda a, b: (lambda o: (torch.add(a, b, out=o), o))(torch.empty(3, 4, dtype=torch.float64, device=a.device)))])
    out += _fpairs("out_strided", "out= vs none vs in-place", [x, y],
                   [("out", lambda a, b: (lambda o: (torch.add(a, b, out=o), o))(torch.empty(3, 4, device=a.device))),
                    ("out_t", lambda a, b: (lambda o: (torch.add(a, b, out=o), o))(torch.empty(4, 3, device=a.device).t()))])
    for name, op, iop in [("add", torch.add, "add_"), ("mul", torch.mul, "mul_"), ("sub", torch.sub, "sub_"),
                          ("div", torch.div, "div_"), ("maximum", torch.maximum, None), ("pow", torch.pow, "pow_")]:
        fns = [("oop", lambda a, b, op=op: op(a, b))]
        if iop:
            fns.append(("inplace", lambda a, b, iop=iop: getattr(a, iop)(b)))
        fns += [("alias_oop", lambda a, b, op=op: op(a, a)),
                ("alias_out", lambda a, b, op=op: op(a, a, out=a)),
                ("out_is_other", lambda a, b, op=op: op(a, b, out=b))]
        if iop:
            fns.append(("alias_inplace", lambda a, b, iop=iop: getattr(a, iop)(a)))
        out += _fpairs(f"alias_{name}", "aliasing", [x, y], fns)
    out += _fpairs("alias_addcmul", "aliasing", [x, y],
                   [("plain", lambda a, b: a.addcmul_(b, b)), ("self", lambda a, b: a.addcmul_(a, a)),
                    ("mixed", lambda a, b: a.addcmul_(a, b))])
    out += _fpairs("alias_mm_out", "aliasing", [_r(3, 3), _r(3, 3, seed=1)],
                   [("plain", lambda a, b: torch.mm(a, b)), ("out_self", lambda a, b: torch.mm(a, b, out=a)),
                    ("view_overlap", lambda a, b: a.t().add_(a) if False else torch.add(a, a.t(), out=b))])
    out += _fpairs("alias_copy_", "aliasing", [_r(4, 4)],
                   [("plain", lambda a: a.copy_(a * 2)), ("self", lambda a: a.copy_(a)), ("self_t", lambda a: a[:2].copy_(a[2:]))])
    return out


def index_twins():
    out = []
    x = _r(5, 4)
    for name, fn in [("index", lambda a, i: a[i]), ("index_select", lambda a, i: a.index_select(0, i)),
                     ("gather", lambda a, i: a.gather(0, i[:, None].expand(-1, 4))),
                     ("index_put", lambda a, i: a.index_put((i,), torch.ones(4, device=a.device), accumulate=True)),
                     ("index_add", lambda a, i: a.index_add(0, i, torch.ones(len(i), 4, device=a.device))),
                     ("scatter_add", lambda a, i: a.scatter_add(0, i[:, None].expand(-1, 4), torch.ones(len(i), 4, device=a.device))),
                     ("take", lambda a, i: a.take(i)), ("embedding", lambda a, i: F.embedding(i, a))]:
        variants = [("i64", [x, torch.tensor([0, 2, 4, 2])]), ("i32", [x, torch.tensor([0, 2, 4, 2], dtype=torch.int32)]),
                    ("neg", [x, torch.tensor([0, -1, 4, 2])]), ("i64_cpu_idx", [x, PD(lambda d: torch.tensor([1, 2, 4, 2]))])]
        out += _pairs(f"idx_{name}", "index int32 vs int64", fn, variants)
    m = torch.tensor([True, False, True, False, True])
    for name, fn in [("getitem", lambda a, k: a[k]), ("masked_fill", lambda a, k: a.masked_fill(k[:, None], 7.0)),
                     ("masked_select", lambda a, k: a.masked_select(k[:, None])), ("setitem", lambda a, k: a.__setitem__(k, 3.0) or a),
                     ("where", lambda a, k: torch.where(k[:, None].bool(), a, 0.0))]:
        out += _pairs(f"mask_{name}", "bool vs uint8 mask", fn,
                      [("bool", [x, m]), ("uint8", [x, m.to(torch.uint8)]), ("bool_other", [x, ~m]), ("int64", [x, m.long()])])
    return out


def all_twins():
    return (dtype_twins() + layout_twins() + shape_twins() + bit_twins() + grad_twins() + scalar_twins()
            + kwarg_twins() + out_twins() + index_twins())


# ---------------------------------------------------------------------------------------------------
# OpInfo twins: a sample of torch's OpInfo database (the ops the tpu op table lowers), each sample
# perturbed in one attribute of its input tensor or of one Python number among its arguments.

_RANDOM = ("rand", "dropout", "normal", "bernoulli", "multinomial", "uniform", "empty", "randint", "exponential",
           "geometric", "cauchy", "log_normal", "poisson", "new_empty", "rrelu")
_OP_DTYPES = [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.uint8,
              torch.complex64]


def _number_variants(v):
    if type(v) is bool:
        return [("int", int(v)), ("flip", not v)]
    if type(v) is int:
        return [("float", float(v)), ("neg", -v), ("bool", bool(v))] + ([("zero", 0)] if v else [])
    if type(v) is float:
        return [("negzero", -0.0 if v == 0 else -v), ("int", int(v)) if v == v and abs(v) < 1e18 else ("nan", float("nan")),
                ("half", v / 2)]
    return []


def _numbers(sample):
    """(where, value) of each Python number among a sample's args/kwargs (top level)."""
    out = [(("arg", i), a) for i, a in enumerate(sample.args) if type(a) in (int, float, bool)]
    out += [(("kw", k), v) for k, v in sample.kwargs.items() if type(v) in (int, float, bool)]
    return out


def _with(sample, where, value):
    args, kwargs = list(sample.args), dict(sample.kwargs)
    if where[0] == "arg":
        args[where[1]] = value
    else:
        kwargs[where[1]] = value
    return args, kwargs


def _call_of(op, inp, args, kwargs):
    def fn(x, *a):  # the keywords come last, materialised on each device like the arguments
        return op(x, *a[:-1], **a[-1])
    fn.__name__ = op.name
    return (fn, [inp, *args, dict(kwargs)])


def opinfo_twins(ops_limit=None, seed=0, per_op=6):
    import random

    from tests.ops import test_op_consistency as T
    rnd = random.Random(seed)
    ops = [o for o in T._selected() if not any(p in o.name for p in _RANDOM)]
    rnd.shuffle(ops)
    out = []
    for op in ops[:ops_limit]:
        try:
            samples = list(op.sample_inputs("cpu", torch.float32))[:2]
        except Exception:  # noqa: BLE001
            continue
        supported = op.supported_dtypes("cpu")
        name = T._full_name(op)
        mine = []
        for si, s in enumerate(samples):
            x = s.input
            if not isinstance(x, torch.Tensor):
                continue
            a = _call_of(op, x, s.args, s.kwargs)
            extra = [d for d in _OP_DTYPES if d in supported]
            for dt in rnd.sample(extra, min(2, len(extra))):
                mine.append(Twin(f"op_{name}_{si}[f32|{str(dt)[6:]}]", a, _call_of(op, x.to(dt), s.args, s.kwargs),
                                 family="opinfo dtype", tol=1e-2 if dt in (torch.float16, torch.bfloat16) else None))
            if x.dim() >= 1 and x.numel() > 1:
                for label, v in _layouts(tuple(x.shape)):
                    if label == "contig":
                        continue
                    vv = v  # the layout maker draws new values: the sample's own are copied into the view
                    mine.append(Twin(f"op_{name}_{si}[contig|{label}]", a, _call_of(op, per_device(
                        lambda d, v=vv, x=x: _filled(v.make(d), x)), s.args, s.kwargs), family="opinfo layout"))
                mine.append(Twin(f"op_{name}_{si}[plain|negbit]", a, _call_of(op, per_device(
                    lambda d, x=x: torch._neg_view((-x).clone().to(d))), s.args, s.kwargs), family="opinfo neg bit"))
            for where, v in _numbers(s):
                for label, nv in _number_variants(v):
                    args, kwargs = _with(s, where, nv)
                    mine.append(Twin(f"op_{name}_{si}[{where[1]}={v!r}|{label}]", a, _call_of(op, x, args, kwargs),
                                     family="opinfo scalar"))
        rnd.shuffle(mine)
        out += mine[:per_op]
    return out


def _filled(view, x):
    """``view`` (a strided/offset/expanded view) holding ``x``'s values where it can: an expanded view
    keeps its own (it cannot be written)."""
    if 0 in view.stride():
        return view
    with torch.no_grad():
        view.copy_(x.to(view.device))
    return view
