"""torch.set_float32_matmul_precision is about float32 products. A product of bf16/fp16 operands is exact in float32
whatever it says, so its program asks XLA for HIGHEST precision even under "high"/"medium": XLA:TPU's DEFAULT
first rounds float16 operands to bfloat16 (measured on the chip: relative errors of order 1 against the exact
product at width 64). XLA:CPU ignores the precision, so the check is on the programs' text: what the chip would be
asked to do. Float32 operands still follow the setting."""
import re

import jax
import jax.numpy as jnp
import pytest
import torch

from torch_tpu.ops import attention, nn, spatial


def _dot_precisions(fn, *arrays) -> set:
    text = jax.jit(fn).lower(*arrays).as_text()
    # dot_general prints "precision = [HIGH, HIGH]", convolution "precision_config = [#stablehlo<precision HIGH>, ...]"
    found = {", ".join(re.findall(r"\b(DEFAULT|HIGHEST|HIGH)\b", re.search(r"precision(?:_config)? = \[([^\]]*)\]", line)[1]))
             for line in text.splitlines()
             if ("dot_general" in line or "convolution" in line) and re.search(r"precision(?:_config)? = \[", line)}
    assert found, f"no dot or convolution with a precision in the program:\n{text}"
    return found


CASES = {
    "mm": (lambda p: lambda a, b: nn.mm(a, b, p), [(4, 8), (8, 3)]),
    "addmm": (lambda p: lambda c, a, b: nn.addmm(c, a, b, precision=p), [(3,), (4, 8), (8, 3)]),
    "addbmm": (lambda p: lambda c, a, b: nn.addbmm(c, a, b, precision=p), [(4, 3), (2, 4, 8), (2, 8, 3)]),
    "einsum": (lambda p: lambda a, b: nn.einsum("ij,jk->ik", [a, b], precision=p), [(4, 8), (8, 3)]),
    "convolution": (lambda p: lambda x, w: spatial.convolution(x, w, None, [1], [0], [1], False, [0], 1, precision=p),
                    [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "attention": (lambda p: lambda q, k, v: attention.attention(q, k, v, precision=p), [(1, 2, 6, 8)] * 3),
}


@pytest.mark.parametrize("setting", ["high", "medium"])
@pytest.mark.parametrize("op", sorted(CASES))
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_products_run_at_highest_whatever_the_setting(op, dtype, setting):
    make, shapes = CASES[op]
    arrays = [jnp.ones(s, dtype) for s in shapes]
    assert _dot_precisions(make(setting), *arrays) == {"HIGHEST, HIGHEST"}


@pytest.mark.parametrize("op", sorted(CASES))
def test_float32_products_follow_the_setting(op):
    make, shapes = CASES[op]
    arrays = [jnp.ones(s, jnp.float32) for s in shapes]
    assert _dot_precisions(make("medium"), *arrays) == {"DEFAULT, DEFAULT"}
    assert _dot_precisions(make("high"), *arrays) == {"HIGH, HIGH"}
    assert _dot_precisions(make("highest"), *arrays) == {"HIGHEST, HIGHEST"}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_linear_and_matmul_under_medium_match_cpu(dtype):
    old = torch.get_float32_matmul_precision()
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g).to(dtype) for s in [(5, 64), (7, 64), (7,)])
    try:
        torch.set_float32_matmul_precision("medium")
        with torch.no_grad():
            got = [torch.nn.functional.linear(x.to("tpu"), w.to("tpu"), b.to("tpu")).cpu(),
                   (x.to("tpu") @ w.to("tpu").t()).cpu()]
        ref = [torch.nn.functional.linear(x, w, b), x @ w.t()]
    finally:
        torch.set_float32_matmul_precision(old)
    for g_, r in zip(got, ref):
        torch.testing.assert_close(g_, r)
