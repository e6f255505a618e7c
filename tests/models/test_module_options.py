"""torch.nn modules and their less common options.

nn.MultiheadAttention with every mask kind and option (bool/float attn_mask, key_padding_mask,
need_weights/average_attn_weights, kdim/vdim, add_bias_kv, add_zero_attn) with backward;
TransformerEncoder/DecoderLayer (norm_first, masks, is_causal); RNN/LSTM/GRU with packed sequences
(enforce_sorted=False), initial states, proj_size; nn.Embedding(max_norm=...) renormalising its weight in
place, padding_idx and scale_grad_by_freq gradients; EmbeddingBag modules; CTCLoss backward; Fold/Unfold
and PixelShuffle modules with gradients; nn.utils.rnn utilities; weight tying then ``.to("tpu")``;
``module.half()``/``bfloat16()``; ``load_state_dict(strict=False, assign=True)`` onto tpu modules.
Every case compares with CPU torch through ``differential`` in strict and fused eager, all in one
crash-tolerant child process.
"""
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import rnn as rnn_utils

from tests.harness import differential as D
from tests.harness.errors import assert_device_works
from tests.harness.inputs import leaf_per_device, module_per_device, rand
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
EAGER = ["strict", "fused"]
TOL = dict(atol=1e-4, rtol=1e-4)

_module = module_per_device
_leaf = leaf_per_device


def _weights(o):
    return torch.linspace(-1, 1, o.numel(), device=o.device).reshape(o.shape)


def _grads(m, x, outs):
    """a weighted sum of ``outs`` backward; x's gradient (or xs') and every parameter's gradient."""
    outs = [o for o in (outs if isinstance(outs, (tuple, list)) else (outs,)) if isinstance(o, torch.Tensor)]
    sum((o.float() * _weights(o)).sum() for o in outs).backward()
    xs = x if isinstance(x, (tuple, list)) else (x,)
    return [t.grad for t in xs] + [p.grad for p in m.parameters()]


def _case(fn, make, *args, modes=EAGER, **kw):
    return lambda: D.check(fn, _module(make), *args, modes=modes, **{**TOL, **kw})


# ---------------------------------------------------------------------------------------------------
# MultiheadAttention

B, L, S, E = 2, 3, 4, 8
KPM = torch.tensor([[False, False, True, False], [False, False, False, False]])
BOOL_MASK = torch.tensor([[False, True, False, False], [False, False, True, True], [True, False, False, False]])
FLOAT_MASK = rand(L, S, seed=7)
MASK3D = rand(B * 2, L, S, seed=8)


def _mha(**call):
    def run(m, q, k, v, *masks):
        kw = dict(call)
        names = [n for n in ("key_padding_mask", "attn_mask") if kw.pop(n, False)]
        kw.update(zip(names, masks))
        out, w = m(q, k, v, **kw)
        return [out, w] + _grads(m, (q, k, v), out)
    return run


def _mha_case(make, call, masks=(), q=(B, L, E), k=(B, S, E), v=None, batch_first=True):
    if not batch_first:
        q, k = (q[1], q[0], q[2]), (k[1], k[0], k[2])
    v = v or k
    return _case(_mha(**call), make, _leaf(*q, seed=1), _leaf(*k, seed=2), _leaf(*v, seed=3),
                 *[mk.clone() for mk in masks])


def _mha_make(batch_first=True, **kw):
    return lambda: nn.MultiheadAttention(E, 2, batch_first=batch_first, **kw)


MHA_CASES = {
    "bool_mask": _mha_case(_mha_make(), dict(attn_mask=True), [BOOL_MASK]),
    "float_mask": _mha_case(_mha_make(), dict(attn_mask=True), [FLOAT_MASK]),
    "mask_3d": _mha_case(_mha_make(), dict(attn_mask=True), [MASK3D]),
    "kpm_bool": _mha_case(_mha_make(), dict(key_padding_mask=True), [KPM]),
    "kpm_float": _mha_case(_mha_make(), dict(key_padding_mask=True), [KPM.float() * -1e4]),
    "kpm_and_bool_mask": _mha_case(_mha_make(), dict(key_padding_mask=True, attn_mask=True), [KPM, BOOL_MASK]),
    "head_weights": _mha_case(_mha_make(), dict(average_attn_weights=False, key_padding_mask=True), [KPM]),
    "no_weights": _mha_case(_mha_make(), dict(need_weights=False, attn_mask=True), [BOOL_MASK]),
    "seq_first": _mha_case(_mha_make(batch_first=False), dict(key_padding_mask=True), [KPM], batch_first=False),
    "kdim_vdim": _mha_case(_mha_make(kdim=5, vdim=6), dict(key_padding_mask=True), [KPM], k=(B, S, 5), v=(B, S, 6)),
    "bias_kv": _mha_case(_mha_make(add_bias_kv=True), dict(key_padding_mask=True), [KPM]),
    "zero_attn": _mha_case(_mha_make(add_zero_attn=True), dict(key_padding_mask=True, attn_mask=True),
                           [KPM, BOOL_MASK]),
    "bias_kv_zero_attn_nobias": _mha_case(_mha_make(add_bias_kv=True, add_zero_attn=True, bias=False),
                                          dict(attn_mask=True), [FLOAT_MASK]),
    "unbatched": _mha_case(_mha_make(), dict(attn_mask=True), [BOOL_MASK], q=(L, E), k=(S, E)),
    "all_masked_row": _mha_case(_mha_make(), dict(attn_mask=True),
                                [torch.tensor([[True] * S, [False] * S, [False, True] * 2])]),
    "is_causal": lambda: D.check(
        lambda m, x, mk: [m(x, x, x, attn_mask=mk, is_causal=True)[0]] + _grads(m, x, m(x, x, x, attn_mask=mk,
                                                                                         is_causal=True)[0]),
        _module(_mha_make()), _leaf(B, L, E), torch.triu(torch.ones(L, L, dtype=torch.bool), 1), modes=EAGER, **TOL),
}


# ---------------------------------------------------------------------------------------------------
# Transformer layers

def _enc(**kw):
    return lambda: nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0, batch_first=True, **kw)


def _dec(**kw):
    return lambda: nn.TransformerDecoderLayer(E, 2, 16, dropout=0.0, batch_first=True, **kw)


CAUSAL = nn.Transformer.generate_square_subsequent_mask(L)
KPM_L = torch.tensor([[False, False, True], [False, False, False]])


def _enc_train(m, x, mask, kpm):
    out = m(x, src_mask=mask, src_key_padding_mask=kpm)
    return [out] + _grads(m, x, out)


def _enc_causal(m, x, mask):
    out = m(x, src_mask=mask, is_causal=True)
    return [out] + _grads(m, x, out)


def _dec_train(m, x, mem, mask, kpm):
    out = m(x, mem, tgt_mask=mask, memory_key_padding_mask=kpm, tgt_is_causal=True)
    return [out] + _grads(m, (x, mem), out)


def _encoder_stack(m, x, kpm):
    out = m(x, src_key_padding_mask=kpm)
    return [out] + _grads(m, x, out)


def _encoder_stack_make(norm_first):
    def make():
        return nn.TransformerEncoder(_enc(norm_first=norm_first)(), 2, norm=nn.LayerNorm(E),
                                     enable_nested_tensor=False)
    return make


def _transformer(m, src, tgt):
    out = m(src, tgt, tgt_mask=CAUSAL.to(src.device), tgt_is_causal=True)
    return [out] + _grads(m, (src, tgt), out)


def _enc_eval_kpm(m, x, kpm):
    m.eval()
    with torch.no_grad():
        out = m(x, src_key_padding_mask=kpm)
    return out.masked_fill(kpm.unsqueeze(-1), 0)


LAYER_CASES = {
    "encoder_train_masks": _case(_enc_train, _enc(), _leaf(B, L, E), CAUSAL.clone(), KPM_L.clone()),
    "encoder_norm_first_gelu": _case(_enc_train, _enc(norm_first=True, activation="gelu"), _leaf(B, L, E),
                                     CAUSAL.clone(), KPM_L.clone()),
    "encoder_bool_masks": _case(_enc_train, _enc(activation=F.silu), _leaf(B, L, E), CAUSAL.isinf(),
                                KPM_L.clone()),
    "encoder_is_causal": _case(_enc_causal, _enc(), _leaf(B, L, E), CAUSAL.clone()),
    "decoder_train": _case(_dec_train, _dec(), _leaf(B, L, E), _leaf(B, S, E, seed=2), CAUSAL.clone(), KPM.clone()),
    "decoder_norm_first": _case(_dec_train, _dec(norm_first=True, bias=False), _leaf(B, L, E),
                                _leaf(B, S, E, seed=2), CAUSAL.clone(), KPM.clone()),
    "encoder_stack": _case(_encoder_stack, _encoder_stack_make(False), _leaf(B, L, E), KPM_L.clone()),
    "encoder_stack_norm_first": _case(_encoder_stack, _encoder_stack_make(True), _leaf(B, L, E), KPM_L.clone()),
    "transformer": _case(_transformer, lambda: nn.Transformer(E, 2, 1, 1, 16, dropout=0.0, batch_first=True),
                         _leaf(B, S, E), _leaf(B, L, E, seed=2)),
    "encoder_stack_eval_kpm": _case(_enc_eval_kpm, _encoder_stack_make(False), rand(B, L, E), KPM_L.clone()),
}


# ---------------------------------------------------------------------------------------------------
# recurrent modules with packed sequences

LENGTHS = torch.tensor([2, 4, 3])


def _packed(m, x, lengths):
    # lengths must be a CPU tensor (or a list), on CUDA too: torch's own check
    packed = rnn_utils.pack_padded_sequence(x, lengths.cpu(), batch_first=m.batch_first, enforce_sorted=False)
    out, h = m(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, batch_first=m.batch_first, total_length=4)
    hs = list(h) if isinstance(h, tuple) else [h]
    return [padded, lens] + hs + _grads(m, x, [padded] + hs)


def _lstm_states(m, x):
    d = 2 if m.bidirectional else 1
    h0 = torch.linspace(-1, 1, m.num_layers * d * x.shape[1] * (m.proj_size or m.hidden_size),
                        device=x.device).reshape(m.num_layers * d, x.shape[1], -1).requires_grad_()
    c0 = torch.linspace(1, -1, m.num_layers * d * x.shape[1] * m.hidden_size,
                        device=x.device).reshape(m.num_layers * d, x.shape[1], -1).requires_grad_()
    out, (h, c) = m(x, (h0, c0))
    return [out, h, c] + _grads(m, (x, h0, c0), [out, h, c])


def _rnn_plain(m, x):
    out, h = m(x)
    return [out, h] + _grads(m, x, [out, h])


def _utils(x, y, z):
    padded = rnn_utils.pad_sequence([x, y, z], batch_first=True, padding_value=-1.0)
    padded2 = rnn_utils.pad_sequence([x, y, z], padding_side="left")
    packed = rnn_utils.pack_sequence([x, y, z], enforce_sorted=False)
    unpacked = rnn_utils.unpack_sequence(packed)
    unpadded = rnn_utils.unpad_sequence(padded, torch.tensor([3, 2, 4]), batch_first=True)
    return [padded, padded2, packed.data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices,
            *unpacked, *unpadded]


RNN_CASES = {
    "lstm_packed_unsorted": _case(_packed, lambda: nn.LSTM(3, 4), _leaf(4, 3, 3), LENGTHS.clone()),
    "gru_packed_bidir_batch_first": _case(_packed, lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True,
                                                                  batch_first=True), _leaf(3, 4, 3), LENGTHS.clone()),
    "rnn_tanh_packed_2layer": _case(_packed, lambda: nn.RNN(3, 4, num_layers=2), _leaf(4, 3, 3), LENGTHS.clone()),
    "lstm_proj_packed_bidir": _case(_packed, lambda: nn.LSTM(3, 4, proj_size=2, bidirectional=True),
                                    _leaf(4, 3, 3), LENGTHS.clone()),
    "lstm_initial_states_2layer_bidir": _case(_lstm_states, lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True),
                                              _leaf(4, 3, 3)),
    "lstm_proj_initial_states": _case(_lstm_states, lambda: nn.LSTM(3, 4, proj_size=2, num_layers=2),
                                      _leaf(4, 3, 3)),
    "rnn_relu_bidir": _case(_rnn_plain, lambda: nn.RNN(3, 4, nonlinearity="relu", bidirectional=True),
                            _leaf(4, 3, 3)),
    "rnn_unbatched": _case(_rnn_plain, lambda: nn.GRU(3, 4, num_layers=2), _leaf(4, 3)),
    "rnn_cell_relu": _case(lambda m, x: [m(x)] + _grads(m, x, m(x)), lambda: nn.RNNCell(3, 4, nonlinearity="relu"),
                           _leaf(2, 3)),
    "rnn_utils": lambda: D.check(_utils, rand(3, 2), rand(2, 2, seed=2), rand(4, 2, seed=3), modes=EAGER),
}


# ---------------------------------------------------------------------------------------------------
# embeddings

def _emb_max_norm(m, i):
    out = m(i)
    out2 = m(i.flip(0))
    return [out, out2, m.weight.detach().clone()] + _grads(m, [], [out])


def _emb_grad(m, i):
    out = m(i)
    return [out] + _grads(m, [], out)


IDX = torch.tensor([[1, 2, 4, 2], [4, 3, 2, 0]])


def _bag(m, i, o, *psw):
    out = m(i, o, per_sample_weights=psw[0] if psw else None)
    return [out] + _grads(m, [], out)


EMB_CASES = {
    "max_norm_weight_renormed": _case(_emb_max_norm, lambda: nn.Embedding(6, 3, max_norm=1.0), IDX.clone()),
    "max_norm_p1_padding": _case(_emb_max_norm, lambda: nn.Embedding(6, 3, max_norm=0.5, norm_type=1.0,
                                                                     padding_idx=2), IDX.clone()),
    "padding_idx_grad": _case(_emb_grad, lambda: nn.Embedding(6, 3, padding_idx=2), IDX.clone()),
    "scale_grad_by_freq": _case(_emb_grad, lambda: nn.Embedding(6, 3, scale_grad_by_freq=True, padding_idx=0),
                                IDX.clone()),
    "from_pretrained_frozen": lambda: D.check(lambda w, i: nn.Embedding.from_pretrained(w, padding_idx=1)(i),
                                              rand(6, 3), IDX.clone(), modes=EAGER),
    "bag_mean_offsets": _case(_bag, lambda: nn.EmbeddingBag(6, 3, mode="mean"), IDX.flatten(),
                              torch.tensor([0, 3, 3, 5])),
    "bag_max_last_offset": _case(_bag, lambda: nn.EmbeddingBag(6, 3, mode="max", include_last_offset=True),
                                 IDX.flatten(), torch.tensor([0, 2, 5, 8])),
    "bag_sum_psw_padding": _case(_bag, lambda: nn.EmbeddingBag(6, 3, mode="sum", padding_idx=2), IDX.flatten(),
                                 torch.tensor([0, 4]), rand(8, seed=4)),
    "bag_max_norm": _case(lambda m, i, o: [m(i, o), m.weight.detach().clone()],
                          lambda: nn.EmbeddingBag(6, 3, max_norm=0.7), IDX.flatten(), torch.tensor([0, 3])),
}


# ---------------------------------------------------------------------------------------------------
# losses and reshaping modules

def _ctc(m, lp, t, il, tl):
    out = m(lp.log_softmax(-1), t, il, tl)
    return [out] + _grads(m, lp, out)


CTC_LP = (5, 2, 4)


def _fold(m, x):
    out = m(x)
    return [out] + _grads(m, x, out)


OTHER_CASES = {
    "ctc_mean_grad": _case(_ctc, lambda: nn.CTCLoss(blank=0), _leaf(*CTC_LP), torch.tensor([[1, 2], [3, 3]]),
                           torch.tensor([5, 4]), torch.tensor([2, 2])),
    "ctc_none_blank_last_concat": _case(_ctc, lambda: nn.CTCLoss(blank=3, reduction="none", zero_infinity=True),
                                        _leaf(*CTC_LP), torch.tensor([1, 2, 0, 1, 1]), torch.tensor([5, 3]),
                                        torch.tensor([2, 3])),
    "ctc_sum_impossible_grad": _case(_ctc, lambda: nn.CTCLoss(reduction="sum", zero_infinity=True), _leaf(*CTC_LP),
                                     torch.tensor([[1, 1, 1], [2, 3, 0]]), torch.tensor([3, 5]), torch.tensor([3, 2])),
    "fold_grad": _case(_fold, lambda: nn.Fold((4, 5), (2, 3), dilation=1, padding=(1, 0), stride=(2, 1)),
                       _leaf(2, 12, 9)),
    "unfold_grad": _case(_fold, lambda: nn.Unfold((2, 3), dilation=(2, 1), padding=1, stride=2), _leaf(2, 3, 5, 6)),
    "pixel_shuffle_grad": _case(_fold, lambda: nn.PixelShuffle(2), _leaf(2, 8, 2, 3)),
    "pixel_unshuffle_grad": _case(_fold, lambda: nn.PixelUnshuffle(2), _leaf(1, 2, 4, 6)),
    "pixel_shuffle_5d": _case(_fold, lambda: nn.PixelShuffle(2), _leaf(2, 1, 4, 2, 2)),
    "channel_shuffle": _case(_fold, lambda: nn.ChannelShuffle(2), _leaf(1, 4, 2, 2)),
    "upsample_nearest_grad": _case(_fold, lambda: nn.Upsample(scale_factor=(2, 1.5)), _leaf(1, 2, 3, 4)),
}


# ---------------------------------------------------------------------------------------------------
# module plumbing: tying, dtype conversion, state_dict

class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.lin = nn.Linear(4, 6, bias=False)
        self.lin.weight = self.emb.weight

    def forward(self, i):
        return self.lin(self.emb(i))


def _tied(m, i):
    assert m.lin.weight is m.emb.weight
    out = m(i)
    return [out, len(list(m.parameters()))] + _grads(m, [], out)


def _tied_step(m, i):
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        m(i).logsumexp(-1).sum().backward()
        opt.step()
    return [m.emb.weight.detach().clone(), m.lin.weight.data_ptr() == m.emb.weight.data_ptr()]


def _converted(dtype):
    def run(m, x):
        m = m.to(dtype)
        out = m(x.to(dtype))
        return [out] + _grads(m, [], out)
    return run


def _conv_block():
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.GELU(), nn.Flatten(),
                         nn.Linear(3 * 4 * 4, 5), nn.LayerNorm(5))


def _half_method(name):
    def run(m, x):
        getattr(m, name)()
        return [m(x.to(m[0].weight.dtype)), m[1].running_mean, m[1].running_var.dtype]
    return run


def _state_dict_load(strict, assign):
    def run(m, src):
        sd = {k: v * 2 for k, v in src.state_dict().items() if not k.endswith("bias")}
        sd["extra.weight"] = torch.ones(2, device=sd["0.weight"].device)
        res = m.load_state_dict(sd, strict=strict, assign=assign)
        p = m[0].weight
        out = m(torch.ones(2, 3, device=p.device))
        return [out, sorted(res.missing_keys), sorted(res.unexpected_keys), p.requires_grad,
                p.device == src[0].weight.device, isinstance(p, nn.Parameter)] + _grads(m, [], out)
    return run


def _mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _cpu_sd_onto(assign):
    """a CPU state dict loaded into a tpu module: copied onto the device (assign=False)."""
    def run(m):
        torch.manual_seed(5)
        sd = _mlp().state_dict()
        m.load_state_dict(sd, assign=assign)
        return [m(torch.ones(2, 3, device=m[0].weight.device)), m[0].weight.device == m[2].bias.device,
                m[0].weight.device.type == ("cpu" if assign else m[2].bias.device.type)]
    return run


PLUMB_CASES = {
    "tied_forward_grad": _case(_tied, _Tied, IDX.clone()),
    "tied_sgd_steps": _case(_tied_step, _Tied, IDX.clone()),
    "half_conv_block": _case(_converted(torch.float16), _conv_block, rand(2, 2, 4, 4), atol=1e-2, rtol=1e-2),
    "bfloat16_conv_block": _case(_converted(torch.bfloat16), _conv_block, rand(2, 2, 4, 4), atol=5e-2, rtol=5e-2),
    "half_method_eval": _case(_half_method("half"), lambda: _conv_block().eval(), rand(2, 2, 4, 4),
                              atol=1e-2, rtol=1e-2),
    "double_method": _case(_half_method("double"), _conv_block, rand(2, 2, 4, 4)),
    "load_strict_false": _case(_state_dict_load(False, False), _mlp, _module(_mlp, seed=3)),
    "load_strict_false_assign": _case(_state_dict_load(False, True), _mlp, _module(_mlp, seed=3)),
    "load_strict_raises": _case(_state_dict_load(True, False), _mlp, _module(_mlp, seed=3)),
    "load_cpu_state_dict": _case(_cpu_sd_onto(False), _mlp),
}

# ---------------------------------------------------------------------------------------------------
# more modules and utilities


def _packed_h0(m, x, lengths):
    packed = rnn_utils.pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
    d = 2 if m.bidirectional else 1
    h0 = torch.linspace(-1, 1, m.num_layers * d * 3 * m.hidden_size, device=x.device).reshape(m.num_layers * d, 3, -1)
    hx = (h0, h0.flip(-1) * 0.5) if isinstance(m, nn.LSTM) else h0
    out, h = m(packed, hx)
    padded, _ = rnn_utils.pad_packed_sequence(out)
    hs = list(h) if isinstance(h, tuple) else [h]
    return [padded] + hs + _grads(m, x, [padded] + hs)


def _unpool(m, x):
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    y = m(out, idx, output_size=x.shape[-2:])
    return [out, idx, y] + _grads(m, x, y)


def _deepcopy(m, x):
    m2 = copy.deepcopy(m)
    with torch.no_grad():
        m2.lin.weight.add_(1)
    return [m(x), m2(x), m2.lin.weight is m2.emb.weight, m.lin.weight is m.emb.weight]


def _clip(m, x):
    out = m(x)
    (out * _weights(out)).sum().backward()
    n1 = nn.utils.clip_grad_norm_(m.parameters(), 0.1)
    n2 = nn.utils.clip_grad_norm_(m.parameters(), 0.05, norm_type=float("inf"), foreach=True)
    nn.utils.clip_grad_value_(m.parameters(), 0.01)
    v = nn.utils.parameters_to_vector(m.parameters())
    nn.utils.vector_to_parameters(v * 2, m.parameters())
    return [n1, n2, v] + [p.grad for p in m.parameters()] + list(m.parameters())


def _fuse(m, x):
    m.eval()
    fused = torch.nn.utils.fusion.fuse_conv_bn_eval(m[0], m[1])
    return [m(x), fused(x)]


def _to_empty(m, x):
    m2 = nn.Linear(3, 4, device="meta").to_empty(device=x.device)
    with torch.no_grad():
        m2.weight.copy_(m.weight); m2.bias.fill_(0.5)
    return [m2(x)] + _grads(m2, x, m2(x))


def _spectral(m, x):
    out = m(x)
    return [out, m.weight] + _grads(m, x, out)


def _emb_sparse_refused():
    """nn.Embedding(sparse=True): the sparse gradient has no tpu layout; a clear refusal naming the way out
    (the forward matches CPU)."""
    torch.manual_seed(0)
    m = nn.Embedding(6, 3, sparse=True).to("tpu")
    out = m(IDX.to("tpu"))
    with pytest.raises(NotImplementedError, match=r"sparse=False"):
        out.sum().backward()
    assert_device_works()


def _channels_last(m, x):
    m = m.to(memory_format=torch.channels_last)
    out = m(x.to(memory_format=torch.channels_last))
    return [out, out.is_contiguous(memory_format=torch.channels_last)] + _grads(m, x, out)


def _mha_eval_kpm(m, x, kpm):
    m.eval()
    with torch.no_grad():
        return m(x, x, x, key_padding_mask=kpm, need_weights=False)[0]


def _adaptive_ls(m, x, t):
    out, loss = m(x, t)
    return [out, loss, m.log_prob(x), m.predict(x)] + _grads(m, x, loss)


def _fwd_grad(m, *xs):
    out = m(*xs)
    return [out] + _grads(m, xs, out)


def _index_0d(op, d):
    return lambda x, s: getattr(x, op)(d, torch.tensor(2, device=x.device), s)


# (self shape, source shape, dim): a 0-d index is one index
INDEX_0D = (((5, 3), (1, 3), 0), ((5,), (1,), 0), ((5,), (), -1), ((4, 5), (4, 1), -1), ((5, 3), (3,), 0))


def _seq_conv_bn(pad=0):
    return lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=pad), nn.BatchNorm2d(3))


MORE_CASES = {
    "gru_packed_h0_bidir": _case(_packed_h0, lambda: nn.GRU(3, 4, bidirectional=True, num_layers=2),
                                 _leaf(4, 3, 3), LENGTHS.clone()),
    "lstm_packed_h0": _case(_packed_h0, lambda: nn.LSTM(3, 4), _leaf(4, 3, 3), LENGTHS.clone()),
    "max_unpool": _case(_unpool, lambda: nn.MaxUnpool2d(2), _leaf(1, 2, 5, 4)),
    "deepcopy_tied": _case(_deepcopy, _Tied, IDX.clone()),
    "clip_grads": _case(_clip, _mlp, _leaf(2, 3)),
    "fuse_conv_bn": _case(_fuse, _seq_conv_bn(), rand(1, 2, 5, 5)),
    "to_empty": _case(_to_empty, lambda: nn.Linear(3, 4), _leaf(2, 3)),
    "spectral_norm": _case(_spectral, lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(3, 4)), _leaf(2, 3)),
    "orthogonal": _case(_spectral, lambda: nn.utils.parametrizations.orthogonal(nn.Linear(4, 4)), _leaf(2, 4)),
    "channels_last_conv": _case(_channels_last, _seq_conv_bn(1), _leaf(2, 2, 4, 4)),
    # AdaptiveLogSoftmaxWithLoss writes with index_copy_ and a 0-d index: the lowering failed
    "adaptive_log_softmax": _case(_adaptive_ls, lambda: nn.AdaptiveLogSoftmaxWithLoss(4, 10, [3, 6], div_value=2.0),
                                  _leaf(5, 4), torch.tensor([0, 4, 9, 2, 7])),
    "index_copy_add_0d_index": lambda: [
        D.check(_index_0d(op, d), rand(*xs), rand(*ss, seed=3) if ss else torch.tensor(1.5), modes=EAGER)
        for op in ("index_copy", "index_add") for xs, ss, d in INDEX_0D],
    "bilinear": _case(_fwd_grad, lambda: nn.Bilinear(3, 2, 4), _leaf(2, 3), _leaf(2, 2, seed=3)),
    "lrn": _case(_fwd_grad, lambda: nn.LocalResponseNorm(3, alpha=0.1), _leaf(2, 5, 3, 3)),
    "cross_map_lrn": _case(_fwd_grad, lambda: nn.CrossMapLRN2d(3, alpha=0.1), _leaf(2, 5, 3, 3)),
    "lppool": _case(_fwd_grad, lambda: nn.LPPool2d(2, 2), _leaf(1, 2, 4, 5)),
    "rmsnorm_module": _case(_fwd_grad, lambda: nn.RMSNorm([3, 4], eps=None), _leaf(2, 3, 4)),
    # unbatched CTC passes 0-d lengths: reading them to the host raised TypeError ('int' is not iterable)
    "ctc_unbatched_int32": _case(_ctc, lambda: nn.CTCLoss(), _leaf(5, 4), torch.tensor([1, 2], dtype=torch.int32),
                                 torch.tensor(5), torch.tensor(2)),
    "ctc_tuple_lengths": lambda: D.check(lambda lp, t: F.ctc_loss(lp.log_softmax(-1), t, (5, 4), (2, 2)),
                                         rand(5, 2, 4), torch.tensor([[1, 2], [3, 3]]), modes=EAGER, **TOL),
    "decoder_eval": _case(lambda m, x, mem: m.eval()(x, mem), lambda: nn.TransformerDecoder(_dec()(), 2),
                          rand(2, 3, 8), rand(2, 4, 8, seed=2)),
    "mha_mixed_mask_types": _case(_mha(key_padding_mask=True, attn_mask=True), _mha_make(), _leaf(2, 3, 8),
                                  _leaf(2, 4, 8, seed=2), _leaf(2, 4, 8, seed=3), KPM.clone(), FLOAT_MASK.clone()),
    "mha_eval_fastpath_kpm": _case(_mha_eval_kpm, _mha_make(), rand(2, 4, 8), KPM.clone()),
    "emb_sparse_refused": _emb_sparse_refused,
}


# ---------------------------------------------------------------------------------------------------
# batch 3: buffers, parameters, embedding bags' per-sample weights


def _emb_view_renorm(w, i):
    base = w.t()  # w is (3, 6): the table is a transposed view
    out = F.embedding(i, base, max_norm=1.0)
    return [out, base]


def _emb_pretrained(w, i):
    m = nn.Embedding.from_pretrained(w, max_norm=0.8, freeze=False)
    out = m(i)
    return [out] + _grads(m, [], out)


def _tied_half(m, i):
    m = m.half()
    return [m(i), m.lin.weight is m.emb.weight, m.emb.weight.dtype]


def _sd_roundtrip(m, x):
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, map_location="cpu")
    cpu = _mlp()
    cpu.load_state_dict(sd)
    m2 = _mlp().to(x.device)
    m2.load_state_dict(m.state_dict(keep_vars=True))
    return [cpu(x.cpu()), m2(x), [v.device.type for v in sd.values()]]


def _shared_buffer(m, x):
    return [m(x), m.scale, m.lin.weight]


class _Buf(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3) * 2)
        self.register_buffer("tmp", torch.zeros(1), persistent=False)

    def forward(self, x):
        self.tmp += 1
        return self.lin(x) * self.scale + self.tmp


def _bufs(m, x):
    out = m(x)
    out = m(x) + out
    return [out, m.tmp, sorted(m.state_dict().keys())]


def _bag_2d_psw(m, i, psw):
    out = m(i, per_sample_weights=psw)
    return [out] + _grads(m, psw, out)


def _bag_max_pad(m, i, o):
    out = m(i, o)
    return [out] + _grads(m, [], out)


def _mha_dropout_eval(m, x, kpm):
    m.eval()
    out, w = m(x, x, x, key_padding_mask=kpm)
    return [out, w] + _grads(m, x, out)


def _enc_eval_float_mask(m, x, mask, kpm):
    m.eval()
    with torch.no_grad():
        return [m(x, src_mask=mask), m(x, src_mask=mask.isinf(), src_key_padding_mask=kpm)]


def _lstm_flatten(m, x):
    m.flatten_parameters()
    out, (h, c) = m(x)
    return [out, h, c] + _grads(m, x, out)


def _param_reassign(m, x):
    m.weight = nn.Parameter(m.weight.detach() * 2)
    m.bias.data = torch.zeros(4, device=x.device)
    out = m(x)
    return [out] + _grads(m, x, out)


def _weight_data_swap(m, x):
    m.weight.data = m.weight.data.t().contiguous().t()  # same values, other strides
    out = m(x)
    return [out] + _grads(m, x, out)

def _bag_psw_grads(w, i, o, p, pad, last):
    out = F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, padding_idx=pad, include_last_offset=last)
    return [out] + list(torch.autograd.grad((out * _weights(out)).sum(), (w, p)))


def _bag_psw_cases():
    for pad in (None, 2):
        for last in (False, True):
            offsets = torch.tensor([0, 2, 2, 6] if last else [0, 2, 2, 5])
            for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 1e-2)):
                D.check(_bag_psw_grads, _leaf(6, 3, dtype=dtype), torch.tensor([1, 2, 4, 2, 5, 0]), offsets,
                        _leaf(6, seed=4, dtype=dtype), pad, last, modes=EAGER, atol=tol, rtol=tol)


def _bag_ids(m, i, o):
    out = m(i, o)
    return [out] + _grads(m, [], out)


BATCH3_CASES = {
    "emb_renorm_view": lambda: D.check(_emb_view_renorm, rand(3, 6) * 3, IDX.clone(), modes=EAGER),
    "emb_pretrained_maxnorm_input": lambda: D.check(_emb_pretrained, rand(6, 3) * 3, IDX.clone(), modes=EAGER),
    "tied_half": _case(_tied_half, _Tied, IDX.clone(), atol=1e-2, rtol=1e-2),
    "state_dict_roundtrip": _case(_sd_roundtrip, _mlp, rand(2, 3)),
    "buffers_inplace": _case(_bufs, _Buf, rand(2, 3)),
    # per_sample_weights' gradient (_embedding_bag_per_sample_weights_backward) had no lowering
    "bag_2d_psw": _case(_bag_2d_psw, lambda: nn.EmbeddingBag(6, 3, mode="sum"), IDX.clone(), _leaf(2, 4)),
    "bag_psw_grads": _bag_psw_cases,
    "bag_max_pad_grad": _case(_bag_ids, lambda: nn.EmbeddingBag(6, 3, mode="max", padding_idx=2),
                              torch.tensor([2, 2, 1, 4, 2]), torch.tensor([0, 2, 4])),
    "bag_mean_pad_all_padded": _case(_bag_ids, lambda: nn.EmbeddingBag(6, 3, mode="mean", padding_idx=2),
                                     torch.tensor([2, 2, 1, 4, 2]), torch.tensor([0, 2, 4])),
    "mha_dropout_eval": _case(_mha_dropout_eval, lambda: nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True),
                              _leaf(2, 4, 8), KPM.clone()),
    "enc_eval_float_mask": _case(_enc_eval_float_mask, _enc(), rand(2, 3, 8), CAUSAL.clone(), KPM_L.clone()),
    "lstm_flatten": _case(_lstm_flatten, lambda: nn.LSTM(3, 4, num_layers=2), _leaf(4, 2, 3)),
    "param_reassign": _case(_param_reassign, lambda: nn.Linear(3, 4), _leaf(2, 3)),
    "weight_data_swap": _case(_weight_data_swap, lambda: nn.Linear(3, 4), _leaf(2, 3)),
    "ctc_grad_zero_inf_long_target": _case(_ctc, lambda: nn.CTCLoss(zero_infinity=True, reduction="none"),
                                           _leaf(3, 2, 4), torch.tensor([[1, 2, 3, 1], [1, 1, 0, 0]]),
                                           torch.tensor([3, 3]), torch.tensor([4, 2])),
    "fold_overlap_dilation": _case(_fold, lambda: nn.Fold((5, 6), (2, 2), dilation=(2, 1), stride=(1, 2), padding=1),
                                   _leaf(1, 8, 12)),
    "embedding_max_norm_p3_grad": lambda: D.check(
        lambda w, i: [F.embedding(i, w, max_norm=1.0, norm_type=3.0),
                      torch.autograd.grad(F.embedding(i, w, max_norm=1.0).sum(), w)[0]],
        leaf_per_device(6, 3), IDX.clone(), modes=EAGER),
}


# ---------------------------------------------------------------------------------------------------
# batch 4: in-place renorm seen by later ops, packing options, functional MHA, argument checks


def _renorm_then_use(w, i):
    out = F.embedding(i, w, max_norm=1.0)
    return [out, w * 1, w.norm(dim=1)]


def _pack_sorted_bad(x):
    return rnn_utils.pack_padded_sequence(x, torch.tensor([2, 4, 3]), enforce_sorted=True).data


def _pad_packed_opts(x):
    p = rnn_utils.pack_padded_sequence(x, torch.tensor([4, 3, 2]))
    return [rnn_utils.pad_packed_sequence(p, padding_value=-7.0, total_length=6)[0],
            rnn_utils.pad_packed_sequence(p, batch_first=True)[0]]


def _mha_fn_separate(q, k, v, wq, wk, wv, wo, sk):
    E, H = 8, 2
    out, w = F.multi_head_attention_forward(
        q, k, v, E, H, None, torch.zeros(3 * E, device=q.device), None, None, False, 0.0, wo, None,
        training=True, need_weights=True, use_separate_proj_weight=True, q_proj_weight=wq, k_proj_weight=wk,
        v_proj_weight=wv, static_k=sk, static_v=sk * 2)
    return [out, w] + list(torch.autograd.grad((out * _weights(out)).sum(), (q, wq, wv, wo)))


def _bad_h0(m, x):
    return m(x, torch.zeros(1, 3, 5, device=x.device))[0]


BATCH4_CASES = {
    "renorm_then_use": lambda: D.check(_renorm_then_use, rand(6, 3) * 3, IDX.clone(), modes=EAGER),
    "pack_sorted_bad": lambda: D.check(_pack_sorted_bad, rand(4, 3, 2), modes=EAGER, expect_raise=True),
    "pad_packed_opts": lambda: D.check(_pad_packed_opts, rand(4, 3, 2), modes=EAGER),
    "mha_fn_separate_static_kv": lambda: D.check(
        _mha_fn_separate, _leaf(3, 2, 8), rand(4, 2, 8, seed=2), rand(4, 2, 8, seed=3), _leaf(8, 8, seed=4),
        rand(8, 8, seed=5), _leaf(8, 8, seed=6), _leaf(8, 8, seed=7), rand(4, 4, 4, seed=8), modes=EAGER, **TOL),
    "gru_bad_h0": _case(_bad_h0, lambda: nn.GRU(3, 4), _leaf(2, 3, 3), expect_raise=True),
    "lstm_bad_input_size": _case(lambda m, x: m(x)[0], lambda: nn.LSTM(3, 4), _leaf(2, 3, 5), expect_raise=True),
    "mha_bad_mask_shape": _case(lambda m, x: m(x, x, x, attn_mask=torch.zeros(2, 2, device=x.device))[0],
                                _mha_make(), _leaf(2, 3, 8), expect_raise=True),
    "ctc_target_too_long": _case(_ctc, lambda: nn.CTCLoss(), _leaf(3, 2, 4), torch.tensor([[1, 2, 3, 1], [1, 1, 0, 0]]),
                                 torch.tensor([3, 3]), torch.tensor([5, 2]), expect_raise=True),
    "ctc_blank_in_target": _case(_ctc, lambda: nn.CTCLoss(), _leaf(3, 2, 4), torch.tensor([[0, 2], [1, 1]]),
                                 torch.tensor([3, 3]), torch.tensor([2, 2])),
    "pixel_unshuffle_bad": _case(lambda m, x: m(x), lambda: nn.PixelUnshuffle(2), _leaf(1, 2, 3, 4), expect_raise=True),
}


ISOLATED_CASES = {}
for _prefix, _cases in (("mha", MHA_CASES), ("layer", LAYER_CASES), ("rnn", RNN_CASES), ("emb", EMB_CASES),
                        ("other", OTHER_CASES), ("plumb", PLUMB_CASES), ("more", MORE_CASES),
                        ("b3", BATCH3_CASES), ("b4", BATCH4_CASES)):
    ISOLATED_CASES.update({f"{_prefix}:{k}": v for k, v in _cases.items()})

XFAIL = {}


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, XFAIL, timeout_per_case=120)
