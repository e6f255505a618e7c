"""Foreach ops and the optimizers and utilities built on them, tpu against CPU torch.

torch sends optimizers (foreach by default on a PrivateUse1 device), ``clip_grad_norm_`` and EMA updates
through ``torch._foreach_*``: lists with mixed dtypes, empty tensors, views of one base, the same tensor
twice, Python scalars, scalar lists, 0-dim tensors and the packed 1-D CPU tensor of per-tensor scalars.

Found here: ``_foreach_addcdiv_/_foreach_addcmul_`` with their scalars as a CPU tensor (the form CUDA
requires) raised a device mismatch.
"""
import pytest
import torch

from tests.harness import differential as D
from tests.harness.inputs import DEV


def _list(dev, dtypes=(torch.float32,) * 3, seed=0):
    """Three tensors of shapes (3,), (2, 2), (0,) (an empty one, as optimizers meet for empty params)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dt).to(dev) for s, dt in zip([(3,), (2, 2), (0,)], dtypes)]


def _inplace(op, *more, **kw):
    def run(dev):
        a = _list(dev)
        op(a, *[m(dev) if callable(m) else m for m in more], **kw)
        return a
    return run


MIXED = (torch.bfloat16, torch.float32, torch.float16)
F = torch

CASES = {
    "add_scalar": _inplace(F._foreach_add_, 2.5),
    "add_list_alpha": _inplace(F._foreach_add_, lambda d: _list(d, seed=1), alpha=0.5),
    "add_scalarlist": lambda d: F._foreach_add(_list(d), [1, 2.5, 3]),
    "add_tpu_0d": _inplace(F._foreach_add_, lambda d: torch.tensor(2.0, device=d)),
    "mul_cpu_0d": _inplace(F._foreach_mul_, lambda d: torch.tensor(2.0)),
    "mul_mixed_dtypes": lambda d: (lambda a: (F._foreach_mul_(a, 1.5), a))(_list(d, MIXED))[1],
    "add_mixed_dtype_lists": lambda d: (lambda a: (F._foreach_add_(a, _list(d, seed=2)), a))(_list(d, MIXED))[1],
    "same_tensor_twice": lambda d: (lambda t: (F._foreach_add_([t, t], 1), t))(torch.ones(3, device=d))[1],
    "views_of_one_base": lambda d: (lambda t: (F._foreach_mul_([t[:3], t[3:]], [2, 3]), t))(
        torch.arange(6.0, device=d))[1],
    "overlapping_views": lambda d: (lambda t: (F._foreach_add_([t[:4], t[2:]], 1), t))(torch.arange(6.0, device=d))[1],
    "lerp_scalar": _inplace(F._foreach_lerp_, lambda d: _list(d, seed=1), 0.3),
    "lerp_list": _inplace(F._foreach_lerp_, lambda d: _list(d, seed=1), lambda d: _list(d, seed=2)),
    "addcdiv_cpu_scalars": _inplace(F._foreach_addcdiv_, lambda d: _list(d, seed=1),
                                    lambda d: [t.abs() + 1 for t in _list(d, seed=2)],
                                    lambda d: torch.tensor([0.1, -0.2, 3.0])),
    "addcmul_cpu_scalars_functional": lambda d: F._foreach_addcmul(_list(d), _list(d, seed=1), _list(d, seed=2),
                                                                    torch.tensor([0.5, 2.0, -1.0])),
    "addcmul_scalars_wrong_length": lambda d: F._foreach_addcmul(_list(d), _list(d), _list(d), torch.tensor([0.5])),
    "addcmul_scalarlist": _inplace(F._foreach_addcmul_, lambda d: _list(d, seed=1), lambda d: _list(d, seed=2),
                                   [0.1, 2, -1]),
    "norm": lambda d: F._foreach_norm(_list(d)),
    "norm_inf": lambda d: F._foreach_norm(_list(d), float("inf")),
    "norm_bf16_to_f32": lambda d: F._foreach_norm(_list(d, (torch.bfloat16,) * 3), 2, dtype=torch.float32),
    "maximum": lambda d: F._foreach_maximum(_list(d), _list(d, seed=1)),
    "clamp_min_scalarlist": lambda d: F._foreach_clamp_min(_list(d), [0.0, 0.5, 1.0]),
    "pow_scalar_base": lambda d: F._foreach_pow(2.0, _list(d)),
    "sqrt_negative": lambda d: F._foreach_sqrt(_list(d)),
    "div_by_zeros": lambda d: F._foreach_div(_list(d), [torch.zeros_like(t) for t in _list(d)]),
    "int_div": lambda d: F._foreach_div([torch.tensor([3, 4], device=d)], 2),
    "int_add_float_inplace": lambda d: F._foreach_add_([torch.tensor([3, 4], device=d)], 1.5),
    "length_mismatch": lambda d: F._foreach_add(_list(d), _list(d)[:2]),
    "shape_mismatch": lambda d: F._foreach_add(_list(d), [torch.ones(2, device=d)] * 3),
    "copy_from_float64": _inplace(F._foreach_copy_, lambda d: _list(d, (torch.float64,) * 3, seed=3)),
    "zero": _inplace(F._foreach_zero_),
}


def _params_with_grads(dev, dtypes=(torch.float32,) * 3, scale=10.0):
    ps = [torch.nn.Parameter(t) for t in _list(dev, dtypes)]
    for p, g in zip(ps, _list(dev, dtypes, seed=5)):
        p.grad = g * scale
    return ps


def _clip(dev, **kw):
    ps = _params_with_grads(dev)
    return torch.nn.utils.clip_grad_norm_(ps, 1.0, **kw), [p.grad for p in ps]


CASES.update({
    "clip_grad_norm": _clip,
    "clip_grad_norm_inf": lambda d: _clip(d, norm_type="inf", foreach=True),
    "clip_grad_norm_no_foreach": lambda d: _clip(d, foreach=False),
    "clip_grad_value": lambda d: (lambda ps: (torch.nn.utils.clip_grad_value_(ps, 0.5), [p.grad for p in ps]))(
        _params_with_grads(d))[1],
    "clip_grad_norm_nonfinite_raises": lambda d: torch.nn.utils.clip_grad_norm_(
        _params_with_grads(d, scale=float("nan")), 1.0, error_if_nonfinite=True),
})


def _optimizer(name, **kw):
    """Three steps of a stock optimizer over params of mixed dtypes (SGD/Adam: a bf16 one), one empty."""
    def run(dev):
        dts = (torch.float32, torch.bfloat16, torch.float32) if name in ("SGD", "Adam") else (torch.float32,) * 3
        ps = [torch.nn.Parameter(t) for t in _list(dev, dts)]
        opt = getattr(torch.optim, name)(ps, lr=0.1, **kw)
        for step in range(3):
            for p, g in zip(ps, _list(dev, dts, seed=10 + step)):
                p.grad = g
            opt.step()
        return ps, [opt.state[p].get("step", torch.tensor(0.0)) for p in ps]
    return run


OPTIMIZERS = {
    "SGD_nesterov": ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    "SGD_no_foreach": ("SGD", {"momentum": 0.9, "foreach": False}),
    "Adam_amsgrad": ("Adam", {"amsgrad": True, "weight_decay": 0.1}),
    "Adam_maximize": ("Adam", {"maximize": True}),
    "AdamW": ("AdamW", {}),
    "AdamW_no_foreach": ("AdamW", {"foreach": False}),
    "RMSprop_centered": ("RMSprop", {"centered": True, "momentum": 0.5}),
    "Adagrad": ("Adagrad", {"lr_decay": 0.01}),
    "Adadelta": ("Adadelta", {}),
    "Adamax": ("Adamax", {}),
    "NAdam": ("NAdam", {"decoupled_weight_decay": True, "weight_decay": 0.1}),
    "RAdam": ("RAdam", {}),
    "ASGD": ("ASGD", {}),
    "Rprop": ("Rprop", {}),
    "Adafactor": ("Adafactor", {}),
}
CASES.update({f"optim_{k}": _optimizer(name, **kw) for k, (name, kw) in OPTIMIZERS.items()})

TOL = {"atol": {torch.bfloat16: 2e-2}, "rtol": {torch.bfloat16: 2e-2}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_foreach(eager_mode, case):
    D.check(lambda anchor: CASES[case](anchor.device), torch.zeros(1), **TOL)


def test_foreach_scalars_on_the_device_raise_as_on_cuda():
    """The packed scalars must be a CPU tensor (torch reads them on the host); CUDA refuses its own."""
    a = _list(DEV)
    with pytest.raises(RuntimeError, match="Expected scalars to be on CPU"):
        F._foreach_addcmul(a, a, a, torch.tensor([0.5, 2.0, -1.0], device=DEV))
