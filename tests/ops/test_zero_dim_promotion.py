"""A 0-dim tensor among dimensioned operands, rule by rule (``ops/_util.torch_operands``): torch computes in the
dimensioned operands' dtype when the 0-dim one is of the same category (or a lower one), casting the 0-dim
value to it first; only a 0-dim operand of a higher category (a float 0-dim with integer tensors) takes part in
the promotion. JAX promotes them all alike, so every lowering that computes in its operands' common dtype
(comparisons, min/max, clamp, remainder, fmod, integer and rounding division, shifts, nextafter) casts first.

Each case is chosen so that computing in the wider dtype gives another result: the 0-dim value is not held
exactly by the narrow dtype (1000 as int8 is -24, 0.1 as float16 is 0.0999755859375, -1 as uint8 is 255).
"""
import pytest
import torch

from tests.harness import differential as D

I8 = torch.tensor([-24, 0, 7, -7, 100, -100, 127], dtype=torch.int8)
U8 = torch.tensor([0, 5, 200, 255], dtype=torch.uint8)
F16 = torch.tensor([0.1, 1.0, -1.0, 0.2, 3.0], dtype=torch.float16)
BF16 = torch.tensor([0.1, 1.0, -2.5, 0.3], dtype=torch.bfloat16)
# many values in (0.01, 8): rounding the result twice (in the wider dtype, then in the tensor's) differs
# from rounding once in some of them
_RANDOM = torch.rand(2000, generator=torch.Generator().manual_seed(0)) * 8 + 0.01
F16R, BF16R, F32R = _RANDOM.half(), _RANDOM.bfloat16(), _RANDOM.float()


def _zero(value, dtype):
    return torch.tensor(value, dtype=dtype)


# name -> (fn, dimensioned operand, 0-dim operand); the same category, a wider 0-dim dtype: CPU casts the
# 0-dim operand to the tensor's dtype first
SAME_CATEGORY = {
    "eq_int8_int64": (torch.eq, I8, _zero(1000, torch.int64)),       # 1000 -> -24 (equal to the first)
    "ne_int8_int64": (torch.ne, I8, _zero(1000, torch.int64)),
    "lt_int8_int64": (torch.lt, I8, _zero(1000, torch.int64)),
    "ge_int8_int16": (torch.ge, I8, _zero(300, torch.int16)),        # 300 -> 44
    "gt_uint8_int8": (torch.gt, U8, _zero(-1, torch.int8)),          # -1 -> 255 (JAX: int16)
    "le_uint8_int64": (torch.le, U8, _zero(-56, torch.int64)),       # -56 -> 200
    "maximum_int8_int64": (torch.maximum, I8, _zero(1000, torch.int64)),
    "minimum_int8_int64": (torch.minimum, I8, _zero(1000, torch.int64)),
    "remainder_int8_int64": (torch.remainder, I8, _zero(300, torch.int64)),
    "fmod_int8_int64": (torch.fmod, I8, _zero(300, torch.int64)),
    "floor_divide_int8_int64": (torch.floor_divide, I8, _zero(300, torch.int64)),
    "div_trunc_int8_int64": (lambda x, y: torch.div(x, y, rounding_mode="trunc"), I8, _zero(300, torch.int64)),
    "div_floor_int8_int64": (lambda x, y: torch.div(x, y, rounding_mode="floor"), I8, _zero(300, torch.int64)),
    "lshift_int8_int64": (torch.bitwise_left_shift, I8.abs().clamp(max=3), _zero(257, torch.int64)),  # 257 -> 1
    "clamp_min_int8_int64": (lambda x, y: torch.clamp(x, min=y), I8, _zero(1000, torch.int64)),
    "clamp_max_uint8_int64": (lambda x, y: torch.clamp(x, max=y), U8, _zero(-56, torch.int64)),
    "eq_uint64_int64": (torch.eq, torch.tensor([2 ** 64 - 1, 7], dtype=torch.uint64), _zero(-1, torch.int64)),
    "eq_float16_float64": (torch.eq, F16, _zero(0.1, torch.float64)),  # 0.1 as float16 equals the first
    "lt_float16_float32": (torch.lt, F16, _zero(0.1, torch.float32)),
    "gt_bfloat16_float64": (torch.gt, BF16, _zero(0.1, torch.float64)),
    "eq_bfloat16_float16": (torch.eq, BF16, _zero(0.1, torch.float16)),  # no float16 in bf16: both cast
    "fmod_float16_float64": (torch.fmod, F16, _zero(0.1, torch.float64)),
    "remainder_float16_float64": (torch.remainder, F16, _zero(0.1, torch.float64)),
    "nextafter_float16_float64": (torch.nextafter, F16, _zero(2.0, torch.float64)),
    "nextafter_float32_float64": (torch.nextafter, F16.float(), _zero(2.0, torch.float64)),
    "eq_complex64_complex128": (torch.eq, torch.tensor([0.1, 1.0, 0.2], dtype=torch.complex64),
                                _zero(0.1 + 0j, torch.complex128)),
    "add_float16_float64": (torch.add, F16R, _zero(0.3, torch.float64)),
    "add_float32_float64": (torch.add, F32R, _zero(1.1, torch.float64)),
    "sub_bfloat16_float64": (torch.sub, BF16R, _zero(0.3, torch.float64)),
    "rsub_float16_float32": (lambda x, y: torch.sub(y, x), F16R, _zero(0.7, torch.float32)),
    "mul_float32_float64": (torch.mul, F32R, _zero(0.1, torch.float64)),
    "mul_zero_dim_first_float16_float64": (lambda x, y: torch.mul(y, x), F16R, _zero(0.1, torch.float64)),
    "div_zero_dim_first_bfloat16_float64": (lambda x, y: torch.div(y, x), BF16R, _zero(0.1, torch.float64)),
    "pow_float16_float64": (torch.pow, F16R, _zero(0.3, torch.float64)),
    "pow_zero_dim_first_bfloat16_float64": (lambda x, y: torch.pow(y, x), BF16R, _zero(1.1, torch.float64)),
    "atan2_float16_float64": (torch.atan2, F16R, _zero(0.7, torch.float64)),
    "xlogy_bfloat16_float64": (torch.xlogy, BF16R, _zero(0.3, torch.float64)),
    "lerp_weight_float16_float64": (lambda x, y: torch.lerp(x, x * 2, y), F16R, _zero(0.3, torch.float64)),
}

# CPU's mul and division kernels of a float16/bfloat16 tensor take a 0-dim second operand at its own value in
# float32 (as a Python number), not cast to the tensor's dtype (``ops/_util.zero_dim_opmath``)
OPMATH = {
    "mul_float16_float64": (torch.mul, F16R, _zero(0.1, torch.float64)),
    "mul_bfloat16_int64": (torch.mul, BF16R, _zero(257, torch.int64)),
    "div_float16_float64": (torch.div, F16R, _zero(0.1, torch.float64)),
    "floor_divide_float16_float64": (torch.floor_divide, F16, _zero(0.1, torch.float64)),  # 0.1 // 0.1 is 0
    "floor_divide_bfloat16_float32": (torch.floor_divide, BF16R, _zero(0.3, torch.float32)),
    "div_trunc_float16_float64": (lambda x, y: torch.div(x, y, rounding_mode="trunc"), F16R,
                                  _zero(0.1, torch.float64)),
    "div_floor_bfloat16_float64": (lambda x, y: torch.div(x, y, rounding_mode="floor"), BF16R,
                                   _zero(0.7, torch.float64)),
}

# a 0-dim operand of a higher category takes part in the promotion (JAX's rule holds), but for a complex
# 0-dim with floating tensors: the complex type of the tensors' precision
HIGHER_CATEGORY = {
    "lt_int8_float64": (torch.lt, I8, _zero(1.5, torch.float64)),        # not 1 < 1
    "eq_int8_float32": (torch.eq, I8, _zero(7.5, torch.float32)),
    "remainder_int8_float64": (torch.remainder, I8, _zero(2.5, torch.float64)),
    "maximum_uint8_float16": (torch.maximum, U8, _zero(-0.5, torch.float16)),
    "eq_bool_int64": (torch.eq, torch.tensor([True, False]), _zero(1, torch.int64)),
    "eq_float16_complex128": (torch.eq, F16, _zero(0.1 + 0j, torch.complex128)),  # in complex32 on CPU
    "eq_float32_complex128": (torch.eq, F16.float(), _zero(0.1 + 0j, torch.complex128)),  # in complex64
    "mul_float32_complex128": (torch.mul, F32R, _zero(0.1 + 0.3j, torch.complex128)),
    # bfloat16 has no complex type: complex64 of the 0-dim's parts as they are (not rounded to bfloat16)
    "mul_bfloat16_complex128": (torch.mul, BF16R, _zero(1 / 3 + 1j, torch.complex128)),
}

# the other operand orders and counts: the 0-dim operand first, both 0-dim, two dimensioned operands
ARRANGEMENTS = {
    "zero_dim_first_lt": (lambda x, y: torch.lt(y, x), I8, _zero(1000, torch.int64)),
    "zero_dim_first_remainder": (lambda x, y: torch.remainder(y, x.clamp(min=1)), I8, _zero(300, torch.int64)),
    "both_zero_dim_promote": (lambda x, y: torch.eq(x[2], y), I8, _zero(7, torch.int64)),
    "both_zero_dim_wide": (lambda x, y: torch.lt(x[6], y), I8, _zero(1000, torch.int64)),  # 127 < 1000
    "two_dimensioned_widen": (lambda x, y: torch.lt(x, x.to(torch.int64) * 0 + y), I8, _zero(1000, torch.int64)),
    "true_div_int8_by_int64": (torch.div, I8, _zero(1000, torch.int64)),  # ints divide as floats of their values
    "true_div_int64_by_int8_first": (lambda x, y: torch.div(y, x.clamp(min=1)), I8, _zero(1000, torch.int64)),
    "clamp_two_zero_dim_bounds": (lambda x, y: torch.clamp(x, min=y - 1300, max=y), I8, _zero(1000, torch.int64)),
}

CASES = {**SAME_CATEGORY, **OPMATH, **HIGHER_CATEGORY, **ARRANGEMENTS}


@pytest.mark.parametrize("name", list(CASES))
def test_zero_dim_operand_promotes_as_cpu(eager_mode, name):
    fn, x, y = CASES[name]
    D.check(fn, x, y, expect_raise=False, atol=0, rtol=0)


@pytest.mark.parametrize("name", list(SAME_CATEGORY))
def test_same_category_cases_tell_the_rule_apart(name):
    """The case is one the rule decides: computed in JAX's (wider) common dtype, CPU torch would differ."""
    fn, x, y = CASES[name]
    wide = torch.float64 if torch.uint64 in (x.dtype, y.dtype) else torch.promote_types(x.dtype, y.dtype)  # (JAX's)
    assert torch.result_type(x, y) == x.dtype, "not a same-category case"
    exact = fn(x, y)
    widened = fn(x.to(wide), y.to(wide)).to(exact.dtype)  # what a lowering computing in JAX's dtype returns
    assert not torch.equal(exact, widened), f"{name}: the wider dtype gives the same result: not a test of the rule"


@pytest.mark.parametrize("name", list(OPMATH))
def test_opmath_cases_tell_the_rule_apart(name):
    """The case is one the rule decides: with the 0-dim operand cast to the tensor's dtype first, CPU torch
    would give another result."""
    fn, x, y = CASES[name]
    assert not torch.equal(fn(x, y), fn(x, y.to(x.dtype))), f"{name}: not a test of the rule"


def test_a_zero_dim_operand_cpu_refuses_to_convert():
    """A 0-dim bound CPU cannot hold in the tensor's dtype beside a Python number: the same error."""
    D.check_raises(lambda x, y: torch.clamp(x, min=-50, max=y), I8, _zero(1000, torch.int64),
                   match="cannot be converted")


@pytest.mark.parametrize("name", ["eq_int8_int64", "remainder_int8_int64", "fmod_float16_float64", "add_float32_float64",
                                  "clamp_min_int8_int64", "lt_int8_float64", "div_float16_float64"])
def test_zero_dim_operand_promotes_as_cpu_compiled(name):
    fn, x, y = CASES[name]
    D.check(fn, x, y, modes=["compiled"], expect_raise=False, atol=0, rtol=0)


# CPU's add and sub with an alpha take a 0-dim second operand beside a float16/bfloat16 tensor as a Python number
# of its value; the tpu's Python-number path rounds as CPU within an ulp (not bit for bit: CPU's vectorized
# kernel), and the 0-dim tensor takes that same path
ALPHA = {
    "add_alpha_float16": (lambda x, y: torch.add(x, y, alpha=3), F16R, 0.1),
    "sub_alpha_bfloat16": (lambda x, y: torch.sub(x, y, alpha=3), BF16R, 0.3),
    "sub_alpha_float16_fraction": (lambda x, y: torch.sub(x, y, alpha=0.7), F16R, 0.1),
}


@pytest.mark.parametrize("name", list(ALPHA))
def test_zero_dim_operand_with_alpha_is_taken_as_a_number(eager_mode, name):
    fn, x, number = ALPHA[name]
    y = _zero(number, torch.float64)
    assert torch.equal(fn(x, y), fn(x, number)), "test setup: CPU's rule"
    as_number = fn(x.to("tpu"), number).cpu()
    torch.testing.assert_close(fn(x.to("tpu"), y.to("tpu")).cpu(), as_number, rtol=0, atol=0)
    D.check(fn, x, y, expect_raise=False)  # and CPU's values, within the dtype's tolerance
