"""What a wide sweep of torch's OpInfo database checks beyond
``test_op_consistency.py`` (extra dtypes, every sample, non-contiguous inputs, fused mode, backward,
``error_inputs``), each case reduced to a small input and compared against CPU torch through
``differential`` (equal results and inputs afterwards, gradients included, or both raise) in the eager
modes and, where the op reaches compiled graphs, in ``torch.compile``. The sweep itself is
``bench/lane/sweep_opinfo.py``. All cases run in one crash-tolerant child process.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import per_device, rand, t
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]


def _ints(*shape, dtype=torch.int32, seed=0, low=-9, high=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def _cplx(*shape, seed=0, scale=3.0):
    return torch.complex(rand(*shape, seed=seed) * scale, rand(*shape, seed=seed + 7) * scale)


# ---------------------------------------------------------------------------------------------------
# wrong values


def _int_addmm_family(dtype):
    """Integer addmm/addmv/baddbmm/addbmm with float alpha/beta: torch converts them to the integer type
    first (0.6 -> 0, -1.5 -> -1); the tpu multiplied by the float values."""
    def run(bias2, m, n, bias3, b1, b2):
        out = []
        for beta, alpha in ((0.6, 0.2), (1.7, 2.9), (-1.5, 1), (2, 3)):
            out += [torch.addmm(bias2, m, n, beta=beta, alpha=alpha),
                    torch.addmv(bias2[0], m, n[:, 0], beta=beta, alpha=alpha),
                    torch.baddbmm(bias3, b1, b2, beta=beta, alpha=alpha),
                    torch.addbmm(bias2, b1, b2, beta=beta, alpha=alpha)]
        return out
    return lambda: D.check(run, _ints(4, 4, dtype=dtype), _ints(4, 3, dtype=dtype, seed=1),
                           _ints(3, 4, dtype=dtype, seed=2), _ints(2, 4, 4, dtype=dtype, seed=3),
                           _ints(2, 4, 3, dtype=dtype, seed=4), _ints(2, 3, 4, dtype=dtype, seed=5), modes=ALL)


WRONG_VALUE_CASES = {
    "int32_addmm_family_float_scalars": _int_addmm_family(torch.int32),
    "int16_addmm_family_float_scalars": _int_addmm_family(torch.int16),
    "uint8_addmm_family_float_scalars": lambda: D.check(
        lambda a, m, n: [torch.addmm(a, m, n, beta=0.6, alpha=2.5), torch.addmv(a[0], m, n[:, 0], beta=1.9)],
        _ints(3, 3, dtype=torch.uint8, low=0), _ints(3, 2, dtype=torch.uint8, seed=1, low=0, high=4),
        _ints(2, 3, dtype=torch.uint8, seed=2, low=0, high=4), modes=ALL),
    # vdot conjugates its first argument: the tpu computed dot's value for complex inputs
    "vdot_complex": lambda: D.check(lambda a, b: [torch.vdot(a, b), torch.vdot(b, a), torch.dot(a, b),
                                                  torch.linalg.vecdot(a[:1], b[:1]), torch.linalg.vecdot(a, b)],
                                    _cplx(5), _cplx(5, seed=3), modes=ALL),
    "vdot_complex_grad": lambda: D.check(
        lambda a, b: torch.autograd.grad(torch.vdot(a, b).real + torch.vdot(a, b).imag * 2, (a, b)),
        per_device(lambda d: _cplx(4).to(d).requires_grad_()),
        per_device(lambda d: _cplx(4, seed=5).to(d).requires_grad_()), modes=EAGER, atol=1e-5, rtol=1e-5),
    # complex logaddexp: torch's log1p(exp(min - max)) + max keeps the imaginary part unwrapped; the
    # principal log of jnp.logaddexp differed by 2 pi
    "logaddexp_complex": lambda: D.check(torch.logaddexp, _cplx(6, 5, scale=5.0), _cplx(6, 5, seed=2, scale=5.0),
                                         modes=ALL, atol=1e-5, rtol=1e-5),
    "logaddexp_complex_inf": lambda: D.check(
        torch.logaddexp, torch.tensor([complex(float("-inf"), 1.0), 1 + 1j, complex(float("nan"), 0.0)], dtype=torch.complex64),
        torch.tensor([complex(float("-inf"), 0.5), complex(float("-inf"), 0.0), 2 + 0j], dtype=torch.complex64), modes=EAGER),
    # as_strided_copy / as_strided_scatter read and write the *storage* of a view (offsets absolute)
    "as_strided_copy_of_view": lambda: D.check(
        lambda x: [torch.as_strided_copy(x.t()[1:], (2, 2), (1, 2)), torch.as_strided_copy(x[1:], (2, 3), (3, 1)),
                   torch.as_strided_copy(x.t(), (3,), (4,), 0)], rand(3, 4), modes=EAGER),
    "as_strided_scatter_of_view": lambda: D.check(
        lambda x, s: [torch.as_strided_scatter(x.t()[1:], s, (2, 2), (1, 2)),
                      torch.as_strided_scatter(x[1:], s, (2, 2), (4, 1), 0), torch.as_strided_scatter(x, s, (2, 2), (1, 4))],
        rand(3, 4), rand(2, 2, seed=1), modes=EAGER, check_stride=True),
    "as_strided_scatter_grad": lambda: D.check(
        lambda x, s: torch.autograd.grad((torch.as_strided_scatter(x, s, (2, 2), (1, 3), 1) *
                                          torch.arange(9.0, device=x.device).reshape(3, 3)).sum(), (x, s)),
        per_device(lambda d: rand(3, 3).to(d).requires_grad_()),
        per_device(lambda d: rand(2, 2, seed=1).to(d).requires_grad_()), modes=EAGER),
    # polygamma(n >= 2) at the poles 0, -1, -2 ...: CPU's zeta gives (-1)^(n+1) inf (the tpu: NaN/finite)
    "polygamma_poles": lambda: D.check(
        lambda x: [torch.polygamma(n, x) for n in (2, 3, 4)] + [torch.polygamma(2, x.float())],
        torch.tensor([-3, -1, 0, 1, 2, 5], dtype=torch.int8), modes=ALL),
    "polygamma_poles_bool": lambda: D.check(lambda x: torch.polygamma(2, x), torch.tensor([True, False]), modes=ALL),
    "logcumsumexp_complex": lambda: D.check(lambda z: [torch.logcumsumexp(z, 1), torch.logcumsumexp(z, 0)],
                                            _cplx(4, 5, scale=5.0), modes=ALL, atol=1e-5, rtol=1e-5),
    "index_add_bool": lambda: D.check(
        lambda x, i, s: [torch.index_add(x, 0, i, s), torch.index_add(x, 0, i, s, alpha=True)],
        torch.tensor([True, False, False, False]), torch.tensor([0, 2]), torch.tensor([True, True]), modes=ALL),
    # float64 resizes and attention computed their weights / scores in float32 (off by 1e-6)
    "interpolate_float64": lambda: D.check(
        lambda x: [F.interpolate(x, scale_factor=1.7, mode="bilinear"),
                   F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=True),
                   F.interpolate(x[:, :, 0], scale_factor=2.3, mode="linear"),
                   F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
                   F.interpolate(x, scale_factor=0.7, mode="bicubic", antialias=True)],
        rand(2, 3, 7, 9).double() * 100, modes=ALL),
    "sdpa_float64": lambda: D.check(
        lambda q, k, v, m: [F.scaled_dot_product_attention(q, k, v, is_causal=True),
                            F.scaled_dot_product_attention(q, k, v, attn_mask=m)],
        rand(2, 4, 3, 8).double(), rand(2, 4, 5, 8, seed=1).double(), rand(2, 4, 5, 8, seed=2).double(),
        rand(3, 5, seed=3).double(), modes=ALL),
    "sdpa_float64_grad": lambda: D.check(
        lambda q, k, v: torch.autograd.grad((F.scaled_dot_product_attention(q, k, v) *
                                             torch.linspace(-1, 1, 24, device=q.device).double().reshape(1, 3, 8)).sum(),
                                            (q, k, v)),
        *[per_device(lambda d, s=s: rand(1, 3, 8, seed=s).double().to(d).requires_grad_()) for s in range(3)],
        modes=EAGER),
}


def _uint8_bilinear():
    """(was a gap: the tpu rounded a float32 interpolation, one off in ~15% of pixels; now CPU's int16
    fixed-point passes)"""
    D.check(lambda x: [F.interpolate(x, scale_factor=1.7, mode="bilinear"),
                       F.interpolate(x, size=(4, 5), mode="bicubic", antialias=True)],
            (rand(1, 2, 7, 9, low=0, high=255)).to(torch.uint8), modes=EAGER)


# ---------------------------------------------------------------------------------------------------
# tpu raised where CPU works


TPU_RAISED_CASES = {
    # integer max pooling: reduce_window got an int64 init value for an int32/int16/int8/uint8 input
    "max_pool2d_int": lambda: D.check(
        lambda x: [F.max_pool2d(x, 3, 2, ceil_mode=True), F.max_pool2d(x, 2, return_indices=True),
                   F.max_pool2d(x.to(torch.uint8), 2, dilation=(1, 2)), F.max_pool2d(x.to(torch.int8), 3, 1, 1)],
        _ints(1, 2, 6, 7, dtype=torch.int16, low=-50, high=50), modes=ALL),
    "max_pool3d_int32": lambda: D.check(lambda x: F.max_pool3d(x, 2, return_indices=True),
                                        _ints(1, 2, 4, 4, 4), modes=ALL),
    # hardshrink/softshrink backward had no lowering (NotImplementedError)
    # bool accumulation (or / and): XLA's scatter refuses bool arithmetic
    "bool_accumulations": lambda: D.check(
        lambda b, i, s: [torch.scatter_add(b, 0, i, s), torch.scatter(b, 0, i, s, reduce="multiply"),
                         torch.scatter(b, 0, i, s, reduce="add"),
                         b.clone().index_put_((torch.tensor([1, 1], device=b.device),), s[0], accumulate=True),
                         b.clone().put_(torch.tensor([0, 5, 5], device=b.device), s[0], accumulate=True)]
        + [torch.scatter_reduce(b, 0, i, s, r) for r in ("sum", "prod", "amax")]
        + [torch.scatter_reduce(b, 0, i, s, "amin", include_self=False)]
        + [torch.index_reduce(b, 0, torch.tensor([1, 1], device=b.device), b, r) for r in ("prod", "amax")],
        torch.tensor([[True, False, False], [False, False, True]]), torch.tensor([[1, 0, 1]]),
        torch.tensor([[True, True, False]]), modes=ALL),
    # x.polygamma_(n): (self, n) reached the functional lowering as (n, self): "could not lower"
    "polygamma_inplace": lambda: D.check(
        lambda x: [x.clone().polygamma_(1), x.clone().polygamma_(3), x[1:].clone().polygamma_(0), x],
        torch.tensor([0.5, 1.5, 2.5, -0.5]), modes=EAGER, atol=1e-4, rtol=1e-4),  # (aot_eager cannot
    # functionalise polygamma_ either: torch's own limit in compiled graphs)
    # out= forms of data-dependent ops: "masked_select() got an unexpected keyword argument 'out'"
    "masked_select_out": lambda: D.check(
        lambda x: [torch.masked_select(x, x > 0, out=torch.empty(0, device=x.device)),
                   torch.masked_select(x, x > 1, out=torch.empty(7, device=x.device)),
                   torch.nonzero(x > 0, out=torch.empty(0, dtype=torch.long, device=x.device))], rand(3, 4),
        modes=EAGER),
    # index_fill's backward for a tensor value calls aten._unique (no lowering: NotImplementedError)
    "index_fill_tensor_value_grad": lambda: D.check(
        lambda a, v: torch.autograd.grad((torch.index_fill(a, 1, torch.tensor([0, 2, 2], device=a.device), v) *
                                          torch.arange(12.0, device=a.device).reshape(3, 4)).sum(), (a, v)),
        per_device(lambda d: rand(3, 4).to(d).requires_grad_()),
        per_device(lambda d: torch.tensor(2.0, device=d).requires_grad_()), modes=EAGER),
    "unique_private": lambda: D.check(lambda x: [torch._unique(x), torch._unique(x, return_inverse=True)],
                                      torch.tensor([3, 1, 3, 0]), modes=EAGER),
    "shrink_backward": lambda: D.check(
        lambda x: torch.autograd.grad((F.hardshrink(x, 0.5) * 2 + F.softshrink(x, 1.0) * 3 + F.hardshrink(x)).sum(), x),
        per_device(lambda d: torch.tensor([-2.0, -1.0, -0.5, -0.2, 0.0, 0.5, 0.7, 1.0, 3.0], device=d).requires_grad_()),
        modes=ALL),
}


# ---------------------------------------------------------------------------------------------------
# silent: CPU raises, the tpu returned a value


def _empty(x, dtype):
    return torch.empty(0, dtype=dtype, device=x.device)


_OUT_CALLS = {  # name: fn(x, wider_out_dtype)
    "index_select": lambda x, o: torch.index_select(x, 0, torch.tensor([0, 2], device=x.device), out=_empty(x, o)),
    "cummax": lambda x, o: torch.cummax(x, 1, out=(_empty(x, o), _empty(x, torch.long))),
    "cummin": lambda x, o: torch.cummin(x, 1, out=(_empty(x, o), _empty(x, torch.long))),
    "logcumsumexp": lambda x, o: torch.logcumsumexp(x, 1, out=_empty(x, o)),
    "log_sigmoid": lambda x, o: torch._C._nn.log_sigmoid(x, out=_empty(x, o)),
    "mode": lambda x, o: torch.mode(x, 1, out=(_empty(x, o), _empty(x, torch.long))),
    "median": lambda x, o: torch.median(x, 1, out=(_empty(x, o), _empty(x, torch.long))),
    "nanmedian": lambda x, o: torch.nanmedian(x, 1, out=(_empty(x, o), _empty(x, torch.long))),
    "batch_norm": lambda x, o: torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5,
                                                       out=(_empty(x, o), _empty(x, o), _empty(x, o))),
    "clamp": lambda x, o: torch.clamp(x, -1, 1, out=_empty(x, o)),
    "nll_loss": lambda x, o: torch._C._nn.nll_loss(x, torch.tensor([0, 1, 2, 1], device=x.device), out=_empty(x, o)),
    "searchsorted": lambda x, o: torch.searchsorted(x.sort(1).values, x, out=_empty(x, torch.int32)),
    "bucketize": lambda x, o: torch.bucketize(x, x[0].sort().values, out=_empty(x, torch.int32)),
}


def _out_call(name):
    return lambda x: _OUT_CALLS[name](x, torch.float64 if x.dtype == torch.float32 else torch.float32)


def _aminmax_out(x):
    return torch.aminmax(x, dim=0, out=(torch.empty(3, device=x.device), torch.empty(3, device=x.device,
                                                                                       dtype=torch.float64)))


SILENT_CASES = {
    "as_strided_copy_out_of_storage": lambda: D.check_raises(
        lambda x: torch.as_strided_copy(x, (2, 2), (200, 2)), rand(4, 4), modes=EAGER),
    "as_strided_scatter_out_of_storage": lambda: D.check_raises(
        lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (200, 200)), rand(4, 4), rand(2, 2), modes=EAGER),
    "as_strided_scatter_src_shape": lambda: D.check_raises(
        lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 2)), rand(4, 4), rand(3), modes=EAGER),
    "masked_scatter_uint8_mask": lambda: D.check_raises(
        lambda x, m, s: torch.masked_scatter(x, m, s), rand(4), torch.tensor([1, 0, 1, 0], dtype=torch.uint8),
        rand(4, seed=1), modes=ALL),
    "masked_scatter__uint8_mask": lambda: D.check_raises(
        lambda x, m, s: x.masked_scatter_(m, s), rand(4), torch.tensor([1, 0, 1, 0], dtype=torch.uint8),
        rand(4, seed=1), modes=EAGER),
    "complex_mixed_dtypes": lambda: D.check_raises(torch.complex, rand(3), rand(3).double(), modes=ALL),
    "polar_mixed_dtypes": lambda: D.check_raises(torch.polar, rand(3), rand(3).double(), modes=ALL),
    "complex_out_dtype": lambda: D.check_raises(
        lambda a, b: torch.complex(a, b, out=torch.empty(3, dtype=torch.complex64, device=a.device)),
        rand(3).double(), rand(3, seed=1).double(), modes=EAGER),
    "complex_out_dtype_ok": lambda: D.check(
        lambda a, b: torch.complex(a, b, out=torch.empty(3, dtype=torch.complex64, device=a.device)),
        rand(3), rand(3, seed=1), modes=EAGER),
    "aminmax_out_dtype": lambda: D.check_raises(_aminmax_out, rand(4, 3), modes=EAGER),
    # CPU's binary search compares by IEEE (a NaN in the sequence); jnp's in sort order
    "searchsorted_ieee_comparisons": lambda: D.check(
        lambda s, v: [torch.searchsorted(s[k], v, right=r) for k in range(len(s)) for r in (False, True)]
        + [torch.bucketize(v, s[0], right=True), torch.searchsorted(s[:2], v[None].expand(2, -1)),
           torch.searchsorted(s[:2, :0], v[None].expand(2, -1))],
        t([[0.0, 1.0, float("nan")], [-0.0, 0.0, 0.0], [float("nan")] * 3, [float("-inf"), 0.0, float("inf")]]),
        t(3.0, 0.5, float("nan"), -0.0, 0.0, 1.0, float("inf"), float("-inf")), modes=ALL, expect_raise=False),
    # reductions into a wider out=: CPU computes var/std in out's dtype and logsumexp's sum and log too
    "moments_into_wider_out": lambda: [D.check(
        lambda x: [torch.var(x, 1, out=_empty(x, o)), torch.std(x, -1, correction=0, keepdim=True, out=_empty(x, o)),
                   torch.var(x, [0], out=_empty(x, o)), torch.logsumexp(x, 1, out=_empty(x, o)),
                   torch.logsumexp(x, (0, 1), keepdim=True, out=_empty(x, o))],
        (rand(6, 300, seed=2) * 4).to(dt), modes=EAGER, expect_raise=False, atol=1e-5, rtol=1e-5)
        for dt, o in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64))],
    "logsumexp_into_wider_out_infinities": lambda: D.check(
        lambda x: [torch.logsumexp(x, 1, out=_empty(x, torch.float32)),
                   torch.logsumexp(x[:0], 1, out=_empty(x, torch.float32))],
        t([[1.0, float("inf"), 2.0], [float("-inf")] * 3, [float("nan"), 1.0, 0.0]], dtype=torch.float16),
        modes=EAGER, expect_raise=False),
    "var_all_half_into_float_out": lambda: D.check_raises(
        lambda x: torch.var(x, out=_empty(x, torch.float32)), rand(3, 4).half(), modes=EAGER),
    # out= of another dtype that CPU's kernels refuse (half/float/double/long inputs; the tpu cast into it)
    "out_dtype_refused_more": lambda: [D.check_raises(_out_call(name), rand(4, 5).to(dt), modes=EAGER)
                                       for name in _OUT_CALLS for dt in (torch.float16, torch.float32)],
    # CPU fills out= with ones in its own dtype when the base is 1, before any cast check
    "pow_of_one_out_any_dtype": lambda: [D.check(
        lambda e: torch.pow(base, e, out=torch.empty(3, dtype=dt, device=e.device)),
        t(0.0, float("nan"), -2.0, 5.0).view(2, 2), modes=EAGER, expect_raise=False)
        for base in (1, 1.0, 1 + 0j) for dt in (torch.uint8, torch.bool, torch.float16, torch.int64)],
    "pow_of_two_or_true_out_uint8": lambda: [D.check_raises(
        lambda e: torch.pow(base, e, out=torch.empty(4, dtype=torch.uint8, device=e.device)), rand(4),
        modes=EAGER) for base in (2.0, True)],
    "kthvalue_out_is_input": lambda: D.check_raises(
        lambda x: torch.kthvalue(x, 2, 0, out=(x, torch.zeros((), dtype=torch.long, device=x.device))),
        rand(5), modes=EAGER),
    "multinomial_int_probs": lambda: D.check_raises(lambda p: torch.multinomial(p, 2), torch.tensor([[1, 2]]),
                                                    modes=ALL),
    "scatter_reduce_bool_mean": lambda: D.check_raises(
        lambda b: torch.scatter_reduce(b, 0, torch.tensor([[1, 0, 1]], device=b.device), b[:1], "mean"),
        torch.tensor([[True, False, False], [False, False, True]]), modes=ALL),
    "index_reduce_bool_refused": lambda: [D.check_raises(
        lambda b: torch.index_reduce(b, 0, torch.tensor([1, 0], device=b.device), b, r, include_self=inc),
        torch.tensor([[True, False, False], [False, False, True]]), modes=EAGER)
        for r, inc in (("mean", True), ("amin", False))],
    "polygamma_inplace_int": lambda: D.check_raises(lambda x: x.polygamma_(1), torch.tensor([1, 2]), modes=EAGER),
    "masked_select_out_aliases_input": lambda: [D.check_raises(
        f, torch.tensor([1.0, 2.0, 3.0, -1.0]), modes=EAGER)
        for f in (lambda x: torch.masked_select(x, x > 1, out=x), lambda x: torch.masked_select(x, x > 1, out=x[2:]))],
    "masked_select_out_dtype": lambda: D.check_raises(
        lambda x: torch.masked_select(x, x > 0, out=torch.empty(0, dtype=torch.float64, device=x.device)),
        rand(3, 4), modes=EAGER),
    # index_add/index_reduce with a source of the wrong shape: the tpu broadcast it into the result
    "index_add_source_shape": lambda: D.check_raises(
        lambda x, i: torch.index_add(x, 0, i, torch.tensor([2.0, 4.0], device=x.device)), rand(3, 2),
        torch.tensor([0, 2]), modes=ALL),
    "index_add_source_0d": lambda: D.check_raises(
        lambda x, i: torch.index_add(x, 0, i, torch.ones((), device=x.device)), rand(2), torch.tensor([0]),
        modes=ALL),
    "index_add_source_dims": lambda: D.check_raises(
        lambda x: torch.index_add(x, 1, torch.tensor([0], device=x.device), torch.ones(3, device=x.device)),
        rand(3, 2), modes=EAGER),
    "index_reduce_source_shape": lambda: D.check_raises(
        lambda x, i: torch.index_reduce(x, 0, i, torch.ones(2, 3, device=x.device), "prod"), rand(3, 2),
        torch.tensor([0, 2]), modes=EAGER),
    "index_add_ok_shapes": lambda: D.check(
        lambda x, i: [torch.index_add(x, 0, i, torch.ones(2, 2, device=x.device)),
                      x.clone().index_add_(-1, i[:1], torch.ones(3, 1, device=x.device)),
                      torch.index_add(x[0, 0], 0, i[:1], torch.ones((), device=x.device)),
                      torch.index_reduce(x, 0, i, torch.ones(2, 2, device=x.device), "amax")],
        rand(3, 2), torch.tensor([0, 2]), modes=ALL),
}

# in-place ops whose result broadcasts to another shape than self: CPU refuses, the tpu wrote (or resized)
_INPLACE_BROADCAST = {
    "clamp_max_": lambda x, y: x.clamp_max_(y), "clamp_min_": lambda x, y: x.clamp_min_(y),
    "atan2_": lambda x, y: x.atan2_(y), "copysign_": lambda x, y: x.copysign_(y),
    "addr_0d": lambda x, y: x[0, 0].addr_(y, y), "addr_column": lambda x, y: x.addr_(y, y),
}
for _k, _f in _INPLACE_BROADCAST.items():
    SILENT_CASES[f"inplace_broadcast_{_k}"] = (lambda f: lambda: D.check_raises(
        f, rand(5, 1), rand(5, seed=1), modes=ALL))(_f)
SILENT_CASES["inplace_broadcast_bitwise_left_shift_"] = lambda: D.check_raises(
    lambda x, y: x.bitwise_left_shift_(y), _ints(5, 1, low=0, high=9), _ints(5, seed=1, low=0, high=4), modes=ALL)
SILENT_CASES["inplace_broadcast_intermediate_eager"] = lambda: D.check_raises(
    lambda x, y: (x * 2).clamp_max_(y), rand(5, 1), rand(5, seed=1), modes=EAGER)
SILENT_CASES["inplace_same_shape_ok"] = lambda: D.check(
    lambda x, y: [x.clone().clamp_max_(y[:1]), x.clone().squeeze_(), x.clone().unsqueeze_(0),
                  torch.ones(5, 5, device=x.device).addr_(y, y, beta=2), x.clone().resize_as_(y), x.clone().atan2_(x)],
    rand(5, 1), rand(5, seed=1), modes=ALL)

# out= tensors that are (or overlap) an input the CPU kernel refuses to alias: the tpu computed them
_I = torch.tensor([2, 1, 0])
_OUT_ALIAS = {
    "gather": lambda x, i: torch.gather(x, 0, i, out=x),
    "gather_index": lambda x, i: torch.gather(i, 0, i[:2], out=i[1:]),
    "index_select": lambda x, i: torch.index_select(x, 0, i, out=x),
    "take": lambda x, i: torch.take(x, i, out=x),
    "scatter_src": lambda x, i: torch.scatter(x.clone(), 0, i, x, out=x),
    "scatter_src_is_self": lambda x, i: torch.scatter(x, 0, i, x, out=x),
}
for _k, _f in _OUT_ALIAS.items():
    SILENT_CASES[f"out_aliases_{_k}"] = (lambda f: lambda: D.check_raises(f, rand(3), _I.clone(), modes=EAGER))(_f)
SILENT_CASES["out_aliases_allowed"] = lambda: D.check(
    lambda x, i: [torch.scatter(x, 0, i, torch.ones(3, device=x.device), out=x),
                  torch.scatter(x, 0, i, 2.0, reduce="add", out=x),
                  torch.gather(x, 0, i, out=torch.empty(3, device=x.device))], rand(3), _I.clone(), modes=EAGER)

_CONV_BAD = {
    "neg_padding": lambda x, w: F.conv2d(x, w, padding=-1),
    "zero_stride": lambda x, w: F.conv2d(x, w, stride=0),
    "neg_stride": lambda x, w: F.conv2d(x, w, stride=-1),
    "zero_dilation": lambda x, w: F.conv2d(x, w, dilation=0),
    "zero_groups": lambda x, w: F.conv2d(x, w, groups=0),
    "transposed_neg_padding": lambda x, w: F.conv_transpose2d(x, w, padding=-1),
    "transposed_neg_output_padding": lambda x, w: F.conv_transpose2d(x, w, output_padding=-1),
    "transposed_zero_stride": lambda x, w: F.conv_transpose2d(x, w, stride=0),
    "conv3d_neg_padding": lambda x, w: F.conv3d(x[None], w[None], padding=(-1, 0, 0)),
    "conv1d_neg_padding": lambda x, w: F.conv1d(x[0], w[0], padding=-1),
}
for _k, _f in _CONV_BAD.items():
    SILENT_CASES[f"conv_{_k}"] = (lambda f: lambda: D.check_raises(f, rand(1, 1, 6, 6), rand(1, 1, 2, 2, seed=1),
                                                                   modes=ALL))(_f)


ISOLATED_CASES = {}
ISOLATED_CASES.update({f"value:{k}": v for k, v in WRONG_VALUE_CASES.items()})
ISOLATED_CASES.update({f"silent:{k}": v for k, v in SILENT_CASES.items()})
ISOLATED_CASES.update({f"raised:{k}": v for k, v in TPU_RAISED_CASES.items()})
ISOLATED_CASES["value:uint8_bilinear"] = _uint8_bilinear
ISOLATED_CASES["raised:inplace_broadcast_intermediate_compiled"] = lambda: D.check_raises(
    lambda x, y: (x * 2).clamp_max_(y), rand(5, 1), rand(5, seed=1), modes=["compiled"])

# Open gaps: name -> D.Gap(reason, match), a strict xfail of the failure it expects.
GAPS = {}


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, GAPS, timeout_per_case=180)
