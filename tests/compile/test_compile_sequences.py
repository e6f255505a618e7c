"""Compiled mode: SEQUENCES of calls of one ``torch.compile(..., backend="tpu")`` function.

Cache-key and guard bugs live between calls: the same compiled function called with another dtype,
another requires_grad, a non-contiguous input, a changed Python scalar or module attribute, a reassigned
buffer, a new batch size; graph breaks (``print``, ``.item()``, data-dependent ``if``) that split a
function into several graphs; autograd through compiled graphs (``retain_graph``, double backward,
views, ``no_grad``/``inference_mode``); in-place writes to inputs, their views and captured globals;
compiled optimizer steps; modules converted or reloaded between calls; compile options. Every call's
result (and the inputs afterwards) is compared with CPU torch: the same function run uncompiled on CPU
(or compiled with ``backend="eager"`` where dynamo's own behaviour is the reference, e.g. ``fullgraph``
refusals). All cases run in one crash-tolerant child process.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.compare import assert_same, read
from tests.harness.errors import is_clear
from tests.harness.inputs import DEV, per_device, rand
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
def compiled(fn, cpu="plain", **kw):
    """fn compiled with backend="tpu" on the tpu and, on the CPU, run plain (``cpu="plain"``) or compiled
    with backend="eager" (``cpu="eager"``); a per-device argument (a fresh compile on each device)."""
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        if d == "cpu":
            return fn if cpu == "plain" else torch.compile(fn, backend="eager", **kw)
        return torch.compile(fn, backend="tpu", **kw)
    return per_device(make)


def call(label, f):
    return D.named(label, lambda *a: f(*a))


def _module(make, seed=0):
    def on(device):
        torch.manual_seed(seed)
        return make().to(device)
    return per_device(on)


def seq(calls, *args, **kw):
    return lambda: D.check_sequence(calls, *args, **kw)


# ---------------------------------------------------------------------------------------------------
# recompiles and guards: one compiled function, inputs that differ between calls


def _f_affine(x):
    return (x * 2 + 1).sum(0), x.exp()


def _recompile_dtype():
    x = rand(3, 4)
    D.check_sequence([
        call("float32", lambda c, x: c(x)),
        call("float64", lambda c, x: c(x.double())),
        call("bfloat16", lambda c, x: c(x.bfloat16())),
        call("float32 again", lambda c, x: c(x)),
        call("int64 sum", lambda c, x: c((x * 10).long())[0]),
    ], compiled(_f_affine, dynamic=False), x, atol=2e-2, rtol=2e-2)


def _recompile_requires_grad():
    def f(x, w):
        return (x @ w).tanh().sum()

    def grad_call(c, x, w):
        w2 = w.detach().clone().requires_grad_()
        out = c(x, w2)
        out.backward()
        return out, w2.grad

    D.check_sequence([
        call("no grad", lambda c, x, w: c(x, w)),
        call("w requires grad", grad_call),
        call("no grad again", lambda c, x, w: c(x, w)),
        call("x requires grad", lambda c, x, w: torch.autograd.grad(c(x.detach().requires_grad_(), w),
                                                                     [x], allow_unused=True)
             if False else c(x.detach().requires_grad_(), w)),
    ], compiled(f, dynamic=False), rand(2, 3), rand(3, 4, seed=2), atol=1e-5, rtol=1e-5)


def _recompile_layouts():
    def f(x):
        return x * torch.arange(x.shape[-1], device=x.device) + x.sum(-1, keepdim=True)

    base = rand(4, 4)
    D.check_sequence([
        call("contiguous", lambda c, x: c(x)),
        call("transposed", lambda c, x: c(x.t())),
        call("row slice step 2", lambda c, x: c(x[::2])),
        call("column slice", lambda c, x: c(x[:, 1:3])),
        call("expanded", lambda c, x: c(x[0:1].expand(4, 4))),
        call("contiguous again", lambda c, x: c(x)),
        call("transposed after mutation", lambda c, x: (x.mul_(2), c(x.t()))[1]),
    ], compiled(f, dynamic=False), base)


def _zero_dim_vs_one_elem():
    def f(x, y):
        return x + y, (x * y).sum(), x.reshape(-1)

    D.check_sequence([
        call("0-dim", lambda c, x, y: c(x, y)),
        call("1-elem", lambda c, x, y: c(x.reshape(1), y)),
        call("0-dim again", lambda c, x, y: c(x, y)),
        call("1x1", lambda c, x, y: c(x.reshape(1, 1), y)),
        call("0-dim int", lambda c, x, y: c(torch.tensor(3, device=x.device), y)),
    ], compiled(f, dynamic=False), torch.tensor(2.5), rand(3))


def _python_scalar_changes():
    def f(x, s, flag):
        y = x * s
        return y + 1 if flag else y - 1

    D.check_sequence([
        call("s=2 True", lambda c, x: c(x, 2, True)),
        call("s=3 True", lambda c, x: c(x, 3, True)),
        call("s=2.5 True", lambda c, x: c(x, 2.5, True)),
        call("s=2.5 False", lambda c, x: c(x, 2.5, False)),
        call("s=-0.0 False", lambda c, x: c(x, -0.0, False)),
        call("s=True", lambda c, x: c(x, True, True)),
        call("s=2 True again", lambda c, x: c(x, 2, True)),
    ], compiled(f), rand(3), signed_zeros=True)


def _scalar_int_dtype_changes():
    def f(x, s):
        return x * s, x // 2

    D.check_sequence([
        call("int*2", lambda c, x: c(x, 2)),
        call("int*2.5", lambda c, x: c(x, 2.5)),
        call("uint8", lambda c, x: c(x.to(torch.uint8), 3)),
    ], compiled(f, dynamic=False), torch.tensor([1, -2, 7]))


# ---------------------------------------------------------------------------------------------------
# module attributes changed between calls


class _EpsNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-5
        self.scale = 2.0
        self.act = torch.nn.ReLU()
        self.register_buffer("shift", torch.zeros(4))

    def forward(self, x):
        return self.act(x / (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt() * self.scale + self.shift)


def _module_attribute_changes():
    def set_(attr, val):
        def go(m, c, x):
            setattr(m, attr, val() if callable(val) and not isinstance(val, type) else val)
            return c(x)
        return go

    def new_shift(m, c, x):
        m.shift = torch.full((4,), 0.5, device=x.device)
        return c(x)

    def shift_inplace(m, c, x):
        m.shift.add_(1)
        return c(x)

    def swap_act(m, c, x):
        m.act = torch.nn.Tanh()
        return c(x)

    mod = _module(_EpsNorm)

    def comp(d):
        import torch._dynamo
        torch._dynamo.reset()
        return None

    # m and its compiled wrapper per device: the wrapper is built from the same module object
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = _EpsNorm().to(d)
        return m, (m if d == "cpu" else torch.compile(m, backend="tpu"))

    pair = per_device(make)
    D.check_sequence([
        call("first", lambda p, x: p[1](x)),
        call("eps=1.0", lambda p, x: set_("eps", 1.0)(p[0], p[1], x)),
        call("scale=-3", lambda p, x: set_("scale", -3.0)(p[0], p[1], x)),
        call("buffer reassigned", lambda p, x: new_shift(p[0], p[1], x)),
        call("buffer in place", lambda p, x: shift_inplace(p[0], p[1], x)),
        call("act swapped", lambda p, x: swap_act(p[0], p[1], x)),
        call("eps back", lambda p, x: set_("eps", 1e-5)(p[0], p[1], x)),
    ], pair, rand(3, 4), atol=1e-5, rtol=1e-5)


def _train_eval_toggle():
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).to(d)
        return m, (m if d == "cpu" else torch.compile(m, backend="tpu"))

    def stats(p, x, mode):
        getattr(p[0], mode)()
        out = p[1](x)
        bn = p[0][1]
        return out, bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()

    def no_grad_eval(p, x):
        with torch.no_grad():
            return stats(p, x, "eval")

    D.check_sequence([
        call("train", lambda p, x: stats(p, x, "train")),
        call("eval", lambda p, x: stats(p, x, "eval")),
        call("train again", lambda p, x: stats(p, x, "train")),
        call("eval under no_grad", no_grad_eval),
    ], per_device(make), rand(5, 4), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# graph breaks


def _graph_break_print_item(x):
    y = x * 2
    print("hostile graph break", end="\r")
    s = y.sum().item()
    z = y + s
    if z.sum() > 0:
        z = z * 3
    else:
        z = z - 3
    lst = z.tolist()
    return z + len(lst), torch.tensor(lst, device=x.device) * 2


def _graph_breaks():
    D.check_sequence([
        call("positive", lambda c, x: c(x.abs())),
        call("negative", lambda c, x: c(-x.abs())),
        call("positive again", lambda c, x: c(x.abs() + 1)),
    ], compiled(_graph_break_print_item, dynamic=False), rand(4))


def _host_outputs():
    """Copies to the host inside the compiled function (``.cpu()``, ``.tolist()``, ``.numpy()``: dynamo
    puts the copy in the graph): the graph returns a CPU tensor read back from the device (was refused
    as "a cpu tensor computed inside it")."""
    def f(x):
        return x.cpu(), (x * 2).cpu().view(-1), x + 1, x.tolist(), float(x.sum().cpu().numpy())

    def run(c, x):
        out = c(x)
        return list(out) + [[o.device.type for o in out[:2]]]

    D.check_sequence([call("host copies", run), call("host copies again", run)], compiled(f, dynamic=False),
                     rand(3))


def _fma_inplace_methods():
    """Dynamo writes ``addcmul_``/``addcdiv_`` with ``value=`` and ``add_`` with a tensor ``alpha`` with
    inductor's ``prims.fma`` (had no lowering: AdamW(foreach=False) could not compile its step)."""
    def f(x, a, b, al):
        x.addcmul_(a, b, value=0.5)
        y = x.clone().addcdiv_(a, b.abs() + 1, value=-2)
        z = x.clone().add_(a, alpha=al)
        return x, y, z

    D.check(f, rand(3), rand(3, seed=1), rand(3, seed=2), torch.tensor(3.0), modes=["compiled"])


def _middle_graph_output_mutated():
    def f(x):
        a = x * 2
        torch._dynamo.graph_break()
        b = a + 1
        torch._dynamo.graph_break()
        return a, b, b * 2

    def mutate_after(c, x):
        a, b, bb = c(x)
        a.add_(100)
        b.mul_(-1)
        return a, b, bb, c(x)

    import torch._dynamo  # noqa: F401
    D.check_sequence([
        call("plain", lambda c, x: c(x)),
        call("outputs mutated", mutate_after),
        call("again", lambda c, x: c(x)),
    ], compiled(f, dynamic=False), rand(3))


def _fullgraph_break_raises():
    def f(x):
        y = x + 1
        print("break", end="\r")
        return y * 2

    def item_break(x):
        return x * x.sum().item()

    for fn in (f, item_break):
        D.check_sequence([call("fullgraph", lambda c, x: c(x))],
                         compiled(fn, cpu="eager", fullgraph=True, dynamic=False), rand(3))


# ---------------------------------------------------------------------------------------------------
# autograd


def _retain_graph_twice():
    def f(x, w):
        return (x * w).sin().sum() + (w ** 2).sum()

    def twice(c, x, w):
        w = w.detach().clone().requires_grad_()
        out = c(x, w)
        out.backward(retain_graph=True)
        g1 = w.grad.clone()
        out.backward()
        return out, g1, w.grad

    D.check_sequence([call("retain twice", twice), call("retain twice again", twice)],
                     compiled(f, dynamic=False), rand(3), rand(3, seed=2), atol=1e-5, rtol=1e-5)


def _double_backward():
    """create_graph=True through a compiled graph: torch's AOTAutograd backends (CPU ``aot_eager``, the
    reference here) refuse the second backward with "does not currently support double backward"; the
    tpu must refuse it as clearly."""
    def f(x):
        return (x ** 3).sum()

    def outcome(device, backend):
        import torch._dynamo
        torch._dynamo.reset()
        x = rand(3).to(device).requires_grad_()
        out = torch.compile(f, backend=backend, dynamic=False)(x)
        (g,) = torch.autograd.grad(out, x, create_graph=True)
        try:
            torch.autograd.grad(g.sum(), x)
        except RuntimeError as e:
            return g.detach().cpu(), str(e)
        return g.detach().cpu(), None

    exp_g, exp_err = outcome("cpu", "aot_eager")
    got_g, got_err = outcome(DEV, "tpu")
    assert_same(exp_g, read(got_g), where="first gradient", atol=1e-5, rtol=1e-5)
    assert exp_err is not None and "double backward" in exp_err, f"test setup: CPU {exp_err!r}"
    assert got_err is not None and "double backward" in got_err, f"[unclear error] CPU: {exp_err}; tpu: {got_err}"


def _grads_of_views():
    def f(a, b):
        return (a * b).sum() + a.sum() * 2

    def run(c, x):
        x = x.detach().clone().requires_grad_()
        out = c(x[0], x.t()[1:3, 0])
        out.backward()
        return out, x.grad

    D.check_sequence([call("views", run), call("views again", run)], compiled(f, dynamic=False), rand(3, 3),
                     atol=1e-5, rtol=1e-5)


def _no_grad_inference_mode():
    def f(x, w):
        return x @ w + 1

    def under(ctx):
        def go(c, x, w):
            w = w.detach().clone().requires_grad_()
            with ctx():
                out = c(x, w)
            return out, out.requires_grad
        return go

    def grad_after(c, x, w):
        w = w.detach().clone().requires_grad_()
        out = c(x, w)
        out.sum().backward()
        return out, w.grad

    D.check_sequence([
        call("grad", grad_after),
        call("no_grad", under(torch.no_grad)),
        call("inference_mode", under(torch.inference_mode)),
        call("grad again", grad_after),
        call("inference_mode again", under(torch.inference_mode)),
    ], compiled(f, dynamic=False), rand(2, 3), rand(3, 2, seed=3), atol=1e-5, rtol=1e-5)


def _detach_inside():
    def f(x):
        y = x * 2
        return y.detach() * x + y, y.detach()

    def run(c, x):
        x = x.detach().clone().requires_grad_()
        a, b = c(x)
        a.sum().backward()
        return a, b, x.grad

    D.check_sequence([call("detach", run)], compiled(f, dynamic=False), rand(3), atol=1e-5, rtol=1e-5)


def _inplace_on_leaf_raises():
    def f(x):
        x.add_(1)
        return x * 2

    def run(c, x):
        return c(x.detach().clone().requires_grad_())

    D.check_sequence([call("in-place on a leaf", run)], compiled(f, cpu="eager", dynamic=False), rand(3))


def _outputs_alias_inputs():
    def f(x):
        return x[0], x.t(), x.view(-1), x

    def mutate(c, x):
        a, t, v, same = c(x)
        a.add_(1)
        t.mul_(2)
        v[0] = -5
        same_is_x = same is x
        return a, t, v, same_is_x, x.clone()

    D.check_sequence([
        call("aliases", lambda c, x: c(x)),
        call("aliases mutated by caller", mutate),
        call("again", lambda c, x: c(x)),
    ], compiled(f, dynamic=False), rand(3, 3))


def _alias_grad():
    def f(x):
        return x.t(), x[1] * 2

    def run(c, x):
        x = x.detach().clone().requires_grad_()
        t, r = c(x)
        (t * torch.arange(9.0, device=x.device).reshape(3, 3)).sum().backward(retain_graph=True)
        r.sum().backward()
        return t, r, x.grad

    D.check_sequence([call("alias grad", run)], compiled(f, dynamic=False), rand(3, 3), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# mutation


def _inplace_on_input_views():
    def f(x):
        x[::2].add_(1)
        x.t().mul_(2)
        x[1, :].sub_(x[0, :])
        return x.sum()

    D.check_sequence([call("views", lambda c, x: c(x)), call("views again", lambda c, x: c(x)),
                      call("on a transposed input", lambda c, x: (c(x.t()), x)[1])],
                     compiled(f, dynamic=False), rand(4, 4))


_GLOBAL = {}


def _captured_global_inplace():
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        state = torch.zeros(3, device=d)

        def f(x):
            state.add_(x)
            return state * 2

        return (f if d == "cpu" else torch.compile(f, backend="tpu", dynamic=False)), state

    def run(p, x):
        c, state = p
        out = c(x)
        return out, state.clone()

    D.check_sequence([call("1", run), call("2", run), call("outside write",
                                                               lambda p, x: (p[1].fill_(-1), run(p, x))[1])],
                     per_device(make), rand(3))


def _setattr_buffer_inside():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            self.count = self.count + 1
            return x * self.count

    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        m = M().to(d)
        return m, (m if d == "cpu" else torch.compile(m, backend="tpu", dynamic=False))

    D.check_sequence([call(str(i), lambda p, x: (p[1](x), p[0].count)) for i in range(3)],
                     per_device(make), rand(3))


def _compiled_optimizer_steps(opt_cls, **kw):
    def run():
        def go(d):
            import torch._dynamo
            torch._dynamo.reset()
            torch.manual_seed(0)
            m = torch.nn.Linear(3, 2).to(d)
            opt = opt_cls(m.parameters(), **kw)
            step = opt.step if d == "cpu" else torch.compile(opt.step, backend="tpu", dynamic=False)
            x = rand(4, 3).to(d)
            outs = []
            for i in range(4):
                if i == 2:  # a changed hyperparameter: the step must not reuse the old lr
                    opt.param_groups[0]["lr"] *= 0.1
                opt.zero_grad()
                (m(x) * (i + 1)).pow(2).sum().backward()
                step()
                outs += [p.detach().clone() for p in m.parameters()]
            return outs
        exp = go("cpu")
        got = read(go(DEV))
        assert_same(exp, got, where=f"{opt_cls.__name__} steps", atol=1e-5, rtol=1e-5)
    return run


# ---------------------------------------------------------------------------------------------------
# modules converted between calls


def _module_convert_between_calls():
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3)).to(d)
        if d != "cpu":
            m.compile(backend="tpu")
        return m

    sd = {k: v * 0.5 for k, v in (torch.manual_seed(1), torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3)))[1].state_dict().items()}

    def load(m, x):
        m.float()
        m.load_state_dict({k: v.to(x.device) for k, v in sd.items()})
        return m(x)

    D.check_sequence([
        call("float32", lambda m, x: m(x)),
        call("double", lambda m, x: m.double()(x.double())),
        call("half", lambda m, x: m.half()(x.half())),
        call("load_state_dict", load),
        call("weight in place", lambda m, x: (m[0].weight.data.mul_(-1), m(x))[1]),
    ], per_device(make), rand(2, 4), atol=2e-3, rtol=2e-3)


def _compile_method_nested_twice():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def helper(self, x):
            return self.lin(x).relu()

        def forward(self, x):
            return self.helper(x) * 2

    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = M().to(d)
        if d == "cpu":
            return m, m.helper, m, m
        inner = torch.compile(m.helper, backend="tpu", dynamic=False)

        def outer(x):
            return inner(x) + 1

        return m, inner, torch.compile(outer, backend="tpu", dynamic=False), (
            torch.compile(m, backend="tpu"), torch.compile(m, backend="tpu", dynamic=False))

    def outer_cpu_or(p, x):
        if x.device.type == "cpu":
            return p[1](x) + 1
        return p[2](x)

    def twice(p, x):
        if x.device.type == "cpu":
            return p[0](x), p[0](x * 2)
        return p[3][0](x), p[3][1](x * 2)

    D.check_sequence([
        call("method", lambda p, x: p[1](x)),
        call("nested", outer_cpu_or),
        call("module compiled twice", twice),
        call("method after weight change", lambda p, x: (p[0].lin.bias.data.fill_(3), p[1](x))[1]),
        call("twice after weight change", twice),
    ], per_device(make), rand(2, 3), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# options


def _options_modes():
    def f(x, w):
        return F.silu(x @ w).sum(-1)

    for kw in (dict(mode="reduce-overhead"), dict(mode="max-autotune"), dict(mode="max-autotune-no-cudagraphs"),
               dict(options={"trace.enabled": False})):
        D.check_sequence([call(f"{kw} 1", lambda c, x, w: c(x, w)),
                          call(f"{kw} 2", lambda c, x, w: c(x * 2, w)),
                          call(f"{kw} new shape", lambda c, x, w: c(x[:1], w))],
                         compiled(f, **kw), rand(3, 4), rand(4, 2, seed=5), atol=1e-5, rtol=1e-5)


def _dynamic_none_batches():
    def f(x):
        return torch.softmax(x, -1) * x.shape[0]

    D.check_sequence([call(f"batch {n}", (lambda n: lambda c, x: c(x[:n]))(n)) for n in (4, 2, 3, 1, 4, 2)]
                     + [call("batch 0", lambda c, x: c(x[:0]))],
                     compiled(f), rand(4, 5), atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------
# captured state changed between calls (a stale program would keep the old value)


def _captured_state_changes():
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        st = {"scale": 2.0, "w": torch.arange(3.0, device=d), "mask": torch.tensor([True, False, True])}

        def f(x):
            return (x * st["scale"] + st["w"]).masked_fill(st["mask"].to(x.device), -1.0)

        return st, (f if d == "cpu" else torch.compile(f, backend="tpu", dynamic=False))

    def change(what):
        def go(p, x):
            st, c = p
            if what == "scale":
                st["scale"] = -0.5
            elif what == "w replaced":
                st["w"] = torch.full((3,), 7.0, device=x.device)
            elif what == "w in place":
                st["w"].mul_(3)
            elif what == "cpu mask in place":
                st["mask"][1] = True
            elif what == "cpu mask replaced":
                st["mask"] = torch.tensor([False, False, True])
            return c(x)
        return go

    D.check_sequence([call("first", lambda p, x: p[1](x))]
                     + [call(w, change(w)) for w in ("scale", "w replaced", "w in place", "cpu mask in place",
                                                     "cpu mask replaced")],
                     per_device(make), rand(3))


def _default_dtype_and_grad_mode_changes():
    def f(x):
        return x + torch.ones(3, device=x.device), torch.arange(3, device=x.device) * 0.5

    def with_default(dt):
        def go(c, x):
            old = torch.get_default_dtype()
            torch.set_default_dtype(dt)
            try:
                return c(x)
            finally:
                torch.set_default_dtype(old)
        return go

    D.check_sequence([call("float32", with_default(torch.float32)), call("float64", with_default(torch.float64)),
                      call("float32 again", with_default(torch.float32))], compiled(f, dynamic=False), rand(3))


def _parameter_swaps_and_hooks():
    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2).to(d)
        # hooks registered after torch.compile(m): dynamo's behaviour is the reference (backend="eager")
        return m, torch.compile(m, backend="eager" if d == "cpu" else "tpu", dynamic=False)

    def grads(p, x):
        m, c = p
        m.zero_grad(set_to_none=True)
        out = c(x)
        out.sum().backward()
        return out, m.weight.grad, m.bias.grad

    def new_weight(p, x):
        p[0].weight = torch.nn.Parameter(torch.full((2, 3), 0.25, device=x.device))
        return grads(p, x)

    def freeze_bias(p, x):
        p[0].bias.requires_grad_(False)
        return grads(p, x)

    def hook(p, x):
        p[0].register_forward_hook(lambda mod, inp, out: out * 10)
        return grads(p, x)

    def pre_hook(p, x):
        p[0].register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
        return grads(p, x)

    D.check_sequence([call("first", grads), call("weight replaced", new_weight), call("bias frozen", freeze_bias),
                      call("forward hook", hook), call("pre hook", pre_hook)],
                     per_device(make), rand(4, 3), atol=1e-5, rtol=1e-5)


def _aliased_inputs():
    def f(a, b):
        a.add_(1)
        return b * 2, a.sum()

    D.check_sequence([
        call("distinct", lambda c, x: c(x[0].clone(), x[1])),
        call("same tensor twice", lambda c, x: c(x[0], x[0])),
        call("overlapping views", lambda c, x: c(x[:, 0:2], x[:, 1:3])),
        call("view and base", lambda c, x: c(x[1], x)),
        call("distinct again", lambda c, x: c(x[2], x[0])),
    ], compiled(f, dynamic=False), rand(3, 3))


def _views_of_outputs():
    """Outputs that view another output (an inference graph returned each as its own array: writes
    through ``a[0]`` were not seen in ``a``, a silent wrong result)."""
    def f(x):
        a = x * 2
        return a, a[0], a.t(), a.view(-1)[1:]

    def mutate(c, x):
        a, row, t, tail = c(x)
        row.add_(100)
        t[1, 1] = -7
        tail.mul_(2)
        return a, row, t, tail

    def inplace_returned(x):
        x.add_(1)
        return x, x[0]

    def mutate_returned(c2, x):
        out, row = c2(x)
        row.zero_()
        return out, row, out is x

    def mutate_grad(c, x):
        x = x.detach().clone().requires_grad_()
        a, row, t, tail = c(x)
        row.add_(100)
        t[1, 1] = -7
        (a * torch.arange(9.0, device=x.device).reshape(3, 3)).sum().backward()
        return a, row, t, x.grad

    D.check_sequence([call("views of an output mutated", mutate), call("again", mutate),
                      call("with grad", mutate_grad), call("no grad again", mutate)],
                     compiled(f, dynamic=False), rand(3, 3))
    D.check_sequence([call("input returned", mutate_returned), call("input returned again", mutate_returned)],
                     compiled(inplace_returned, dynamic=False), rand(3, 3))


def _errors_between_calls():
    def f(x, y):
        if x.shape[0] > 3:
            raise ValueError("too long")
        return (x @ y).relu()

    D.check_sequence([
        call("ok", lambda c, x, y: c(x, y)),
        call("shape mismatch", lambda c, x, y: c(x, y.t())),
        call("python raise", lambda c, x, y: c(torch.cat([x, x]), y)),
        call("ok again", lambda c, x, y: c(x, y)),
        call("wrong dtype", lambda c, x, y: c(x, y.double())),
        call("ok after all", lambda c, x, y: c(x * 2, y)),
    ], compiled(f, dynamic=False), rand(2, 3), rand(3, 2, seed=2), atol=1e-5, rtol=1e-5)


def _backward_errors_and_inner_backward():
    def f(x, w):
        return (x * w).sum()

    def twice_no_retain(c, x, w):
        w = w.detach().clone().requires_grad_()
        out = c(x, w)
        out.backward()
        out.backward()  # raises like CPU: the graph was freed
        return w.grad

    def after(c, x, w):
        w = w.detach().clone().requires_grad_()
        out = c(x, w)
        out.backward()
        return w.grad

    def inner(x, w):
        w = w.detach().clone().requires_grad_()
        loss = (x * w).sin().sum()
        loss.backward()
        return w.grad * 2

    D.check_sequence([call("backward twice", twice_no_retain), call("after", after)],
                     compiled(f, dynamic=False), rand(3), rand(3, seed=3), atol=1e-5, rtol=1e-5)
    D.check_sequence([call("backward inside", lambda c, x, w: c(x, w)), call("again", lambda c, x, w: c(x, w))],
                     compiled(inner, dynamic=False), rand(3), rand(3, seed=3), atol=1e-5, rtol=1e-5)


def _grad_mode_inside():
    def f(x, w):
        with torch.no_grad():
            s = (x * w).sum()
        with torch.enable_grad():
            t = (x * w).sum()
        return s, t, s.requires_grad, t.requires_grad

    def outer_no_grad(c, x, w):
        w = w.detach().clone().requires_grad_()
        with torch.no_grad():
            return c(x, w)

    def with_grad(c, x, w):
        w = w.detach().clone().requires_grad_()
        s, t, a, b = c(x, w)
        t.backward()
        return s, t, a, b, w.grad

    D.check_sequence([call("grad", with_grad), call("outer no_grad", outer_no_grad), call("grad again", with_grad)],
                     compiled(f, dynamic=False), rand(3), rand(3, seed=3), atol=1e-5, rtol=1e-5)


def _structured_returns():
    """Python numbers returned beside tensors; on a new shape (dynamic=None: a per-shape program) the
    number computed from the shape came back as a JAX array."""
    import collections
    Pair = collections.namedtuple("Pair", "a b")

    def f(x):
        return {"sum": x.sum(), "list": [x * 2, (x.shape, x.dtype)], "pair": Pair(x - 1, x.numel()),
                "none": None, "int": int(x.shape[0]) * 3}

    D.check_sequence([call("dict", lambda c, x: c(x)), call("other shape", lambda c, x: c(x[:2]))],
                     compiled(f), rand(3))


def _vmap_and_double_compile():
    def f(x):
        return (x * x.sum()).sin()

    def vm(c, x):
        return torch.func.vmap(c)(x)

    def compile_twice(d):
        import torch._dynamo
        torch._dynamo.reset()
        if d == "cpu":
            return f
        return torch.compile(torch.compile(f, backend="tpu", dynamic=False), backend="tpu", dynamic=False)

    D.check_sequence([call("vmap", vm), call("plain", lambda c, x: c(x[0]))], compiled(f, dynamic=False),
                     rand(2, 3), atol=1e-5, rtol=1e-5)
    D.check_sequence([call("compiled twice", lambda c, x: c(x)), call("again", lambda c, x: c(x * 2))],
                     per_device(compile_twice), rand(2, 3), atol=1e-5, rtol=1e-5)


def _int_overflow_and_promotion():
    def f(x, s):
        return x * s, x + 200, (x * 100).to(torch.int8), x // -2, x % 3

    D.check_sequence([call("int8 * 3", lambda c, x: c(x, 3)), call("int8 * 3.5", lambda c, x: c(x, 3.5)),
                      call("int8 * -1", lambda c, x: c(x, -1)),
                      call("int8 * True", lambda c, x: c(x, True))],
                     compiled(f, dynamic=False), torch.tensor([1, -7, 100, 127, -128], dtype=torch.int8))


def _inference_tensors_and_mutated_nonleaf():
    def f(x, w):
        x.mul_(2)
        return (x * w).sum()

    def nonleaf(c, x, w):
        w = w.detach().clone().requires_grad_()
        leaf = x.detach().clone().requires_grad_()
        y = leaf * 1
        out = c(y, w)
        out.backward()
        return out, y, leaf.grad, w.grad

    def inference_input(c, x, w):
        with torch.inference_mode():
            xi = x * 1
        w = w.detach().clone().requires_grad_()
        out = c(xi, w)  # in-place on an inference tensor outside inference mode: CPU raises
        return out

    def inference_input_no_write(c, x, w):
        with torch.inference_mode():
            xi = x * 1
        return c(xi.clone(), w)

    D.check_sequence([call("non-leaf input mutated, backward", nonleaf),
                      call("inference tensor written", inference_input),
                      call("inference tensor cloned", inference_input_no_write),
                      call("non-leaf again", nonleaf)],
                     compiled(f, cpu="eager", dynamic=False), rand(3), rand(3, seed=4), atol=1e-5, rtol=1e-5)


def _cpu_inputs_to_tpu_compiled():
    """A function compiled for the tpu called with CPU tensors: the same result as on CPU (or a clear
    error), then tpu inputs still work."""
    import torch._dynamo

    def f(x):
        return (x * 2).sum(0)

    torch._dynamo.reset()
    c = torch.compile(f, backend="tpu", dynamic=False)
    x = rand(3, 2)
    try:
        got = c(x.clone())
    except Exception as e:  # noqa: BLE001
        assert is_clear(e), f"[unclear error] {type(e).__name__}: {e}"
    else:
        assert got.device.type == "cpu", f"[wrong device] {got.device}"
        assert_same(f(x), read(got), where="cpu input")
    assert_same(f(x), read(c(x.to(DEV))), where="tpu input after")


def _overlapping_output_views():
    """Two outputs that overlap in one intermediate (no output is their base): a write through one must
    be seen through the other."""
    def f(x):
        a = x * 2
        return a[0:2], a[1:3]

    def mutate(c, x):
        p, q = c(x)
        p[1].fill_(9)
        return p, q

    D.check_sequence([call("overlapping views", mutate)], compiled(f, dynamic=False), rand(3, 2))


def _resize_input():
    D.check_sequence([call("resize_ an input", lambda c, x: c(x))],
                     compiled(lambda x: x.resize_(6).fill_(1), cpu="eager", dynamic=False), torch.zeros(3))


def _inplace_on_nonleaf_input_grad():
    """A compiled function writing in place to an input that requires grad and is not a leaf (``w * 1``):
    the backend's fake inputs were all leaves, so AOTAutograd wrote the mutation back with
    ``detach().copy_()``, hidden from autograd: ``x`` kept its old grad_fn and the gradient skipped the
    write (compile/test_random_compiled.py, seed 11)."""
    def f(x, s):
        x.mul_(s)
        return x

    def g(x, s):
        x[::2].add_(x[1::2] * s)
        return (x * x).sum()

    def h(x, s):
        with torch.no_grad():
            x.add_(s)  # hidden from autograd: the gradient passes as through the identity
        return x

    def run(fn, s):
        def go(c, w):
            w = w.detach().clone().requires_grad_()
            x = w * 1
            out = c(fn)(x, s)
            (out * (torch.arange(out.numel(), device=w.device) + 1).reshape(out.shape)).sum().backward()
            return out, x, w.grad
        return go

    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        return (lambda fn: fn) if d == "cpu" else (lambda fn: torch.compile(fn, backend="tpu", dynamic=False))

    D.check_sequence([call("x.mul_(-3); return x", run(f, -3)), call("again, s=2.5", run(f, 2.5)),
                      call("write through views", run(g, 2)), call("no_grad write, return x", run(h, 1.5))],
                     per_device(make), rand(4, 3), atol=1e-5, rtol=1e-5, signed_zeros=False)


def _returned_written_input_beside_grad_input_write():
    """A training graph (an input requires grad and is written) that returns another input it writes
    (``y[0] = s; return y``): with input mutations kept in the graph, AOTAutograd's forward returned ``y``
    in the place of ``x``'s new value, so ``x`` was overwritten with ``y``'s values (torch's own bug;
    compile/test_random_compiled.py, seed 33)."""
    def f(x, y, s):
        x.diagonal()[0] = s
        y[0] = s
        return y

    def h(x, y, s):
        x.mul_(2)
        return y.add_(s)

    def run(fn):
        def go(c, w, y):
            w = w.detach().clone().requires_grad_()
            x = w * 1
            out = c(fn)(x, y, -3)
            (x * x).sum().backward()
            return out, x, y.clone(), w.grad
        return go

    def make(d):
        import torch._dynamo
        torch._dynamo.reset()
        return (lambda fn: fn) if d == "cpu" else (lambda fn: torch.compile(fn, backend="tpu", dynamic=False))

    D.check_sequence([call("diagonal write, return y", run(f)), call("mul_, return y.add_", run(h))],
                     per_device(make), rand(2, 5), rand(5, seed=2), atol=1e-5, rtol=1e-5, signed_zeros=False)


def _float_after_shape_change():
    """dynamic=None: a new shape (a per-shape program, ``specialize.py``), then a new Python float that
    dynamo passes unspecialised (a host 0-d tensor read with ``.item()``): the per-shape compile saw
    ``.item()`` as an op no program runs ("no tpu lowering for aten._local_scalar_dense"; compile/test_random_compiled.py,
    seed 0 with dynamic=None)."""
    def f(x, s):
        t = x * s
        x[0] = s
        return t, x.fill_(s) if x.shape[0] > 3 else x

    def go(shape, s):
        def call_(c, x):
            xx = torch.ones(shape, device=x.device)
            return c(xx, s), xx
        return call_

    D.check_sequence([call("4x4, 0", go((4, 4), 0)), call("2x3, 0", go((2, 3), 0)),
                      call("4x4, -0.25", go((4, 4), -0.25)), call("4x4, 1.5", go((4, 4), 1.5)),
                      call("2x3, 1.5", go((2, 3), 1.5)), call("4x4, -0.25 again", go((4, 4), -0.25))],
                     compiled(f), rand(1))


def _input_rank_change_dynamic_none():
    """dynamic=None: a second input that changes from (4,) to (3, 4) between calls was traced with
    symbolic sizes while no size was a graph input; the backend refused it as "dynamic" (StaticShapeError)
    although nothing asked for dynamism (compile/test_random_compiled.py, seed 23 with dynamic=None)."""
    def f(x, y):
        t = (x + y).index_select(-1, torch.tensor([0, 2], device=x.device))
        return torch.cat([x, x.flip(-1)], -1).t(), t

    def go(yshape):
        return lambda c, x: c(x, torch.arange(float(torch.Size(yshape).numel()), device=x.device).reshape(yshape))

    D.check_sequence([call("y (4,)", go((4,))), call("y (3, 4)", go((3, 4))), call("y (4,) again", go((4,))),
                      call("y (1, 4)", go((1, 4)))], compiled(f), rand(3, 4))


ISOLATED_CASES = {
    "recompile_dtype": _recompile_dtype,
    "recompile_requires_grad": _recompile_requires_grad,
    "recompile_layouts": _recompile_layouts,
    "zero_dim_vs_one_elem": _zero_dim_vs_one_elem,
    "python_scalar_changes": _python_scalar_changes,
    "scalar_int_dtype_changes": _scalar_int_dtype_changes,
    "module_attribute_changes": _module_attribute_changes,
    "train_eval_toggle": _train_eval_toggle,
    "graph_breaks": _graph_breaks,
    "host_outputs": _host_outputs,
    "fma_inplace_methods": _fma_inplace_methods,
    "middle_graph_output_mutated": _middle_graph_output_mutated,
    "fullgraph_break_raises": _fullgraph_break_raises,
    "retain_graph_twice": _retain_graph_twice,
    "double_backward": _double_backward,
    "grads_of_views": _grads_of_views,
    "no_grad_inference_mode": _no_grad_inference_mode,
    "detach_inside": _detach_inside,
    "inplace_on_leaf_raises": _inplace_on_leaf_raises,
    "outputs_alias_inputs": _outputs_alias_inputs,
    "alias_grad": _alias_grad,
    "inplace_on_input_views": _inplace_on_input_views,
    "captured_global_inplace": _captured_global_inplace,
    "setattr_buffer_inside": _setattr_buffer_inside,
    "compiled_sgd_momentum_steps": _compiled_optimizer_steps(torch.optim.SGD, lr=0.1, momentum=0.9),
    "compiled_adam_steps": _compiled_optimizer_steps(torch.optim.Adam, lr=0.01),
    "compiled_adamw_foreach_false_steps": _compiled_optimizer_steps(torch.optim.AdamW, lr=0.01, foreach=False),
    "module_convert_between_calls": _module_convert_between_calls,
    "compile_method_nested_twice": _compile_method_nested_twice,
    "options_modes": _options_modes,
    "dynamic_none_batches": _dynamic_none_batches,
    "captured_state_changes": _captured_state_changes,
    "default_dtype_and_grad_mode_changes": _default_dtype_and_grad_mode_changes,
    "parameter_swaps_and_hooks": _parameter_swaps_and_hooks,
    "aliased_inputs": _aliased_inputs,
    "views_of_outputs": _views_of_outputs,
    "errors_between_calls": _errors_between_calls,
    "backward_errors_and_inner_backward": _backward_errors_and_inner_backward,
    "grad_mode_inside": _grad_mode_inside,
    "structured_returns": _structured_returns,
    "vmap_and_double_compile": _vmap_and_double_compile,
    "int_overflow_and_promotion": _int_overflow_and_promotion,
    "inference_tensors_and_mutated_nonleaf": _inference_tensors_and_mutated_nonleaf,
    "cpu_inputs_to_tpu_compiled": _cpu_inputs_to_tpu_compiled,
    "overlapping_output_views": _overlapping_output_views,
    "resize_input": _resize_input,
    "inplace_on_nonleaf_input_grad": _inplace_on_nonleaf_input_grad,
    "returned_written_input_beside_grad_input_write": _returned_written_input_beside_grad_input_write,
    "float_after_shape_change": _float_after_shape_change,
    "input_rank_change_dynamic_none": _input_rank_change_dynamic_none,
}


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=180)
