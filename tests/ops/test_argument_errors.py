"""Argument validation and error clarity.

Every case is an argument CPU torch refuses (or a corner CPU answers in a defined way); the tpu must
refuse it with a clear Python exception, or answer the same. Random ops are compared by what CPU
guarantees (range, support), not by value.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.compare import read
from tests.harness.inputs import DEV

pytestmark = pytest.mark.usefixtures("watchdog")

A = torch.arange(6, dtype=torch.float32).reshape(2, 3)
B = torch.arange(6, dtype=torch.float32).reshape(3, 2)
I = torch.arange(6).reshape(2, 3)
BO = torch.tensor([True, False, True])
E = torch.zeros(0, 3)
Z0 = torch.tensor(2.5)
B = torch.tensor([[True, False], [True, True]])

# name -> (fn, args); devices of extra tensors follow the first argument
CASES = {
    # random ops with bad arguments
    "randint_high_lt_low": (lambda x: torch.randint(5, 3, (3,), device=x.device), (A,)),
    "randint_high_eq_low": (lambda x: torch.randint(3, 3, (3,), device=x.device), (A,)),
    "randint_like_bad": (lambda x: torch.randint_like(x, 5, 3), (A,)),
    "random_from_to_bad": (lambda x: x.clone().random_(5, 3), (A,)),
    "uniform_bad_range": (lambda x: x.clone().uniform_(2, 1), (A,)),
    "normal_neg_std": (lambda x: x.clone().normal_(0, -1), (A,)),
    "bernoulli_p_out_of_range": (lambda x: torch.bernoulli(torch.full_like(x, 1.5)), (A,)),
    "bernoulli_p_neg": (lambda x: x.clone().bernoulli_(-0.5), (A,)),
    "multinomial_zero_probs": (lambda x: torch.multinomial(torch.zeros(4, device=x.device), 1), (A,)),
    "multinomial_negative_prob": (lambda x: torch.multinomial(torch.tensor([0.5, -0.1, 0.6], device=x.device), 1),
                                  (A,)),
    "multinomial_nan_prob": (lambda x: torch.multinomial(torch.tensor([0.5, float("nan")], device=x.device), 1), (A,)),
    "multinomial_inf_prob": (lambda x: torch.multinomial(torch.tensor([0.5, float("inf")], device=x.device), 1), (A,)),
    "multinomial_too_many": (lambda x: torch.multinomial(torch.ones(3, device=x.device), 4), (A,)),
    "multinomial_zero_samples": (lambda x: torch.multinomial(torch.ones(3, device=x.device), 0), (A,)),
    "randperm_negative": (lambda x: torch.randperm(-1, device=x.device), (A,)),
    "dropout_p_gt_1": (lambda x: F.dropout(x, p=1.5), (A,)),
    # dtype mismatches CPU refuses
    "mm_f32_f64": (lambda a, b: a @ b, (A, B.double())),
    "mm_f32_bf16": (lambda a, b: a @ b, (A, B.bfloat16())),
    "mm_int_float": (lambda a, b: a @ b, (I, B)),
    "bmm_dtype": (lambda a, b: torch.bmm(a[None], b[None]), (A, B.double())),
    "linear_dtype": (lambda a, b: F.linear(a, b.T.double()), (A, B)),
    "addmm_dtype": (lambda a, b: torch.addmm(torch.zeros(2, 2, dtype=torch.float64, device=a.device), a, b), (A, B)),
    "dot_dtype": (lambda a, b: torch.dot(a[0], b[:, 0].double()), (A, B)),
    "conv_dtype": (lambda a: F.conv1d(a[None], torch.ones(1, 2, 2, dtype=torch.float64, device=a.device)), (A,)),
    "lerp_dtype": (lambda a: torch.lerp(a, a.double(), 0.5), (A,)),
    "addcmul_int_float_value": (lambda a: torch.addcmul(a.long(), a.long(), a.long(), value=0.5), (A,)),
    "index_put_dtype": (lambda a: a.clone().index_put_((torch.tensor([0], device=a.device),),
                                                       torch.ones(3, dtype=torch.float64, device=a.device)), (A,)),
    "masked_fill_float_mask": (lambda a: a.masked_fill(a.clone(), 0.0), (A,)),
    "masked_fill_multi_value": (lambda a: a.masked_fill(a > 1, torch.ones(2, device=a.device)), (A,)),
    "where_cond_float": (lambda a: torch.where(a, a, a), (A,)),
    # in-place results that cannot be cast
    "int_add_float_": (lambda i: i.clone().add_(1.5), (I,)),
    "int_mul_float_tensor_": (lambda i, a: i.clone().mul_(a), (I, A)),
    "int_div_": (lambda i: i.clone().div_(2), (I,)),
    "bool_add_int_": (lambda b: b.clone().add_(2), (BO,)),
    "float_to_bool_out": (lambda a: torch.add(a, a, out=torch.empty(2, 3, dtype=torch.bool, device=a.device)), (A,)),
    "out_wrong_dtype": (lambda a: torch.add(a, a, out=torch.empty(2, 3, dtype=torch.int64, device=a.device)), (A,)),
    "inplace_broadcast_self": (lambda a: a[0].clone().add_(a), (A,)),
    "copy_shape_mismatch": (lambda a: a.clone().copy_(torch.ones(3, 2, device=a.device)), (A,)),
    "copy_broadcast": (lambda a: a.clone().copy_(torch.ones(3, device=a.device)), (A,)),
    # ops CPU refuses on a dtype
    "bool_neg": (lambda b: -b, (BO,)),
    "bool_sub": (lambda b: b - b, (BO,)),
    "float_bitwise_not": (lambda a: ~a, (A,)),
    "float_and": (lambda a: a & a, (A,)),
    "float_lshift": (lambda a: a << 1, (A,)),
    "int_div_zero": (lambda i: i // 0, (I,)),
    "int_floordiv_zero_tensor": (lambda i: i // torch.zeros_like(i), (I,)),
    "int_remainder_zero": (lambda i: i % 0, (I,)),
    "int_fmod_zero": (lambda i: torch.fmod(i, 0), (I,)),
    "int_true_div_zero": (lambda i: i / 0, (I,)),
    "float_div_zero": (lambda a: a / 0, (A,)),
    "float_floordiv_zero": (lambda a: a // 0.0, (A,)),
    "complex_max": (lambda a: torch.complex(a, a).max(), (A,)),
    "complex_lt": (lambda a: torch.complex(a, a) < 1, (A,)),
    "one_hot_float": (lambda a: F.one_hot(a), (A,)),
    "one_hot_negative_classes": (lambda i: F.one_hot(i, num_classes=-2), (I,)),
    "one_hot_too_few_classes": (lambda i: F.one_hot(i, num_classes=3), (I,)),
    "nll_loss_float_target": (lambda a: F.nll_loss(a, torch.zeros(2, device=a.device)), (A,)),
    "cross_entropy_weight_size": (lambda a: F.cross_entropy(a, torch.tensor([0, 1], device=a.device),
                                                            weight=torch.ones(5, device=a.device)), (A,)),
    "nll_loss_weight_size": (lambda a: F.nll_loss(a, torch.tensor([0, 1], device=a.device),
                                                  weight=torch.ones(5, device=a.device)), (A,)),
    "nll_loss2d_weight_size": (lambda a: F.nll_loss(a.reshape(1, 2, 3, 1).expand(2, 2, 3, 4), torch.zeros(
        2, 3, 4, dtype=torch.long, device=a.device), weight=torch.ones(5, device=a.device)), (A,)),
    "cross_entropy_batch_mismatch": (lambda a: F.cross_entropy(a, torch.tensor([0, 1, 2], device=a.device)), (A,)),
    "embedding_float_idx": (lambda a: F.embedding(a, a), (A,)),
    "sqrt_int": (lambda i: torch.sqrt(i), (I,)),
    "pow_bool": (lambda b: b ** 2, (BO,)),
    # shapes CPU refuses
    "mm_shape": (lambda a: a @ a, (A,)),
    "matmul_1d_mismatch": (lambda a: torch.matmul(a[0], a[0, :2]), (A,)),
    "bmm_batch": (lambda a: torch.bmm(a.expand(2, 2, 3), a.T.expand(3, 3, 2)), (A,)),
    "cat_rank": (lambda a: torch.cat([a, a[0]]), (A,)),
    "cat_shape": (lambda a: torch.cat([a, a.T]), (A,)),
    "cat_empty_list": (lambda a: torch.cat([]), (A,)),
    "cat_legacy_empty": (lambda a: torch.cat([a, torch.empty(0, device=a.device)]), (A,)),
    "stack_shape": (lambda a: torch.stack([a, a.T]), (A,)),
    "reshape_bad": (lambda a: a.reshape(4, 2), (A,)),
    "reshape_two_minus_one": (lambda a: a.reshape(-1, -1), (A,)),
    "view_noncontig": (lambda a: a.T.view(6), (A,)),
    "view_dtype_bad_size": (lambda a: a.view(torch.float64), (A,)),
    "expand_bad": (lambda a: a.expand(3, 3), (A,)),
    "expand_fewer_dims": (lambda a: a.expand(3), (A,)),
    "repeat_fewer_dims": (lambda a: a.repeat(2), (A,)),
    "permute_dup": (lambda a: a.permute(0, 0), (A,)),
    "transpose_dim": (lambda a: a.transpose(0, 2), (A,)),
    "sum_dim": (lambda a: a.sum(5), (A,)),
    "softmax_dim": (lambda a: a.softmax(2), (A,)),
    "squeeze_dim": (lambda a: a.squeeze(3), (A,)),
    "unflatten_bad": (lambda a: a.unflatten(1, (2, 2)), (A,)),
    "chunk_zero": (lambda a: a.chunk(0), (A,)),
    "split_zero": (lambda a: a.split(0), (A,)),
    "topk_too_big": (lambda a: a.topk(4), (A,)),
    "kthvalue_zero": (lambda a: a.kthvalue(0), (A,)),
    "kthvalue_too_big": (lambda a: a.kthvalue(4), (A,)),
    "tril_1d": (lambda a: a[0].tril(), (A,)),
    "linear_shape": (lambda a: F.linear(a, torch.ones(2, 2, device=a.device)), (A,)),
    "layer_norm_shape": (lambda a: F.layer_norm(a, (2,)), (A,)),
    "group_norm_groups": (lambda a: F.group_norm(a.reshape(1, 6, 1), 4), (A,)),
    "conv2d_channels": (lambda a: F.conv2d(a[None, None], torch.ones(1, 2, 1, 1, device=a.device)), (A,)),
    "conv2d_kernel_too_big": (lambda a: F.conv2d(a[None, None], torch.ones(1, 1, 3, 3, device=a.device)), (A,)),
    "avg_pool_kernel_too_big": (lambda a: F.avg_pool2d(a[None, None], 3), (A,)),
    "interpolate_zero_size": (lambda a: F.interpolate(a[None, None], size=(0, 2)), (A,)),
    "pad_negative_too_much": (lambda a: F.pad(a, (-2, -2)), (A,)),
    "pad_reflect_too_big": (lambda a: F.pad(a[None], (3, 3), mode="reflect"), (A,)),
    "where_shapes": (lambda a: torch.where(a > 0, a, a[:, :2]), (A,)),
    "broadcast_mismatch": (lambda a: a + a[:, :2], (A,)),
    "sdpa_shapes": (lambda a: F.scaled_dot_product_attention(a[None], a[None], a[None, :, :2]), (A,)),
    "item_many": (lambda a: a.item(), (A,)),
    "item_empty": (lambda a: a.item(), (E,)),
    "bool_ambiguous": (lambda a: bool(a), (A,)),
    "int_of_many": (lambda a: int(a), (A,)),
    # negative and absurd sizes (family 13: must not say 'integer multiplication overflow')
    "zeros_negative": (lambda a: torch.zeros(-1, device=a.device), (A,)),
    "empty_negative": (lambda a: torch.empty(2, -3, device=a.device), (A,)),
    "full_negative": (lambda a: torch.full((-1,), 1.0, device=a.device), (A,)),
    "randn_negative": (lambda a: torch.randn(-2, device=a.device), (A,)),
    "ones_like_then_view_negative": (lambda a: a.view(-2, 3), (A,)),
    "new_zeros_negative": (lambda a: a.new_zeros((3, -1)), (A,)),
    "eye_negative": (lambda a: torch.eye(-1, device=a.device), (A,)),
    "arange_wrong_direction": (lambda a: torch.arange(0, 10, -1, device=a.device), (A,)),
    "arange_zero_step": (lambda a: torch.arange(0, 1, 0, device=a.device), (A,)),
    "arange_nan": (lambda a: torch.arange(0, float("nan"), device=a.device), (A,)),
    "arange_inf": (lambda a: torch.arange(0, float("inf"), device=a.device), (A,)),
    "linspace_negative_steps": (lambda a: torch.linspace(0, 1, -1, device=a.device), (A,)),
    "repeat_negative": (lambda a: a.repeat(-1, 1), (A,)),
    "repeat_interleave_negative": (lambda a: a.repeat_interleave(torch.tensor([1, -1], device=a.device), dim=0), (A,)),
    "huge_size": (lambda a: torch.empty(2 ** 62, 4, device=a.device), (A,)),
    "tril_indices_negative": (lambda a: torch.tril_indices(-1, 3, device=a.device), (A,)),
    # empty inputs to reductions CPU refuses (family 13: median of empty)
    "median_empty": (lambda e: e.reshape(-1).median(), (E,)),
    "median_dim_empty": (lambda e: e.median(0), (E,)),
    "max_empty": (lambda e: e.max(), (E,)),
    "min_dim_empty": (lambda e: e.min(0), (E,)),
    "argmax_empty": (lambda e: e.argmax(), (E,)),
    "amax_empty": (lambda e: e.amax(0), (E,)),
    "kthvalue_empty": (lambda e: e.kthvalue(1, 0), (E,)),
    # (each of its own class on CPU: IndexError for an empty dim, RuntimeError with no dim)
    "max_dim_empty_negative": (lambda e: e.max(-2), (E,)),
    "argmin_empty": (lambda e: e.argmin(), (E,)),
    "argmin_dim_empty": (lambda e: e.argmin(0), (E,)),
    "amin_empty_negative": (lambda e: e.amin((-2, 1)), (E,)),
    "amax_all_empty": (lambda e: e.amax(), (E,)),
    "aminmax_empty": (lambda e: torch.aminmax(e), (E,)),
    "aminmax_dim_empty": (lambda e: torch.aminmax(e, dim=0), (E,)),
    "topk_empty": (lambda e: e.topk(1, 0), (E,)),
    "mode_empty": (lambda e: e.mode(0), (E,)),
    "prod_empty_ok": (lambda e: e.prod(0), (E,)),
    "sum_empty_ok": (lambda e: e.sum(), (E,)),
    "mean_empty_nan": (lambda e: e.mean(), (E,)),
    "std_one_element": (lambda a: a[0, :1].std(), (A,)),
    "var_empty": (lambda e: e.var(0), (E,)),
    "logsumexp_empty": (lambda e: e.logsumexp(0), (E,)),
    "softmax_empty": (lambda e: e.softmax(0), (E,)),
    "cumsum_empty": (lambda e: e.cumsum(0), (E,)),
    "sort_empty": (lambda e: e.sort(0), (E,)),
    "nonzero_empty": (lambda e: e.nonzero(), (E,)),
    "unique_empty": (lambda e: torch.unique(e), (E,)),
    "matmul_empty_inner": (lambda e: e.T @ e, (E,)),
    "matmul_empty_k": (lambda a: a[:, :0] @ a.T[:0], (A,)),
    "cat_with_empty": (lambda e: torch.cat([e, e]), (E,)),
    "median_0d": (lambda z: z.median(), (Z0,)),
    "argmax_0d": (lambda z: z.argmax(), (Z0,)),
    "sort_0d": (lambda z: z.sort(), (Z0,)),
    "topk_0d": (lambda z: z.topk(1), (Z0,)),
    "cumsum_0d": (lambda z: z.cumsum(0), (Z0,)),
    "softmax_0d": (lambda z: z.softmax(0), (Z0,)),
    # an output size of 0: an empty result on CPU (the lowerings divided by it)
    "adaptive_avg_pool_to_zero": (lambda a: F.adaptive_avg_pool2d(a[None].expand(2, 2, 3), (0, 2)), (A,)),
    "adaptive_max_pool_to_zero": (lambda a: F.adaptive_max_pool2d(a[None].expand(2, 2, 3), (1, 0)), (A,)),
    "adaptive_avg_pool1d_to_zero": (lambda a: F.adaptive_avg_pool1d(a, 0), (A,)),
    # matrix products of bools: CPU and CUDA have no kernel (the tpu computed them)
    **{f"bool_{name}": (fn, (B,)) for name, fn in {
        "mm": lambda b: b @ b, "mv": lambda b: b @ b[0], "dot": lambda b: b[0] @ b[1], "bmm": lambda b: b[None] @ b[None],
        "addmm": lambda b: torch.addmm(b, b, b), "linear": lambda b: F.linear(b, b),
        "baddbmm": lambda b: torch.baddbmm(b[None], b[None], b[None]), "vdot": lambda b: torch.vdot(b[0], b[1])}.items()},
    "transpose_0d": (lambda z: z.t(), (Z0,)),
    "index_0d": (lambda z: z[0], (Z0,)),
    "unbind_0d": (lambda z: z.unbind(), (Z0,)),
    "sum_dim_0d": (lambda z: z.sum(0), (Z0,)),
    "sum_dim1_0d": (lambda z: z.sum(1), (Z0,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validation(eager_mode, case):
    fn, args = CASES[case]
    D.check(fn, *args)


NEGATIVE_SIZE_MSG = r"(?i)negative|invalid|must be|non-negative|size"


@pytest.mark.parametrize("case", ["zeros_negative", "empty_negative", "full_negative", "randn_negative",
                                  "new_zeros_negative", "eye_negative"])
def test_negative_size_message(eager_mode, case):
    fn, args = CASES[case]
    D.check_raises(fn, *args, match=NEGATIVE_SIZE_MSG)


def test_negative_size_not_overflow(eager_mode):
    """The message must say what is wrong (negative size), not 'integer multiplication overflow'."""
    with pytest.raises(RuntimeError, match="non-negative") as info:  # (CPU's class and words)
        read(torch.zeros(-1, 2, device=DEV))
    assert "overflow" not in str(info.value).lower(), f"[unclear error] {info.value}"


def test_randint_high_lt_low_raises(eager_mode):
    D.check_raises(lambda x: torch.randint(5, 3, (3,), device=x.device), A)


@pytest.mark.parametrize("probs", [[0.0, 0.0, 0.0], [0.5, -0.1, 0.6]], ids=["zeros", "negative"])
def test_multinomial_bad_probs_raise(eager_mode, probs):
    D.check_raises(lambda x: torch.multinomial(torch.tensor(probs, device=x.device), 1), A)


def test_matmul_f32_f64_raises(eager_mode):
    D.check_raises(lambda a, b: a @ b, A, B.double())


# random ops: range and support only
RANDOM = {
    "randint": lambda d: torch.randint(3, 7, (200,), device=d),
    "randint_neg": lambda d: torch.randint(-5, -2, (200,), device=d),
    "randint_uint8": lambda d: torch.randint(0, 256, (200,), dtype=torch.uint8, device=d),
    "randint_int8_full": lambda d: torch.randint(-128, 128, (200,), dtype=torch.int8, device=d),
    "random_bool": lambda d: torch.empty(200, dtype=torch.bool, device=d).random_(),
    "random_to": lambda d: torch.empty(200, device=d).random_(5),
    "random_uint8": lambda d: torch.empty(200, dtype=torch.uint8, device=d).random_(),
    "multinomial_support": lambda d: torch.multinomial(torch.tensor([0.0, 1.0, 0.0, 2.0], device=d), 200,
                                                       replacement=True),
    "multinomial_no_replacement": lambda d: torch.multinomial(torch.tensor([0.0, 1.0, 0.0, 2.0], device=d), 2),
    "bernoulli_01": lambda d: torch.bernoulli(torch.tensor([0.0, 1.0] * 100, device=d)),
    "rand_range": lambda d: torch.rand(200, device=d),
    "rand_bf16": lambda d: torch.rand(200, dtype=torch.bfloat16, device=d),
    "randperm": lambda d: torch.randperm(7, device=d).sort().values,
    "uniform_range": lambda d: torch.empty(200, device=d).uniform_(-3, -2),
    "exponential_pos": lambda d: torch.empty(200, device=d).exponential_(),
    "dropout_scale": lambda d: torch.unique(F.dropout(torch.ones(200, device=d), 0.5)),
}

SUPPORT = {
    "randint": lambda v: ((v >= 3) & (v < 7)).all(),
    "randint_neg": lambda v: ((v >= -5) & (v < -2)).all(),
    "randint_uint8": lambda v: v.dtype == torch.uint8,
    "randint_int8_full": lambda v: v.dtype == torch.int8,
    "random_bool": lambda v: v.dtype == torch.bool,
    "random_to": lambda v: ((v >= 0) & (v < 5) & (v == v.round())).all(),
    "random_uint8": lambda v: v.dtype == torch.uint8,
    "multinomial_support": lambda v: ((v == 1) | (v == 3)).all(),
    "multinomial_no_replacement": lambda v: sorted(v.tolist()) == [1, 3],
    "bernoulli_01": lambda v: torch.equal(v, torch.tensor([0.0, 1.0] * 100)),
    "rand_range": lambda v: ((v >= 0) & (v < 1)).all(),
    "rand_bf16": lambda v: ((v >= 0) & (v < 1)).all() and v.dtype == torch.bfloat16,
    "randperm": lambda v: torch.equal(v, torch.arange(7)),
    "uniform_range": lambda v: ((v >= -3) & (v <= -2)).all(),
    "exponential_pos": lambda v: (v > 0).all(),
    "dropout_scale": lambda v: set(v.tolist()) <= {0.0, 2.0},
}


@pytest.mark.parametrize("case", sorted(RANDOM))
def test_random_support(eager_mode, case):
    cpu = RANDOM[case]("cpu")
    assert SUPPORT[case](cpu), "test setup: the CPU reference is outside the stated support"
    got = read(RANDOM[case](DEV))
    assert got.dtype == cpu.dtype and got.shape == tuple(cpu.shape), (
        f"[wrong dtype] {case}: CPU {cpu.dtype}{list(cpu.shape)}, tpu {got.dtype}{list(got.shape)}")
    assert SUPPORT[case](got.value), f"[wrong value] {case}: tpu values outside the support: {got.value[:20].tolist()}"


@pytest.mark.parametrize("where", ["alone", "first", "second"])
def test_cat_of_zero_dim_tensor_raises_cpus_error(eager_mode, where):
    """torch's meta kernel raised an IndexError ("list assignment index out of range"); CPU names the
    0-dim tensor (tensor/test_random_sequences.py, seed 2758)."""
    lists = {"alone": lambda z, v: [z], "first": lambda z, v: [z, v], "second": lambda z, v: [v, z]}
    D.check(lambda z, v: torch.cat(lists[where](z, v)), torch.tensor(1.0), torch.ones(2),
            match=r"^zero-dimensional tensor \(at position \d\) cannot be concatenated$")


# dtypes CPU's kernels have no instance for: the tpu computed something (logsigmoid of int64 gave zeros)
def _pool_input(dtype):
    return torch.arange(32).reshape(1, 2, 4, 4).to(dtype)


KERNEL_DTYPE_REFUSED = {
    "logsigmoid_int64": (F.logsigmoid, torch.arange(4)),
    "gelu_bool": (F.gelu, BO),
    "celu_int32": (F.celu, torch.arange(4, dtype=torch.int32)),
    "softmax_complex": (lambda x: torch.softmax(x, 0), torch.ones(3, dtype=torch.complex64)),
    "adaptive_avg_pool2d_int": (lambda x: F.adaptive_avg_pool2d(x, 2), _pool_input(torch.int64)),
    "avg_pool2d_int": (lambda x: F.avg_pool2d(x, 2), _pool_input(torch.int32)),
    "batch_norm_int": (lambda x: F.batch_norm(x, None, None, training=True), _pool_input(torch.int64)),
    # (the table holds the argument forms torch's OpInfo samples use: align_corners=True here)
    "interpolate_bilinear_int": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                                 _pool_input(torch.int64)),
    "grid_sample_uint8": (lambda x: F.grid_sample(x, torch.zeros(1, 2, 2, 2, dtype=torch.uint8, device=x.device),
                                                  align_corners=False), _pool_input(torch.uint8)),
    "trace_bool": (torch.trace, B),
    "cholesky_solve_half": (lambda x: torch.cholesky_solve(x, x), torch.eye(2, dtype=torch.float16)),
    "cdist_half": (lambda x: torch.cdist(x, x), torch.ones(2, 3, dtype=torch.float16)),
    "hardswish_int": (F.hardswish, torch.arange(4)),
    "mse_loss_complex": (lambda x: F.mse_loss(x, x), torch.ones(3, dtype=torch.complex64)),
    # in-place and out= forms (a decomposed celu_ had no validator; out= computes in out's dtype) and
    # a flag the recorder's samples never set (rrelu's samples all train)
    "celu_inplace_int": (lambda x: F.celu(x, inplace=True), torch.arange(4)),
    "cumsum_out_bool": (lambda x: torch.cumsum(x, 0, out=torch.empty_like(x)), BO),
    "rrelu_eval_int": (lambda x: F.rrelu(x, training=False), torch.arange(4)),
    "rrelu_eval_inplace_int": (lambda x: F.rrelu(x, training=False, inplace=True), torch.arange(4)),
    "hardshrink_int": (F.hardshrink, torch.arange(4)),
    "upsample_nearest2d_bool": (lambda x: F.interpolate(x, scale_factor=2), _pool_input(torch.bool)),
}
# integer and bool inputs CPU refuses with errors of its own
INTEGRAL_REFUSED = {
    "addcdiv_bool": (lambda b: torch.addcdiv(b, b, b), BO),
    "addcdiv_int": (lambda i: torch.addcdiv(i.float(), i, i), I),
    "mvlgamma_bool": (lambda b: torch.mvlgamma(b, 1), BO),
    "soft_margin_loss_int": (lambda i: F.soft_margin_loss(i, i), I),
    "soft_margin_loss_bool": (lambda b: F.soft_margin_loss(b, b), BO),
}
# near misses the table must not refuse (CPU computes them: other dtypes, promotion by a number)
KERNEL_DTYPE_COMPUTED = {
    "logsigmoid_half": (F.logsigmoid, torch.arange(4, dtype=torch.float16)),
    "clamp_bool_by_float": (lambda x: torch.clamp(x, 0.5), BO),
    "cumsum_bool": (lambda x: torch.cumsum(x, 0), BO),
    "div_bool": (lambda x: torch.div(x, x), BO),
    "avg_pool2d_bfloat16": (lambda x: F.avg_pool2d(x, 2), _pool_input(torch.bfloat16)),
    "softmax_half": (lambda x: torch.softmax(x, 0), torch.arange(3, dtype=torch.float16)),
    "trace_int": (torch.trace, I),
    "addcdiv_float_int_float": (lambda i: torch.addcdiv(i.float(), i, i.float()), I),
    "mvlgamma_int": (lambda i: torch.mvlgamma(i + 2, 1), I),
    "cumsum_bool_out_int64": (lambda x: torch.cumsum(x, 0, out=torch.empty(3, dtype=torch.int64, device=x.device)), BO),
    "cumsum_int_out_float": (lambda x: torch.cumsum(x, 0, out=torch.empty(2, 3, device=x.device)), I),
    "rrelu_eval_half": (lambda x: F.rrelu(x, training=False), torch.arange(4, dtype=torch.float16) - 2),
    "hardshrink_bfloat16": (F.hardshrink, torch.arange(4, dtype=torch.bfloat16) - 2),
    "upsample_nearest2d_uint8": (lambda x: F.interpolate(x, scale_factor=2), _pool_input(torch.uint8)),
    "celu_inplace_float": (lambda x: F.celu(x, inplace=True), torch.arange(4.0) - 2),
}


@pytest.mark.parametrize("case", sorted(KERNEL_DTYPE_REFUSED))
def test_dtype_without_cpu_kernel_raises(eager_mode, case):
    fn, x = KERNEL_DTYPE_REFUSED[case]
    D.check_raises(fn, x, match="not implemented for")


@pytest.mark.parametrize("case", sorted(KERNEL_DTYPE_COMPUTED))
def test_dtype_near_misses_compute(eager_mode, case):
    fn, x = KERNEL_DTYPE_COMPUTED[case]
    D.check(fn, x, expect_raise=False)


# compiled too: torch decomposes some calls before the op table sees them in a graph (Python kernels at the
# Autograd key: hardshrink, upsample_nearest2d; decomposition tables: celu; functionalised forms:
# rrelu_with_noise_functional), and compiled mode computed them
# (dynamo's fake call may refuse first, with its own message: batch_norm of int64)
@pytest.mark.parametrize("case", sorted(KERNEL_DTYPE_REFUSED))
def test_dtype_without_cpu_kernel_raises_compiled(case):
    fn, x = KERNEL_DTYPE_REFUSED[case]
    D.check_raises(fn, x, modes=["compiled"])


@pytest.mark.parametrize("case", sorted(KERNEL_DTYPE_COMPUTED))
def test_dtype_near_misses_compute_compiled(case):
    fn, x = KERNEL_DTYPE_COMPUTED[case]
    D.check(fn, x, expect_raise=False, modes=["compiled"])


@pytest.mark.parametrize("case", sorted(INTEGRAL_REFUSED))
def test_integral_inputs_cpu_refuses(eager_mode, case):
    fn, x = INTEGRAL_REFUSED[case]
    D.check_raises(fn, x)


NANSUM_OUT = {  # CPU sums integral input as sum does (into any out dtype); floats reduce in out's dtype
    "int_into_bool": (lambda x, o: torch.nansum(x, 0, out=o), I, torch.zeros(3, dtype=torch.bool), False),
    "bool_into_int8": (lambda x, o: torch.nansum(x > 0, None, out=o), I, torch.zeros((), dtype=torch.int8), False),
    "int_into_int8_wraps": (lambda x, o: torch.nansum(x * 100, 1, True, out=o), I, torch.zeros(2, 1, dtype=torch.int8),
                            False),
    "float_into_long": (lambda x, o: torch.nansum(x, 0, out=o), A, torch.zeros(3, dtype=torch.int64), True),
    "float_into_complex": (lambda x, o: torch.nansum(x, 0, out=o), A, torch.zeros(3, dtype=torch.complex64), True),
    "float_dtype_long_into_long": (lambda x, o: torch.nansum(x, 0, dtype=torch.int64, out=o), A,
                                   torch.zeros(3, dtype=torch.int64), False),
}


@pytest.mark.parametrize("case", sorted(NANSUM_OUT))
def test_nansum_out_dtypes_as_cpu(eager_mode, case):
    fn, x, out, raises = NANSUM_OUT[case]
    D.check(fn, x, out, expect_raise=raises)


# dim=[] / dim=(): sum-like reductions reduce every dim on CPU, any/all reduce none, logsumexp raises. torch's
# meta kernel keeps every dim for nansum (and nanmean, built on it) and says (1, 1) for logsumexp: the tpu
# broadcast the total to the input's shape, any/all reduced everything
NO_DIMS = {
    "nansum": lambda x: torch.nansum(x, dim=[]),
    "nansum_keepdim": lambda x: torch.nansum(x, [], True),
    "nansum_int": lambda x: torch.nansum(x.nan_to_num().long(), dim=[]),
    "nansum_dtype": lambda x: torch.nansum(x, [], dtype=torch.float64),
    "nansum_out": lambda x: torch.nansum(x, [], out=torch.empty(0, device=x.device)),
    "nanmean": lambda x: torch.nanmean(x, dim=[]),
    "nanmean_keepdim": lambda x: torch.nanmean(x, dim=[], keepdim=True),
    "sum": lambda x: torch.sum(x, dim=[]),
    "mean_keepdim": lambda x: torch.mean(x, dim=[], keepdim=True),
    "amax": lambda x: torch.amax(x, dim=[]),
    "std": lambda x: torch.std(x, dim=[]),
    "vector_norm": lambda x: torch.linalg.vector_norm(x, dim=[]),
    "count_nonzero": lambda x: torch.count_nonzero(x, dim=[]),
    "any": lambda x: torch.any(x, dim=()),
    "all": lambda x: torch.all(x, dim=()),
    "any_keepdim": lambda x: torch.any(x, dim=[], keepdim=True),
    "logsumexp": lambda x: torch.logsumexp(x, dim=[]),
    "logsumexp_keepdim": lambda x: torch.logsumexp(x, dim=[], keepdim=True),
    "logsumexp_0d": lambda x: torch.logsumexp(x[0, 0], dim=[]),
}
NO_DIMS_X = torch.tensor([[-3.0, float("nan"), 0.0, 1.5], [2.0, 0.0, -1.0, 4.0], [0.5, 1.0, 0.0, -2.5]])


@pytest.mark.parametrize("case", sorted(NO_DIMS))
def test_reductions_over_no_dims(eager_mode, case):
    D.check(NO_DIMS[case], NO_DIMS_X)


@pytest.mark.parametrize("case", ["nansum", "nansum_keepdim", "nanmean", "any", "all", "logsumexp_keepdim"])
def test_reductions_over_no_dims_compiled(case):
    D.check(lambda x: NO_DIMS[case](x) * 1, NO_DIMS_X, modes=["compiled"])


# a dim outside the input's rank: CPU raises IndexError; the meta kernels of these ops skip the check and
# the lowerings wrapped the dim (sort(x, 5) sorted dim 1; a 0-d input takes only 0 and -1)
BAD_DIMS = {
    "sort_2d": lambda x: torch.sort(x, 5),
    "sort_2d_negative": lambda x: torch.sort(x, -3),
    "argsort_2d": lambda x: torch.argsort(x, 2),
    "sort_stable_2d": lambda x: torch.sort(x, dim=2, stable=True),
    "sort_0d": lambda x: torch.sort(x[0, 0], 1),
    "cummax_0d": lambda x: torch.cummax(x[0, 0], 1),
    "cummin_0d": lambda x: torch.cummin(x[0, 0], -2),
    "softmax_0d": lambda x: torch.softmax(x[0, 0], 1),
    "index_select_0d": lambda x: x[0, 0].index_select(1, torch.zeros(1, dtype=torch.long, device=x.device)),
}
IN_RANGE_DIMS = {  # the edges that stay legal
    "sort_last": lambda x: torch.sort(x, -2),
    "softmax_0d_dim0": lambda x: torch.softmax(x[0, 0], -1),
    "index_select_0d_dim0": lambda x: x[0, 0].index_select(0, torch.zeros(1, dtype=torch.long, device=x.device)),
    "unsqueeze_end": lambda x: x.unsqueeze(2) * 1,
    "cross_broadcast": lambda x: torch.linalg.cross(x[:, :3], x[:1, 1:], dim=1),
}


@pytest.mark.parametrize("case", sorted(BAD_DIMS))
def test_dim_out_of_range_raises(eager_mode, case):
    D.check_raises(BAD_DIMS[case], A.reshape(3, 2).repeat(1, 2))


@pytest.mark.parametrize("case", sorted(IN_RANGE_DIMS))
def test_dim_at_the_edges_computes(eager_mode, case):
    D.check(IN_RANGE_DIMS[case], A.reshape(3, 2).repeat(1, 2), expect_raise=False)


@pytest.mark.parametrize("case", ["sort_2d", "softmax_0d", "cummax_0d"])
def test_dim_out_of_range_raises_compiled(case):
    def fn(x):
        r = BAD_DIMS[case](x)
        return (r[0] if isinstance(r, tuple) else r) * 1

    D.check_raises(fn, A.reshape(3, 2).repeat(1, 2), modes=["compiled"], match="Dimension out of range")


# random_ bounds outside the dtype (CPU's check_from_to_in_range: random_(0, 300) of int8 drew values past
# 127 and wrapped them), complex and float8 random tensors, factory dtypes without a CPU kernel
RANDOM_BOUNDS = {
    "random_int8_to_300": lambda d: torch.zeros(3, dtype=torch.int8, device=d).random_(0, 300),
    "random_int8_from": lambda d: torch.zeros(3, dtype=torch.int8, device=d).random_(-200, 3),
    "random_uint8_negative_from": lambda d: torch.zeros(3, dtype=torch.uint8, device=d).random_(-1, 3),
    "random_bool_to_3": lambda d: torch.zeros(3, dtype=torch.bool, device=d).random_(0, 3),
    "random_half_past_max": lambda d: torch.zeros(3, dtype=torch.float16, device=d).random_(0, 2 ** 20),
    "random_int8_to_only": lambda d: torch.zeros(3, dtype=torch.int8, device=d).random_(200),
    "random_complex": lambda d: torch.zeros(3, dtype=torch.complex64, device=d).random_(0, 5),
    "randint_int8_past_max": lambda d: torch.randint(0, 1000, (3,), dtype=torch.int8, device=d),
    "randint_complex": lambda d: torch.randint(0, 3, (2,), dtype=torch.complex64, device=d),
    "randint_float8": lambda d: torch.randint(0, 3, (2,), dtype=torch.float8_e4m3fn, device=d),
    "randint_like_complex": lambda d: torch.randint_like(torch.zeros(3, dtype=torch.complex64, device=d), 5),
    "linspace_bool": lambda d: torch.linspace(0, 1, 3, dtype=torch.bool, device=d),
    "logspace_uint16": lambda d: torch.logspace(0, 1, 3, dtype=torch.uint16, device=d),
    "arange_float8": lambda d: torch.arange(3, dtype=torch.float8_e5m2, device=d),
    "nansum_into_complex_dtype": lambda d: torch.nansum(torch.ones(3, device=d), dtype=torch.complex64),
}
RANDOM_BOUNDS_OK = {  # the edges CPU accepts
    "random_bool_to_2": lambda d: torch.zeros(3, dtype=torch.bool, device=d).random_(0, 2),
    "random_int8_to_128": lambda d: torch.zeros(3, dtype=torch.int8, device=d).random_(-128, 128),
    "random_int64_wide": lambda d: torch.zeros(3, dtype=torch.int64, device=d).random_(-2 ** 62, 2 ** 62),
    "randint_uint16": lambda d: torch.randint(0, 3, (2,), dtype=torch.uint16, device=d),
}


@pytest.mark.parametrize("case", sorted(RANDOM_BOUNDS))
def test_random_bounds_and_factory_dtypes_raise(eager_mode, case):
    D.check_raises(lambda x: RANDOM_BOUNDS[case](x.device), A)


@pytest.mark.parametrize("case", sorted(RANDOM_BOUNDS_OK))
def test_random_bounds_at_the_edges(eager_mode, case):
    fn = RANDOM_BOUNDS_OK[case]
    got, ref = fn(DEV).cpu(), fn("cpu")
    assert got.dtype == ref.dtype and got.shape == ref.shape
