"""Integer and bool tensors with Python floats: torch computes in the default dtype (float32), with the number
rounded to it, where JAX with 64-bit types on computes in float64. Programs did that and rounded the result:
``int * 0.1`` was one ulp off CPU in a fifth of the elements, ``fmod(int, 0.7)`` wrong in nearly all of them,
and on a TPU the float64 program was emulated (slow) or did not compile at all (a float64 copysign).

Numbers like 0.1 and 0.7, which float32 does not hold exactly, are what tell the two apart: the tests of
tests/ops/test_scalar_arguments.py use 0.5 and 2.0, exact in both."""
import pytest
import torch


INTS = [torch.int32, torch.int64, torch.uint8, torch.bool]


def _ints(dtype):
    if dtype == torch.bool:
        return torch.arange(40) % 3 == 0
    if dtype == torch.uint8:
        return torch.arange(0, 256, 3, dtype=dtype)
    return torch.cat([torch.arange(-1000, 1000, 7), torch.tensor([16777217, -16777219, 2 ** 24 + 3])]).to(dtype)


# results CPU torch computes exactly as float32 arithmetic does (one rounding, or none): equal bit for bit
EXACT = {
    "mul": lambda x: x * 0.1,
    "rmul": lambda x: 0.7 * x,
    "add": lambda x: x + 0.1,
    "sub": lambda x: x - 0.1,
    "rsub": lambda x: 0.1 - x,
    "fmod": lambda x: torch.fmod(x, 0.7),
    "remainder": lambda x: torch.remainder(x, 0.7),
    "floor_divide": lambda x: torch.floor_divide(x, 0.7),
    "gt": lambda x: x > 16777216.5,
    "eq": lambda x: x == 0.1 * 3,
    "clamp": lambda x: torch.clamp(x, min=0.1, max=200.3),
    "where": lambda x: torch.where(x > 0, x, 0.1),
    "mul_then_sum_of_squares": lambda x: (x * 0.1) * (x * 0.1),
}
# results of a float32 formula CPU rounds in its own way (division by a Scalar, pow): equal bit for bit to the
# same op on the tensor converted to float32 first (the promotion rule itself), close to CPU torch
SAME_AS_FLOAT = {
    "div": lambda x: x / 0.3,
    "rdiv": lambda x: 0.3 / x,
    "pow": lambda x: torch.pow(x.abs() if x.dtype != torch.bool else x, 0.7),
}


def _assert_equal(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", sorted(EXACT))
def test_int_tensor_with_a_float_number_as_cpu(eager_mode, op, dtype):
    x = _ints(dtype)
    if dtype == torch.bool and op in ("sub", "rsub"):  # torch refuses these for bool on the CPU too
        for device in ("cpu", "tpu"):
            with pytest.raises(RuntimeError, match="Subtraction"):
                EXACT[op](x.to(device))
        return
    _assert_equal(EXACT[op](x.to("tpu")).cpu(), EXACT[op](x))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", sorted(SAME_AS_FLOAT))
def test_int_tensor_with_a_float_number_computes_as_float32(eager_mode, op, dtype):
    x = _ints(dtype)
    fn = SAME_AS_FLOAT[op]
    got = fn(x.to("tpu")).cpu()
    as_float = fn(x.to("tpu").float()).cpu() if dtype != torch.bool else fn(x.to("tpu").to(torch.uint8)).cpu()
    _assert_equal(got, as_float)
    torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: str(d).replace("torch.", ""))
def test_a_float_number_to_an_int_power(eager_mode, dtype):
    """``1.1 ** int_tensor`` (CPU rounds it otherwise than ``1.1 ** float_tensor``): float32, close to CPU."""
    x = _ints(dtype)
    e = x.remainder(50) if dtype != torch.bool else x
    got, want = torch.pow(1.1, e.to("tpu")).cpu(), torch.pow(1.1, e)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_a_traced_float_scalar_changes_no_dtype_between_calls(eager_mode):
    """The same program serves 0.1 and 0.7 (the value is an argument): both compute in float32."""
    x = _ints(torch.int32)
    for s in (0.1, 0.7, 0.1):
        _assert_equal(torch.fmod(x.to("tpu"), s).cpu(), torch.fmod(x, s))
        _assert_equal((x.to("tpu") * s).cpu(), x * s)


def test_a_complex_number_with_an_int_tensor_is_complex64(eager_mode):
    x = _ints(torch.int32)[:20]
    for fn in (lambda t: t * (0.1 + 0.2j), lambda t: t + (0.1 - 0.3j), lambda t: t / (0.3 + 0.1j)):
        got, want = fn(x.to("tpu")).cpu(), fn(x)
        assert got.dtype == want.dtype == torch.complex64
        torch.testing.assert_close(got, want)


def test_under_a_float64_default_dtype_the_number_stays_float64(eager_mode):
    x = _ints(torch.int64)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for fn in (lambda t: t * 0.1, lambda t: torch.fmod(t, 0.7), lambda t: t > 16777216.5):
            _assert_equal(fn(x.to("tpu")).cpu(), fn(x))
    finally:
        torch.set_default_dtype(before)


def test_compiled_graphs_promote_as_torch():
    """A compiled graph's Python floats are constants, not arguments: the same rule holds for them. (Each result
    its own output: XLA:CPU contracts a product and a sum in one fusion into a fused multiply-add, one rounding
    where CPU torch has two.)"""
    x = _ints(torch.int32)

    def f(t):
        return torch.fmod(t, 0.7), t * 0.1, t > 16777216.5, torch.where(t > 0, t, 0.1)

    for got, want in zip(torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu")), f(x)):
        _assert_equal(got.cpu(), want)


def test_promoted_ops_feeding_each_other(eager_mode):
    """Several int-with-float ops in one graph (fused mode defers them into one), each result feeding the next:
    every one in float32, as torch."""
    x = _ints(torch.int32)

    def chain(t):
        y = t * 0.1
        z = torch.fmod(t, 0.7)
        above = y > z
        return [y, z, above, torch.where(above, t, 0.1), torch.floor_divide(t, 0.7), above * 0.3, (t > 0) + 0.1]

    for got, want in zip(chain(x.to("tpu")), chain(x)):
        _assert_equal(got.cpu(), want)
