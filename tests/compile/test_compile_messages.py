"""Compile-time errors a user meets first say what is true and name ways out that work: each test takes the
way out its message names and checks that it then computes CPU torch's value.

- An op without a tpu lowering: the message said "strict eager runs it" for ``torch.special.bessel_j0``,
  which strict eager raises NotImplementedError for (its CompositeExplicitAutograd kernel calls back into
  it); whether strict eager runs an op is now found out, and ``TORCH_TPU_CPU_FALLBACK=1`` is named.
- A data-dependent op under ``fullgraph=True`` (``a[a > 0].sum()``) failed with "unexpected call <built-in
  function ge> in the aten graph"."""
import re

import pytest
import torch

import torch_tpu

DEV = "tpu"


def _compile_error(fn, *args, **options) -> str:
    torch._dynamo.reset()
    # dynamo wraps what the backend raised: the class a user catches is BackendCompilerFailed
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        torch.compile(fn, backend="tpu", dynamic=False, **options)(*args)
    return str(info.value)


@pytest.fixture
def cpu_fallback(monkeypatch):
    def turn(on: bool):
        monkeypatch.setenv("TORCH_TPU_CPU_FALLBACK", "1" if on else "0")
        torch_tpu.reset_caches()
    yield turn
    monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK", raising=False)
    torch_tpu.reset_caches()


def _strict_eager_runs(fn, *args) -> bool:
    try:
        fn(*args).cpu()
        return True
    except NotImplementedError:
        return False


BESSEL = (lambda a: torch.special.bessel_j0(a) * 2, "prims.bessel_j0.default")
CHEBYSHEV = (lambda a: torch.special.chebyshev_polynomial_t(a, 3), "aten.special_chebyshev_polynomial_t.n_scalar")


@pytest.mark.parametrize("case", [BESSEL, CHEBYSHEV], ids=["bessel_j0", "chebyshev_n_scalar"])
def test_an_op_eager_cannot_run_is_not_said_to_run_and_the_fallback_named_works(case, cpu_fallback):
    fn, op = case
    x = torch.linspace(-3, 3, 16)
    cpu_fallback(False)
    message = _compile_error(fn, x.to(DEV), fullgraph=True)
    assert op in message and "strict eager runs it" not in message
    assert f"{op}: strict eager cannot run it either" in message and "TORCH_TPU_CPU_FALLBACK=1" in message
    assert not _strict_eager_runs(fn, x.to(DEV))  # what the message says of strict eager is true
    cpu_fallback(True)  # the way out it names
    torch._dynamo.reset()
    with pytest.warns(Warning, match="op by op|on the CPU"):
        got = torch.compile(fn, backend="tpu", fullgraph=True, dynamic=False)(x.to(DEV)).cpu()
    torch.testing.assert_close(got, fn(x))
    # and the other one: compute it on the CPU
    torch.testing.assert_close(fn(x.to(DEV).cpu()).to(DEV).cpu(), fn(x))


def _grouped_mm(a, b):
    return torch._grouped_mm(a, b)


def test_an_op_eager_runs_is_said_to_run_and_a_graph_break_around_it_works(cpu_fallback):
    """``_grouped_mm`` has no lowering; its CompositeExplicitAutograd kernel runs in strict eager (lowered
    matmuls). The message says so, and the way out it names (a function under torch.compiler.disable)
    computes CPU torch's per-group products."""
    cpu_fallback(False)
    a = torch.randn(2, 16, 32).to(torch.bfloat16)
    b = torch.randn(2, 32, 16).to(torch.bfloat16)
    message = _compile_error(lambda a, b: _grouped_mm(a, b) + 1, a.to(DEV), b.to(DEV), fullgraph=True)
    assert "aten._grouped_mm.default: strict eager runs it" in message and "torch.compiler.disable" in message
    assert _strict_eager_runs(_grouped_mm, a.to(DEV), b.to(DEV))
    outside = torch.compiler.disable(_grouped_mm)
    torch._dynamo.reset()
    got = torch.compile(lambda a, b: outside(a, b) + 1, backend="tpu", dynamic=False)(a.to(DEV), b.to(DEV)).cpu()
    want = torch.stack([a[i].float() @ b[i].float() for i in range(2)]).to(torch.bfloat16) + 1
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    cpu_fallback(True)  # the other way out it names: the graph runs op by op
    torch._dynamo.reset()
    with pytest.warns(Warning, match="op by op"):
        got = torch.compile(lambda a, b: _grouped_mm(a, b) + 1, backend="tpu", fullgraph=True,
                            dynamic=False)(a.to(DEV), b.to(DEV)).cpu()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


MASKED = [
    ("a[a > 0].sum()", lambda a: a[a > 0].sum(), "aten.index.Tensor",
     lambda a: torch.where(a > 0, a, 0).sum()),
    ("masked_select", lambda a: torch.masked_select(a, a > 0).sum(), "aten.masked_select",
     lambda a: a.masked_fill(~(a > 0), 0).sum()),
    ("nonzero", lambda a: torch.nonzero(a > 0).float().sum(), "aten.nonzero",
     lambda a: (torch.arange(a.numel(), device=a.device) * (a > 0)).float().sum()),
]


@pytest.mark.parametrize("fn,op,static", [m[1:] for m in MASKED], ids=[m[0] for m in MASKED])
def test_a_data_dependent_op_under_fullgraph_names_the_op_and_ways_out_that_work(fn, op, static):
    a = torch.randn(64)
    message = _compile_error(fn, a.to(DEV), fullgraph=True)
    assert "unexpected call" not in message
    assert op in message and "test_compile_messages.py:" in message  # the op and the user's line
    for way in ("without fullgraph=True", "torch.compiler.disable", "torch.where"):
        assert way in message
    want = fn(a)
    torch._dynamo.reset()  # 1: without fullgraph=True dynamo breaks the graph there
    torch.testing.assert_close(torch.compile(fn, backend="tpu", dynamic=False)(a.to(DEV)).cpu(), want)
    torch._dynamo.reset()  # 2: that code in a function under torch.compiler.disable
    eager_part = torch.compiler.disable(fn)
    torch.testing.assert_close(torch.compile(lambda x: eager_part(x) * 1, backend="tpu", dynamic=False)(
        a.to(DEV)).cpu(), want)
    torch._dynamo.reset()  # 3: a static shape, with fullgraph=True
    got = torch.compile(static, backend="tpu", fullgraph=True, dynamic=False)(a.to(DEV)).cpu()
    torch.testing.assert_close(got, want.to(got.dtype))


def test_the_message_quotes_the_users_line():
    def user_code(a):
        positive = a[a > 0]  # the line the message quotes
        return positive.sum()

    message = _compile_error(user_code, torch.randn(8).to(DEV), fullgraph=True)
    assert re.search(r"test_compile_messages\.py:\d+ \(`positive = a\[a > 0\]", message), message
