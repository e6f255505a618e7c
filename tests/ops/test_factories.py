"""Factory functions with device="tpu" match the same call on the CPU (values, dtype, shape)."""
import numpy as np
import pytest
import torch

DEV = "tpu"

CASES = [
    ("arange_float_step", lambda d: torch.arange(0, 1, 0.1, device=d)),
    ("arange_float_end", lambda d: torch.arange(2.5, device=d)),
    ("arange_dtype", lambda d: torch.arange(0, 10, 3, dtype=torch.float16, device=d)),
    ("arange_big_int64", lambda d: torch.arange(2**33, 2**33 + 4, device=d)),
    ("arange_neg_float", lambda d: torch.arange(1.0, -1.0, -0.3, device=d)),
    ("arange_empty", lambda d: torch.arange(3, 3, device=d)),
    ("linspace_int", lambda d: torch.linspace(0, 10, 5, dtype=torch.int64, device=d)),
    ("linspace_one", lambda d: torch.linspace(2, 5, 1, device=d)),
    ("linspace_bf16", lambda d: torch.linspace(-3, 3, 9, dtype=torch.bfloat16, device=d)),
    ("logspace_base2", lambda d: torch.logspace(0, 4, 5, base=2, device=d)),
    ("eye_bool", lambda d: torch.eye(3, dtype=torch.bool, device=d)),
    ("eye_int", lambda d: torch.eye(3, 2, dtype=torch.int32, device=d)),
    ("full_bool", lambda d: torch.full((2, 2), True, device=d)),
    ("full_bf16", lambda d: torch.full((3,), 1.5, dtype=torch.bfloat16, device=d)),
    ("zeros_int8", lambda d: torch.zeros(3, dtype=torch.int8, device=d)),
    ("ones_0d", lambda d: torch.ones((), device=d)),
    ("zeros_empty_dim", lambda d: torch.zeros(0, 3, device=d)),
    ("empty_zero_numel", lambda d: torch.empty(2, 0, device=d)),
    ("scalar_tensor", lambda d: torch.scalar_tensor(3.5, device=d)),
    ("tensor_nested_bf16", lambda d: torch.tensor([[1, 2], [3, 4]], dtype=torch.bfloat16, device=d)),
    ("tensor_complex", lambda d: torch.tensor([1 + 2j, 3 - 1j], device=d)),
    ("tensor_numpy", lambda d: torch.tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=d)),
    ("as_tensor_numpy", lambda d: torch.as_tensor(np.linspace(0, 1, 4), device=d)),
    ("from_numpy_to", lambda d: torch.from_numpy(np.ones((2, 2), np.float32)).to(d)),
    ("tensor_scalar", lambda d: torch.tensor(7, device=d)),
    ("zeros_like_dtype", lambda d: torch.zeros_like(torch.ones(2, 3, device=d), dtype=torch.int64)),
    ("full_like_bool", lambda d: torch.full_like(torch.ones(2, device=d), False, dtype=torch.bool)),
    ("ones_like_transposed", lambda d: torch.ones_like(torch.ones(2, 3, device=d).t())),
    ("triu_indices", lambda d: torch.triu_indices(4, 3, 1, device=d)),
    ("empty_strided_filled", lambda d: torch.empty_strided((2, 3), (1, 2), device=d).fill_(2)),
    ("zeros_out", lambda d: torch.zeros(2, 2, out=torch.empty(2, 2, device=d))),
    ("ones_grad", lambda d: torch.ones(2, requires_grad=True, device=d) * 2),
]


@pytest.mark.parametrize("fn", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_factory_matches_cpu(fn):
    ref = fn("cpu")
    out = fn(DEV)
    assert out.device.type == "tpu"
    assert out.dtype == ref.dtype and out.shape == ref.shape and out.requires_grad == ref.requires_grad
    assert out.stride() == ref.stride()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-6, atol=1e-6)


def test_random_factory_dtypes():
    for fn, dtype in ((lambda: torch.randn(3, dtype=torch.bfloat16, device=DEV), torch.bfloat16),
                      (lambda: torch.rand(3, dtype=torch.float64, device=DEV), torch.float64),
                      (lambda: torch.randint(0, 5, (3,), dtype=torch.int32, device=DEV), torch.int32),
                      (lambda: torch.randperm(6, dtype=torch.int32, device=DEV), torch.int32),
                      (lambda: torch.randint(10, (2, 2), device=DEV), torch.int64)):
        t = fn()
        assert t.dtype == dtype and t.device.type == "tpu"
    p = torch.randperm(50, device=DEV).cpu()
    assert torch.equal(p.sort().values, torch.arange(50))
    x = torch.empty(1000, device=DEV).uniform_(-2, 3).cpu()
    assert x.min() >= -2 and x.max() < 3
    y = torch.empty(2000, device=DEV).normal_(5, 2).cpu()
    assert abs(y.mean() - 5) < 0.2 and abs(y.std() - 2) < 0.2
    b = torch.bernoulli(torch.full((2000,), 0.25, device=DEV)).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.05
    # random ops running through a CPU generator (diffusers' pattern) then moved
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4, generator=g)
    g.manual_seed(0)
    assert torch.equal(torch.randn(4, generator=g).to(DEV).cpu(), ref)


def test_as_tensor_on_device_does_not_copy():
    x = torch.ones(3, device=DEV)
    assert torch.as_tensor(x) is x
    assert torch.as_tensor(x, device=DEV) is x
    y = torch.as_tensor(x, dtype=torch.float64)
    assert y.dtype == torch.float64 and y.device.type == "tpu"
