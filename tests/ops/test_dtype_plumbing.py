"""Dtypes and tensor plumbing, in every executor.

A tour of the less common dtypes (float8 weights and ``torch._scaled_mm``,
uint16/32/64, narrow-int wraparound, bool, complex and ``torch.fft``), of the tensor plumbing (repr,
pickle and ``torch.save``, ``as_strided``, in-place writes through expanded views, dtype views) and of
the RNG and ``torch.tpu`` / ``torch.accelerator`` APIs a ``torch.cuda`` user calls. Every case compares
with CPU torch through ``differential`` (equal results and inputs afterwards, or both raise) and runs in
one crash-tolerant child process.

Cases (each tagged with the failure it guards against):
  * float8_e4m3fn conversions gave NaN where torch saturates to +-448 (``.to(fp8)``, ``copy_``, an fp8
    matmul's result); fp8 matmul did not accumulate in float32; e4m3fnuz/e5m2fnuz were refused;
    ``torch._scaled_mm`` and ``torch.fft.*`` had no lowering; ``aten.view.dtype`` had none in compiled
    graphs; an eager ``complex64.view(int16)`` converted values instead of reinterpreting bytes.
  * ``uint16 * int64_tensor`` gave uint16 (torch refuses the promotion); argmax & co. of bool computed
    (CPU refuses); compiled ``int_tensor.mul_(1.5)`` and writes into an expanded view were computed (eager
    refuses; ``fill_`` came back as garbage); ``as_strided`` past its storage read past it.
  * repr dropped requires_grad / grad_fn / "Parameter containing:"; a callable map_location failed for
    a tpu checkpoint; ``get_rng_state`` lost the seed's top bit (``manual_seed(-1)`` restored another
    stream); compiled ``torch.randn/rand/randint`` had no lowering; ``torch.accelerator.synchronize()`` and
    its memory functions failed inside torch; ``torch.tpu.synchronize(3)`` was accepted.
  * complex division by a constant zero gave nan+nanj in fused and compiled programs (XLA folded it);
    uint64 against a 0-dim signed operand computed in float64 (saturated instead of wrapping).

Documented, not matched: float -> int conversion of NaN, infinities and out-of-range values is undefined
behaviour in torch; the tpu saturates (XLA's rule) where x86 CPU wraps, so those cases compare with the
saturating rule computed on the CPU. Ops CPU torch has no kernel for (fp8 or uint16/32/64 arithmetic)
are computed on the tpu and compared with CPU torch's result through a wider dtype.
"""
import copy
import io
import math
import pickle

import pytest
import torch

from tests.harness import differential as D
from tests.harness.compare import assert_same_value, _Host
from tests.harness.errors import assert_device_works, is_clear
from tests.harness.inputs import rand
from tests.harness.isolated import isolated_case_tests
from tests.harness.modes import _in_mode

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]
F8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
VALS = torch.tensor([0.0, -0.0, 1.0, -1.5, 0.3, 100.0, 448.0, 449.0, 465.0, 500.0, 57344.0, 61440.0, 1e6, -1e6,
                     float("inf"), -float("inf"), float("nan"), 1e-9, 2 ** -9])
Z = torch.complex(rand(3, 4), rand(3, 4, seed=3))
X = rand(4, 6)

CASES = {}


def case(name, fn, *args, modes=ALL, **kw):
    CASES[name] = lambda: D.check(fn, *args, modes=modes, **kw)
    if "scaled_mm" in name:
        CASES[name] = _with_cpu_reference_kernels(CASES[name])


def _with_cpu_reference_kernels(run):
    """CPU torch's ``_scaled_mm`` takes oneDNN where the CPU has AMX, which refuses the fnuz float8 types and
    gives nan for a float8 result out of range; elsewhere its reference kernel takes every float8 type and
    saturates. The reference kernel's results are what the case compares with (oneDNN off while it runs)."""
    def wrapped():
        before = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False
        try:
            return run()
        finally:
            torch.backends.mkldnn.enabled = before

    return wrapped


def _name(dt):
    return str(dt).split(".")[1]


# ---------------------------------------------------------------------------------------------------
# float8: conversions saturate like torch, matmul and _scaled_mm


def _fp8_family(dt):
    n = _name(dt)
    case(f"fp8:{n}:roundtrip", lambda x: x.to(dt).float(), VALS)
    case(f"fp8:{n}:from_bf16_f16_f64", lambda x: (x.bfloat16().to(dt).float(), x.half().to(dt).float(),
                                                   x.double().to(dt).float()), VALS)
    case(f"fp8:{n}:from_int", lambda x: x.to(dt).float(), torch.arange(-20, 20) * 37)
    case(f"fp8:{n}:copy_into", lambda x, y: y.copy_(x), VALS, torch.zeros(19).to(dt))
    case(f"fp8:{n}:upload_cat_index", lambda x, i: (torch.cat([x, x[:3]]).float(), x[i].float(), x[1::2].clone()),
         VALS.to(dt), torch.tensor([0, 3, 5, 2]), modes=EAGER)
    case(f"fp8:{n}:view_uint8", lambda x: x.view(torch.uint8) * 1, VALS.to(dt))
    case(f"fp8:{n}:uint8_view_as", lambda x: x.view(dt).float(), torch.arange(256).to(torch.uint8))
    case(f"fp8:{n}:item_tolist", lambda x: (x[2].item(), x[14].item(), x.tolist()), VALS.to(dt), modes=EAGER)
    case(f"fp8:{n}:scaled_mm", lambda a, b: torch._scaled_mm(
        a, b.t(), torch.tensor(0.5, device=a.device), torch.tensor(2.0, device=a.device), out_dtype=torch.float32),
        (torch.arange(32.0).reshape(2, 16) / 8).to(dt), (torch.arange(256.0).reshape(16, 16) / 64).to(dt))


for _dt in F8:
    _fp8_family(_dt)
case("fp8:matmul_saturates", lambda x: x[:16].reshape(4, 4) @ x[:16].reshape(4, 4), VALS.to(torch.float8_e4m3fn))
case("fp8:scaled_mm_bias_bf16", lambda a, b, bias: torch._scaled_mm(
    a, b.t(), torch.tensor(1.0, device=a.device), torch.tensor(1.0, device=a.device), bias=bias,
    out_dtype=torch.bfloat16), (rand(4, 16) * 4).to(torch.float8_e4m3fn),
    (rand(16, 16, seed=2) * 4).to(torch.float8_e4m3fn), rand(16, seed=5).bfloat16())
case("fp8:scaled_mm_fp8_out_scale_result", lambda a, b: torch._scaled_mm(
    a, b.t(), torch.tensor(2.0, device=a.device), torch.tensor(3.0, device=a.device),
    scale_result=torch.tensor(0.25, device=a.device), out_dtype=torch.float8_e4m3fn),
    (rand(4, 16) * 8).to(torch.float8_e4m3fn), (rand(16, 16, seed=2) * 8).to(torch.float8_e4m3fn))
case("fp8:scaled_mm_rowwise", lambda a, b, sa, sb: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16),
     (rand(4, 16) * 4).to(torch.float8_e4m3fn), (rand(16, 16, seed=2) * 4).to(torch.float8_e4m3fn),
     rand(4, 1, low=0.5, high=2), rand(1, 16, seed=7, low=0.5, high=2), modes=EAGER)
case("fp8:scaled_mm_float_inputs_refused", lambda a, b: torch._scaled_mm(
    a, b.t(), torch.tensor(1.0, device=a.device), torch.tensor(1.0, device=a.device)),
    rand(4, 16), rand(8, 16).to(torch.float8_e4m3fn), expect_raise=True, modes=EAGER)


# CPU torch has no fp8 add/mul kernel: refused as on CPU (and on CUDA); through float32 it computes
for _dt in F8:
    case(f"fp8:{_name(_dt)}:add_refused", lambda t: t + t, VALS[:6].to(_dt), expect_raise=True, modes=EAGER)
    case(f"fp8:{_name(_dt)}:mul_refused", lambda t: t * 2, VALS[:6].to(_dt), expect_raise=True, modes=EAGER)
    case(f"fp8:{_name(_dt)}:arith_through_float", lambda t: ((t.float() + t.float()).to(t.dtype), t.float().sum()),
         VALS[:6].to(_dt), modes=EAGER)

# ---------------------------------------------------------------------------------------------------
# uint16/32/64, narrow ints, bool, half promotion


def _uint_family(dt):
    n = _name(dt)
    big = {torch.uint16: 65535, torch.uint32: 2 ** 32 - 1, torch.uint64: 2 ** 63 + 5}[dt]
    x = torch.tensor([0, 1, 7, 1000, big], dtype=dt)
    case(f"uint:{n}:ops_cpu_has", lambda x: (x * 3, x & 5, x | 2, x ^ x, x == 7, x.sum(), x.cumsum(0), x.float(),
                                             x.long(), x.sort().values, torch.cat([x, x]), x[torch.tensor([4, 0])]),
         x)
    case(f"uint:{n}:from_negative_int", lambda x: x.to(dt), torch.tensor([-1, 3, -100, 0]))
    case(f"uint:{n}:tolist_item", lambda x: (x.tolist(), x[4].item()), x, modes=EAGER)
    case(f"uint:{n}:promote_refused", lambda x: x * torch.tensor([2], device=x.device), x, expect_raise=True)
    case(f"uint:{n}:promote_uint8_refused", lambda x: x + torch.tensor([2], dtype=torch.uint8, device=x.device), x,
         expect_raise=True)
    case(f"uint:{n}:promote_0dim_and_float_ok", lambda x: (
        x * torch.tensor(2, device=x.device), x * torch.tensor(-3, device=x.device), x * 1.5,
        x * torch.tensor([1.5], device=x.device), torch.tensor([2**62, -5], device=x.device) * x[4]), x)

    # ops CPU has no uint16/32/64 kernel for: refused as on CPU (the tpu computed them through int64)
    small = torch.tensor([0, 1, 7, 1000], dtype=dt)
    for op, fn in {"add": lambda t: t + 5, "lt": lambda t: t < 2, "max": lambda t: t.max(), "lshift": lambda t: t << 1,
                   "rshift": lambda t: t >> 1, "add_0dim": lambda t: t + torch.tensor(-3, device=t.device),
                   "sub": lambda t: t - 9}.items():
        case(f"uint:{n}:cpu_lacks_{op}", fn, small, expect_raise=True, modes=EAGER)


for _dt in (torch.uint16, torch.uint32, torch.uint64):
    _uint_family(_dt)


def _int_family(dt):
    n = _name(dt)
    ii = torch.iinfo(dt)
    x = torch.tensor([ii.min, ii.min + 1, -1 if ii.min < 0 else 0, 0, 1, ii.max - 1, ii.max], dtype=dt)
    case(f"int:{n}:wrap", lambda x: (x + x, x + 100, x * x, -x, x.abs(), x - x.flip(0), x ** 3, ~x, x << 3, x >> 3),
         x)
    case(f"int:{n}:promote", lambda x: (x.sum(), x.sum(dtype=dt), x.prod(), x.cumsum(0), x / 3, x.clamp(-5, 300)), x)
    case(f"int:{n}:inplace_float_refused", lambda x: x.mul_(1.5), x, expect_raise=True)

    def iadd_refused(x):
        x *= 1.5
        return x

    case(f"int:{n}:imul_float_refused", iadd_refused, x, expect_raise=True)


for _dt in (torch.int8, torch.int16, torch.int32, torch.uint8):
    _int_family(_dt)


def _float_to_int_family(dt):
    """In range: CPU's values. NaN, infinities, out of range (undefined in torch): the tpu saturates."""
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e20, -1e20, 3e9, -3e9, 300.7, -2.5])
    inside = torch.tensor([2.5, -2.5, 100.9, -0.9, 0.0, 127.0])
    n = _name(dt)
    if dt != torch.uint8:
        case(f"f2i:{n}:in_range", lambda x: (x.to(dt), x.double().to(dt), x.bfloat16().to(dt)), inside)

    def saturates():
        ii = torch.iinfo(dt)
        for src in (torch.float32, torch.float64):
            exp = torch.tensor([0 if math.isnan(v) else ii.max if v >= ii.max else ii.min if v <= ii.min else int(v)
                                for v in special.to(src).tolist()], dtype=dt)
            for mode in EAGER:
                with _in_mode(mode):
                    got = special.to(src).to("tpu").to(dt).cpu()
                assert_same_value(exp, _Host(got), where=f"{src} -> {dt} {mode}")

    CASES[f"f2i:{n}:out_of_range_saturates"] = saturates


for _dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
    _float_to_int_family(_dt)

B = (torch.tensor([True, False, True, True]), torch.tensor([True, True, False, True]))
case("bool:arith", lambda a, b: (a + b, a * b, a.sum(), a.cumsum(0), a / b, a // b, a ^ b, ~a, a.prod(), a.max(),
                                 a + 2, a + 0.5, a * True), *B)
for _op in ("argmax", "argmin"):
    case(f"bool:{_op}_refused", lambda a, b, op=_op: getattr(a, op)(), *B, expect_raise=True)
case("bool:topk_refused", lambda a, b: a.topk(1), *B, expect_raise=True)
case("bool:median_kthvalue_refused", lambda a, b: a.median(), *B, expect_raise=True)


def _half_family(dt):
    n = _name(dt)
    x = torch.tensor([1.0, 2.5, 65504.0, -3.0]).to(dt)
    case(f"half:{n}:scalars_and_0dim", lambda x: (
        x * 1e-3, x * 1e5, x + torch.tensor(0.1), x + torch.tensor(0.1, dtype=torch.float64, device=x.device),
        x + torch.tensor([0.1], device=x.device), torch.tensor([1, 2, 3, 4], device=x.device) + x,
        x[0] + torch.tensor([1, 2], device=x.device), x[0] * torch.ones(2, device=x.device),
        torch.where(x > 2, x, 0.1), x / 3, x.sum(), x.mean(), x.cumsum(0)), x)


for _dt in (torch.float16, torch.bfloat16):
    _half_family(_dt)

# ---------------------------------------------------------------------------------------------------
# complex, torch.fft, dtype views


def _complex_family(dt):
    n = _name(dt)
    z = Z.to(dt)
    case(f"complex:{n}:arith", lambda z: ((z * z + z / (z + 1) - 2j * z) ** 2, z.abs(), z.angle(), z.sum(),
                                          z.mean(1), z.prod(0), z @ z.T.conj(), z.exp(), z.sgn(), z.cumsum(1)), z)
    case(f"complex:{n}:fft", lambda z: (torch.fft.fft(z), torch.fft.ifft(z, dim=0), torch.fft.fft2(z),
                                        torch.fft.fftn(z, norm="ortho"), torch.fft.fft(z, n=6),
                                        torch.fft.rfft(z.real), torch.fft.irfft(z), torch.fft.hfft(z),
                                        torch.fft.ihfft(z.real), torch.fft.rfft2(z.real, norm="forward"),
                                        torch.fft.irfftn(z, s=(3, 6)), torch.fft.fftshift(z)), z)
    case(f"complex:{n}:stft", lambda z: torch.stft(z.real.reshape(-1).repeat(4), 8, return_complex=True,
                                                   window=torch.hann_window(8, device=z.device)),
         z, atol=1e-4, rtol=1e-4)


for _dt in (torch.complex64, torch.complex128):
    _complex_family(_dt)
case("fft:freq", lambda x: (torch.fft.fftfreq(7, 0.3, device=x.device), torch.fft.fftfreq(8, device=x.device),
                            torch.fft.rfftfreq(9, 2.5, device=x.device),
                            torch.fft.fftfreq(6, dtype=torch.float64, device=x.device)), X)
case("fft:half_refused", lambda x: torch.fft.fft(x.half()), X, expect_raise=True)


def _fft_grad(x):
    x = x.clone().requires_grad_()
    out = torch.fft.rfft(x).abs().sum() + torch.fft.fft(x * 1j).real.sum()
    out.backward()
    return out, x.grad


case("fft:grad", _fft_grad, X, modes=EAGER, atol=1e-4, rtol=1e-4)

VIEW_PAIRS = [(torch.float32, torch.int32), (torch.float32, torch.int16), (torch.int8, torch.int32),
              (torch.complex64, torch.float32), (torch.float32, torch.complex64), (torch.complex64, torch.int16),
              (torch.complex128, torch.complex64), (torch.complex64, torch.complex128), (torch.bool, torch.int8),
              (torch.float8_e4m3fn, torch.uint8), (torch.bool, torch.float16), (torch.int16, torch.complex64)]


def _view_dtype(src, dst):
    x = (torch.arange(24.0) * 1.37 - 3).reshape(2, 12).to(src)

    def fn(x):
        v = x.view(dst)
        return v.view(torch.uint8) * 1 if dst != torch.bool else v * 1

    def write(x):
        v = x.view(dst)
        v[..., :1] = v[..., 1:2].clone()
        return x.view(torch.uint8) * 1

    case(f"view_dtype:{_name(src)}->{_name(dst)}", lambda x: (fn(x), write(x)), x)


for _s, _d in VIEW_PAIRS:
    _view_dtype(_s, _d)


def _complex_div_by_constant_zero(z):
    return z / torch.zeros_like(z), z / 0, z.real / torch.zeros_like(z), z / (2 + 1j)


def _complex_div_extremes(z, w):
    return z / w, w / z, z.real / w, z / w.real


CASES["complex:div_by_constant_zero"] = lambda: D.check(_complex_div_by_constant_zero, Z, modes=ALL)
CASES["complex:div_extremes"] = lambda: D.check(
    _complex_div_extremes, torch.complex(torch.tensor([1.0, -2.0, 1.0, 1e30, 1e-30, 0.0]),
                                         torch.tensor([3.0, -1.0, 0.0, 1e30, 2e-30, 0.0])),
    torch.complex(torch.tensor([0.0, 0.0, 0.0, 3e30, 1e-30, 0.0]), torch.tensor([0.0, 0.0, 0.0, 1e-5, 5e-31, 0.0])),
    modes=ALL)

# ---------------------------------------------------------------------------------------------------
# plumbing: as_strided bounds, expanded writes, repr, pickle/save


case("as_strided:in_bounds", lambda x: (x.as_strided((3, 2), (2, 5), 1), x.as_strided((3, 3), (0, 1), 2),
                                        x[1:].as_strided((2, 2), (1, 3), 4), x.as_strided((2,), (1,), 22)), X)
for _n, _args in {"past_end": ((5, 6), (6, 1)), "offset_past_end": ((2,), (1,), 23),
                  "offset_far": ((2,), (1,), 1000)}.items():
    case(f"as_strided:{_n}_refused", lambda x, a=_args: x.as_strided(*a), X, expect_raise=True)
case("as_strided:of_dtype_view_past_end", lambda x: x.view(torch.int16).as_strided((2,), (1,), 47), X,
     expect_raise=True, modes=EAGER)
case("expand:add_refused", lambda x: x[:1].expand(3, 6).add_(1), X, expect_raise=True)
case("expand:broadcast_to_mul_refused", lambda x: torch.broadcast_to(x[0], (3, 6)).mul_(2), X, expect_raise=True)
case("expand:clone_then_write_ok", lambda x: x[:1].expand(3, 6).clone().add_(1), X)


def _expanded_fill(x):
    x[:1].expand(3, 6).fill_(1)
    return x


def _expanded_fill_modes():
    """fill_ through an expanded view: CPU writes the shared row; eager matches, the compiled program
    refuses clearly (AOTAutograd's functionalisation returned garbage for it)."""
    D.check(_expanded_fill, X, modes=EAGER)
    x = X.to("tpu")
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        torch.compile(_expanded_fill, backend="tpu", dynamic=False)(x)
    assert "expanded view" in str(info.value), info.value
    assert_device_works()


CASES["expand:fill_compiled_refused"] = _expanded_fill_modes


def _strip_device(r):
    return r.replace(", device='tpu:0'", "")


REPRS = {
    "requires_grad": lambda d: torch.ones(2, device=d, requires_grad=True),
    "grad_fn": lambda d: torch.ones(2, device=d, requires_grad=True) * 2,
    "parameter": lambda d: torch.nn.Parameter(torch.arange(3.0).to(d)),
    "bf16_pending": lambda d: (torch.arange(6.0, device=d) / 7).bfloat16() * 3,
    "complex_conj": lambda d: Z.to(d).conj(),
    "empty": lambda d: torch.empty(0, 3, device=d),
    "fp8": lambda d: torch.tensor([0.5, 448.0, -3.0]).to(d).to(torch.float8_e4m3fn),
    "large": lambda d: torch.arange(5000.0).reshape(50, 100).to(d),
    "half_requires_grad": lambda d: torch.ones(2, device=d).half().requires_grad_(),
}


def _repr_case(make):
    def run():
        for mode in EAGER:
            with _in_mode(mode):
                exp, got = repr(make("cpu")), repr(make("tpu"))
            assert "device='tpu:0'" in got, got
            assert _strip_device(got) == exp, f"[wrong value] repr ({mode}):\nCPU {exp}\ntpu {got}"
    return run


CASES.update({f"repr:{k}": _repr_case(v) for k, v in REPRS.items()})


def _save_load(x, **kw):
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    return torch.load(buf, **kw)


RTRIP = {"pickle": lambda x: pickle.loads(pickle.dumps(x)), "deepcopy": copy.deepcopy, "save": _save_load}
STORED = {"fp8": torch.tensor([0.5, 448.0, -3.0]).to(torch.float8_e4m3fn), "complex128": Z.to(torch.complex128),
          "bool": torch.tensor([True, False, True]), "empty": torch.empty(0, 4),
          "uint16": torch.tensor([1, 65535], dtype=torch.uint16), "bf16_noncontig": rand(3, 4).bfloat16().t()}
for _k, _v in STORED.items():
    for _r, _f in RTRIP.items():
        case(f"roundtrip:{_r}:{_k}", lambda x, f=_f: (lambda y: (y, y.device == x.device, y.stride()))(f(x)), _v,
             modes=EAGER)


def _param_save(x):
    p = torch.nn.Parameter(x.clone())
    out = _save_load({"p": p, "alias": p})
    return out["p"], isinstance(out["p"], torch.nn.Parameter), out["p"].requires_grad, out["p"] is out["alias"]


case("save:parameter", _param_save, rand(3), modes=EAGER)


def _callable_map_location():
    """torch.load(map_location=callable) of a tpu checkpoint: called like torch calls it for CPU ones."""
    x = rand(3, 2)
    for src in ("cpu", "tpu"):
        for ml, where in ((lambda s, loc: s, "cpu"), (lambda s, loc: None, src)):
            buf = io.BytesIO()
            torch.save({"x": x.to(src), "v": x.to(src)[1]}, buf)
            buf.seek(0)
            out = torch.load(buf, map_location=ml)
            assert out["x"].device.type == where and out["v"].device.type == where, (src, where, out)
            assert torch.equal(out["x"].cpu(), x) and torch.equal(out["v"].cpu(), x[1])


CASES["save:callable_map_location"] = _callable_map_location

# ---------------------------------------------------------------------------------------------------
# RNG and the torch.tpu / torch.accelerator API


def _rng_state_roundtrip():
    T = torch.tpu
    for seed in (-1, 2 ** 63 + 5, 2 ** 64 - 1, -2 ** 63, 5):
        T.manual_seed(seed)
        assert T.initial_seed() == torch.manual_seed(seed).initial_seed(), seed
        state = T.get_rng_state()
        a = torch.randn(3, device="tpu").cpu()
        T.set_rng_state(state)
        b = torch.randn(3, device="tpu").cpu()
        assert torch.equal(a, b), f"[wrong value] seed {seed}: set_rng_state(get_rng_state()) drew {a} then {b}"
    for bad in (2 ** 64, -2 ** 63 - 1):
        with pytest.raises(ValueError):
            torch.manual_seed(bad)
        with pytest.raises(ValueError):
            T.manual_seed(bad)


def _rng_same_in_strict_and_fused():
    outs = []
    for mode in EAGER:
        with _in_mode(mode):
            torch.tpu.manual_seed(11)
            x = torch.empty(5, device="tpu")
            r = [torch.randn(4, device="tpu"), torch.rand(3, device="tpu"), torch.randint(0, 100, (4,), device="tpu"),
                 torch.randperm(6, device="tpu"), x.normal_(2, 3) * 1, x.uniform_(-1, 1) * 1, x.bernoulli_(0.3) * 1,
                 x.exponential_(2.0) * 1, torch.multinomial(torch.tensor([0.1, 0.5, 0.4], device="tpu"), 5, True),
                 torch.nn.functional.dropout(torch.ones(8, device="tpu"), 0.5), torch.randn_like(x)]
            outs.append([t.cpu() for t in r])
    for i, (a, b) in enumerate(zip(*outs)):
        assert torch.equal(a, b), f"[wrong value] draw {i}: strict {a}, fused {b}"
    with torch.random.fork_rng(device_type="tpu"):
        inside = torch.randn(3, device="tpu").cpu()
    assert torch.equal(inside, torch.randn(3, device="tpu").cpu())


def _rng_compiled_factories():
    fns = {"randn": lambda x: x + torch.randn(3, device=x.device),
           "randint": lambda x: torch.randint(5, (3,), device=x.device, dtype=torch.int32),
           "randint_low": lambda x: torch.randint(-3, 4, (2, 3), device=x.device),
           "rand_f64": lambda x: torch.rand(2, 3, device=x.device, dtype=torch.float64),
           "randn_bf16": lambda x: torch.randn(4, device=x.device, dtype=torch.bfloat16),
           "normal_": lambda x: x.normal_(3.0, 0.5) * 1}
    for name, fn in fns.items():
        cpu = fn(torch.ones(3))
        torch._dynamo.reset()
        f = torch.compile(fn, backend="tpu", dynamic=False)
        torch.tpu.manual_seed(5)
        a = f(torch.ones(3, device="tpu")).cpu()
        torch.tpu.manual_seed(5)
        b = f(torch.ones(3, device="tpu")).cpu()
        c = f(torch.ones(3, device="tpu")).cpu()
        assert a.dtype == cpu.dtype and a.shape == cpu.shape, (name, a, cpu)
        assert torch.equal(a, b) and not torch.equal(a, c), (name, a, b, c)
        if cpu.dtype.is_floating_point:
            assert torch.isfinite(a.float()).all(), (name, a)
        else:
            lo, hi = (0, 5) if name == "randint" else (-3, 4)
            assert ((a >= lo) & (a < hi)).all(), (name, a)


def _tpu_api():
    T = torch.tpu
    T.synchronize()
    T.synchronize(0)
    T.synchronize("tpu:0")
    for bad, error in ((lambda: T.synchronize(3), RuntimeError), (lambda: T.synchronize("cuda"), ValueError),
                       (lambda: T.memory_allocated(3), RuntimeError), (lambda: T.mem_get_info(2), RuntimeError),
                       (lambda: T.set_device(5), RuntimeError), (lambda: T.device(-1).__enter__(), RuntimeError),
                       (lambda: T.get_device_name(4), RuntimeError), (lambda: T.Stream(3), RuntimeError),
                       (lambda: T.current_stream(2), RuntimeError), (lambda: T.CUDAGraph(), AttributeError)):
        with pytest.raises(error) as info:
            bad()
        assert is_clear(info.value), info.value
    assert T.Stream().device.type == "tpu" and T.Event(enable_timing=True).device.type == "tpu"  # (test_streams.py)
    acc = torch.accelerator
    x = torch.ones(1024, device="tpu")
    acc.synchronize()
    assert acc.memory_allocated() >= x.numel() * 4 and acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_allocated() == T.memory_allocated()
    acc.reset_peak_memory_stats()
    acc.empty_cache()
    free, total = acc.get_memory_info()
    assert 0 <= free <= total
    assert set(T.memory_stats()) == set(acc.memory_stats())


CASES["rng:state_roundtrip_all_seeds"] = _rng_state_roundtrip
CASES["rng:strict_equals_fused"] = _rng_same_in_strict_and_fused
CASES["rng:compiled_factories"] = _rng_compiled_factories
CASES["api:tpu_and_accelerator"] = _tpu_api

# ---------------------------------------------------------------------------------------------------

ISOLATED_CASES = CASES

results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=180)

