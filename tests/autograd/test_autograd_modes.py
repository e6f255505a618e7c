"""Autograd across the three execution modes (strict, fused, compiled).

``ops/test_op_backward.py`` compares the backward of every lowered OpInfo op in strict mode; here:

* the backward of OpInfo ops in fused mode and in compiled mode (the forward compiled with
  ``torch.compile(backend="tpu", dynamic=False)``, the backward through AOTAutograd's compiled backward
  graph). A full sweep of the 190 ops (one sample each) was run once in each mode; this file keeps a
  representative subset plus every op that failed (``BUGS``);
* sequences: gradient accumulation, retain_graph, double backward, ``autograd.grad`` options, hooks,
  optimizer-style in-place updates under no_grad, CopySlices, detach_/requires_grad_, device hops and
  mode switches between forward and backward;
* ``torch.utils.checkpoint`` with dropout (the mask must be replayed), ``torch.func`` transforms,
  autocast with GradScaler.

Every case compares with CPU torch through ``differential`` where a reference exists, and all run in one
crash-tolerant child process.
"""
import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from tests.harness import differential as D
from tests.harness.errors import assert_device_works, Gap
from tests.harness.inputs import per_device, rand
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]


def _leaf(*shape, seed=0):
    return rand(*shape, seed=seed).requires_grad_(True)


def _on_tpu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _compiled_on_tpu(f):
    """``f`` compiled (backend tpu) when called with tpu tensors, plain on the CPU (the reference)."""
    cache = {}

    def g(*a):
        if any(_on_tpu(x) for x in pytree.tree_leaves(a)):
            if "fn" not in cache:
                torch._dynamo.reset()
                cache["fn"] = torch.compile(f, backend="tpu", dynamic=False)
            return cache["fn"](*a)
        return f(*a)

    return g


# --------------------------------------------------------------------------------------------------
# 1. OpInfo backward in fused and compiled modes (one sample per op, as ops/test_op_backward.py)

# ops whose compiled backward failed in the full sweep: CopySlices' and masked_scatter's backward graphs
# hold new_empty_strided / masked_scatter_backward, sgn's and angle's a known zero (_efficientzerotensor):
# "no tpu lowering for aten op(s)"
BUGS_COMPILED = ["masked_scatter", "sgn", "angle"]
# the same with the OpInfo's last sample (a second sweep): index_fill with a tensor value aborted the
# process (its backward's _unique, traced with fake tpu tensors on autograd's tpu thread);
# repeat_interleave with output_size was refused as data-dependent
BUGS_COMPILED_LAST = ["index_fill", "repeat_interleave"]
# a spread of families: elementwise, reductions with ties, scans, scatters, views, norms, pools, sorts
# (the whole sweep passes; the suite keeps a few per family for its time on 2 cores)
COMPILED_SUBSET = ["add", "cumprod", "index_put", "scatter_reduce.prod", "native_layer_norm",
                   "nn.functional.max_pool2d", "sort", "as_strided_scatter", "std_mean", "kthvalue"]
FUSED_SUBSET = ["index_put", "scatter_reduce.amax", "cummax", "as_strided_scatter", "masked_scatter",
                "native_group_norm", "slice_scatter", "repeat_interleave"]


def _opinfo_case(name, mode, sample=0):
    from tests.ops import test_op_backward as HB

    def run():
        if name not in HB._opinfos():
            pytest.fail(f"[setup] {name} is no longer selected (no lowering, or no float32/autograd)")
        if mode == "compiled":
            # the OpInfo call compiled on the tpu; loss and backward outside (AOTAutograd's backward graph)
            fn, tensors = _compiled_opinfo(HB, name, sample)
            run_mode = "strict"
        else:
            fn, tensors = HB._opinfo_case(name)
            run_mode = mode
        tol = HB.ILL_CONDITIONED.get(name, 1e-3 if name in HB.LOOSE else 1e-4)
        D.check(fn, *tensors, modes=[run_mode], atol=tol, rtol=tol)
    return run


def _compiled_opinfo(HB, name, index=0):
    call, tensors = HB.opinfo_call(name, index)
    return HB._fwd_bwd(_compiled_on_tpu(call)), tensors


# --------------------------------------------------------------------------------------------------
# 2. sequences


def _accumulate(x):
    for k in (1.0, 2.0, 3.0):
        (x * k).sin().sum().backward()
    return x.grad


def _retain_twice(x):
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    g1 = x.grad.clone()
    loss.backward()
    return g1, x.grad


def _grad_penalty(x, w, b):
    xi = x.detach().requires_grad_(True)
    out = F.linear(xi, w, b).tanh()
    g, = torch.autograd.grad(out.sum(), xi, create_graph=True)
    pen = ((g.norm(2, dim=1) - 1) ** 2).mean()
    pen.backward()
    return pen, w.grad, b.grad


def _grad_of_grad(x):
    g, = torch.autograd.grad((x ** 3).sin().sum(), x, create_graph=True)
    gg, = torch.autograd.grad(g.sum(), x)
    return g, gg


def _allow_unused(x, y):
    return torch.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)


def _materialize_unused(x, y):
    return torch.autograd.grad((x * 2).sum(), [x, y], allow_unused=True, materialize_grads=True)


def _grad_outputs(dtype):
    def f(x):
        y = x.exp() * 2
        return torch.autograd.grad(y, x, grad_outputs=torch.linspace(-1, 1, 6, device=x.device).view(3, 2).to(dtype))
    f.__name__ = f"grad_outputs_{dtype}"
    return f


def _tensor_hooks(x):
    h = x.register_hook(lambda g: g * 2)
    y = x.exp()
    y.register_hook(lambda g: g + 1)
    y.sum().backward()
    h.remove()
    (x * 3).sum().backward()
    return x.grad


def _module_hook(x):
    torch.manual_seed(0)
    m = nn.Linear(2, 3).to(x.device)
    seen = []

    def hook(mod, gin, gout):
        seen.append(gout[0].clone())
        return (gin[0] * 0.5,)

    m.register_full_backward_hook(hook)
    xi = x.detach().requires_grad_(True)
    (m(xi).relu() * 2).sum().backward()
    return xi.grad, m.weight.grad, seen[0]


def _module_pre_hook(x):
    torch.manual_seed(0)
    m = nn.Linear(2, 3).to(x.device)
    m.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 3,))
    xi = x.detach().requires_grad_(True)
    m(xi).sum().backward()
    return xi.grad, m.weight.grad


def _sgd_steps(set_to_none):
    def f(x):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1)).to(x.device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for i in range(3):
            opt.zero_grad(set_to_none=set_to_none)
            loss = (m(x * (i + 1)) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return losses, [p.detach() for p in m.parameters()], [p.grad for p in m.parameters()]
    return f


def _manual_sgd(w, x):
    for i in range(3):
        loss = ((x @ w).sin() ** 2).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
        if i == 1:
            w.grad = None
    return w, w.grad


def _inplace_leaf_nograd(w):
    with torch.no_grad():
        w.mul_(2).add_(1)
    (w * w).sum().backward()
    return w.grad


def _copyslices(x):
    y = x * 1
    y[0] = y[1] * 2
    y[:, 1].mul_(x[:, 0])
    y.exp().sum().backward()
    return y, x.grad


def _copyslices_view_chain(x):
    y = x.clone()
    v = y.view(6)[1:5].view(2, 2)
    v.sin_()
    (y * torch.arange(6., device=x.device).view(3, 2)).sum().backward()
    return y, x.grad


def _copyslices_compiled_fwd(x):
    def f(t):
        y = t * 1
        y[0] = y[1] * 2
        y[:, 1].mul_(t[:, 0])
        return y
    y = _compiled_on_tpu(f)(x)
    y.exp().sum().backward()
    return y, x.grad


def _detach_toggle(x):
    y = x * 2
    z = y.exp()
    y.detach_()
    (y * x).sum().add(z.sum()).backward()
    return x.grad, y.requires_grad


def _requires_grad_toggle(x, y):
    a = (x * y).sum()
    y.requires_grad_(True)
    b = (x * y).sum()
    (a + b).backward()
    return x.grad, y.grad


def _cross_device(x):
    # tpu -> cpu -> tpu (and, for the CPU reference, cpu -> cpu): the gradient flows across the copies
    h = (x * 2).to("cpu").exp()
    h = h.to(x.device).sin()
    h.sum().backward()
    return x.grad


def _two_grads(x):
    y = x.exp()
    g = torch.autograd.grad(y[1].sum(), x, retain_graph=True)[0]
    g2 = torch.autograd.grad(y.sum(), x)[0]
    return g, g2


def _inputs_arg(x, y):
    (x * y).sum().backward(inputs=[x])
    return x.grad, y.grad


def _retain_grad_nonleaf(x):
    y = x.exp()
    y.retain_grad()
    z = y.sin()
    z.retain_grad()
    z.sum().backward()
    return y.grad, z.grad, x.grad


def _mode(x, name):
    import torch_tpu

    if not _on_tpu(x):
        return contextlib.nullcontext()
    return torch.tpu.set_eager_mode(torch_tpu.EagerMode[name])


def _mixed(fwd_mode, bwd_mode):
    def f(x):
        with _mode(x, fwd_mode):
            y = (x.exp() * x).sin().cumsum(0)
        with _mode(x, bwd_mode):
            y.sum().backward()
        return y, x.grad
    return f


def _retain_compiled(x):
    y = _compiled_on_tpu(lambda t: (t.exp() * t).sin())(x)
    loss = y.sum()
    loss.backward(retain_graph=True)
    g1 = x.grad.clone()
    loss.backward()
    return g1, x.grad


def _accumulate_compiled(x):
    f = _compiled_on_tpu(lambda t, k: (t * k).sin())
    for k in (1.0, 2.0, 3.0):
        f(x, k).sum().backward()
    return x.grad


def _hook_compiled(x):
    x.register_hook(lambda g: g * 2)
    y = _compiled_on_tpu(lambda t: t.exp().cumsum(0))(x)
    y.sum().backward()
    return x.grad


def _cross_device_compiled(x):
    y = _compiled_on_tpu(lambda t: t.sin() * 2)(x)
    y.cpu().exp().to(x.device).sum().backward()
    return x.grad


def _masked_scatter_src(x, mask, src):
    out = x.masked_scatter(mask, src)
    return torch.autograd.grad((out * torch.arange(12., device=x.device).view(3, 4)).sum(), [x, src])


def _saved_modified(x):
    y = x.exp()  # exp saves its result
    y.add_(1)
    y.sum().backward()
    return x.grad


def _saved_view_modified(x):
    y = x.exp()
    y[0].mul_(2)
    y.sum().backward()
    return x.grad


def _saved_input_modified(x):
    h = x * 1
    y = h.sin()
    h.add_(1)
    y.sum().backward()
    return x.grad


def _compiled_saved_input_modified(x):
    # the compiled forward saves its input h; h changed in place before backward: torch raises (the
    # version check); the compiled forward used to return a copy of h, so backward ran silently
    h = x * 1
    y = _compiled_on_tpu(lambda t: t.sin() * t)(h)
    h.add_(1)
    y.sum().backward()
    return x.grad


def _compiled_saved_output_modified(body):
    # the compiled forward's result is also saved for backward (alias(exp) in the graph): changing it
    # in place must fail the version check (the result and the saved value were two tensors)
    def f(x):
        y = _compiled_on_tpu(body)(x)
        y.add_(1)
        y.sum().backward()
        return x.grad
    return f


def _compiled_saved_unmodified(x):
    y = _compiled_on_tpu(lambda t: (t * 2).exp().sigmoid())(x)
    z = y * 3  # out of place: the saved value is intact
    (z.sum() + y.sum()).backward()
    return y, x.grad


def _backward_twice(x):
    loss = x.exp().sum()
    loss.backward()
    loss.backward()
    return x.grad


def _nonscalar_backward(x):
    x.exp().backward()
    return x.grad


def _grad_wrong_shape(x):
    x.exp().sum().backward()
    x.grad = torch.zeros(2, device=x.device)
    return x.grad


def _grad_wrong_dtype(x):
    x.grad = torch.zeros(3, 2, dtype=torch.float64, device=x.device)
    return x.grad


def _grad_set_then_accumulate(x):
    x.grad = torch.ones(3, 2, device=x.device)
    g = x.grad
    x.exp().sum().backward()
    return x.grad, g  # accumulated in place into the tensor the user set


def _grad_outputs_wrong_shape(x):
    return torch.autograd.grad(x.exp(), x, grad_outputs=torch.ones(2, device=x.device))


def _grad_of_detached(x):
    return torch.autograd.grad(x.exp().sum(), x.detach())


def _data_assignment(x):
    y = x.exp()
    x.data = x.data * 2
    y.sum().backward()
    return x.grad, x


def _bf16_leaf(x):
    w = x.bfloat16().detach().requires_grad_(True)
    (w.float() * 3).sin().sum().backward()
    (w * 2).sum().backward()
    return w.grad


def _hook_changes_dtype(x):
    x.register_hook(lambda g: g.double())
    x.exp().sum().backward()
    return x.grad


def _grad_inside_compiled(x):
    def f(x):
        return torch.autograd.grad((x.exp() * x).sum(), x)[0]
    return _compiled_on_tpu(f)(x)


def _inplace_on_leaf(x):
    x[0].mul_(2)
    return x


def _anomaly_nan(x):
    with torch.autograd.detect_anomaly():
        ((x * 0).sqrt() * 0 + x.log()).sum().backward()
    return x.grad


def _grad_modes(x):
    with torch.no_grad():
        a = x * 2
    with torch.enable_grad():
        b = x * 3
    with torch.inference_mode():
        c = x * 4
    (a * b).sum().backward()
    return x.grad, a.requires_grad, c.requires_grad


def _split_inplace(x):
    y = x * 1
    a, b = y.split(2, 0)
    a.mul_(3)
    (y * y).sum().backward()
    return x.grad


def _grad_bucket_view(w, b):
    # DDP-style gradient buckets: .grad set to views of one flat buffer; backward accumulates in place
    flat = torch.zeros(9, device=w.device)
    w.grad = flat[:6].view(3, 2)
    b.grad = flat[6:]
    for k in (1.0, 2.0):
        F.linear(torch.ones(4, 2, device=w.device) * k, w, b).sin().sum().backward()
    return flat, w.grad, b.grad


def _grad_transposed_view(w):
    # compiled: the graph returned buf and buf.t() as two unrelated tensors, so the gradient accumulated
    # into w.grad never reached buf
    buf = torch.zeros(2, 3, device=w.device)
    w.grad = buf.t()
    (w.exp() * 2).sum().backward()
    (w * 3).sum().backward()
    return buf, w.grad


def _compiled_outputs_alias(x):
    # outputs of one compiled graph that alias each other stay aliases (a write through one reaches all)
    y, t, row = _compiled_on_tpu(lambda x: (lambda y: (y, y.t(), y[1]))(x * 2))(x)
    y.add_(1)
    t[0, 0] = -5.0
    return y, t, row


def _optimizer_grad_views(x):
    torch.manual_seed(0)
    m = nn.Linear(2, 3).to(x.device)
    flat = torch.zeros(9, device=x.device)
    m.weight.grad = flat[:6].view(3, 2)
    m.bias.grad = flat[6:]
    opt = torch.optim.Adam(m.parameters(), lr=0.1, foreach=True)
    for _ in range(2):
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    return flat, [p.detach() for p in m.parameters()]


def _cpu_leaf_through_compiled(x):
    # a CPU leaf moved to the tpu inside a compiled function: its gradient comes back to the CPU
    xc = x.detach().cpu().requires_grad_(True)
    dev = x.device

    def f(t):
        return (t.to(dev).sin() * 2).sum()
    (_compiled_on_tpu(f)(xc) if dev.type == "tpu" else f(xc)).backward()
    return xc.grad.to(dev)


def _cpu_leaf_roundtrip(x):
    # a CPU leaf moved cpu -> tpu -> cpu (for the CPU reference: no move): both copies' backward run
    xc = x.detach().cpu().requires_grad_(True)
    y = (xc.to(x.device).exp() * 2).to("cpu").sin()
    (y * torch.linspace(-1, 1, y.numel()).view(y.shape)).sum().backward()
    return y.to(x.device), xc.grad.to(x.device)


def _saved_leaf_modified_nograd(w):
    loss = (w * w).sum()
    with torch.no_grad():
        w.mul_(2)
    loss.backward()
    return w.grad


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y, (x > 0)

    @staticmethod
    def backward(ctx, g, _):
        x, y = ctx.saved_tensors
        return g * y * 2, g * x


class _Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _custom_functions(x, y):
    a, m = _Scaled.apply(x, y)
    b = _Dirty.apply(x.clone())
    (a.sum() + (b * b).sum()).backward()
    return a, m, x.grad, y.grad


def _custom_function_compiled(x, y):
    a, m = _compiled_on_tpu(lambda x, y: _Scaled.apply(x.sin(), y))(x, y)
    a.sum().backward()
    return a, m, x.grad, y.grad


def _compiled_module_hook(x):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(2, 3), nn.Tanh()).to(x.device)
    m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 0.5,))
    xi = x.detach().requires_grad_(True)
    _compiled_on_tpu(m)(xi).sum().backward()
    return xi.grad, m[0].weight.grad


def _compiled_tensor_hook_inside(x):
    def f(t):
        y = t.exp()
        y.register_hook(lambda g: g * 3)
        return y.sum()
    _compiled_on_tpu(f)(x).backward()
    return x.grad


def _noncontig_grad_outputs(x):
    go = torch.linspace(-1, 1, 6, device=x.device).view(2, 3).t()
    return torch.autograd.grad(x.exp(), x, grad_outputs=go)


def _expanded_leaf(x):
    (x.expand(4, 3, 2) * torch.arange(24., device=x.device).view(4, 3, 2)).sum().backward()
    return x.grad


def _item_in_hook(x):
    vals = []
    x.register_hook(lambda g: vals.append(g.sum().item()) or g)
    (x.exp() * x).sum().backward()
    return x.grad, vals[0]


def _autograd_functional(x):
    jac = torch.autograd.functional.jacobian(lambda t: t.sin() * t.sum(), x, vectorize=True)
    hes = torch.autograd.functional.hessian(lambda t: (t.exp() * t).sum(), x)
    hvp = torch.autograd.functional.hvp(lambda t: (t ** 3).sum(), x, torch.ones_like(x))
    return jac, hes, hvp


def _index_fill_value_compiled(x, v):
    # index_fill's backward for a tensor value takes _unique(index): a data-dependent shape. AOTAutograd
    # traces that backward with fake tpu tensors on autograd's tpu thread, where the fake kernel's error
    # aborted the process ("terminate called without an active exception"); CPU falls back to eager
    idx = torch.tensor([0, 2, 4, 1, 3, 2], device=x.device)
    out = _compiled_on_tpu(lambda x, i, v: x.index_fill(-1, i, v) * x)(x, idx, v)
    return out, torch.autograd.grad(out.sum(), [x, v])


def _repeat_interleave_sized(x, r):
    out = torch.repeat_interleave(x, r, dim=0, output_size=6)
    return out, torch.autograd.grad((out * torch.arange(6., device=x.device).view(6, 1)).sum(), x)


def _hook_on_stale_view(x):
    # a view whose base changed in place, hooked before anything read its grad_fn: torch refreshes the
    # view's grad_fn inside Tensor.register_hook after creating its hook dict, the refresh clears the
    # dict, and torch dereferenced it (segfault, CPU tensors too). The CPU reference reads grad_fn first,
    # which CPU torch needs to survive; the tpu must survive without it
    y = x * 1
    v = y[:2]
    w = y.t()[1]
    y.add_(1)
    if not _on_tpu(x):
        v.grad_fn, w.grad_fn  # noqa: B018
    v.register_hook(lambda g: g * 3)
    w.register_hook(lambda g: g - 1)
    ((v * v).sum() + w.exp().sum() + y.sum()).backward()
    return v, w, x.grad


def _sdpa_double_backward(x, k):
    # create_graph=True through SDPA: the differentiable backward took autograd.grad of the decomposition
    # with respect to q, k, v themselves, i.e. the total derivative: one tensor as q, k and v
    # (self-attention) had its gradient 3x too large, a v computed from q counted q's path through v twice
    w = torch.linspace(-1, 1, 6, device=x.device).view(1, 3, 2)
    out = F.scaled_dot_product_attention(x, x, x)
    g, = torch.autograd.grad((out * w).sum(), x, create_graph=True)
    out2 = F.scaled_dot_product_attention(x, k, x * 0.5 + k, is_causal=True)
    g2 = torch.autograd.grad((out2 * w).sum(), [x, k], create_graph=True)
    gg = torch.autograd.grad((g2[0] ** 2).sum() + g.sum(), [x, k])
    return g, g2, gg


def _inference_view(write):
    # a view made outside inference_mode of a tensor made inside it is an inference tensor too: torch
    # refuses to write it or make it require grad. The tpu made it a normal tensor, so the write went
    # through silently (into the inference tensor's storage)
    def f(x):
        with torch.inference_mode():
            y = x * 2
        write(y)
        return y
    return f


def _inference_resize(x):
    # resize_ of an inference tensor outside inference_mode: torch resizes, then refuses (both); the tpu's
    # resize took a new tensor's dispatch keys, so y stopped being an inference tensor (requires_grad_
    # and writes then went through)
    with torch.inference_mode():
        y = x * 2
    try:
        y.resize_(8)
    except RuntimeError:
        pass
    with torch.inference_mode():
        z = x.detach().clone()
    z2 = x.detach().clone()
    with torch.inference_mode():
        z2.resize_(9)  # a normal tensor resized under inference_mode stays normal
    return y.is_inference(), z.is_inference(), z2.is_inference(), y.shape, z2.shape


def _sdpa_input_modified(x, k):
    q = x * 1
    out = F.scaled_dot_product_attention(q, k, k)
    q.add_(1)
    out.sum().backward()
    return x.grad, k.grad


def _leaf_view_base_changed(x):
    base = x.detach() * 1
    leaf = base[1:].requires_grad_()  # an autograd view of a tensor that does not require grad
    v = leaf.t()
    with torch.no_grad():
        leaf.mul_(2)
    (v * 2).sum().backward()  # CPU: v's refreshed grad_fn leads to base, so leaf.grad stays None
    return leaf.grad, v


def _repeat_interleave_wrong_size(r):
    # CPU torch refuses an output_size the repeats do not sum to; strict eager returned r.sum() elements
    return torch.repeat_interleave(r, output_size=5)


SEQUENCES = {
    "accumulate": (_accumulate, [_leaf(3, 2)], ALL),
    "retain_twice": (_retain_twice, [_leaf(3, 2)], ALL),
    "grad_penalty": (_grad_penalty, [rand(4, 2), _leaf(3, 2, seed=1), _leaf(3, seed=2)], EAGER),
    "grad_of_grad": (_grad_of_grad, [_leaf(3, 2)], EAGER),
    "allow_unused": (_allow_unused, [_leaf(3, 2), _leaf(2, seed=1)], ALL),
    "materialize_unused": (_materialize_unused, [_leaf(3, 2), _leaf(2, seed=1)], EAGER),
    "grad_outputs_f64": (_grad_outputs(torch.float64), [_leaf(3, 2)], ALL),
    "grad_outputs_bf16": (_grad_outputs(torch.bfloat16), [_leaf(3, 2)], EAGER),
    "grad_outputs_int": (_grad_outputs(torch.int64), [_leaf(3, 2)], EAGER),
    "tensor_hooks": (_tensor_hooks, [_leaf(3, 2)], ALL),
    "module_hook": (_module_hook, [rand(4, 2)], ALL),
    "module_pre_hook": (_module_pre_hook, [rand(4, 2)], EAGER),
    "sgd_set_to_none": (_sgd_steps(True), [rand(4, 2)], ALL),
    "sgd_zeroed": (_sgd_steps(False), [rand(4, 2)], EAGER),
    "manual_sgd": (_manual_sgd, [_leaf(2, 3), rand(4, 2, seed=1)], ALL),
    "inplace_leaf_nograd": (_inplace_leaf_nograd, [_leaf(3, 2)], ALL),
    # compiled: CopySlices' backward graph holds new_empty_strided (had no lowering)
    "copyslices": (_copyslices, [_leaf(3, 2)], ALL),
    "copyslices_view_chain": (_copyslices_view_chain, [_leaf(3, 2)], ALL),
    "copyslices_compiled_fwd": (_copyslices_compiled_fwd, [_leaf(3, 2)], ["strict"]),
    "detach_toggle": (_detach_toggle, [_leaf(3, 2)], ALL),
    "requires_grad_toggle": (_requires_grad_toggle, [_leaf(3, 2), rand(3, 2, seed=1)], EAGER),
    "cross_device": (_cross_device, [_leaf(3, 2)], EAGER),
    "two_grads": (_two_grads, [_leaf(3, 2)], ALL),
    "inputs_arg": (_inputs_arg, [_leaf(3, 2), _leaf(3, 2, seed=1)], EAGER),
    "retain_grad_nonleaf": (_retain_grad_nonleaf, [_leaf(3, 2)], EAGER),
    "fused_fwd_strict_bwd": (_mixed("DEFER_AND_FUSE", "DEFER_NEVER"), [_leaf(3, 2)], [None]),
    "strict_fwd_fused_bwd": (_mixed("DEFER_NEVER", "DEFER_AND_FUSE"), [_leaf(3, 2)], [None]),
    "retain_compiled_fwd": (_retain_compiled, [_leaf(3, 2)], EAGER),
    "accumulate_compiled_fwd": (_accumulate_compiled, [_leaf(3, 2)], ["strict"]),
    "hook_compiled_fwd": (_hook_compiled, [_leaf(3, 2)], ["strict"]),
    "cross_device_compiled_fwd": (_cross_device_compiled, [_leaf(3, 2)], ["strict"]),
    "saved_modified": (_saved_modified, [_leaf(3, 2)], ALL),
    "saved_view_modified": (_saved_view_modified, [_leaf(3, 2)], EAGER),
    "saved_input_modified": (_saved_input_modified, [_leaf(3, 2)], ALL),
    "compiled_saved_input_modified": (_compiled_saved_input_modified, [_leaf(3, 2)], EAGER),
    "compiled_saved_output_modified": (_compiled_saved_output_modified(lambda t: t.exp()), [_leaf(3, 2)], EAGER),
    "compiled_saved_output_modified_chain": (_compiled_saved_output_modified(lambda t: (t * 2).exp().sigmoid()),
                                             [_leaf(3, 2)], ["strict"]),
    "compiled_saved_unmodified": (_compiled_saved_unmodified, [_leaf(3, 2)], ["strict"]),
    "backward_twice": (_backward_twice, [_leaf(3, 2)], ALL),
    "nonscalar_backward": (_nonscalar_backward, [_leaf(3, 2)], EAGER),
    "grad_wrong_shape": (_grad_wrong_shape, [_leaf(3, 2)], EAGER),
    "grad_wrong_dtype": (_grad_wrong_dtype, [_leaf(3, 2)], EAGER),
    "grad_set_then_accumulate": (_grad_set_then_accumulate, [_leaf(3, 2)], ALL),
    "grad_outputs_wrong_shape": (_grad_outputs_wrong_shape, [_leaf(3, 2)], EAGER),
    "grad_of_detached": (_grad_of_detached, [_leaf(3, 2)], EAGER),
    "data_assignment": (_data_assignment, [_leaf(3, 2)], EAGER),
    "bf16_leaf": (_bf16_leaf, [_leaf(3, 2)], ALL),
    "hook_changes_dtype": (_hook_changes_dtype, [_leaf(3, 2)], EAGER),
    "grad_inside_compiled": (_grad_inside_compiled, [_leaf(3, 2)], ["strict"]),
    "inplace_on_leaf": (_inplace_on_leaf, [_leaf(3, 2)], ALL),
    "anomaly_nan": (_anomaly_nan, [_leaf(3, 2)], EAGER),
    "grad_modes": (_grad_modes, [_leaf(3, 2)], ALL),
    "split_inplace": (_split_inplace, [_leaf(4, 2)], ALL),
    "grad_bucket_view": (_grad_bucket_view, [_leaf(3, 2), _leaf(3, seed=1)], ALL),
    "grad_transposed_view": (_grad_transposed_view, [_leaf(3, 2)], ALL),
    "compiled_outputs_alias": (_compiled_outputs_alias, [rand(3, 2)], EAGER),
    "optimizer_grad_views": (_optimizer_grad_views, [rand(4, 2)], ["strict", "compiled"]),
    "cpu_leaf_roundtrip": (_cpu_leaf_roundtrip, [rand(3, 2)], EAGER),
    "cpu_leaf_through_compiled": (_cpu_leaf_through_compiled, [rand(3, 2)], ["strict"]),
    # compiled: torch itself refuses at compile time (BackendCompilerFailed, w left unchanged, also with
    # backend="aot_eager"), so only the eager modes are compared with CPU
    "saved_leaf_modified_nograd": (_saved_leaf_modified_nograd, [_leaf(3, 2)], EAGER),
    "custom_functions": (_custom_functions, [_leaf(3, 2), _leaf(3, 2, seed=1)], ALL),
    "custom_function_compiled": (_custom_function_compiled, [_leaf(3, 2), _leaf(3, 2, seed=1)], ["strict"]),
    "compiled_module_hook": (_compiled_module_hook, [rand(4, 2)], ["strict"]),
    "compiled_tensor_hook_inside": (_compiled_tensor_hook_inside, [_leaf(3, 2)], ["strict"]),
    "noncontig_grad_outputs": (_noncontig_grad_outputs, [_leaf(3, 2)], ALL),
    "expanded_leaf": (_expanded_leaf, [_leaf(3, 2)], ALL),
    "item_in_hook": (_item_in_hook, [_leaf(3, 2)], EAGER),
    "autograd_functional": (_autograd_functional, [rand(3)], EAGER),
    "index_fill_value_compiled": (_index_fill_value_compiled, [_leaf(5, 5), torch.tensor(-1.5, requires_grad=True)], EAGER),
    "repeat_interleave_sized": (_repeat_interleave_sized, [_leaf(4, 1), torch.tensor([0, 1, 2, 3])], ALL),
    "hook_on_stale_view": (_hook_on_stale_view, [_leaf(3, 2)], EAGER),
    "inference_view_add_": (_inference_view(lambda y: y[1:].add_(1)), [_leaf(3, 2)], EAGER),
    "inference_view_setitem": (_inference_view(lambda y: y.__setitem__(0, 5.0)), [_leaf(3, 2)], EAGER),
    "inference_view_index_add_": (_inference_view(
        lambda y: y.t().index_add_(0, torch.tensor([1], device=y.device), torch.ones(1, 3, device=y.device))),
        [_leaf(3, 2)], EAGER),
    "inference_view_requires_grad": (_inference_view(lambda y: y.t().requires_grad_()), [_leaf(3, 2)], EAGER),
    "inference_view_saved": (_inference_view(lambda y: (y[0] * torch.ones(2, device=y.device, requires_grad=True))
                                             .sum().backward()), [_leaf(3, 2)], EAGER),
    "inference_resize": (_inference_resize, [_leaf(3, 2)], EAGER),
    "leaf_view_base_changed": (_leaf_view_base_changed, [_leaf(3, 2)], EAGER),
    "sdpa_3d_input_modified": (_sdpa_input_modified, [_leaf(1, 3, 2), _leaf(1, 3, 2, seed=1)], EAGER),
    "sdpa_4d_input_modified": (_sdpa_input_modified, [_leaf(1, 2, 3, 2), _leaf(1, 2, 3, 2, seed=1)], EAGER),
    "sdpa_double_backward": (_sdpa_double_backward, [_leaf(1, 3, 2), _leaf(1, 3, 2, seed=1)], EAGER),
    "repeat_interleave_wrong_size": (_repeat_interleave_wrong_size, [torch.tensor([0, 1, 2, 3])], ALL),
    # masked_scatter_backward (no lowering: compiled failed): mask broadcast, fewer ones than source
    "masked_scatter_src_broadcast": (_masked_scatter_src, [_leaf(3, 4), rand(4, seed=3) > 0, _leaf(20, seed=1)],
                                     ALL),
    "masked_scatter_src_few": (_masked_scatter_src, [_leaf(3, 4), rand(3, 4, seed=3) > 1.5, _leaf(7, seed=1)],
                               ALL),
}


def _sequence_case(fn, args, modes):
    def run():
        D.check(fn, *args, modes=modes, atol=1e-5, rtol=1e-5)
    return run


def _double_backward_compiled_refused():
    # AOTAutograd (torch itself) refuses a double backward through a compiled forward: a clear error,
    # the process and the device survive
    x = torch.rand(4, 2, device="tpu", requires_grad=True)
    w = torch.rand(3, 2, device="tpu", requires_grad=True)
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: (x @ w.t()).tanh(), backend="tpu", dynamic=False)
    g, = torch.autograd.grad(f(x, w).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.pow(2).sum().backward()
    assert_device_works()


# --------------------------------------------------------------------------------------------------
# 3. checkpoint with dropout, torch.func, autocast + GradScaler


def _ckpt_body(x, w):
    h = F.dropout((x @ w).tanh(), p=0.5, training=True)
    return F.dropout(h * 2 + 3, p=0.3, training=True)  # + 3: a zero is a dropped element, nothing else


def _checkpoint_replays_mask(mode, reentrant):
    """The recomputation in backward must draw the same dropout masks as the forward: the gradients with
    checkpointing equal those without it (same seed), and the second dropout's mask is the output's."""
    def run():
        from torch.utils.checkpoint import checkpoint

        def grads(use_ckpt):
            torch.manual_seed(0)
            x = torch.randn(8, 16).to("tpu").requires_grad_(True)
            w = torch.randn(16, 16).to("tpu").requires_grad_(True)
            with _mode(x, mode):
                torch.manual_seed(123)
                out = checkpoint(_ckpt_body, x, w, use_reentrant=reentrant) if use_ckpt else _ckpt_body(x, w)
                (out * torch.linspace(-1, 1, 128, device="tpu").view(8, 16)).sum().backward()
                return out.detach().cpu(), x.grad.cpu(), w.grad.cpu()

        ref, got = grads(False), grads(True)
        assert 0.1 < float((ref[0] == 0).float().mean()) < 0.6, "test setup: dropout dropped nothing"
        for what, a, b in zip(("output", "x.grad", "w.grad"), ref, got):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5, msg=lambda m: f"[wrong value] {what}: {m}")
    return run


def _checkpoint_mask_consistent(mode, reentrant):
    """grad of sum(dropout(sin(x) + 3)) is keep * 2 * cos(x), keep read from the output: holds whatever
    the generator, so the compiled mode (its own random stream) is checked too."""
    def run():
        from torch.utils.checkpoint import checkpoint

        def body(x):
            return F.dropout(x.sin() + 3, p=0.5, training=True)

        def f(x):
            return checkpoint(body, x, use_reentrant=reentrant)

        torch.manual_seed(0)
        x = torch.randn(64, 8).to("tpu").requires_grad_(True)
        if mode == "compiled":
            torch._dynamo.reset()
            f = torch.compile(f, backend="tpu", dynamic=False)
        with _mode(x, "DEFER_AND_FUSE" if mode == "fused" else "DEFER_NEVER"):
            out = f(x)
            out.sum().backward()
            keep = (out.detach() != 0).cpu()
            assert 0.2 < float(keep.float().mean()) < 0.8, "test setup: dropout dropped nothing or everything"
            expected = keep * 2 * torch.cos(x.detach().cpu())
            torch.testing.assert_close(x.grad.cpu(), expected, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: f"[wrong value] the replayed dropout mask differs: {m}")
    return run


def _checkpoint_randn(mode):
    """checkpoint of x * randn_like(x): the backward's recomputation must draw the same noise n; the
    gradient of sum((x n)^2) is 2 a^2 / x with a the forward's output."""
    def run():
        from torch.utils.checkpoint import checkpoint

        x = (rand(4, 3) + 3).to("tpu").requires_grad_(True)
        with _mode(x, mode):
            torch.manual_seed(5)
            a = checkpoint(lambda t: t * torch.randn_like(t), x, use_reentrant=False)
            (a * a).sum().backward()
            torch.testing.assert_close(x.grad.cpu(), (2 * a.detach() ** 2 / x.detach()).cpu(), atol=1e-4,
                                       rtol=1e-4, msg=lambda m: f"[wrong value] the replayed noise differs: {m}")
    return run


def _checkpoint_compiled_three_random_ops():
    """Three random ops in one compiled checkpoint (two dropouts, rand_like): each is replayed with its
    own key. a = M (sin x + 3) r, so d sum(a) / dx = a cos x / (sin x + 3)."""
    from torch.utils.checkpoint import checkpoint

    def body(t):
        return F.dropout(F.dropout(t.sin() + 3, 0.3), 0.5) * torch.rand_like(t)

    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(16, 8).to("tpu").requires_grad_(True)
    a = torch.compile(lambda t: checkpoint(body, t, use_reentrant=False), backend="tpu", dynamic=False)(x)
    a.sum().backward()
    assert 0.3 < float((a == 0).float().mean().cpu()) < 0.9, "test setup: the dropouts dropped nothing"
    xd = x.detach()
    torch.testing.assert_close(x.grad.cpu(), (a.detach() * torch.cos(xd) / (torch.sin(xd) + 3)).cpu(), atol=1e-5,
                               rtol=1e-4, msg=lambda m: f"[wrong value] a replayed random op differs: {m}")


def _func_grad(x):
    return torch.func.grad(lambda t: (t.sin() * t).sum())(x)


def _func_vjp(x):
    out, vjp = torch.func.vjp(lambda t: t.exp() @ t.T, x)
    return out, vjp(torch.ones_like(out))


def _func_jacrev(x):
    return torch.func.jacrev(lambda t: t.sin().sum(0))(x)


def _func_jacfwd(x):
    return torch.func.jacfwd(lambda t: t.sin().sum(0))(x)


def _func_vmap_grad(x):
    return torch.func.vmap(torch.func.grad(lambda t: (t ** 3).sum()))(x)


def _func_vmap(x, w):
    return torch.func.vmap(lambda r: (w @ r).relu())(x)


def _func_hessian(x):
    return torch.func.hessian(lambda t: (t.sin() * t).sum())(x)


def _func_functional_call(x):
    torch.manual_seed(0)
    m = nn.Linear(2, 3).to(x.device)
    params = {k: v.detach() for k, v in m.named_parameters()}
    return torch.func.grad(lambda p: torch.func.functional_call(m, p, (x,)).pow(2).sum())(params)


def _func_compiled(transform):
    def f(x):
        return _compiled_on_tpu(transform)(x)
    return f


def _compiled_grad_of_input(x):
    return torch.func.grad(lambda t: (t.sin() * t).sum())(x)


def _compiled_grad_after_op(x):
    return torch.func.grad(lambda t: (t.sin() * t).sum())(x * 1)


def _compiled_vmap(x):
    return torch.func.vmap(lambda r: r.sin() * 2)(x)


def _compiled_jacrev(x):
    return torch.func.jacrev(lambda t: t.sin().sum(0))(x)


FUNC = {
    "grad": (_func_grad, [rand(3, 2)]),
    "vjp": (_func_vjp, [rand(3, 2)]),
    "jacrev": (_func_jacrev, [rand(3, 2)]),
    "jacfwd": (_func_jacfwd, [rand(3, 2)]),
    "vmap_grad": (_func_vmap_grad, [rand(3, 2)]),
    "vmap": (_func_vmap, [rand(5, 2), rand(3, 2, seed=1)]),
    "hessian": (_func_hessian, [rand(3)]),
    "functional_call": (_func_functional_call, [rand(4, 2)]),
    "compiled_grad_after_op": (_func_compiled(_compiled_grad_after_op), [rand(3, 2)]),
    "compiled_grad_of_input": (_func_compiled(_compiled_grad_of_input), [rand(3, 2)]),
    "compiled_vmap": (_func_compiled(_compiled_vmap), [rand(3, 2)]),
    "compiled_jacrev": (_func_compiled(_compiled_jacrev), [rand(3, 2)]),
}


def _amp_model(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).to(device)


def _amp_step(m, x, y, inf_grad=False):
    """autocast(bfloat16) forward, GradScaler backward and step (twice); with ``inf_grad`` the first
    step's gradient holds an inf: the step is skipped and the scale halved."""
    dev = x.device.type
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(dev, init_scale=2.0 ** 4)
    outs = []
    for i in range(2):
        opt.zero_grad()
        with torch.autocast(dev, dtype=torch.bfloat16):
            out = m(x)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        if inf_grad and i == 0:
            with torch.no_grad():
                m[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        outs.append((out.dtype, loss.detach(), x.grad, torch.tensor(scaler.get_scale())))
    return outs, [p.detach() for p in m.parameters()]


def _amp_case(inf_grad, modes):
    def run():
        x = rand(5, 8)
        D.check(lambda m, x, y: _amp_step(m, x.requires_grad_(True), y, inf_grad),
                per_device(_amp_model), x, torch.tensor([0, 3, 1, 2, 0]),
                modes=modes, atol=2e-2, rtol=2e-2)
    return run



def _amp_compiled_like_eager():
    """autocast's policy on the tpu is its own (``sum`` runs in float32, as on CUDA; CPU keeps bfloat16), so
    the compiled forward + backward is compared with tpu eager: same dtypes, values within bfloat16."""
    def step(x, w, compiled):
        def f(x, w):
            with torch.autocast("tpu", dtype=torch.bfloat16):
                h = (x @ w).relu()
                return h, h.sum()
        h, loss = (_compiled_on_tpu(f) if compiled else f)(x, w)
        loss.backward()
        return h, loss, x.grad, w.grad

    got = []
    for compiled in (False, True):
        x, w = rand(4, 8).to("tpu").requires_grad_(True), rand(8, 3, seed=1).to("tpu").requires_grad_(True)
        got.append([t.detach().cpu() for t in step(x, w, compiled)])
    for what, e, g in zip(("h", "loss", "x.grad", "w.grad"), *got):
        assert e.dtype == g.dtype, f"[wrong dtype] {what}: eager {e.dtype}, compiled {g.dtype}"
        torch.testing.assert_close(g, e, atol=2e-2, rtol=2e-2, msg=lambda m: f"[wrong value] {what}: {m}")

# --------------------------------------------------------------------------------------------------

ISOLATED_CASES = {}
for _n in sorted(set(BUGS_COMPILED + COMPILED_SUBSET)):
    ISOLATED_CASES[f"opinfo_compiled:{_n}"] = _opinfo_case(_n, "compiled")
for _n in BUGS_COMPILED_LAST:
    ISOLATED_CASES[f"opinfo_compiled_last:{_n}"] = _opinfo_case(_n, "compiled", -1)
for _n in FUSED_SUBSET:
    ISOLATED_CASES[f"opinfo_fused:{_n}"] = _opinfo_case(_n, "fused")
for _n, (_fn, _args, _modes) in SEQUENCES.items():
    ISOLATED_CASES[f"seq:{_n}"] = _sequence_case(_fn, _args, _modes)
ISOLATED_CASES["seq:double_backward_compiled_refused"] = _double_backward_compiled_refused
for _m in ("DEFER_NEVER", "DEFER_AND_FUSE"):
    for _r in (False, True):
        ISOLATED_CASES[f"checkpoint:replay:{_m}:{'reentrant' if _r else 'nonreentrant'}"] = \
            _checkpoint_replays_mask(_m, _r)
for _m in ("strict", "fused", "compiled"):
    for _r in (False, True):
        ISOLATED_CASES[f"checkpoint:mask:{_m}:{'reentrant' if _r else 'nonreentrant'}"] = \
            _checkpoint_mask_consistent(_m, _r)
for _m in ("DEFER_NEVER", "DEFER_AND_FUSE"):
    ISOLATED_CASES[f"checkpoint:randn:{_m}"] = _checkpoint_randn(_m)
ISOLATED_CASES["checkpoint:compiled_three_random_ops"] = _checkpoint_compiled_three_random_ops
for _n, (_fn, _args) in FUNC.items():
    ISOLATED_CASES[f"func:{_n}"] = _sequence_case(_fn, _args, ["strict"] if _n.startswith("compiled") else EAGER)
ISOLATED_CASES["amp:gradscaler"] = _amp_case(False, EAGER)
ISOLATED_CASES["amp:gradscaler_inf_skips_step"] = _amp_case(True, EAGER)
ISOLATED_CASES["amp:compiled_like_eager"] = _amp_compiled_like_eager

# Known gaps (strict xfail: the day they pass, the mark must go)
XFAIL = {
    "seq:leaf_view_base_changed": Gap("a view v of a leaf that is itself an autograd view of a tensor not requiring "
    "grad, after an in-place write bumped their version: torch refreshes v's grad_fn by replaying the views "
    "from the base for every __torch_dispatch__ subclass (TwoTensor on the CPU fails alike) and asserts on the "
    "missing grad_fn ('new_fn INTERNAL ASSERT FAILED', a RuntimeError; the process survives); CPU tensors "
    "take the as_strided path. torch's C++, not reachable from the backend", r"new_fn INTERNAL ASSERT FAILED"),
    "seq:sdpa_3d_input_modified": Gap("q changed in place after SDPA, then backward: tpu::attention saves q, k, v "
    "for its backward (as CPU's flash kernel does for 4-D inputs, where CPU raises the same version error: "
    "seq:sdpa_4d_input_modified); CPU's math path, which it takes for 3-D inputs, saves scaled copies and "
    "runs. Matching it would mean copying q, k, v at every forward",
        r"\[tpu raised\] \(mode strict\) CPU returned a value; tpu raised at the call: builtins.RuntimeError: one of "
        r"the variables needed for gradient computation has been modified by an inplace operation"),
    "func:compiled_grad_of_input": Gap("torch.compile of torch.func.grad applied directly to a graph input: dynamo "
    "fakeifies the tpu tensor (a traceable wrapper subclass) inside the grad transform's level and fails with "
    "'Cannot access storage of TensorWrapper' (backend='eager' too: dynamo/functorch, not the tpu lowering); "
    "any op on the input before the transform works (func:compiled_grad_after_op)",
        r"Cannot access storage of TensorWrapper"),
}


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, XFAIL, timeout_per_case=180)
