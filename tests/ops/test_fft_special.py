"""torch.fft, torch.special and other numeric ops (mode, histogram, kaiser_window, rrelu, fractional max
pooling, antialiased interpolate, CTC loss) on the tpu device, in strict, fused and compiled mode, against CPU torch.

Every ``torch.fft`` function raised NotImplementedError (``_fft_r2c``/``_fft_c2r``/``_fft_c2c`` had no
lowering), which also broke ``torch.stft`` and diffusers' FreeU (``fourier_filter``: fftn, fftshift, ifftn).
The gradients go through torch's own autograd formulas, which call the same three primitives.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import rand

pytestmark = pytest.mark.usefixtures("watchdog")

ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]
# cases that also run compiled (each a dynamo trace): the others differ from them only in arguments
COMPILED = {"fft_norms", "real_transforms", "hermitian", "freeu_fourier_filter", "normal_cdf_family",
            "incomplete_gamma", "hurwitz_zeta", "mode", "histogram_bins", "kaiser_window", "interpolate_antialias",
            "fractional_max_pool", "rrelu_eval", "padded_mean", "concatenated_sum", "impossible_zero_infinity"}


def _modes(name):
    return ALL if name in COMPILED else EAGER


def _window(t):
    return torch.hann_window(8, device=t.device, dtype=t.dtype)


FFT_CASES = {
    "fft_norms": lambda x, z: [torch.fft.fft(x), torch.fft.fft(x, norm="ortho"), torch.fft.fft(x, norm="forward"),
                               torch.fft.ifft(z), torch.fft.ifft(z, norm="ortho"), torch.fft.ifft(z, norm="forward")],
    "fft_sizes_dims": lambda x, z: [torch.fft.fft(x, n=9), torch.fft.fft(x, n=3, dim=0), torch.fft.fft2(z),
                                    torch.fft.ifftn(z, s=(5, 4))],
    "fft_zero_length": lambda x, z: torch.fft.fft(x, n=0),
    "real_transforms": lambda x, z: [torch.fft.rfft(x), torch.fft.rfft(x, n=7, norm="ortho"), torch.fft.irfft(z),
                                     torch.fft.irfft(z, n=9, norm="forward"), torch.fft.rfftn(x),
                                     torch.fft.irfftn(z, s=(4, 9)), torch.fft.rfft2(x, norm="ortho")],
    "hermitian": lambda x, z: [torch.fft.hfft(z), torch.fft.ihfft(x), torch.fft.hfft2(z), torch.fft.ihfftn(x),
                               torch.fft.ihfft2(x, norm="forward")],
    "shifts_freqs": lambda x, z: [torch.fft.fftshift(z), torch.fft.ifftshift(x, dim=0),
                                  torch.fft.fftfreq(5, device=x.device), torch.fft.rfftfreq(6, 0.5, device=x.device)],
    "float64_int_inputs": lambda x, z: [torch.fft.fft(x.double()), torch.fft.rfft((x * 3).long()),
                                        torch.fft.ifft(z.to(torch.complex128)), torch.fft.fft((x > 0))],
    "stft_istft": lambda x, z: [torch.stft(x.reshape(-1), 8, hop_length=2, window=_window(x), return_complex=True),
                                torch.istft(torch.stft(x.reshape(-1), 8, hop_length=2, window=_window(x),
                                                       return_complex=True), 8, hop_length=2, window=_window(x))],
    # diffusers' FreeU filter (utils.torch_utils.fourier_filter)
    "freeu_fourier_filter": lambda x, z: torch.fft.ifftn(torch.fft.ifftshift(
        torch.fft.fftshift(torch.fft.fftn(x[None, None], dim=(-2, -1)), dim=(-2, -1)) * 0.5, dim=(-2, -1)),
        dim=(-2, -1)).real,
    "half_refused_as_cpu": lambda x, z: torch.fft.fft(x.half()[:, :3]),
    "out_variant": lambda x, z: torch.fft.fft(x, out=torch.empty(4, 6, dtype=torch.complex64, device=x.device)),
}


def _inputs():
    return rand(4, 6, seed=3), (rand(4, 6, seed=4) + 1j * rand(4, 6, seed=5)).to(torch.complex64)


@pytest.mark.parametrize("name", list(FFT_CASES))
def test_fft(name):
    x, z = _inputs()
    D.check(FFT_CASES[name], x, z, modes=_modes(name), atol=1e-4, rtol=1e-4)


def _fft_loss(x, z):
    x = x.clone().requires_grad_()
    z = z.clone().requires_grad_()
    loss = (torch.fft.rfft(x).abs() ** 2).sum() + (torch.fft.irfft(z, n=9) ** 2).sum() \
        + torch.fft.fftn(z, norm="ortho").real.sum() + torch.fft.ifft(x).imag.pow(2).sum()
    loss.backward()
    return loss, x.grad, z.grad


def test_fft_backward():
    x, z = _inputs()
    D.check(_fft_loss, x, z, modes=ALL, atol=1e-4, rtol=1e-4)


def test_fftfreq_dtypes():
    D.check(lambda x: [torch.fft.fftfreq(7, 0.3, device=x.device), torch.fft.fftfreq(8, dtype=torch.float64, device=x.device),
                       torch.fft.rfftfreq(9, 2.0, device=x.device), torch.fft.rfftfreq(1, device=x.device)],
            rand(2), modes=ALL)


# ---------------------------------------------------------------------------------------------------
# torch.special: each raised NotImplementedError (prims.ndtri/erfcx/zeta/igamma/igammac/frexp, ...).
# Inputs include 0, -0, ±inf, NaN and the tails; no subnormals (XLA flushes them to zero: README).
_X = torch.cat([torch.tensor([0., -0., 1., -1., 0.5, float("inf"), -float("inf"), float("nan"), 30., -30., 1e5, -40.,
                              9.2, 1e-30]), torch.linspace(-10, 10, 41)])
_P = torch.cat([torch.tensor([0., 1., 0.5, -0.1, 1.1, 1e-30, 1 - 1e-7, float("nan")]), torch.linspace(0.001, 0.999, 50)])
_A = torch.tensor([0.5, 1., 2., 3.5, 10., 0., -1., float("inf"), 1.0, 2.0, float("nan"), 5., float("inf")])
_B = torch.tensor([0.3, 1., 5., 0., 9., 1., 1., 1., float("inf"), -1., 1., 0., float("inf")])
_Q = torch.tensor([1., 2., 0.5, -1., -0.5, 0., -2.5, 3., 1., 1., 2.])
_ZX = torch.tensor([float("inf")] * 8 + [2., 1., 0.5])

SPECIAL_CASES = {
    "normal_cdf_family": (lambda x, p: [torch.special.ndtri(p), torch.special.log_ndtr(x), torch.special.ndtr(x),
                                        torch.special.erfcx(x), torch.special.ndtri(p.double()),
                                        torch.special.erfcx(x.double()), torch.special.ndtri(torch.tensor(
                                            [0, 1], device=x.device))], (_X, _P)),
    "incomplete_gamma": (lambda a, b: [torch.igamma(a, b), torch.igammac(a, b), torch.igamma(a.double(), b.double()),
                                       torch.special.gammainc(a, b), torch.special.gammaincc(b.abs(), a.abs())],
                         (_A, _B)),
    "hurwitz_zeta": (lambda x, q: [torch.special.zeta(x, q), torch.special.zeta(2.0, q.abs() + 0.5),
                                   torch.special.zeta(x[-3:].abs() + 1.5, 2.0), torch.special.zeta(x.double(), q)],
                     (_ZX, _Q)),
    "bessel": (lambda x: [torch.special.modified_bessel_i0(x), torch.special.modified_bessel_i1(x),
                          torch.special.spherical_bessel_j0(x), torch.special.spherical_bessel_j0(x * 1e-3)], (_X,)),
    "frexp": (lambda x: [*torch.frexp(x), *torch.frexp(x.double()), *torch.frexp(x.half())], (_X,)),
    "half_refused_as_cpu": (lambda x: torch.special.erfcx(x.half()), (_X,)),
    "bfloat16_refused_as_cpu": (lambda x: torch.special.zeta(x.bfloat16(), x.bfloat16()), (_X,)),
    "integer_inputs": (lambda x: [torch.special.zeta(x.long() + 2, x.long()), torch.special.log_ndtr(x.long())], (_X[8:],)),
    "integer_refused_as_cpu": (lambda x: torch.igammac(x.long(), x.long() + 1), (_X[8:],)),
}


@pytest.mark.parametrize("name", list(SPECIAL_CASES))
def test_special(name):
    fn, inputs = SPECIAL_CASES[name]
    D.check(fn, *inputs, modes=_modes(name), atol=1e-6, rtol=2e-5)


def test_special_backward():
    def loss(x):
        x = x.clone().requires_grad_()
        y = torch.special.ndtri(torch.sigmoid(x)).sum() + torch.special.log_ndtr(x).sum() + torch.special.erfcx(x).sum()
        y.backward()
        return y, x.grad

    D.check(loss, torch.linspace(-3, 3, 13), modes=ALL, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------------------
# mode, histogram, kaiser_window (an INTERNAL ASSERT "DispatchStub: missing kernel for tpu"), rrelu
_G = torch.Generator().manual_seed(0)
_INTS = torch.randint(0, 4, (3, 5, 6), generator=_G)
_NORMAL = torch.randn(2000, generator=_G)

OTHER_CASES = {
    # CPU: the smallest of the most frequent values, the index of its last occurrence (small sizes)
    "mode": (lambda i: [torch.mode(i, d, k) for d in (-1, 0, 1) for k in (False, True)]
             + [torch.mode(i.float() - 1.5), torch.mode(i.bool(), 0), torch.mode(i[0, 0, 0]), torch.mode(i[:, :0], 0)],
             (_INTS,)),
    "mode_empty_dim_refused": (lambda i: torch.mode(i[:, :0], 1), (_INTS,)),
    "histogram_bins": (lambda x: [*torch.histogram(x, 37), *torch.histogram(x * 3, 100, range=(-2., 2.)),
                                  *torch.histogram(x[:7], 5, density=True), *torch.histogram(x[:2] * 0 + 1, 3),
                                  *torch.histogram(x[:0], 2), *torch.histogram(x.double() * 0.37, 11, weight=x.double().abs())],
                       (_NORMAL,)),
    "histogram_edges_tensor": (lambda x: [*torch.histogram(x, torch.linspace(-3, 3, 9, device=x.device),
                                                           weight=x.abs()),
                                          *torch.histogram(x, torch.tensor([0., 1.5, 2.5, 10.], device=x.device),
                                                           density=True)], (_NORMAL,)),
    "histogram_nan_outside": (lambda x: torch.histogram(torch.cat([x, x.new_tensor([float("nan"), 7.])]), 4,
                                                        range=(-1., 1.)), (_NORMAL[:50],)),
    "histogram_inf_refused": (lambda x: torch.histogram(torch.cat([x, x.new_tensor([float("inf")])]), 4),
                              (_NORMAL[:50],)),
    "kaiser_window": (lambda x: [torch.kaiser_window(5, device=x.device),
                                 torch.kaiser_window(6, periodic=False, beta=8.0, device=x.device, dtype=torch.float64),
                                 torch.kaiser_window(1, device=x.device), torch.kaiser_window(0, device=x.device),
                                 torch.kaiser_window(2, False, device=x.device)], (_NORMAL[:1],)),
    # interpolate(antialias=True): torch's separable filter (triangle / bicubic a=-0.5) stretched when shrinking
    "interpolate_antialias": (lambda x: [torch.nn.functional.interpolate(x, size=size, mode=m, align_corners=ac,
                                                                         antialias=True)
                                         for m in ("bilinear", "bicubic") for ac in (False, True)
                                         for size in ((5, 4), (30, 40), (3, 29), (1, 1))]
                              + [torch.nn.functional.interpolate(x, scale_factor=sf, mode=m, antialias=True,
                                                                 recompute_scale_factor=r)
                                 for m in ("bilinear", "bicubic") for sf in (0.3, (0.7, 1.3)) for r in (False, True)],
                              (rand(2, 3, 17, 13, seed=7),)),
    # fractional max pooling with given samples (CPU's window starts, first maximum, a NaN wins)
    "fractional_max_pool": (lambda x, u, x3, u3: [
        F.fractional_max_pool2d(x, k, output_size=o, return_indices=True, _random_samples=u)
        for k, o in (((2, 2), (5, 4)), ((3, 2), (4, 7)), ((2, 3), (1, 1)), ((3, 3), (9, 7)))]
        + [F.fractional_max_pool2d(x[0], 2, output_size=(5, 4), return_indices=True, _random_samples=u[:1]),
           F.fractional_max_pool2d(x.round(), 3, output_ratio=0.5, return_indices=True, _random_samples=u),
           F.fractional_max_pool2d(x.where(x > 1.5, torch.nan), 3, output_size=(4, 3), return_indices=True,
                                   _random_samples=u),
           F.fractional_max_pool2d((x * 5).long(), 2, output_size=(5, 4), return_indices=True, _random_samples=u),
           F.fractional_max_pool3d(x3, (2, 3, 2), output_size=(4, 3, 5), return_indices=True, _random_samples=u3)],
        (rand(2, 3, 11, 9, seed=9), rand(2, 3, 2, seed=10, low=0, high=1), rand(2, 2, 7, 8, 9, seed=11),
         rand(2, 2, 3, seed=12, low=0, high=1))),
    "fractional_max_pool_too_large": (lambda x, u: F.fractional_max_pool2d(x, 2, output_size=(11, 9), _random_samples=u),
                                      (rand(2, 3, 11, 9, seed=9), rand(2, 3, 2, seed=10, low=0, high=1))),
    "rrelu_eval": (lambda x: [torch.nn.functional.rrelu(x), torch.nn.functional.rrelu(x, 0.1, 0.3),
                              torch.nn.functional.rrelu(x.clone(), inplace=True), torch.nn.RReLU().eval()(x.double())],
                   (_NORMAL[:40],)),
}


@pytest.mark.parametrize("name", list(OTHER_CASES))
def test_other_numeric(name):
    fn, inputs = OTHER_CASES[name]
    D.check(fn, *inputs, modes=_modes(name), atol=1e-5, rtol=1e-5)


def _aa_grads(x):
    x = x.clone().requires_grad_()
    y = torch.nn.functional.interpolate(x, size=(5, 9), mode="bicubic", antialias=True)
    z = torch.nn.functional.interpolate(x, scale_factor=0.4, mode="bilinear", antialias=True)
    loss = (y * torch.linspace(-1, 1, 45, device=x.device).view(5, 9)).sum() + (z ** 2).sum()
    loss.backward()
    return loss, x.grad


def test_interpolate_antialias_backward():
    D.check(_aa_grads, rand(2, 3, 17, 13, seed=8), modes=ALL, atol=1e-4, rtol=1e-4)


def _fmp_grads(x, u, x3, u3):
    x, x3 = x.clone().requires_grad_(), x3.clone().requires_grad_()
    y = F.fractional_max_pool2d(x, 2, output_size=(5, 4), _random_samples=u)
    z = F.fractional_max_pool3d(x3, 2, output_size=(3, 4, 5), _random_samples=u3)
    loss = (y * torch.linspace(-1, 1, 20, device=x.device).view(5, 4)).sum() + (z ** 2).sum()
    loss.backward()
    return loss, x.grad, x3.grad


def test_fractional_max_pool_backward():
    D.check(_fmp_grads, rand(2, 3, 11, 9, seed=9), rand(2, 3, 2, seed=10, low=0, high=1),
            rand(2, 2, 7, 8, 9, seed=11), rand(2, 2, 3, seed=12, low=0, high=1), modes=ALL, atol=1e-5, rtol=1e-5)


def _rrelu_train(x):
    """The slopes are random (they cannot match CPU's): each output is x where x > 0, x times a slope in
    [lower, upper] elsewhere, and the gradient is that slope (it checks both on each device)."""
    a = x.clone().requires_grad_()
    out = torch.nn.functional.rrelu(a, 0.1, 0.3, training=True)
    out.sum().backward()
    slope = torch.where(x > 0, torch.ones_like(x), out.detach() / x)
    ok = ((x > 0) & (out == x)) | ((x <= 0) & (slope >= 0.1 - 1e-6) & (slope <= 0.3 + 1e-6))
    return bool(ok.all()), bool(torch.allclose(a.grad, slope))


def test_rrelu_training_slopes():
    D.check(_rrelu_train, _NORMAL[:40], modes=ALL)


# ---------------------------------------------------------------------------------------------------
# CTC loss (no lowering before): padded and concatenated targets, reductions, impossible alignments,
# zero_infinity, unbatched, another blank, tensor lengths; the gradient is torch's formula (w.r.t. logits)
def _ctc(lp, tg, il, tl, **kw):
    x = lp.clone().requires_grad_()
    loss = F.ctc_loss(x.log_softmax(-1), tg, il, tl, **kw)
    (loss * torch.linspace(1, 2, loss.numel(), device=lp.device).reshape(loss.shape)).sum().backward()
    return loss, x.grad


CTC_CASES = {
    "padded_mean": (rand(6, 2, 5, seed=20), torch.tensor([[1, 2, 1], [3, 1, 0]]), [6, 6], [3, 2], {}),
    "concatenated_sum": (rand(8, 3, 4, seed=21), torch.tensor([1, 2, 2, 3, 1, 1]), [8, 7, 5], [2, 3, 1],
                         {"reduction": "sum"}),
    "empty_target_none": (rand(8, 3, 4, seed=22), torch.tensor([[1, 1, 1], [2, 2, 0], [3, 0, 0]]), [8, 4, 5],
                          [3, 2, 0], {"reduction": "none"}),
    "impossible": (rand(3, 2, 4, seed=23), torch.tensor([[1, 1, 1, 1], [2, 0, 0, 0]]), [3, 3], [4, 1],
                   {"reduction": "none"}),
    "impossible_zero_infinity": (rand(3, 2, 4, seed=23), torch.tensor([[1, 1, 1, 1], [2, 0, 0, 0]]), [3, 3],
                                 [4, 1], {"zero_infinity": True}),
    "unbatched_blank_last": (rand(7, 5, seed=24), torch.tensor([1, 3, 2]), [7], [3], {"blank": 4}),
    "double": (rand(10, 4, 6, seed=25).double(), torch.tensor([[1, 2, 3, 4, 5], [5, 5, 1, 2, 0], [3, 3, 3, 0, 0],
                                                                 [1, 2, 0, 0, 0]]), [10, 9, 8, 10], [5, 4, 3, 2], {}),
}


@pytest.mark.parametrize("name", list(CTC_CASES))
def test_ctc_loss(name):
    lp, tg, il, tl, kw = CTC_CASES[name]
    D.check(lambda lp, tg: _ctc(lp, tg, il, tl, **kw), lp, tg, modes=_modes(name), atol=1e-4, rtol=1e-4)


def test_ctc_loss_tensor_lengths():
    D.check(lambda lp, tg, il, tl: _ctc(lp, tg, il, tl), rand(7, 2, 5, seed=26), torch.tensor([[1, 3, 2], [0, 0, 1]]),
            torch.tensor([7, 6]), torch.tensor([3, 3]), modes=["strict", "fused"], atol=1e-4, rtol=1e-4)
    D.check(lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl), rand(7, 2, 5, seed=26),
            torch.tensor([[1, 3, 2], [0, 0, 1]]), torch.tensor([7., 6.]), torch.tensor([3, 3]), modes=["strict"])
