"""Python numbers in program keys: each type and special value is its own program (no collisions), and a
Scalar whose value changes between calls is a program input (no new compile per value)."""
import itertools

import pytest
import torch

import torch_tpu
from tests.harness import hangs

SCALARS = [2, 2.0, True, 1, 1.0, 0.0, -0.0, -3, float("nan"), float("inf"), 1 + 0j, 2 - 1j]
TENSORS = {
    "uint8": torch.tensor([200, 100, 0], dtype=torch.uint8),
    "int32": torch.tensor([7, -8, 0], dtype=torch.int32),
    "bool": torch.tensor([True, False, True]),
    "float32": torch.tensor([1.5, -0.0, 2.0]),
    "bfloat16": torch.tensor([1.5, -2.25, 0.0], dtype=torch.bfloat16),
}
BINARY = {
    "add": lambda t, s: t + s, "radd": lambda t, s: s + t, "sub": lambda t, s: t - s,
    "rsub": lambda t, s: s - t, "mul": lambda t, s: t * s, "div": lambda t, s: t / s,
    "eq": lambda t, s: t == s, "lt": lambda t, s: t < s, "clamp_max": lambda t, s: torch.clamp(t, max=s),
    "where": lambda t, s: torch.where(t > 1, t, s), "fill": lambda t, s: torch.full_like(t, s),
    "add_alpha": lambda t, s: torch.add(t, t, alpha=s),
}


def _run(fn, t, s):
    try:
        return fn(t, s)
    except Exception as exc:  # noqa: BLE001 - the comparison is "both raise"
        return exc


def _same(cpu, tpu, what):
    if isinstance(cpu, NotImplementedError) and "not implemented for" in str(cpu):
        return  # CPU torch lacks a kernel for this dtype; the tpu device may have one (documented)
    if isinstance(cpu, Exception):
        assert isinstance(tpu, Exception), f"{what}: CPU raised {cpu!r}, tpu returned {tpu}"
        return
    assert not isinstance(tpu, Exception), f"{what}: tpu raised {tpu!r}, CPU returned {cpu}"
    tpu = tpu.cpu()
    assert tpu.dtype == cpu.dtype, f"{what}: dtype {tpu.dtype} != CPU {cpu.dtype}"
    torch.testing.assert_close(tpu, cpu, equal_nan=True, atol=1e-2 if cpu.dtype == torch.bfloat16 else 1e-6,
                               rtol=1e-2 if cpu.dtype == torch.bfloat16 else 1e-6, msg=what)
    if cpu.is_floating_point():  # the sign of zero too
        assert torch.equal(torch.signbit(tpu), torch.signbit(cpu)) or cpu.isnan().any(), what


@pytest.mark.parametrize("op", sorted(BINARY))
def test_every_scalar_kind_in_one_sequence(op):
    """All scalar kinds through the same op in one process: a cache key that confuses 1, 1.0, True,
    1+0j, 0.0, -0.0 or NaN returns the first variant's dtype or value for the others."""
    fn = BINARY[op]
    scalars = SCALARS
    if op == "clamp_max":  # CPU torch keeps a float input's dtype under a complex bound, its meta kernel
        scalars = [s for s in SCALARS if type(s) is not complex]  # says complex: the tpu device refuses
    for (name, t), s in itertools.product(TENSORS.items(), scalars):
        _same(_run(fn, t, s), _run(fn, t.to("tpu"), s), f"{op}({name}, {s!r})")


@pytest.mark.parametrize("op", ["add", "div", "fill", "where"])
def test_every_scalar_kind_in_one_fused_sequence(op):
    """The same in fused eager, where numbers are inputs of recorded graphs (their graph keys too)."""
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        test_every_scalar_kind_in_one_sequence(op)


@pytest.mark.parametrize("op", sorted(BINARY))
def test_every_scalar_kind_as_a_constant_of_one_fused_graph(op, monkeypatch):
    """Fused graphs take Python numbers as constants of their programs (graph_sets.dynamic_numbers), which
    XLA folds: every kind and special value (-0.0 + 0.0 is 0.0, uint8 + 300 wraps), all in one graph."""
    from torch_tpu.engine import fused, graph_sets

    monkeypatch.setattr(graph_sets, "dynamic_numbers", lambda sites, numbers: (set(), set()))  # every one a constant
    fn = BINARY[op]
    scalars = SCALARS + [300, -1, 2 ** 40]
    if op == "clamp_max":
        scalars = [s for s in scalars if type(s) is not complex]
    cases = [(f"{op}({name}, {s!r})", t, s) for (name, t), s in itertools.product(TENSORS.items(), scalars)]
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        results = [(what, _run(fn, t, s), _run(fn, t.to("tpu"), s)) for what, t, s in cases]
        numbers = len(fused._graph().number_sites)
        replays = torch_tpu.stats()["fused_graph_replays"]
        torch_tpu.sync()
        assert numbers > 0 and fused.last_flush_constants() == numbers
        assert torch_tpu.stats()["fused_graph_replays"] == replays  # it ran as one program, not op by op
        for what, cpu, tpu in results:
            _same(cpu, tpu, what)


def test_known_collisions():
    u = torch.tensor([200, 100], dtype=torch.uint8)
    ud = u.to("tpu")
    assert (ud * 2).dtype == torch.uint8
    assert (ud * 2.0).cpu().tolist() == [400.0, 200.0]
    i = torch.tensor([1, 2], device="tpu")
    assert (i + 1.0).dtype == torch.float32 and (i + 1).dtype == torch.int64
    assert torch.arange(5.0, device="tpu").dtype == torch.float32
    assert torch.arange(5, device="tpu").dtype == torch.int64
    b = torch.tensor([True, False], device="tpu")
    assert (b + True).dtype == torch.bool
    x = torch.tensor([-1.0, 2.0], device="tpu")
    assert torch.signbit(x.clamp(max=0.0).cpu()).tolist() == [True, False]
    assert torch.signbit(x.clamp(max=-0.0).cpu()).tolist() == [True, True]


def _compiles_during(fn):
    torch.tpu.synchronize()
    before = torch_tpu.stats()["cache_misses"]
    fn()
    torch.tpu.synchronize()
    return torch_tpu.stats()["cache_misses"] - before


def test_changing_scalars_do_not_compile(eager_mode):
    g = torch.randn(64, device="tpu")
    p = torch.randn(64, device="tpu")
    pc, gc = p.cpu(), g.cpu()

    def steps(start):
        for k in range(start, start + 10):
            lr = 0.01 * (k + 1) + 1e-3
            p.add_(g, alpha=-lr)
            p.mul_(1 - lr / 7)
            p.clamp_(min=-3.5 - lr, max=3.5 + lr)
            pc.add_(gc, alpha=-lr)
            pc.mul_(1 - lr / 7)
            pc.clamp_(min=-3.5 - lr, max=3.5 + lr)

    steps(0)  # warm-up: compiles each op once
    assert _compiles_during(lambda: steps(10)) == 0
    torch.testing.assert_close(p.cpu(), pc, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("opt", ["Adam", "AdamW", "SGD"])
def test_optimizer_steps_compile_once(opt, eager_mode):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    ref = torch.nn.Linear(8, 4)
    ref.load_state_dict(model.state_dict())
    model.to("tpu")
    kwargs = {"lr": 0.05, "momentum": 0.9} if opt == "SGD" else {"lr": 0.05}
    o = getattr(torch.optim, opt)(model.parameters(), **kwargs)
    o_ref = getattr(torch.optim, opt)(ref.parameters(), **kwargs)
    x = torch.randn(16, 8)

    def step():
        for m, op, xx in ((model, o, x.to("tpu")), (ref, o_ref, x)):
            op.zero_grad()
            m(xx).square().mean().backward()
            op.step()

    for _ in range(3):
        step()
    assert _compiles_during(lambda: [step() for _ in range(4)]) == 0
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=1e-5, rtol=1e-4)


def test_program_caches_are_bounded(monkeypatch):
    from torch_tpu.eager import op_path
    from torch_tpu.runtime import program_cache

    monkeypatch.setenv("TORCH_TPU_MAX_CACHED_PROGRAMS", "16")
    for n in range(1, 26):
        x = torch.ones(n, device="tpu")
        assert (x * 3 + 1).sum().item() == 4 * n
    assert len(op_path._ENTRIES) <= 16 and len(program_cache._PROGRAMS) <= 16


def test_pow_exponent_is_static_and_exact():
    # pow(x, 2) is x * x, as on the CPU (a traced exponent would be XLA's general pow: slower, and
    # a few ulp off); also when pow is the first op of a process (before any lowering module loaded)
    import sys

    code = ("import torch, torch_tpu\n"
            "x = torch.randn(100000) * 10\n"
            "t = x.to('tpu')\n"
            "assert torch.equal(t.pow(2).cpu(), x.pow(2)), 'pow 2'\n"
            "assert torch.equal(t.pow(3).cpu(), x.pow(3)), 'pow 3'\n"
            "print('ok')\n")
    out = hangs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.complex64])
def test_int_and_float_scalars_share_a_program_on_inexact_tensors(dtype):
    """With a floating (or complex) tensor an int Scalar computes as the same float does, so ``x / 3``
    and ``x / 3.0`` are one program; ints past 2**53 (not exact as doubles) and 0 (whose negation keeps
    no sign, unlike 0.0's) keep programs of their own and CPU's results, integer tensors keep ints apart
    (int and float results differ there). Strict eager: fused graphs hold a number as a constant until a
    second value comes at its place (tests/test_fused.py)."""
    cpu = torch.tensor([1.5, -2.25, 7.0, -0.0], dtype=dtype)
    x = cpu.to("tpu")
    ops = [lambda t, s: t / s, lambda t, s: s * t, lambda t, s: t.add(t, alpha=s), lambda t, s: t - s]
    for op in ops:
        _same(op(cpu, 3), op(x, 3), f"{dtype} int")  # builds the program
        for s in (3.0, -7, 2 ** 53, -(2 ** 53), 0.5):
            assert _compiles_during(lambda: _same(op(cpu, s), op(x, s), f"{dtype} {s!r}")) == 0, s
    for s in (2 ** 53 + 1, 2 ** 60 + 1, -(2 ** 62) - 3):  # not exact as a double: an int key, CPU's rounding
        _same(cpu * s, x * s, f"{dtype} * {s}")
    for s in (0, 0.0, -0.0, 0):  # x - 0 * x keeps -0.0 on CPU, x - 0.0 * x does not
        _same(torch.sub(cpu, cpu, alpha=s), torch.sub(x, x, alpha=s), f"{dtype} sub alpha={s!r}")
    ints = torch.tensor([7, -8, 0])
    for s in (3, 3.0, 2):
        _same(ints * s, ints.to("tpu") * s, f"int64 * {s!r}")
