"""Bad arguments raise what CPU torch raises (or a clearer error where CPU's result is undefined); good
ones give CPU's values. Each case runs on both devices."""
import pytest
import torch


def _run(fn, device):
    try:
        out = fn(device)
        return out.cpu() if isinstance(out, torch.Tensor) else out
    except Exception as exc:  # noqa: BLE001 - compared: both raise
        return exc


def _t(*v, **kw):
    return torch.tensor(*v, **kw)


CASES = {
    "int_pow_negative_number": lambda d: _t([2, 1, -1], device=d) ** -1,
    "int_pow_negative_tensor": lambda d: _t([2, 1, -1, 0, -2, 3], device=d) ** _t([-1, -1, -3, -1, -2, 2], device=d),
    "number_pow_tensor": lambda d: torch.pow(2, _t([-1, 2, 0], device=d)),
    "float_pow_two": lambda d: _t([1.5, -2.0], device=d) ** 2,
    "randint_empty_range": lambda d: torch.randint(5, 3, (2,), device=d),
    "random_empty_range": lambda d: torch.empty(3, device=d).random_(4, 4),
    "multinomial_zero_sum": lambda d: torch.multinomial(_t([0.0, 0.0], device=d), 1),
    "multinomial_negative": lambda d: torch.multinomial(_t([-1.0, 2.0], device=d), 1),
    "multinomial_nan": lambda d: torch.multinomial(_t([float("nan"), 2.0], device=d), 1),
    "multinomial_too_many": lambda d: torch.multinomial(_t([1.0, 2.0], device=d), 3),
    "mm_mixed_dtypes": lambda d: torch.ones(2, 2, device=d) @ torch.ones(2, 2, dtype=torch.float64, device=d),
    "dot_mixed_dtypes": lambda d: torch.ones(2, device=d) @ torch.ones(2, dtype=torch.float64, device=d),
    "linear_mixed_dtypes": lambda d: torch.nn.functional.linear(torch.ones(2, 2, device=d),
                                                                torch.ones(2, 2, dtype=torch.float64, device=d)),
    "empty_negative": lambda d: torch.empty(-1, device=d),
    "randn_negative": lambda d: torch.randn(3, -2, device=d),
    "full_negative": lambda d: torch.full((-1,), 2.0, device=d),
    "new_empty_negative": lambda d: torch.ones(2, device=d).new_empty((-1,)),
    "median_empty": lambda d: torch.tensor([], device=d).median(),
    "median_dim_empty": lambda d: torch.ones(0, 3, device=d).median(dim=0),
    "add_bool_alpha_to_float": lambda d: torch.add(torch.ones(2, device=d), torch.ones(2, device=d), alpha=True),
    "sub_bool": lambda d: torch.ones(2, dtype=torch.bool, device=d) - torch.ones(2, dtype=torch.bool, device=d),
    "fill_overflow": lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d),
    "masked_fill_nan_into_int": lambda d: torch.zeros(2, dtype=torch.int32, device=d).masked_fill(
        _t([True, False], device=d), float("nan")),
    "clamp_complex": lambda d: torch.clamp(torch.ones(2, dtype=torch.int32, device=d), max=1 + 1j),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_cpu(case):
    cpu, tpu = _run(CASES[case], "cpu"), _run(CASES[case], "tpu")
    if isinstance(cpu, Exception):
        assert isinstance(tpu, Exception), f"{case}: CPU raised {cpu!r}; tpu returned {tpu}"
    else:
        assert not isinstance(tpu, Exception), f"{case}: tpu raised {tpu!r}"
        if case.startswith("randint") or case.startswith("multinomial"):
            assert tpu.shape == cpu.shape and tpu.dtype == cpu.dtype
        else:
            assert tpu.dtype == cpu.dtype, (tpu.dtype, cpu.dtype)
            torch.testing.assert_close(tpu, cpu, equal_nan=True)


def test_scalar_checks_hold_on_every_call_of_a_cached_program(eager_mode):
    """A dynamic Scalar's value is checked on every call of a program built for another value (the check
    runs per call only where the key has such a number); a call refused for what its key holds is
    refused every time, also after good calls of the same op."""
    x = torch.ones(2, dtype=torch.float16, device="tpu")
    u = torch.zeros(2, dtype=torch.uint8, device="tpu")
    for _ in range(2):
        assert torch.add(x, x, alpha=2.0).cpu().tolist() == [3.0, 3.0]
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.add(x, x, alpha=70000.0)  # past float16's range, as on CPU
        assert torch.full((2,), 200, dtype=torch.uint8, device="tpu").cpu().tolist() == [200, 200]
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.full((2,), 300, dtype=torch.uint8, device="tpu")
        assert (u + 1).cpu().tolist() == [1, 1]
        with pytest.raises(RuntimeError, match="negative integer powers"):
            _t([2, 1], device="tpu") ** -1
