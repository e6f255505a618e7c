"""Python scalars as op arguments.

* Cache keys: ``1 == 1.0 == True`` and ``0.0 == -0.0`` as dict keys, so a program made for one variant
  can be served for another. Every case runs a list of scalar variants in both orders on one input, so
  whichever variant this process ran first, the other one meets its cache entry.
* Changing scalar values must not compile new programs (the value is a program argument; its type is in
  the key), a NaN scalar must hit the cache, and the caches must not grow per value.
All results are compared with CPU torch.
"""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from tests.harness import differential as D
from tests.harness.compare import assert_same, read, sync
from tests.harness.counting import counting, program_cache_sizes
from tests.harness.inputs import DEV, rand, t

pytestmark = pytest.mark.usefixtures("watchdog")

NAN, INF = float("nan"), float("inf")

# One sequence per (op, dtype): the colliding groups back to back.
SCALARS = [1, 1.0, True, 2, 2.0, -0.0, 0.0, 0, False, -3, -3.0, NAN, INF, -INF, 0.5, 300, 2 ** 40]

# int8/int32/float16 behave like their neighbours here; they appear in the narrower tests below
DTYPES = [torch.bool, torch.uint8, torch.int64, torch.bfloat16, torch.float32]


def _input(dtype):
    if dtype == torch.bool:
        return t(True, False, True, False)
    if dtype == torch.uint8:
        return t(0, 1, 5, 250, dtype=dtype)
    if dtype.is_floating_point:
        return t(-2.5, -0.0, 0.0, 3.0, dtype=dtype)
    return t(-7, 0, 1, 5, dtype=dtype)


BINARY = {
    "add": lambda x, s: x + s,
    "radd": lambda x, s: s + x,
    "sub": lambda x, s: x - s,
    "rsub": lambda x, s: s - x,
    "mul": lambda x, s: x * s,
    "div": lambda x, s: x / s,
    "rdiv": lambda x, s: s / x,
    "floordiv": lambda x, s: x // s,
    "remainder": lambda x, s: x % s,
    "fmod": lambda x, s: torch.fmod(x, s),
    "pow": lambda x, s: x ** s,
    "rpow": lambda x, s: s ** x,
    "eq": lambda x, s: x == s,
    "lt": lambda x, s: x < s,
    "ge": lambda x, s: x >= s,
    "and": lambda x, s: x & s,
    "or": lambda x, s: x | s,
    "xor": lambda x, s: x ^ s,
    "clamp_min": lambda x, s: torch.clamp(x, min=s),
    "clamp_max": lambda x, s: torch.clamp(x, max=s),
    "where": lambda x, s: torch.where(x > 0, x, s),
    "masked_fill": lambda x, s: x.masked_fill(torch.tensor([True, False, True, False], device=x.device), s),
    "full_like": lambda x, s: torch.full_like(x, s),
    "fill_": lambda x, s: x.clone().fill_(s),
    "add_alpha": lambda x, s: torch.add(x, x, alpha=s),
    "add_": lambda x, s: x.clone().add_(s),
    "mul_": lambda x, s: x.clone().mul_(s),
    "sub_alpha": lambda x, s: torch.sub(x, x, alpha=s),
}


def _calls(op, scalars):
    fn = BINARY[op]
    return [D.named(f"{op}({s!r})", (lambda x, s=s: fn(x, s))) for s in scalars]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_scalar_variants(eager_mode, op, dtype):
    D.check_both_orders(_calls(op, SCALARS), _input(dtype))


COMPLEX_OPS = ["add", "mul", "sub", "div", "eq", "full_like", "where"]


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", COMPLEX_OPS)
def test_complex_scalar_after_real(eager_mode, op, dtype):
    """``1 + 0j == 1``: a complex scalar must promote to complex, and never reuse the real program."""
    D.check_both_orders(_calls(op, [1, 1.0, 1 + 0j, True]), _input(dtype))


# --------------------------------------------------------------------------------------------------
# the issue's own examples, spelled out


def test_uint8_times_int_then_float(eager_mode):
    D.check_orders(lambda u: u * 2, lambda u: u * 2.0, t(1, 2, 200, dtype=torch.uint8))


def test_int_plus_float_then_int(eager_mode):
    D.check_orders(lambda i: i + 1.0, lambda i: i + 1, t(1, 2, 3))


def test_bool_plus_true(eager_mode):
    D.check_orders(lambda b: b + True, lambda b: b + 1, t(True, False))


def test_clamp_max_negative_zero(eager_mode):
    D.check_orders(lambda x: x.clamp(max=0.0), lambda x: x.clamp(max=-0.0), t(0.0, -0.0, 1.0, -1.0),
                   signed_zeros=True)


@pytest.mark.parametrize("v", [0.0, -0.0])
def test_signed_zero_fill_and_full(eager_mode, v):
    D.check_sequence([lambda x: torch.full_like(x, 0.0), lambda x: torch.full_like(x, v),
                      lambda x: torch.full((3,), v, device=x.device), lambda x: x.clone().fill_(v),
                      lambda x: torch.where(x > 5, x, v), lambda x: x * v],
                     t(1.0, 2.0, 3.0), signed_zeros=True)


FACTORIES = {
    "arange_end": [lambda d: torch.arange(5, device=d), lambda d: torch.arange(5.0, device=d)],
    "arange_start": [lambda d: torch.arange(1, 5, device=d), lambda d: torch.arange(1.0, 5, device=d),
                     lambda d: torch.arange(1, 5.0, device=d)],
    "arange_step": [lambda d: torch.arange(0, 4, 1, device=d), lambda d: torch.arange(0, 4, 1.0, device=d),
                    lambda d: torch.arange(0, 2, 0.5, device=d)],
    "full": [lambda d: torch.full((2,), 1, device=d), lambda d: torch.full((2,), 1.0, device=d),
             lambda d: torch.full((2,), True, device=d)],
    "full_dtype": [lambda d: torch.full((2,), 1, dtype=torch.uint8, device=d),
                   lambda d: torch.full((2,), 1.0, dtype=torch.uint8, device=d)],
    "scalar_tensor": [lambda d: torch.scalar_tensor(1, device=d), lambda d: torch.tensor(1, device=d),
                      lambda d: torch.tensor(1.0, device=d), lambda d: torch.tensor(True, device=d)],
    "linspace": [lambda d: torch.linspace(0, 1, 3, device=d), lambda d: torch.linspace(0.0, 1.0, 3, device=d)],
    "zeros_like": [lambda d: torch.zeros(2, dtype=torch.int64, device=d) + 1,
                   lambda d: torch.zeros(2, dtype=torch.int64, device=d) + 1.0],
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factory_scalar_types(eager_mode, name):
    calls = [D.named(f"{name}[{i}]", (lambda x, f=f: f(x.device.type))) for i, f in enumerate(FACTORIES[name])]
    D.check_both_orders(calls, t(0.0))


def test_arange_float_then_int(eager_mode):
    D.check_orders(lambda x: torch.arange(5.0, device=x.device), lambda x: torch.arange(5, device=x.device),
                   t(0.0))


ZERO_DIM = {
    "cpu_int": lambda d: torch.tensor(2),
    "cpu_float": lambda d: torch.tensor(2.0),
    "cpu_bool": lambda d: torch.tensor(True),
    "dev_int": lambda d: torch.tensor(2, device=d),
    "dev_float": lambda d: torch.tensor(2.0, device=d),
    "dev_f64": lambda d: torch.tensor(2.0, dtype=torch.float64, device=d),
}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", ["add", "mul", "div", "where", "pow"])
def test_zero_dim_tensor_as_scalar(eager_mode, op, dtype):
    """0-dim tensors take part in type promotion like scalars of their kind."""
    fn = BINARY[op]
    calls = [D.named(f"{op}({k})", (lambda x, m=m: fn(x, m(x.device.type)))) for k, m in ZERO_DIM.items()]
    calls += _calls(op, [2, 2.0, True])
    D.check_both_orders(calls, _input(dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8], ids=lambda d: str(d)[6:])
def test_int_pow_negative(eager_mode, dtype):
    """CPU: ``int ** negative int scalar`` raises; ``int ** negative int tensor`` gives 0 (1 and -1
    excepted), never INT64_MIN."""
    x = t(2, 1, 3, 0, dtype=dtype) if dtype == torch.uint8 else t(2, 1, -1, 3, dtype=dtype)
    D.check(lambda a: a ** -1, x)
    D.check(lambda a, b: a ** b, x, t(-1, -2, -3, -1, dtype=dtype if dtype != torch.uint8 else torch.int64))
    D.check(lambda a, b: torch.pow(a, b), x, t(0, 1, 2, 62, dtype=torch.int64))


@pytest.mark.parametrize("big", [2 ** 63, -(2 ** 63) - 1, 2 ** 64, 1e400])
def test_scalar_out_of_range(eager_mode, big):
    """A scalar too big for int64 / float: CPU raises or saturates; the tpu must do the same."""
    D.check(lambda x: x + big, t(1, 2))
    D.check(lambda x: x * big, t(1.0, 2.0))


@pytest.mark.parametrize("s", [300, -1, 256, 1.5, -0.5])
def test_narrow_int_scalar_wrap(eager_mode, s):
    """Scalars cast into narrow integer dtypes (uint8/int8) follow torch's rules."""
    D.check_both_orders([lambda x: x + s, lambda x: x + 1, lambda x: x.clone().fill_(s) if isinstance(s, int) else x],
                        t(1, 2, 250, dtype=torch.uint8))
    D.check_both_orders([lambda x: x * s, lambda x: x * 2], t(-100, 2, 100, dtype=torch.int8))


# --------------------------------------------------------------------------------------------------
# changing scalars compile nothing new


def _warm_then_count(step, values, warm=2):
    """Run ``step(v)`` on the first ``warm`` values (compiling what it needs), then on the rest;
    returns the counters of the rest."""
    for v in values[:warm]:
        read(step(v))
    with counting() as c:
        for v in values[warm:]:
            read(step(v))
    return c


STEPS = {
    "add_alpha": lambda x, g, v: x.add_(g, alpha=-v),
    "mul_scalar": lambda x, g, v: x * v,
    "add_scalar": lambda x, g, v: x + v,
    "rsub_scalar": lambda x, g, v: v - x,
    "div_scalar": lambda x, g, v: x / v,
    "pow_scalar": lambda x, g, v: x.abs() ** v,
    "clamp": lambda x, g, v: x.clamp(min=-v, max=v),
    "fill_": lambda x, g, v: g.clone().fill_(v),
    "masked_fill": lambda x, g, v: x.masked_fill(x > 0, v),
    "full": lambda x, g, v: torch.full((4,), v, device=x.device),
    "lerp": lambda x, g, v: torch.lerp(x, g, v),
    "addcdiv": lambda x, g, v: torch.addcdiv(x, g, g.abs() + 1, value=v),
    "addcmul_": lambda x, g, v: x.addcmul_(g, g, value=-v),
    "where": lambda x, g, v: torch.where(x > 0, x, v),
    "mul_int": lambda x, g, v: x * int(v * 1000),
    "add_nan": lambda x, g, v: x + float("nan"),
    "add_int_tensor": lambda x, g, v: g.long() + int(v * 100),
    "gt_scalar": lambda x, g, v: x > v,
    "sub_": lambda x, g, v: x.sub_(v),
    "div_int_scalar": lambda x, g, v: g.long() // max(1, int(v * 100)),
}

VALUES = [0.01, 0.02, 0.013, 0.5, 0.7, 1.3, 3e-4]


@pytest.mark.parametrize("name", sorted(STEPS))
def test_changing_scalar_compiles_nothing(eager_mode, name):
    fn = STEPS[name]
    x = rand(4).to(DEV)
    g = rand(4, seed=1).to(DEV)
    c = _warm_then_count(lambda v: fn(x, g, v), VALUES)
    assert c.compiles == 0 and c.cache_misses == 0, (
        f"[recompiles] {name}: {len(VALUES) - 2} calls with new scalar values compiled {c.compiles} programs "
        f"({c.cache_misses} cache misses)")


@pytest.mark.parametrize("name", sorted(STEPS))
def test_changing_scalar_values(eager_mode, name):
    """The values computed with changing scalars match CPU (a value baked into a reused program would
    show here)."""
    fn = STEPS[name]
    calls = [D.named(f"{name}({v})", (lambda x, g, v=v: fn(x, g, v))) for v in VALUES]
    D.check_sequence(calls, rand(4), rand(4, seed=1))


def _model(d):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).to(d)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2),
}


def _train_steps(d, make_opt, steps, sched=False):
    m = _model(d)
    opt = make_opt(m.parameters())
    s = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7) if sched else None
    x = rand(3, 4, seed=2).to(d)
    y = rand(3, 2, seed=3).to(d)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        if s:
            s.step()
        losses.append(loss.detach())
    return m, opt, losses


@pytest.mark.parametrize("opt,sched", [("sgd", True), ("sgd_momentum_nesterov", False), ("adam", False),
                                       ("adam", True), ("adamw", False), ("rmsprop", False)])
def test_optimizer_steps_compile_nothing_after_warmup(eager_mode, opt, sched):
    m, o, _ = _train_steps(DEV, OPTIMIZERS[opt], 3, sched)
    x = rand(3, 4, seed=2).to(DEV)
    y = rand(3, 2, seed=3).to(DEV)
    s = torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.7) if sched else None
    with counting() as c:
        for _ in range(3):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
            if s:
                s.step()
        read(list(m.parameters()))
    assert c.compiles == 0 and c.cache_misses == 0, (
        f"[recompiles] {opt}{' + StepLR' if sched else ''}: 3 training steps after a 3-step warm-up compiled "
        f"{c.compiles} programs ({c.cache_misses} cache misses)")


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu(eager_mode, opt):
    mc, _, lc = _train_steps("cpu", OPTIMIZERS[opt], 4, sched=True)
    mt, _, lt = _train_steps(DEV, OPTIMIZERS[opt], 4, sched=True)
    assert_same(torch.stack(lc), read(torch.stack(lt)), where="losses", atol=1e-4, rtol=1e-4)
    assert_same(list(mc.parameters()), read(list(mt.parameters())), where="parameters", atol=1e-4, rtol=1e-4)


def test_nan_scalar_hits_cache(eager_mode):
    x = rand(4).to(DEV)
    for _ in range(2):
        read(x + NAN)
        read(torch.full_like(x, NAN))
    with counting() as c:
        for _ in range(3):
            read(x + NAN)
            read(torch.full_like(x, NAN))
            read(x.masked_fill(x > 0, NAN))
    assert c.cache_misses <= 1 and c.compiles <= 1, (
        f"[recompiles] a NaN scalar compiled {c.compiles} programs / {c.cache_misses} cache misses over 3 calls")


def test_program_cache_does_not_grow_per_scalar_value(eager_mode):
    """40 distinct scalar values through a few ops: the backend's program caches must not grow with
    the number of values."""
    x = rand(4).to(DEV)
    for v in (0.25, 0.5):
        read([x * v, x + v, x.clamp(max=v)])
    before = program_cache_sizes()
    for i in range(40):
        v = 1.0 + i / 7
        read([x * v, x.clamp(max=v)])
    after = program_cache_sizes()
    grown = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 3}
    assert not grown, f"[growth] program caches grew with the scalar values: {grown}"


def test_memory_does_not_grow_per_scalar_value(eager_mode):
    x = rand(64).to(DEV)
    read(x * 0.5)
    sync()
    base = torch.tpu.memory_allocated()
    for i in range(30):
        read(x * (1 + i / 3))
    sync()
    import gc
    gc.collect()
    grown = torch.tpu.memory_allocated() - base
    assert grown <= 64 * 4 * 2, f"[growth] device memory grew by {grown} bytes over 30 calls"


@pytest.mark.parametrize("v", [-0.0, True, 1.0])
def test_compiled_scalar_variants(v):
    """Compiled programs (torch.compile backend='tpu') keyed by scalar type: constants baked per value
    by dynamo, but never one variant's program for another."""
    D.check(lambda x: x * v + v, t(1, 2, 3, dtype=torch.uint8), modes=["compiled"], signed_zeros=True)


# --------------------------------------------------------------------------------------------------
# tensor-tensor promotion (dtype pairs), 0-dim tensors of another dtype included

PAIR_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.float16, torch.bfloat16]


def _pair_input(dtype, shape=(3,)):
    base = t(1, 0, 3) if dtype != torch.bool else t(True, False, True)
    return base.to(dtype).reshape(shape) if shape else base[2].to(dtype)


@pytest.mark.parametrize("b", PAIR_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("a", PAIR_DTYPES, ids=lambda d: str(d)[6:])
def test_tensor_pair_promotion(a, b):
    """add/div/where between tensors of two dtypes, and with a 0-dim tensor of the other dtype: result
    dtype and values as on CPU (int8 + uint8 -> int16, float16 + bfloat16 -> float32...). Strict mode
    only (promotion comes from the meta kernels, the same in every mode); all passed when written."""
    calls = [
        D.named("add", lambda x, y, z: x + y),
        D.named("div", lambda x, y, z: x / y),
        D.named("where", lambda x, y, z: torch.where(x != 0, x, y)),
        D.named("add_0dim", lambda x, y, z: x + z),
        D.named("cat", lambda x, y, z: torch.cat([x, y])),
    ]
    D.check_sequence(calls, _pair_input(a), _pair_input(b), _pair_input(b, shape=None))


# --------------------------------------------------------------------------------------------------
# pow across dtype kinds, and dtypes the device cannot hold

POW_BASES = {"float": t(0.0, 1.0, 2.0, -1.5), "int": t(0, 1, 2, -3), "uint8": t(0, 1, 2, 3, dtype=torch.uint8),
             "complex": torch.tensor([0j, 1j, 2 + 0j, -1 + 1j]), "bool": t(True, False, True, True)}
POW_EXPONENTS = {"complex_scalar": 2.5 + 1j, "complex_0dim": torch.tensor(2.5 + 1j),
                 "complex_tensor": torch.tensor([2.5 + 1j, 1.5 + 0j, 1 + 0j, 0.5 - 2j]), "zero_complex": 0j,
                 "bool_0dim": torch.tensor(True), "bool_tensor": t(True, False, False, True)}


@pytest.mark.parametrize("e", sorted(POW_EXPONENTS))
@pytest.mark.parametrize("base", sorted(POW_BASES))
def test_pow_kinds(eager_mode, base, e):
    """A zero base to a complex exponent with positive real part is 0 on CPU (JAX's exp(y log 0) is
    NaN); bool ** bool tensors have no CPU kernel (it raised nothing on the tpu). Not compared: 0 ** 0j
    inside a complex exponent tensor (CPU's vectorised kernel gives NaN, the tpu 1, as 0 ** 0j does on
    CPU for a Python exponent)."""
    exponent = POW_EXPONENTS[e]
    D.check(lambda x, y: torch.pow(x, y), POW_BASES[base].clone(),
            exponent.clone() if isinstance(exponent, torch.Tensor) else exponent)


def test_unsupported_dtype_is_named_not_a_type_error():
    """float16 + a complex64 0-dim tensor is complex32 (ComplexHalf), which the device cannot hold: a
    RuntimeError naming the dtype (a TypeError inside a Python operator reads as "unsupported operand
    type(s) for +: 'TpuTensor' and 'TpuTensor'")."""
    a = torch.tensor([1.0, 2.0], dtype=torch.float16, device="tpu")
    b = torch.tensor(1 + 2j, dtype=torch.complex64, device="tpu")
    for fn in (lambda: a + b, lambda: a - b, lambda: torch.zeros(2, dtype=torch.complex32).to("tpu")):
        with pytest.raises(RuntimeError, match="complex32 is not supported on the tpu device"):
            fn()


# Python scalars of other types in less common places
U8 = torch.tensor([0, 2, 250, 5], dtype=torch.uint8)
BOOLS = torch.tensor([True, False, True, False])
HALF = torch.tensor([-1.5, 0.0, 2.0, -0.0], dtype=torch.float16)
SCALAR_CORNERS = {
    # uint8 // -1: torch converts -1 to uint8 (255); the tpu divided by -1 in int32
    "div_trunc_uint8_by_negative": (lambda x: torch.div(x, -1, rounding_mode="trunc"), U8),
    "div_trunc_uint8_by_3": (lambda x: torch.div(x, 3, rounding_mode="trunc"), U8),
    "div_trunc_int_negative": (lambda x: torch.div(x.long() - 3, -2, rounding_mode="trunc"), U8),
    # False / 0.0 is nan: XLA folded the converted bool's 0 / 0 to 0
    "div_trunc_bool_by_zero": (lambda b: torch.div(b, 0.0, rounding_mode="trunc"), BOOLS),
    "div_trunc_bool_by_negative_zero": (lambda b: torch.div(b, -0.0, rounding_mode="trunc"), BOOLS),
    # a bool for a Scalar parameter picks the input's kernel: CPU has none for integers (the tpu computed)
    "leaky_relu_int_bool_slope": (lambda x: F.leaky_relu(x.long(), True), U8),
    "hardshrink_int_bool_lambda": (lambda x: F.hardshrink(x.long(), True), U8),
    "softplus_bool_beta": (lambda b: F.softplus(b, True), BOOLS),
    # half multiplies in float32: 0 * 2**40 is 0 (the slope as half is inf: 0 * inf was nan)
    "leaky_relu_half_huge_slope": (lambda h: F.leaky_relu(h, 2.0 ** 40), HALF),
}


@pytest.mark.parametrize("case", sorted(SCALAR_CORNERS))
def test_scalar_corners(eager_mode, case):
    fn, x = SCALAR_CORNERS[case]
    D.check(fn, x, signed_zeros=True)


_SIGNED = [complex(-0.0, 2.0), complex(-0.0, -0.0), 0j, complex(3.0, -0.0), complex(float("inf"), 1.0),
           complex(1.0, float("nan")), complex(-0.0, float("inf"))]


def _same_bits(got, want) -> bool:
    got, want = torch.view_as_real(got.cpu()), torch.view_as_real(want)
    nan = want.isnan()
    return bool(((got == want) | (nan & got.isnan())).all() and ((torch.signbit(got) == torch.signbit(want)) | nan).all())


def test_complex_add_and_sub_follow_cpus_unit_alpha_product():
    """CPU torch's complex add and sub multiply ``other`` by alpha = +-1 + 0j even for the default alpha, so
    zeros' signs (and infinities' NaNs) follow that product: ``z + (-0 - 0j)`` of -0 + 2j is +0 + 2j, where
    IEEE's -0 + -0 is -0. Graph constants too (fused and compiled): XLA folds ``v + 0`` into ``v``, which
    kept -0.0 (``z + (-0.0)``, ``0.0 - z``)."""
    z = torch.tensor(_SIGNED, dtype=torch.complex64)
    calls = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "rsub": lambda a, b: b - a}
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            for s in _SIGNED + [-0.0, 0.0, 2.5]:
                for name, call in calls.items():
                    assert _same_bits(call(z.to("tpu"), s), call(z, s)), (mode, name, s)
                    w = torch.full_like(z, s)
                    assert _same_bits(call(z.to("tpu"), w.to("tpu")), call(z, w)), (mode, name, "tensor", s)

    def constants(t):
        return t + (-0.0), t - 0.0, t + complex(-0.0, -0.0), 0.0 - t, t + 0, 1j - t, t - complex(0.0, -0.0)

    compiled = torch.compile(constants, backend="tpu")
    for got, want in zip(compiled(z.to("tpu")), constants(z)):
        assert _same_bits(got, want), (got, want)


def test_complex_add_and_sub_with_an_alpha_match_cpus_bits():
    """``torch.add(z, w, alpha=a)``: other times alpha first, CPU's product, for real, complex, signed-zero and
    zero alphas, with signed zeros, infinities and NaNs in both operands."""
    z = torch.tensor(_SIGNED, dtype=torch.complex64)
    w = z.flip(0)
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            for alpha in (2, -1.5, 1j, 2 - 1j, -0.0, 0):
                for op in (torch.add, torch.sub):
                    got = op(z.to("tpu"), w.to("tpu"), alpha=alpha)
                    assert _same_bits(got, op(z, w, alpha=alpha)), (mode, op.__name__, alpha)
