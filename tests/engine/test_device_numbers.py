"""Strict eager passes a Python number it has seen before to its op's program as a cached device scalar
(``engine/device_numbers.py``): every value must compute as the number itself did, bit for bit, whichever
value, type or tensor dtype came before it (the cache is keyed by value and type only)."""
import math

import numpy as np
import pytest
import torch

import torch_tpu
from torch_tpu.engine import device_numbers

NUMBERS = [0.0, -0.0, 1, 1.0, True, -3, 0.1, 1e-30, 3e38, float("inf"), -float("inf"), float("nan"),
           -float("nan"), 300, 2 ** 63 - 1, -2 ** 63, 1 + 0j, -0.0 - 0j, 1e308]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64, torch.uint8]
OPS = {"add": lambda t, s: t + s, "mul": lambda t, s: t * s, "rsub": lambda t, s: s - t,
       "add_alpha": lambda t, s: torch.add(t, t, alpha=s), "clamp_max": lambda t, s: torch.clamp(t, max=s)}


def _pairs_with(name, dtype, s) -> bool:
    """Combinations this test covers: complex numbers with float32/float64 tensors outside clamp (complex32
    and complex clamp bounds are refused on tpu), 1e308 with floating tensors (an integer tensor times it
    is another test's subject)."""
    if type(s) is complex:
        return name != "clamp_max" and dtype in (torch.float32, torch.float64)
    if s == 1e308:
        return dtype.is_floating_point
    return True


def _tensor(dtype):
    if dtype.is_floating_point:
        return torch.tensor([1.5, -0.0, 0.0, -2.25, 1e-3, 6e4], dtype=torch.float64).to(dtype)
    return torch.tensor([7, 0, 100, 1, 3, 5], dtype=torch.int64).to(dtype)


def _bits(t):
    """Exact contents: each element's bits (NaN's sign and payload aside, which CPU kernels do not fix)."""
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        nan = torch.isnan(t)
        t = torch.where(nan, torch.zeros_like(t), t)
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
        return torch.cat([nan.flatten().to(torch.int64), t.view(width).flatten().to(torch.int64)])
    return t.flatten()


def _outcome(fn, t, s):
    try:
        out = fn(t, s)
    except Exception as exc:  # noqa: BLE001 - compared as "both raise"
        return type(exc).__name__
    return out.dtype, _bits(out)


def _cpu_outcome(name, fn, t, s):
    """CPU torch's outcome. float16 ``add`` with alpha as torch's opmath computes it (float32, one rounding), as
    CPUs without AVX512-FP16 and CUDA do: CPU torch on one with it rounds ``alpha * other`` to float16 first."""
    if name == "add_alpha" and t.dtype == torch.float16 and type(_outcome(fn, t, s)) is not str:
        return _outcome(lambda x, v: torch.add(x.float(), x.float(), alpha=v).half(), t, s)
    return _outcome(fn, t, s)


def test_every_number_computes_as_itself_in_any_order():
    """Each (op, dtype, number) twice in a row (the second call takes the cached scalar), over numbers whose
    keys a value-keyed table could confuse: 0.0/-0.0, 1/1.0/True, NaN of either sign, ints at int64's ends,
    complex; and the dtypes in turn, so a scalar cached for one dtype serves the next (weakly typed, it
    must take the tensor's dtype as the Python number does: a float64 scalar would round float32 twice)."""
    bad = []
    for name, fn in OPS.items():
        for dtype in DTYPES:
            cpu = _tensor(dtype)
            tpu = cpu.to("tpu")
            for s in NUMBERS:
                if not _pairs_with(name, dtype, s):
                    continue
                want = _cpu_outcome(name, fn, cpu, s)
                for attempt in range(2):
                    got = _outcome(fn, tpu, s)
                    if type(want) is str or type(got) is str:
                        ok = type(want) is str and type(got) is str
                    else:
                        ok = want[0] == got[0] and torch.equal(want[1], got[1])
                    if not ok:
                        bad.append((name, dtype, s, attempt, want, got))
    assert not bad, bad[:5]


def _kept(value):
    """The device scalars kept for ``value`` at any op's place."""
    from torch_tpu.engine.graph_sets import value_key

    key = value_key(value)
    return [slot[1] for _, _, places in list(device_numbers.PLACES.values()) for kept in places
            for slot in kept if slot[0] == key]


def test_a_strict_op_passes_a_number_seen_before_as_a_device_scalar():
    """The second ``x + 0.4137`` finds 0.4137's device scalar (made at its second sighting); fused mode keeps
    its numbers as graph constants and makes none."""
    x = torch.randn(5)
    xt = x.to("tpu")
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        for _ in range(2):
            torch.testing.assert_close((xt + 0.4137).cpu(), x + 0.4137, rtol=0, atol=0)
    assert not _kept(0.4137)
    for _ in range(3):
        torch.testing.assert_close((xt + 0.4137).cpu(), x + 0.4137, rtol=0, atol=0)
    assert any(hasattr(d, "dtype") for d in _kept(0.4137))


def test_a_view_offset_seen_before_is_passed_as_a_device_scalar_and_reads_right():
    """A view input's storage offset (an op's, and a view read's own small program) is converted at every
    call like a number (~160 us on a TPU host); the same slices at every step pass kept device scalars
    (64-bit, strongly typed: what the programs were traced with), and every offset still reads its own
    elements, whichever came before."""
    x = torch.randn(6, 4)
    xt = x.to("tpu")
    device_numbers.release()
    for _ in range(3):
        for i in (2, 5, 2, 0):
            torch.testing.assert_close((xt[i] * 3).cpu(), x[i] * 3, rtol=0, atol=0)  # an op's view input
            torch.testing.assert_close(xt[i].cpu(), x[i], rtol=0, atol=0)  # the view read alone
    held = [slot[1] for table in (device_numbers.PLACES, device_numbers.LAUNCH_PLACES)
            for _, _, places in table.values() for slots in places for slot in slots
            if slot[1] is not None and hasattr(slot[1], "dtype")]
    offsets = [d for d in held if str(d.dtype) == "int64"]  # (the 3 is a float64, weakly typed)
    assert offsets and not any(d.weak_type for d in offsets), held
    assert device_numbers.kept() >= 2


def test_a_place_keeps_values_apart():
    """0.0 and -0.0, 1 and 1.0 (True is never a dynamic input): distinct device scalars of JAX's own
    argument types (64-bit, weakly typed), each made at its second sighting; NaN and ints past int64 are
    never kept; a place keeps its last few values only."""
    kept: list = []
    for v in (0.0, -0.0, 1, 1.0):
        assert device_numbers.scalar_for(kept, v) is None  # (seen once)
    zero, neg_zero = device_numbers.scalar_for(kept, 0.0), device_numbers.scalar_for(kept, -0.0)
    assert math.copysign(1.0, float(zero)) == 1.0 and math.copysign(1.0, float(neg_zero)) == -1.0
    one_int, one_float = device_numbers.scalar_for(kept, 1), device_numbers.scalar_for(kept, 1.0)
    assert (str(one_int.dtype), str(one_float.dtype)) == ("int64", "float64")
    assert one_int.weak_type and one_float.weak_type and zero.weak_type
    other: list = []
    for _ in range(2):
        c = device_numbers.scalar_for(other, 2.5 + 1j)
    assert str(c.dtype) == "complex128"
    # a complex Scalar passed as complex64 (beside narrower tensors: eager/arguments.py): strongly typed, as
    # the program was traced, its zeros' signs apart
    for v in (np.complex64(0j), np.complex64(complex(-0.0, -0.0))) * 2:
        last = device_numbers.scalar_for(other, v)
    zero64 = device_numbers.scalar_for(other, np.complex64(0j))
    assert str(last.dtype) == "complex64" and not last.weak_type
    assert math.copysign(1.0, float(np.real(np.asarray(last)))) == -1.0
    assert math.copysign(1.0, float(np.real(np.asarray(zero64)))) == 1.0
    for v in (float("nan"), 2 ** 64):
        assert device_numbers.scalar_for(other, v) is None and device_numbers.scalar_for(other, v) is None
    for i in range(10):
        device_numbers.scalar_for(other, float(i))
    assert len(other) == device_numbers._PER_PLACE


def test_a_complex_scalar_seen_before_is_a_complex64_device_scalar_and_computes_as_itself():
    """``z * s`` of a complex64 ``z``: the Scalar is a complex64 input, kept as a device scalar from its second
    sighting; every value, zeros of either sign included, equals CPU bit for bit whichever came before."""
    z = torch.tensor([1.5 - 0.0j, complex(-0.0, 2.0), 0j, complex(3.0, -0.0)], dtype=torch.complex64)
    zt = z.to("tpu")
    values = [0.5 + 1j, complex(-0.0, -0.0), 0j, complex(0.0, -0.0), 0.5 + 1j]
    for _ in range(3):
        for s in values:
            for fn in (lambda t: t * s, lambda t: t + s, lambda t: torch.add(t, t, alpha=s)):
                assert torch.equal(_bits(fn(zt)), _bits(fn(z))), s
    held = [slot[1] for _, _, places in list(device_numbers.PLACES.values()) for kept in places
            for slot in kept if slot[1] is not None and hasattr(slot[1], "dtype")]
    assert any(str(d.dtype) == "complex64" and not d.weak_type for d in held)


def test_a_changing_number_reuses_the_program_keeps_nothing_more_and_stays_right():
    """A counter passes a new value at every call: one program, every value right, the values kept at its
    place bounded (no device scalar per value)."""
    x = torch.randn(8)
    xt = x.to("tpu")
    (xt * 0.5).cpu()
    before = torch_tpu.stats()["cache_misses"]
    for i in range(300):
        if i % 50 == 0 or i > 296:
            torch.testing.assert_close((xt * (i / 7)).cpu(), x * (i / 7), rtol=0, atol=0)
        else:
            xt * (i / 7)
    assert torch_tpu.stats()["cache_misses"] == before
    assert all(len(kept) <= device_numbers._PER_PLACE for _, _, places in device_numbers.PLACES.values()
               for kept in places)


@pytest.mark.parametrize("mode", ["strict", "launch_blocking"])
def test_out_of_range_numbers_still_raise_as_on_cpu(mode):
    """An int past int64 is passed as it is, and fails as on CPU, also when seen twice."""
    modes = {"strict": torch_tpu.EagerMode.DEFER_NEVER,
             "launch_blocking": torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING}
    x = torch.ones(3, dtype=torch.int64)
    with torch.tpu.set_eager_mode(modes[mode]):
        for _ in range(2):
            with pytest.raises(OverflowError):
                x + 2 ** 70
            with pytest.raises(OverflowError):
                x.to("tpu") + 2 ** 70


def test_empty_cache_frees_the_kept_scalars_and_runs_no_collection(monkeypatch):
    """``torch.tpu.empty_cache()`` frees the device scalars strict eager keeps (made again at later calls,
    still right) and, as CUDA's, leaves reference cycles to Python's collector: accelerate's sequential
    offload calls it after every submodule, and a full collection in a process holding diffusers took
    ~0.3 s each time (a tiny FLUX call spent 94 of its 100 s there)."""
    import gc

    x = torch.randn(5)
    xt = x.to("tpu")
    for _ in range(3):
        xt + 0.771
    assert any(hasattr(d, "dtype") for d in _kept(0.771))
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a, **k: collections.append(a) or 0)
    torch.tpu.empty_cache()
    torch.accelerator.empty_cache()
    assert not collections
    assert not _kept(0.771) and device_numbers.kept() == 0
    for _ in range(3):
        torch.testing.assert_close((xt + 0.771).cpu(), x + 0.771, rtol=0, atol=0)
    assert any(hasattr(d, "dtype") for d in _kept(0.771))


def test_a_fused_graph_passes_a_changing_number_seen_before_as_a_device_scalar():
    """A number that changes where it enters a fused graph (a timestep) is an input of its program; a value
    seen there before is passed as a kept device scalar (strict ops do the same), one program serves every
    value but the first, and each value computes as itself. The first value seen there stays a constant of
    the first program (the next identical call's first step reuses it), so it is not held."""
    x = torch.randn(5)
    xt = x.to("tpu")
    device_numbers.release()
    values = (0.25, 0.6180339, -0.0, 0.25, 0.6180339, -0.0, 0.25)
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        for k, v in enumerate(values):
            if k == 2:
                before = torch_tpu.stats()["cache_misses"]
            torch.testing.assert_close((xt * 2 + v).cpu(), x * 2 + v, rtol=0, atol=0)
        assert torch_tpu.stats()["cache_misses"] == before
    held = [slot for _, _, places in device_numbers.LAUNCH_PLACES.values() for slots in places for slot in slots
            if hasattr(slot[1], "dtype")]
    assert {float(slot[1]) for slot in held} >= {0.6180339}, held
    assert 0.25 not in {float(slot[1]) for slot in held}, held
    assert all(slot[1].weak_type and str(slot[1].dtype) == "float64" for slot in held), held
