"""torch.fft and torch.special on the tpu device, in strict, fused and compiled mode, against CPU torch.

Every ``torch.fft`` function raised NotImplementedError (``_fft_r2c``/``_fft_c2r``/``_fft_c2c`` had no
lowering), which also broke ``torch.stft`` and diffusers' FreeU (``fourier_filter``: fftn, fftshift, ifftn).
The gradients go through torch's own autograd formulas, which call the same three primitives.
"""
import pytest
import torch

import differential as D
from differential import watchdog  # noqa: F401

pytestmark = pytest.mark.usefixtures("watchdog")

ALL = ["strict", "fused", "compiled"]


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
    return D.rand(4, 6, seed=3), (D.rand(4, 6, seed=4) + 1j * D.rand(4, 6, seed=5)).to(torch.complex64)


@pytest.mark.parametrize("name", list(FFT_CASES))
def test_fft(name):
    x, z = _inputs()
    D.check(FFT_CASES[name], x, z, modes=ALL, atol=1e-4, rtol=1e-4)


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
            D.rand(2), modes=ALL)
