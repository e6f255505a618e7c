"""Whole torch.nn modules and argument checks, in every executor.

Stock modules in compiled mode (``torch.compile(backend="tpu")``) and in both eager modes:
BatchNorm in training and eval mode, InstanceNorm with running statistics, ``nn.LSTM``/``nn.GRU`` and
their cells (no lowering for the fused cells at all; ``bias=False`` backward aborted the process),
complex ``conj``, and argument checks that eager made and compiled programs skipped (``float32 @
float64``, ``int ** -1`` returned values). Every case compares with CPU torch through ``differential``
(equal results and inputs afterwards, gradients included, or both raise) and runs in one crash-tolerant
child process.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import leaf_per_device, module_per_device, rand
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]


_module = module_per_device
_leaf = leaf_per_device


def _grads(m, x, out):
    """out's weighted sum backward; the input's and every parameter's gradient."""
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
    loss = sum((o.float() * torch.linspace(-1, 1, o.numel(), device=o.device).reshape(o.shape)).sum()
               for o in outs)
    loss.backward()
    return [x.grad] + [p.grad for p in m.parameters()]


# ---------------------------------------------------------------------------------------------------
# normalisation layers: their running statistics are written in place (in compiled graphs too)


def _bn_train(m, x):
    out = m(x)
    return out, m.running_mean, m.running_var, m.num_batches_tracked


def _bn_train_twice(m, x):
    m(x)
    out = m(x * 2 + 1)
    return out, m.running_mean, m.running_var


def _bn_eval(m, x):
    m.eval()
    return m(x)


def _bn_train_grad(m, x):
    out = m(x)
    return [out, m.running_mean] + _grads(m, x, out)


def _instnorm_stats(m, x):
    out = m(x)
    return out, m.running_mean, m.running_var


def _bn1d_momentum_none(m, x):
    out = m(x)
    out2 = m(x.flip(0))
    return out, out2, m.running_mean, m.running_var


NORM_CASES = {
    "batchnorm2d_train": (_bn_train, lambda: torch.nn.BatchNorm2d(3), (4, 3, 5, 5), ALL),
    "batchnorm2d_train_twice": (_bn_train_twice, lambda: torch.nn.BatchNorm2d(3), (2, 3, 4, 4), ALL),
    "batchnorm2d_eval": (_bn_eval, lambda: torch.nn.BatchNorm2d(3), (2, 3, 4, 4), ALL),
    "batchnorm2d_train_grad": (_bn_train_grad, lambda: torch.nn.BatchNorm2d(3), (4, 3, 3, 3), ALL),
    "batchnorm1d_cumulative": (_bn1d_momentum_none, lambda: torch.nn.BatchNorm1d(4, momentum=None), (6, 4), ALL),
    "instancenorm2d_track_stats": (_instnorm_stats,
                                   lambda: torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                                   (2, 3, 4, 4), ALL),
    "weight_norm_grad": (lambda m, x: [m(x)] + _grads(m, x, m(x)),
                         lambda: torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3)), (2, 4), ALL),
    "weight_norm_conv_dim1": (lambda m, x: [m(x)] + _grads(m, x, m(x)),
                              lambda: torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(2, 3, 2), dim=1),
                              (2, 2, 5), EAGER),
    "groupnorm_grad": (lambda m, x: [m(x)] + _grads(m, x, m(x)), lambda: torch.nn.GroupNorm(2, 4),
                       (2, 4, 3, 3), ALL),
}


def _norm_case(fn, make, shape, modes):
    return lambda: D.check(fn, _module(make), _leaf(*shape), modes=modes, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------------
# recurrent layers: the fused LSTM/GRU cells and their backwards


def _rnn_run(m, x):
    out = m(x)
    return list(out if isinstance(out, tuple) else (out,)) + _grads(m, x, out)


def _rnn_with_state(m, x):
    h0 = torch.ones(m.num_layers * (2 if m.bidirectional else 1), x.shape[0], m.hidden_size, device=x.device)
    out, h = m(x, h0 * 0.5)
    return [out, h] + _grads(m, x, (out, h))


def _cell_steps(m, x):
    h = None
    outs = []
    for t in range(x.shape[1]):
        h = m(x[:, t], h)
        outs.append(h if isinstance(h, torch.Tensor) else h[0])
    out = torch.stack(outs, 1)
    return [out] + _grads(m, x, out)


RNN_CASES = {
    "lstm_batch_first": (_rnn_run, lambda: torch.nn.LSTM(5, 4, batch_first=True), (2, 3, 5), ALL),
    "lstm_2layer_bidirectional": (_rnn_run, lambda: torch.nn.LSTM(5, 4, num_layers=2, bidirectional=True),
                                  (3, 2, 5), EAGER),
    "lstm_no_bias": (_rnn_run, lambda: torch.nn.LSTM(5, 4, bias=False), (3, 2, 5), EAGER),
    "lstm_proj": (_rnn_run, lambda: torch.nn.LSTM(5, 4, proj_size=2), (3, 2, 5), EAGER),
    "gru": (_rnn_run, lambda: torch.nn.GRU(5, 4), (3, 2, 5), ALL),
    "gru_initial_state": (_rnn_with_state, lambda: torch.nn.GRU(5, 4, batch_first=True), (2, 3, 5), EAGER),
    # the backward of a GRU without biases aborted the process (an undefined bias gradient)
    "gru_no_bias_2layer": (_rnn_run, lambda: torch.nn.GRU(5, 4, num_layers=2, bias=False), (3, 2, 5), EAGER),
    "lstm_cell": (_cell_steps, lambda: torch.nn.LSTMCell(5, 4), (2, 3, 5), EAGER),
    "gru_cell": (_cell_steps, lambda: torch.nn.GRUCell(5, 4), (2, 3, 5), EAGER),
    "gru_cell_no_bias": (_cell_steps, lambda: torch.nn.GRUCell(5, 4, bias=False), (2, 3, 5), EAGER),
}


def _rnn_case(fn, make, shape, modes):
    return lambda: D.check(fn, _module(make), _leaf(*shape), modes=modes, atol=1e-4, rtol=1e-4)


def _lstm_bf16():
    """bfloat16 LSTM: the gates are activated in float32 (torch's accumulate type); compared with CPU's
    bfloat16 LSTM at bfloat16's tolerance."""
    D.check(lambda m, x: m(x)[0], _module(lambda: torch.nn.LSTM(5, 4).to(torch.bfloat16)),
            _leaf(3, 2, 5, dtype=torch.bfloat16), modes=EAGER, atol=3e-2, rtol=3e-2)


# ---------------------------------------------------------------------------------------------------
# attention layers, compiled


def _mha(m, x):
    out, w = m(x, x, x)
    return [out, w] + _grads(m, x, out)


def _encoder_layer(m, x):
    m.eval()
    with torch.no_grad():
        return m(x)


KPM = torch.tensor([[False, False, True], [False, False, False]])
CAUSAL = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)


def _mha_fastpath(need_weights, average):
    """eval + no_grad: torch's fast path (``_native_multi_head_attention``), with both mask kinds."""
    def run(m, x, kpm, causal):
        m.eval()
        with torch.no_grad():
            return [m(x, x, x, key_padding_mask=k, attn_mask=a, need_weights=need_weights,
                      average_attn_weights=average) for k, a in [(None, None), (kpm, None), (None, causal),
                                                                 (kpm, causal)]]
    return run


def _encoder_layer_masks(m, x, kpm, causal):
    m.eval()
    with torch.no_grad():
        return [m(x), m(x, src_key_padding_mask=kpm), m(x, src_mask=causal),
                m(x, src_mask=causal, src_key_padding_mask=kpm)]


def _layer(**kw):
    return lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, **kw)


LAYER_CASES = {
    "mha_fastpath_weights": (_mha_fastpath(True, True), lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True),
                             (2, 3, 8), EAGER),
    "mha_fastpath_head_weights": (_mha_fastpath(True, False),
                                  lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True), (2, 3, 8), EAGER),
    # without weights CPU returns None for them (the meta kernel, which compiled graphs follow, says empty)
    "mha_fastpath_no_weights": (_mha_fastpath(False, True),
                                lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True), (2, 3, 8), EAGER),
    "encoder_layer_fastpath_relu": (_encoder_layer_masks, _layer(), (2, 3, 8), ALL),
    "encoder_layer_fastpath_gelu_norm_first": (_encoder_layer_masks, _layer(activation="gelu", norm_first=True),
                                               (2, 3, 8), ALL),
    "multihead_attention": (_mha, lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True), (2, 3, 8), ALL),
    "transformer_encoder_layer_eval": (_encoder_layer,
                                       lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                                batch_first=True),
                                       (2, 3, 8), ALL),
}


def _layer_case(fn, make, shape, modes):
    if fn in (_mha, _encoder_layer):
        return _norm_case(fn, make, shape, modes)
    return lambda: D.check(fn, _module(make), _leaf(*shape), KPM.clone(), CAUSAL.clone(), modes=modes, atol=1e-4,
                           rtol=1e-4)


# ---------------------------------------------------------------------------------------------------
# argument checks: what CPU torch refuses, every executor refuses (compiled programs at compile time)

F32 = rand(2, 3)
F64 = rand(3, 2, seed=2).double()
INTS = torch.tensor([1, 2, 3])

CHECK_CASES = {
    "matmul_float32_float64": (lambda a, b: a @ b, (F32, F64)),
    "mm_float32_float64": (lambda a, b: torch.mm(a, b), (F32, F64)),
    "int_pow_negative_int": (lambda a: a ** -1, (INTS,)),
    "addmm_mixed": (lambda a, b: torch.addmm(torch.zeros(2, 2), a, b), (F32, F64)),
}


def _check_case(fn, args):
    return lambda: D.check(fn, *[a.clone() for a in args], modes=ALL, expect_raise=True)


def _int_pow_tensor_exponent():
    """A tensor of negative exponents is no error on CPU (integer division semantics: 2 ** -1 == 0)."""
    D.check(lambda a, e: torch.pow(a, e), torch.tensor([1, 2, 3, -1, -2]), torch.tensor([-1, -1, 2, -1, -3]),
            modes=ALL, expect_raise=False)


# ---------------------------------------------------------------------------------------------------
# complex math-bit views, compiled

Z = torch.complex(rand(3, 2), rand(3, 2, seed=3))

def _tensor_constants(x, t):
    """``torch.tensor(..., device=x.device)`` inside a compiled function (diffusers' UNet builds its
    timestep tensor so): one-element, 0-dim, empty and wider constants, int and float."""
    return (x * torch.tensor([t], dtype=torch.long, device=x.device), torch.tensor(2.5, device=x.device) * x,
            torch.tensor([], device=x.device), x + torch.tensor([1.0, -2.0, 3.0], device=x.device),
            torch.tensor([[t, 1], [2, 3]], device=x.device).sum())


def _captured_cpu_mask(x):
    """A CPU tensor captured by the compiled function and moved to x's device inside it."""
    return x.masked_fill(KPM.to(x.device), -1.0) * 2


def _captured_cpu_compute_refused():
    """CPU work inside a compiled tpu graph would run on the device: refused, naming the op."""
    import torch._dynamo

    w = torch.arange(3.0)
    fn = torch.compile(lambda x: x + (w * 2).to(x.device), backend="tpu", dynamic=False)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"graph input \d+ is a cpu tensor \(3,\) that aten.mul.Tensor uses"):
        fn(torch.ones(3, device="tpu"))


def _encoder_nested_refused():
    """nn.TransformerEncoder's nested-tensor fast path (eval, no autograd, a padding mask): a clear
    refusal that names the way out; with enable_nested_tensor=False the unpadded positions match CPU."""
    def encoder(nested):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested).eval()

    x, kpm = rand(2, 3, 8), KPM.clone()
    with torch.no_grad():
        ref = encoder(True)(x, src_key_padding_mask=kpm)
        with pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
            encoder(True).to("tpu")(x.to("tpu"), src_key_padding_mask=kpm.to("tpu"))
        out = encoder(False).to("tpu")(x.to("tpu"), src_key_padding_mask=kpm.to("tpu")).cpu()
    torch.testing.assert_close(out[~kpm], ref[~kpm], atol=1e-5, rtol=1e-5)


def _cdist_all_p(a, b):
    return [torch.cdist(a, b, p=p) for p in (0, 1, 2, 3.5, float("inf"))]


def _cdist_grads(a, b):
    out = torch.cdist(a, b, p=2) + torch.cdist(a, b, p=1) * 0.5
    (out * torch.linspace(-1, 1, out.numel(), device=a.device).reshape(out.shape)).sum().backward()
    return out, a.grad, b.grad


SCATTER_SHAPES = {
    "diagonal": lambda x: torch.diagonal_scatter(x, torch.ones(3, device=x.device), 2),
    "select": lambda x: torch.select_scatter(x, torch.zeros(5, device=x.device), 0, -1),
    "select_broadcastable": lambda x: torch.select_scatter(x, torch.zeros(1, device=x.device), 0, -1),
    "slice": lambda x: torch.slice_scatter(x, torch.zeros(4, 3, device=x.device), 1, 1, 5, 2),
}


MISC_CASES = {
    "cdist": lambda: D.check(_cdist_all_p, rand(2, 5), rand(3, 5, seed=2), modes=ALL, atol=1e-5, rtol=1e-5),
    "cdist_batched_mm_path_grads": lambda: D.check(_cdist_grads, _leaf(2, 30, 4), _leaf(2, 27, 4, seed=3),
                                                    modes=EAGER, atol=1e-4, rtol=1e-4),
    # torch's meta kernels broadcast src into the view: CPU refuses any other shape (the tpu returned values)
    "scatter_src_shapes": lambda: [D.check(f, rand(4, 6), modes=ALL, expect_raise=True)
                                   for f in SCATTER_SHAPES.values()],
    "encoder_nested_refused": _encoder_nested_refused,
    "captured_cpu_mask": lambda: D.check(_captured_cpu_mask, rand(2, 3), modes=ALL),
    "captured_cpu_compute_refused": _captured_cpu_compute_refused,
    "tensor_constants": lambda: [D.check(_tensor_constants, rand(3), t, modes=ALL) for t in (3, 4)],
    "conj_compiled": lambda: D.check(lambda z: z.conj() * 2, Z.clone(), modes=ALL),
    "conj_physical_compiled": lambda: D.check(lambda z: torch.conj_physical(z) + z, Z.clone(), modes=ALL),
    "imag_of_conj_compiled": lambda: D.check(lambda z: z.conj().imag * 1, Z.clone(), modes=ALL),
    "grid_sample_compiled": lambda: D.check(
        lambda x, g: F.grid_sample(x, g, align_corners=False), rand(1, 2, 4, 4),
        rand(1, 3, 3, 2, seed=4, low=-1, high=1), modes=ALL, atol=1e-5, rtol=1e-5),
    "lstm_bf16": _lstm_bf16,
    "int_pow_tensor_exponent": _int_pow_tensor_exponent,
}

ISOLATED_CASES = {}
ISOLATED_CASES.update({f"norm:{k}": _norm_case(*v) for k, v in NORM_CASES.items()})
ISOLATED_CASES.update({f"rnn:{k}": _rnn_case(*v) for k, v in RNN_CASES.items()})
ISOLATED_CASES.update({f"layer:{k}": _layer_case(*v) for k, v in LAYER_CASES.items()})
ISOLATED_CASES.update({f"check:{k}": _check_case(*v) for k, v in CHECK_CASES.items()})
ISOLATED_CASES.update({f"misc:{k}": v for k, v in MISC_CASES.items()})


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=180)
