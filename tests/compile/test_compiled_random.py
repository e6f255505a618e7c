"""Every random op of torch's list (the "Random sampling" functions and in-place methods, the random
``nn.init`` initialisers and ``nn.functional`` ops) compiles with ``torch.compile(backend="tpu")`` and draws
from the distribution CPU torch draws from, as eager does.

In-place random ops (``uniform_``, ``exponential_``, ``log_normal_``, ``cauchy_``, ``geometric_``,
``nn.init.uniform_``) ran in eager modes but not compiled: AOTAutograd functionalises them into ``aten.uniform``
and alike, which the op table did not lower, and the error said "strict eager has the same op table".

Values differ from CPU's (another generator): each sample is compared by its statistics, with a fixed seed:
quantiles (scaled by the CPU sample's spread), mean and standard deviation where they exist, and the support
(bounds, integrality, distinctness).
"""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.errors import DeviceAssertError
from torch_tpu.ops import registry

N = 20000


def _ints_in(lo, hi):
    return lambda s: bool(((s >= lo) & (s < hi) & (s == s.round())).all())


def _in(lo, hi):
    return lambda s: bool(((s >= lo) & (s < hi)).all())


def _positive(s):
    return bool((s > 0).all())


def _rows_sum_to_one(s):
    return bool(torch.allclose(s.view(-1, 10).sum(1), torch.ones(N // 10, dtype=s.dtype), atol=1e-4))


def _orthonormal(s):
    q = s.view(100, 200).double()
    return bool(torch.allclose(q @ q.T, torch.eye(100, dtype=torch.float64), atol=1e-4))


def _permutation(s):
    return bool(torch.equal(s.sort().values, torch.arange(N, dtype=s.dtype)))


def _half_zero_per_column(s):
    return bool(((s.view(5000, 4) == 0).sum(0) == 2500).all())


# name -> (sample(x): x is zeros(N) float32 on the device, support check or None, kind): "C" continuous,
# "D" discrete (its quantiles fall on its values: compared by mean and deviation), "H" heavy-tailed (no mean)
CASES = {
    # Tensor's in-place sampling methods
    "uniform_": (lambda x: x.uniform_(-2.0, 3.0), _in(-2.0, 3.0), "C"),
    "normal_": (lambda x: x.normal_(1.0, 2.0), None, "C"),
    "exponential_": (lambda x: x.exponential_(2.0), _positive, "C"),
    "log_normal_": (lambda x: x.log_normal_(0.0, 0.5), _positive, "C"),
    "cauchy_": (lambda x: x.cauchy_(1.0, 2.0), None, "H"),
    "geometric_": (lambda x: x.geometric_(0.3), _ints_in(1, 10 ** 6), "D"),
    "geometric_ int64": (lambda x: x.long().geometric_(0.3).float(), _ints_in(1, 10 ** 6), "D"),
    "bernoulli_(p)": (lambda x: x.bernoulli_(0.3), _ints_in(0, 2), "D"),
    "bernoulli_(tensor)": (lambda x: x.bernoulli_(torch.linspace(0, 1, N, device=x.device)), _ints_in(0, 2), "D"),
    "random_ (aten)": (lambda x: torch.ops.aten.random_.to(x, 10), _ints_in(0, 10), "D"),
    # torch's sampling functions
    "rand": (lambda x: torch.rand(N, device=x.device), _in(0.0, 1.0), "C"),
    "randn": (lambda x: torch.randn(N, device=x.device), None, "C"),
    "randint": (lambda x: torch.randint(3, 9, (N,), device=x.device).float(), _ints_in(3, 9), "D"),
    "rand_like": (lambda x: torch.rand_like(x), _in(0.0, 1.0), "C"),
    "randn_like": (lambda x: torch.randn_like(x), None, "C"),
    "randint_like": (lambda x: torch.randint_like(x, 0, 5), _ints_in(0, 5), "D"),
    "randperm": (lambda x: torch.randperm(N, device=x.device).float(), _permutation, "C"),
    "bernoulli": (lambda x: torch.bernoulli(torch.full_like(x, 0.7)), _ints_in(0, 2), "D"),
    "multinomial": (lambda x: torch.multinomial(torch.arange(1.0, 11.0, device=x.device), N, replacement=True
                                                ).float(), _ints_in(0, 10), "D"),
    "normal(tensor, tensor)": (lambda x: torch.normal(x + 1.0, x + 2.0), None, "C"),
    "normal(tensor, float)": (lambda x: torch.normal(x - 1.0, 0.5), None, "C"),
    "normal(float, tensor)": (lambda x: torch.normal(3.0, x + 0.5), None, "C"),
    "normal(float, float, size)": (lambda x: torch.normal(-1.0, 3.0, (N,), device=x.device), None, "C"),
    "poisson": (lambda x: torch.poisson(x + 3.0), _ints_in(0, 10 ** 6), "D"),
    # nn.functional
    "dropout": (lambda x: F.dropout(x + 1.0, 0.4, training=True), None, "D"),
    "alpha_dropout": (lambda x: F.alpha_dropout(x + 1.0, 0.4, training=True), None, "D"),
    "feature_alpha_dropout": (lambda x: F.feature_alpha_dropout(x.view(-1, 10, 1) + 1.0, 0.4, training=True
                                                                ).reshape(-1), None, "D"),
    "rrelu": (lambda x: F.rrelu(x - 1.0, 0.1, 0.3, training=True), None, "C"),
    "gumbel_softmax": (lambda x: F.gumbel_softmax(x.view(-1, 10), tau=0.5).reshape(-1), _rows_sum_to_one, "C"),
    # nn.init
    "init.uniform_": (lambda x: torch.nn.init.uniform_(x, -1.0, 1.0), _in(-1.0, 1.0), "C"),
    "init.normal_": (lambda x: torch.nn.init.normal_(x, 0.5, 2.0), None, "C"),
    "init.xavier_uniform_": (lambda x: torch.nn.init.xavier_uniform_(x.view(100, 200)).reshape(-1), None, "C"),
    "init.xavier_normal_": (lambda x: torch.nn.init.xavier_normal_(x.view(100, 200)).reshape(-1), None, "C"),
    "init.kaiming_uniform_": (lambda x: torch.nn.init.kaiming_uniform_(x.view(100, 200)).reshape(-1), None, "C"),
    "init.kaiming_normal_": (lambda x: torch.nn.init.kaiming_normal_(x.view(100, 200)).reshape(-1), None, "C"),
    "init.orthogonal_": (lambda x: torch.nn.init.orthogonal_(x.view(100, 200)).reshape(-1), _orthonormal, "C"),
    "init.sparse_": (lambda x: torch.nn.init.sparse_(x.view(5000, 4), 0.5).reshape(-1), _half_zero_per_column,
                     "D"),
}
# dynamo itself refuses these in a full graph (on CPU too): compiled with a graph break around them
GRAPH_BREAK_CASES = {
    "random_(from, to)": (lambda x: x.random_(0, 10), _ints_in(0, 10), "D"),
    "random_(to)": (lambda x: x.random_(7), _ints_in(0, 7), "D"),
    "random_() int16": (lambda x: x.to(torch.int16).random_().float(), _ints_in(0, 2 ** 15), "D"),
    "init.trunc_normal_": (lambda x: torch.nn.init.trunc_normal_(x, 0.0, 1.0, -1.5, 2.0), _in(-1.5, 2.0), "C"),
}
QUANTILES = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9], dtype=torch.float64)


def _compare(name, got, want, support, kind):
    got, want = got.detach().cpu().double().reshape(-1), want.detach().double().reshape(-1)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)}, CPU {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite samples"
    if support is not None:
        assert support(got), f"{name}: samples outside the distribution's support: {got[:8].tolist()}"
    if kind != "D":
        qg, qw = torch.quantile(got, QUANTILES), torch.quantile(want, QUANTILES)
        spread = float(qw[-1] - qw[0])
        assert torch.allclose(qg, qw, atol=0.04 * spread), f"{name}: quantiles {qg.tolist()}, CPU {qw.tolist()}"
    if kind != "H":  # a Cauchy sample has no mean
        sd = float(want.std())
        assert abs(float(got.mean() - want.mean())) <= 6 * sd / N ** 0.5 + 1e-6, \
            f"{name}: mean {float(got.mean())}, CPU {float(want.mean())}"
        assert abs(float(got.std()) - sd) <= 0.05 * sd + 1e-6, f"{name}: std {float(got.std())}, CPU {sd}"


def _samples(cases, device, run=None):
    torch.manual_seed(0)
    x = torch.zeros(N, device=device)
    return run(x) if run is not None else [fn(x.clone()) for fn, _, _ in cases.values()]


def _check_all(cases, got):
    want = _samples(cases, "cpu")
    for (name, (_, support, kind)), g, w in zip(cases.items(), got, want):
        _compare(name, g, w, support, kind)


def test_every_random_op_compiles_in_one_graph_with_cpus_distribution():
    torch._dynamo.reset()
    fns = [fn for fn, _, _ in CASES.values()]
    compiled = torch.compile(lambda x: [fn(x.clone()) for fn in fns], backend="tpu", fullgraph=True,
                             dynamic=False)
    _check_all(CASES, _samples(CASES, "tpu", compiled))


def test_every_random_op_in_eager_has_cpus_distribution():
    cases = {**CASES, **GRAPH_BREAK_CASES}
    _check_all(cases, [s.cpu() for s in _samples(cases, "tpu")])


def test_random_ops_dynamo_refuses_in_a_full_graph_compile_around_a_break():
    torch._dynamo.reset()
    fns = [fn for fn, _, _ in GRAPH_BREAK_CASES.values()]
    compiled = torch.compile(lambda x: [fn(x.clone() * 1) for fn in fns], backend="tpu", dynamic=False)
    _check_all(GRAPH_BREAK_CASES, _samples(GRAPH_BREAK_CASES, "tpu", compiled))


def test_every_lowered_in_place_random_op_lowers_its_functional_form():
    """A compiled graph holds the functional form of an in-place op: eager and compiled share one lowering."""
    missing = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not name.endswith("_") or not hasattr(packet, "overloads"):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.nondeterministic_seeded in op.tags and registry.lookup(op) is not None:
                functional = registry.functional_variant(op)
                if functional is not None and registry.lookup(functional) is None:
                    missing.append(f"{op} -> {functional}")
    assert not missing, missing


def test_arguments_cpu_refuses_are_refused_compiled():
    for fn, match in [(lambda x: x.uniform_(2.0, 1.0), r"from=2(\.0)? > to=1"),
                      (lambda x: x.bernoulli_(1.5), r"p to be in \[0, 1\]"),
                      (lambda x: x.geometric_(1.5), r"p to be in \(0, 1\)"),
                      (lambda x: x.cauchy_(0.0, -1.0), "sigma > 0.0")]:
        with pytest.raises(RuntimeError, match=match):
            fn(torch.zeros(4))  # CPU torch refuses it
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match=match):  # (dynamo's wrappers of CPU's RuntimeError are ones too)
            torch.compile(fn, backend="tpu", dynamic=False)(torch.zeros(4, device="tpu"))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_negative_std_tensor_raises_like_cpu(compiled):
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        torch.normal(torch.zeros(4), -torch.ones(4))
    torch._dynamo.reset()
    fn = lambda m, s: torch.normal(m, s)  # noqa: E731
    fn = torch.compile(fn, backend="tpu", dynamic=False) if compiled else fn
    with pytest.raises(DeviceAssertError, match="normal expects all elements of std >= 0.0"):
        fn(torch.zeros(4, device="tpu"), -torch.ones(4, device="tpu")).cpu()


@pytest.mark.parametrize("fallback", ["0", "1"])
def test_an_op_without_lowering_in_a_compiled_graph(fallback, monkeypatch):
    """Without the CPU fallback the error says strict eager has no lowering either (it used to claim the
    same op table also for ops eager runs); with it, the graph runs op by op and computes CPU's value."""
    monkeypatch.setenv("TORCH_TPU_CPU_FALLBACK", fallback)
    torch_tpu.reset_caches()
    try:
        torch._dynamo.reset()
        fn = torch.compile(lambda a: torch.linalg.eigvals(a).real, backend="tpu", fullgraph=True, dynamic=False)
        a = torch.tensor([[2.0, 1.0], [0.5, 3.0]])
        if fallback == "0":
            with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                               match="aten.linalg_eig.default: strict eager has no lowering for it either"):
                fn(a.to("tpu"))
        else:
            with pytest.warns(UserWarning):
                got = fn(a.to("tpu")).cpu()
            torch.testing.assert_close(got.sort().values, torch.linalg.eigvals(a).real.sort().values)
    finally:
        monkeypatch.delenv("TORCH_TPU_CPU_FALLBACK")
        torch_tpu.reset_caches()
