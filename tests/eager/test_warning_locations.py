"""torch_tpu's warnings name the user's line (the op's call, the compiled function's call), not the file in
torch_tpu that raised them: the CPU fallback's pointed at torch_tpu/eager/op_path.py, the compiled graph's
op-by-op notice at torch_tpu/compile/__init__.py."""
import warnings

import pytest
import torch

import torch_tpu


@pytest.fixture
def cpu_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CPU_FALLBACK", "1")
    torch_tpu.reset_caches()  # (the fallback's warn-once set too)
    yield
    monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK")
    torch_tpu.reset_caches()


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, caught


def test_the_cpu_fallback_warning_names_the_users_line(cpu_fallback, eager_mode):
    x = torch.linspace(-2, 2, 8)
    line = _line_of_next_statement()
    got, caught = _caught(lambda: torch.special.bessel_j0(x.to("tpu")).cpu())
    ours = [w for w in caught if "has no tpu lowering; running it on the CPU" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert ours[0].filename == __file__ and ours[0].lineno == line, (ours[0].filename, ours[0].lineno)
    torch.testing.assert_close(got, torch.special.bessel_j0(x))


def test_the_compiled_graph_run_op_by_op_names_the_users_call(cpu_fallback):
    fn = torch.compile(lambda a: torch.special.bessel_j0(a) + 1, backend="tpu", dynamic=False)
    torch._dynamo.reset()
    x = torch.linspace(-2, 2, 8)
    line = _line_of_next_statement()
    got, caught = _caught(lambda: fn(x.to("tpu")).cpu())
    notices = [w for w in caught if "runs op by op" in str(w.message)]
    assert notices and all(w.filename == __file__ for w in notices), [(w.filename, w.lineno) for w in caught]
    assert notices[0].lineno == line
    torch.testing.assert_close(got, torch.special.bessel_j0(x) + 1)


def _line_of_next_statement() -> int:
    import sys

    return sys._getframe(1).f_lineno + 1
