"""What ``to_jax``'s docstring and the README say of 64-bit values: the exported array keeps int64/float64,
JAX arithmetic on it in the user's code follows JAX's default (64-bit mode off: int32/float32, so int64
values past 2**31 wrap around), and ``jax.enable_x64(True)`` keeps 64 bits. torch_tpu never turns the
global flag on for the user."""
import jax
import torch

import torch_tpu


def test_an_exported_int64_array_keeps_64_bits_but_jax_arithmetic_drops_them_by_default():
    t = torch.tensor([2 ** 40, 3], device="tpu")
    a = torch_tpu.to_jax(t)
    assert str(a.dtype) == "int64" and int(a[0]) == 2 ** 40
    assert not jax.config.jax_enable_x64  # the user's default, left as it was
    b = a + 1
    assert str(b.dtype) == "int32" and int(b[0]) == 1  # 2**40 + 1 wrapped around, as documented
    with jax.enable_x64(True):
        c = a + 1
    assert str(c.dtype) == "int64" and int(c[0]) == 2 ** 40 + 1
    f = torch_tpu.to_jax(torch.tensor([1e300], dtype=torch.float64, device="tpu"))
    assert str(f.dtype) == "float64" and str((f * 2).dtype) == "float32"
