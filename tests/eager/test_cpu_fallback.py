"""TORCH_TPU_CPU_FALLBACK=1 runs every op without a tpu lowering on the CPU, in every mode.

``FALLBACK`` is the whole list of OpInfos of torch's database that reach such an op, with the ops each
one falls back to (``bench/lane/sweep_fallbacks.py`` finds them: every OpInfo whose name the op table does not
lower runs on the tpu and the ops counted in ``stats()["cpu_fallback_ops"]`` are listed; sparse layouts,
which the tpu has no storage for, and complex32 are out of scope). Each one's first float32 samples run
on the tpu beside CPU torch, in strict and fused eager, and must match, with each fallback counted under
its op's name; without the setting each raises the error naming the op and the setting. Before, 3 of 4
ops tried failed with the setting on: a prim whose kernel calls back into the op (bessel_j0), an out=
kernel resizing its output (lstsq), a Scalar overload whose composite kernel passes a wrapped number
(chebyshev_polynomial_t(x, 2)).
"""
import warnings

import pytest
import torch
from torch.utils import _pytree as pytree

import torch_tpu

from tests.harness.counting import opinfo_db
from tests.harness.inputs import rand

pytest.importorskip("expecttest")  # common_methods_invocations imports it

# OpInfo name -> the ops it runs on the CPU (as stats()["cpu_fallback_ops"] names them)
FALLBACK = {
    "histogramdd": ("aten::_histogramdd_bin_edges", "aten::_histogramdd_from_bin_cts"),
    "grid_sampler_3d": ("aten::grid_sampler_3d",),
    "hash_tensor": ("aten::hash_tensor",),
    "_segment_reduce.lengths": ("aten::segment_reduce",),
    "_segment_reduce.offsets": ("aten::segment_reduce",),
    "linalg.eig": ("aten::linalg_eig",),
    "linalg.eigvals": ("aten::linalg_eig",),
    "linalg.ldl_factor": ("aten::linalg_ldl_factor_ex",),
    "linalg.ldl_factor_ex": ("aten::linalg_ldl_factor_ex",),
    "linalg.ldl_solve": ("aten::linalg_ldl_solve",),
    "linalg.lstsq": ("aten::linalg_lstsq.out",),
    "linalg.lstsq.grad_oriented": ("aten::linalg_lstsq.out",),
    "special.airy_ai": ("aten::special_airy_ai",),
    "special.bessel_j0": ("prims::bessel_j0",),
    "special.bessel_j1": ("prims::bessel_j1",),
    "special.bessel_y0": ("aten::special_bessel_y0",),
    "special.bessel_y1": ("aten::special_bessel_y1",),
    "special.modified_bessel_k0": ("aten::special_modified_bessel_k0",),
    "special.modified_bessel_k1": ("aten::special_modified_bessel_k1",),
    "special.scaled_modified_bessel_k0": ("aten::special_scaled_modified_bessel_k0",),
    "special.scaled_modified_bessel_k1": ("aten::special_scaled_modified_bessel_k1",),
    **{f"special.{kind}_polynomial_{v}": (f"aten::special_{kind}_polynomial_{v}",)
       for kind, variants in (("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw"), ("hermite", ("h", "he")),
                              ("laguerre", "l"), ("legendre", "p")) for v in variants},
}
SAMPLES = 3
_OPS = {(op.name + ("." + op.variant_test_name if op.variant_test_name else "")): op for op in opinfo_db()}


def test_the_list_names_opinfos_that_exist():
    assert len(FALLBACK) == 33 and not set(FALLBACK) - set(_OPS), set(FALLBACK) - set(_OPS)


def _dtype(op):
    return next(d for d in (torch.float32, torch.int64, torch.bool) if d in op.supported_dtypes("cpu"))


def _samples(op):
    out = []
    for sample in op.sample_inputs("cpu", _dtype(op), requires_grad=False):
        torch.manual_seed(0)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # not valid on CPU torch either
        out.append((sample, expected))
        if len(out) == SAMPLES:
            break
    return out


def _on_tpu(sample):
    move = lambda x: x.to("tpu") if isinstance(x, torch.Tensor) else x  # noqa: E731
    return (pytree.tree_map(move, sample.input), pytree.tree_map(move, sample.args),
            pytree.tree_map(move, sample.kwargs))


@pytest.fixture
def fallback_on(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CPU_FALLBACK", "1")
    torch_tpu.reset_caches()  # routes are decided once per op signature
    yield
    monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK")
    torch_tpu.reset_caches()


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_every_op_without_a_lowering_runs_on_the_cpu_and_is_counted_by_name(mode, fallback_on):
    failures = []
    with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, mode)):
        for name, ops in FALLBACK.items():
            op = _OPS[name]
            samples = _samples(op)
            assert samples, f"{name}: no sample runs on CPU torch"
            torch_tpu.reset_stats()
            for i, (sample, expected) in enumerate(samples):
                try:
                    inp, args, kwargs = _on_tpu(sample)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        torch.manual_seed(0)
                        got = op(inp, *args, **kwargs)
                    for t in pytree.tree_leaves(got):
                        if isinstance(t, torch.Tensor):
                            assert t.device.type == "tpu", f"a result on {t.device}"
                    got = pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, got)
                    torch.testing.assert_close(got, expected, equal_nan=True, atol=1e-5, rtol=1e-5)
                except Exception as exc:
                    failures.append(f"{name} sample {i}: {type(exc).__name__}: {str(exc)[:300]}")
            counted = torch_tpu.stats()["cpu_fallback_ops"]
            if not set(ops) <= set(counted) or torch_tpu.stats()["cpu_fallbacks"] != sum(counted.values()):
                failures.append(f"{name}: counted {counted}, expected {ops}")
    assert not failures, "\n".join(failures)


def test_without_the_setting_each_raises_naming_the_op(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK", raising=False)
    torch_tpu.reset_caches()
    for name in FALLBACK:
        sample, _ = _samples(_OPS[name])[0]
        inp, args, kwargs = _on_tpu(sample)
        with pytest.raises(NotImplementedError, match=r"has no tpu lowering.*TORCH_TPU_CPU_FALLBACK=1"):
            _OPS[name](inp, *args, **kwargs)


def test_compiled_graphs_with_such_ops_run_op_by_op(fallback_on):
    """torch.compile(backend="tpu") of a function calling ops without a lowering: the graph runs op by op
    (warned), those ops on the CPU; values as CPU torch's (it raised 'no tpu lowering')."""
    def f(x, a, b):
        return torch.special.bessel_j0(x * 2) + 1, torch.linalg.lstsq(a, b).solution * 2, \
            torch.special.chebyshev_polynomial_t(x, 3).sum()

    x, a, b = rand(6, seed=1), rand(5, 3, seed=2), rand(5, 2, seed=3)
    ref = f(x, a, b)
    torch_tpu.reset_stats()
    with pytest.warns(RuntimeWarning, match="no tpu lowering: TORCH_TPU_CPU_FALLBACK=1 runs it on the CPU"):
        got = torch.compile(f, backend="tpu")(x.to("tpu"), a.to("tpu"), b.to("tpu"))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r)
    assert {"prims::bessel_j0", "aten::linalg_lstsq.out"} <= set(torch_tpu.stats()["cpu_fallback_ops"])
