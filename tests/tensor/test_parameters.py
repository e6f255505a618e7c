"""How training and model-loading code handles parameters, gradients and storage, tpu against CPU.

Flat parameter and gradient buffers (FSDP/DeepSpeed style: ``p.data = flat[i:j].view(shape)``,
``p.grad = gflat[i:j].view(shape)``), optimizer steps (foreach, for-loop, fused) read back through the flat
buffer, tied weights through moves, saving and loading, meta-device init with ``to_empty`` and
``load_state_dict(assign=True)``, ``swap_tensors`` and the ``torch.__future__`` conversion flags,
``functional_call``, gradient accumulation and hand-assigned gradients, clipping, EMA/SWA, GradScaler,
safetensors and ``torch.load`` with every ``map_location`` form, ``mmap`` and ``weights_only``.

Found here and fixed:
* ``untyped_storage().resize_(0)`` / ``resize_(nbytes)`` (FSDP's ``free_storage``/``alloc_storage`` of a
  flat parameter, also ``_typed_storage()._resize_``) raised "not supported". A tpu storage can now be freed
  and re-allocated at its size (views keep their geometry, memory counters follow); reading or writing a
  freed storage raises a clear error (CPU reads freed memory, or segfaults); other sizes are refused clearly.
* ``module.share_memory()`` / ``tensor.share_memory_()`` raised: torch makes it a no-op for every storage
  but the CPU's, as on CUDA.
* ``copy.deepcopy`` of a tpu ``nn.Parameter`` kept its ``.grad``, its Python attributes and its sharing with
  other parameters' storage (flat buffers); torch's ``Parameter.__deepcopy__`` (CPU, CUDA) clones the data
  alone: ``ema = deepcopy(model)`` after a backward carried every gradient.
* ``torch.save(..., _use_new_zipfile_serialization=False)`` (the legacy format) of tpu tensors, or of CPU
  tensors loaded with ``map_location="tpu"``, loaded garbage: the legacy format reads the bytes after the
  pickle, and the device copy was made while unpickling, from uninitialised memory. Now uploaded once
  ``torch.serialization._legacy_load`` has read them.
* ``torch.save``/``pickle`` of a tpu tensor or parameter lost its Python attributes (``p.tag = ...``), which
  torch keeps (weights_only loads too).

Cases tried (all strict and fused eager), outcome:
  flat params + SGD/SGD momentum foreach and for-loop/Adam/AdamW for-loop/Adam fused ........ pass
    (plain SGD and SGD momentum for-loop not kept: same paths as the kept ones)
  flat grad buffer accumulated by backward twice, then Adam (foreach and for-loop) ............ pass
  parameters_to_vector / vector_to_parameters; _flatten/_unflatten_dense_tensors (+ p.data) .. pass
  tied LM: AdamW steps, torch.save, load(map_location=tpu), tie and shared pointer kept ........ pass
  meta init + load_state_dict(assign=True) (untied, tied); to_empty + strict=False (tied) ...... pass
  swap_tensors of params and of a tensor with a live view .................................... pass
  __future__ overwrite/swap flags with .to(tpu)/.double()/.to(float64)/bf16/half, tied, optimizer pass
  functional_call (untied, tie_weights tied/untied, buffers), torch.func.grad, vmap over stacked pass
  register_buffer(persistent=False) round trip ............................................... pass
  micro-batch accumulation with zero_grad(set_to_none=False) and p.grad.data.mul_ ............. pass
  p.grad = CPU tensor / wrong shape / float64 / int64 / a view of the wrong numel / expanded ... same error as CPU (CPU grad: torch's own device error)
  retain_grad on views; backward(inputs=...); post-accumulate-grad hooks (optimizer in backward) pass
  clip_grad_norm_ error_if_nonfinite (inf, nan foreach), nonfinite without error, grad views .. pass
  EMA via _foreach_lerp_/mul_/add_ on live params, AveragedModel EMA and use_buffers ........... pass
  AveragedModel(use_buffers=True) with BatchNorm's int64 num_batches_tracked ................. raises as on CUDA
      (torch sends PrivateUse1 down its foreach path: integer _foreach_addcdiv_; CPU takes the loop)
  fuse_conv_bn_eval, fuse_linear_bn_eval ..................................................... pass
  safetensors save_file/load_file(device=tpu), non-contiguous view, save/load bytes, tied
    save_file refused like CPU, save_model/load_model with tied weights ........................ pass
  torch.load map_location cpu / tpu / torch.device / {"tpu:0": "cpu"} / callable, mmap=True,
    weights_only=True (Parameter kept), optimizer state_dict round trip and CPU<->tpu ........... pass
  load_state_dict: strict=False extra/missing, shape mismatch, float64 sd, non-contiguous CPU sd,
    tpu sd into a CPU model, into flat views, assign=True of flat views then Adam ............... pass
  module.half()/.double() of flat-view params, then writes to the flat buffer ................ pass
  Module._apply with a kept view, state_dict(keep_vars) writes, state_dict sharing ............. pass
  p.set_(flat view) / p.set_(storage, offset, size, stride) under no_grad, then backward ....... pass
  FSDP-style untyped_storage().resize_(0)/resize_(n), _typed_storage()._resize_, shard loop ..... FIXED (raised)
  freed storage read/written/viewed; resize_ to another size ................................. clear errors (new)
  module.share_memory(), tensor.share_memory_() .............................................. FIXED (raised)
  deepcopy of a model with flat params and flat grads (EMA copy) ............................. FIXED (grads kept, storage shared)
  torch.save/load (weights_only both), pickle, deepcopy of tensors/params with attributes .... FIXED (attributes lost)
  legacy (non-zipfile) torch.save of tpu tensors / CPU file with map_location=tpu ............ FIXED (garbage values)
  torch.load map_location="tpu:7" (no such device), "meta", skip_data(), get_unsafe_globals ... pass
  deepcopy of a plain tensor with grad, of a transposed param, of a frozen param .............. pass
  ZeRO-3 style p.data = empty(0) release and p.data = gathered re-point, two steps ............ pass
  capturable=True Adam/AdamW/NAdam/RAdam/Adamax/ASGD/RMSprop/Adadelta/Rprop (CPU: not capturable) pass
  tensor lr (foreach, fused) with StepLR, differentiable=True SGD ............................ pass
  _foreach_lerp_ with a 0-d tpu weight, _foreach_copy_ into flat views from float64/transposed  pass
  nn.init eye_/dirac_/constant_/zeros_/ones_, orthogonal_ (W^T W), random inits' statistics ... pass
  skip_init, torch.device(tpu) context init, load_state_dict pre/post hooks, non_blocking moves pass
  channels_last module training (param and grad strides), channels_last param grad layout ..... pass
  Embedding.from_pretrained tied to a Linear, a flat Parameter used through views, requires_grad_
    on a view of a flat buffer, grads re-pointed into one buffer before a foreach AdamW step ... pass
  strided (step 2) param views + Adam, bf16 flat fused AdamW, inference_mode load_state_dict,
    model built under inference_mode then backward (raises like CPU), inference sd + assign=True pass
  .double() with grads, .cpu() of flat-view params, clip over fp32/bf16/fp16 grads, empty norms pass
  parameters_to_vector over two devices ...................................................... torch's own error
  load_state_dict of a freed tensor, foreach on grads aliasing themselves, flat optimizer
    state saved/loaded ...................................................................... pass
  fused hazards: reads pending when the storage is freed, p.data swapped between forward and
    backward, p.data = view of itself, swap_tensors with a pending read, free/alloc in hooks .. pass
  torch.distributed.checkpoint get/set_model_state_dict, get_optimizer_state_dict ............ pass
  dcp.save(..., no_dist=True) with the default FileSystemWriter ............................... not fixed: needs
      torch.tpu.current_stream() (refused by design); FileSystemWriter(path, thread_count=2) saves, dcp.load loads
  prune l1/ln_structured training + remove, global_unstructured, old weight_norm/spectral_norm,
    parametrize.cached() ...................................................................... pass
  set_(storage) of a freed-then-re-allocated storage, storage clone before a free, free through
    each param of a flat model, freed param then p.data =, TypedStorage size/nbytes/tolist ..... pass
  GradScaler unscale_/step over a flat grad buffer, inf overflow skip ........................ pass
  fp16 model with fp32 master weights, bf16 grads ............................................. pass (fp16/bf16 rounding tolerance)
  add_param_group later, tpu optimizer state loaded into a CPU optimizer ...................... pass
  torch.save of a Parameter with .grad (grad dropped), flat-view state_dict offsets kept ....... pass
  requires_grad_(False) on part of a flat model, zero_grad(set_to_none=False) on grad views ... pass
Not fixed (by design, clear errors): ``cpu_param.data = tpu_tensor`` / ``tpu_param.data = cpu_tensor``
(a tpu tensor is a Python wrapper subclass; torch's "incompatible tensor type" / the backend's own message),
FSDP2 ``fully_shard`` (needs ``torch.tpu.Stream``, which the backend refuses by design), ``nn.LazyLinear`` moved
to tpu before its first call (the README's documented limit; the error says to initialise it on the CPU).
"""
import copy
import gc
import io
import os
import pickle

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.compare import read, sync
from tests.harness.errors import assert_device_works
from tests.harness.inputs import DEV, rand

pytestmark = pytest.mark.usefixtures("watchdog")

X = rand(5, 3)
IDS = torch.tensor([1, 2, 3, 6])
HALF_TOL = {"atol": {torch.float32: 2e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2},
            "rtol": {torch.float32: 2e-3, torch.float16: 2e-3, torch.bfloat16: 2e-2}}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


class _LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, i):
        return self.head(self.emb(i))


def _lm(d):
    torch.manual_seed(0)
    return _LM().to(d)


def _flatten(m):
    """FSDP/DeepSpeed style: every parameter becomes a view of one flat buffer."""
    ps = list(m.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in ps])
    o = 0
    for p in ps:
        p.data = flat[o:o + p.numel()].view(p.shape)
        o += p.numel()
    return ps, flat


def _flat_grads(ps):
    g = torch.zeros(sum(p.numel() for p in ps), device=ps[0].device)
    o = 0
    for p in ps:
        p.grad = g[o:o + p.numel()].view(p.shape)
        o += p.numel()
    return g


def _save_bytes(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    b.seek(0)
    return b


# ---------------------------------------------------------------------------------------------------
# flat buffers


def _flat_params_train(opt_name, **kw):
    def run(d):
        m = _mlp().to(d)
        ps, flat = _flatten(m)
        opt = getattr(torch.optim, opt_name)(ps, lr=0.1, **kw)
        for _ in range(3):
            opt.zero_grad()
            m(X.to(d)).pow(2).sum().backward()
            opt.step()
        return flat, [p.data for p in ps], m(X.to(d))
    return run


def _flat_grads_accumulated(foreach):
    def run(d):
        m = _mlp().to(d)
        ps = list(m.parameters())
        g = _flat_grads(ps)
        opt = torch.optim.Adam(ps, lr=0.1, foreach=foreach)
        for _ in range(2):
            opt.zero_grad(set_to_none=False)
            m(X.to(d)).pow(2).sum().backward()
            m(X.to(d)).sum().backward()
            opt.step()
        same = [p.grad.untyped_storage().data_ptr() == g.untyped_storage().data_ptr() for p in ps]
        return g, ps, torch.tensor(same)
    return run


def _flatten_dense(d):
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
    m = _mlp().to(d)
    ps = list(m.parameters())
    flat = _flatten_dense_tensors([p.data for p in ps])
    for p, o in zip(ps, _unflatten_dense_tensors(flat, [p.data for p in ps])):
        p.data = o
    flat.add_(1)
    v = nn.utils.parameters_to_vector(ps)
    nn.utils.vector_to_parameters(v * 3, ps)
    return flat, v, ps, m(X.to(d))


def _flat_clip_and_scaler(d):
    m = _mlp().to(d)
    ps = list(m.parameters())
    g = _flat_grads(ps)
    opt = torch.optim.SGD(ps, lr=0.1)
    sc = torch.amp.GradScaler(d.type, init_scale=1024.0)
    sc.scale(m(X.to(d)).pow(2).sum()).backward()
    sc.unscale_(opt)
    n1 = nn.utils.clip_grad_norm_(ps, 1.0)
    n2 = nn.utils.clip_grad_norm_(ps, 0.1, foreach=False)
    nn.utils.clip_grad_value_(ps, 0.01)
    sc.step(opt)
    sc.update()
    return g, ps, n1, n2, sc.get_scale()


def _flat_load_state_dict_and_cast(d):
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    m.load_state_dict({k: v * 2 + 1 for k, v in _mlp().to(d).state_dict().items()})
    out = m(X.to(d))
    m.double()
    flat.fill_(3)  # the double params are new tensors: untouched
    return out, flat, list(m.parameters())


def _set_on_params(d):
    m = _mlp().to(d)
    ps = list(m.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in ps]) * 3
    o = 0
    with torch.no_grad():
        for p in ps:
            p.set_(flat[o:o + p.numel()].view(p.shape))
            o += p.numel()
    out = m(X.to(d))
    out.sum().backward()
    flat.add_(1)
    return out, [p.grad for p in ps], ps, flat


# ---------------------------------------------------------------------------------------------------
# FSDP's free_storage / alloc_storage (fixed: resize_ of a tpu storage raised)


def _fsdp_free_realloc(d):
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    saved = flat.clone()
    flat.untyped_storage().resize_(0)
    sizes = [flat.untyped_storage().nbytes(), ps[0].untyped_storage().nbytes(), flat._typed_storage()._size()]
    flat.untyped_storage().resize_(flat.numel() * 4)
    flat.copy_(saved * 2)
    out = m(X.to(d))
    out.sum().backward()
    return out, flat, sizes, [p.data for p in ps], [p.grad for p in ps]


def _fsdp1_typed_resize(d):
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    saved = flat.clone()
    flat._typed_storage()._resize_(0)
    freed = flat._typed_storage()._size()
    flat._typed_storage()._resize_(flat.numel())
    flat.copy_(saved)
    flat[:3].add_(1)
    return freed, flat, m(X.to(d))


def _fsdp_shard_loop(d):
    """unshard (alloc + copy from the shard), forward/backward, reduce the grads into the shard's grad,
    reshard (free), optimizer step on the shard"""
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    shard = nn.Parameter(flat.clone())
    opt = torch.optim.Adam([shard], lr=0.1)
    flat.untyped_storage().resize_(0)
    for _ in range(3):
        flat.untyped_storage().resize_(flat.numel() * 4)
        with torch.no_grad():
            flat.copy_(shard)
        m(X.to(d)).pow(2).sum().backward()
        shard.grad = torch.cat([p.grad.reshape(-1) for p in ps])
        for p in ps:
            p.grad = None
        flat.untyped_storage().resize_(0)
        opt.step()
        opt.zero_grad()
    return shard


def _realloc_view_write(d):
    x = torch.arange(6.0, device=d).view(2, 3)
    v = x[1]
    _ = v * 1  # the view's value cached before the free
    x.untyped_storage().resize_(0)
    x.untyped_storage().resize_(24)
    x.zero_()  # CPU's re-allocated bytes are uninitialised; the tpu's read as zeros
    v.add_(5)
    return x, v


def _share_memory(d):
    m = _mlp().to(d)
    m.share_memory()
    t = torch.ones(3, device=d).share_memory_()
    return list(m.parameters()), t


# ---------------------------------------------------------------------------------------------------
# tied weights, meta init, conversions


def _tied_train_save_load(d):
    m = _lm(d)
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    i = IDS.to(d)
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(m(i), i.roll(1)).backward()
        opt.step()
    sd = torch.load(_save_bytes(m.state_dict()), map_location=d)
    m2 = _lm(d)
    m2.load_state_dict(sd)
    return (list(m.parameters()), m2(i),
            torch.tensor([m2.head.weight is m2.emb.weight,
                          sd["emb.weight"].data_ptr() == sd["head.weight"].data_ptr()]))


def _meta_assign_tied(d):
    with torch.device("meta"):
        m = _LM()
    m.load_state_dict(_lm(d).state_dict(), assign=True)
    out = m(IDS.to(d))
    out.sum().backward()
    return out, m.emb.weight.grad, torch.tensor([m.head.weight is m.emb.weight])


def _meta_to_empty_strict_false(d):
    with torch.device("meta"):
        m = _LM()
    m.to_empty(device=d)
    res = m.load_state_dict(_lm("cpu").state_dict(), strict=False)
    return m(IDS.to(d)), torch.tensor([m.head.weight is m.emb.weight]), res.missing_keys, res.unexpected_keys


def _future_flag(flag, convert):
    def run(d):
        setter = getattr(torch.__future__, flag)
        setter(True)
        try:
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
            w = m[0].weight
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
            m(X).sum().backward()
            m = convert(m.to(d))
            if flag.startswith("set_swap") and m[0].weight.dtype == torch.float32:
                opt.step()  # swapped: the optimizer's parameters are the model's (overwritten: on CPU only)
            out = m(X.to(d).to(m[0].weight.dtype))
            t = _lm(d).to(m[0].weight.dtype)
            return (out, [p.grad for p in m.parameters()], list(m.parameters()), list(m.buffers()),
                    torch.tensor([m[0].weight is w, t.head.weight is t.emb.weight]))
        finally:
            setter(False)
    return run


def _swap_tensors(d):
    a, b = nn.Linear(3, 4).to(d), nn.Linear(3, 4).to(d)
    nn.utils.swap_tensors(a.weight, b.weight)
    t, u = torch.arange(6.0, device=d), torch.ones(6, device=d) * 5
    v = t[1:4]
    nn.utils.swap_tensors(t, u)
    t.add_(1)
    return a.weight, b.weight, a(X.to(d)), t, u, v


def _functional_call(d):
    m = _lm(d)
    w = (m.emb.weight.detach() * 2).requires_grad_()
    tied = torch.func.functional_call(m, {"emb.weight": w}, (IDS.to(d),), tie_weights=True, strict=False)
    w2 = (w.detach() + 1).requires_grad_()
    untied = torch.func.functional_call(m, {"emb.weight": w, "head.weight": w2}, (IDS.to(d),))
    (tied.sum() + untied.pow(2).sum()).backward()
    mlp = _mlp().to(d)
    g = torch.func.grad(lambda p: torch.func.functional_call(mlp, p, (X.to(d),)).pow(2).sum())(
        {k: v.detach() for k, v in mlp.named_parameters()})
    return tied, untied, w.grad, w2.grad, m.emb.weight, g


def _nonpersistent_buffer(d):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.register_buffer("scale", torch.tensor([2.0, 3.0]), persistent=False)

        def forward(self, x):
            return self.lin(x) * self.scale

    torch.manual_seed(0)
    sd = M().to(d).state_dict()
    m2 = M().to(d)
    m2.scale.mul_(2)
    m2.load_state_dict(sd)
    return m2(X.to(d)), sorted(sd)


# ---------------------------------------------------------------------------------------------------
# gradients


def _accumulate_micro_batches(d):
    m = _mlp().to(d)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad(set_to_none=False)
        for mb in X.to(d).split(2):
            (m(mb).pow(2).sum() / 3).backward()
        for p in m.parameters():
            p.grad.data.mul_(0.5)
        opt.step()
    m[0].weight.grad.data = torch.ones_like(m[0].weight) * 7
    return list(m.parameters()), [p.grad for p in m.parameters()]


def _grad_assign(kind):
    def run(d):
        p = nn.Parameter(torch.ones(2, 3, device=d))
        if kind == "shape":
            p.grad = torch.ones(3, 2, device=d)
        elif kind == "dtype":
            p.grad = torch.ones(2, 3, device=d, dtype=torch.float64)
        elif kind == "int":
            p.grad = torch.ones(2, 3, device=d, dtype=torch.int64)
        elif kind == "view_numel":
            p.grad = torch.zeros(8, device=d)[:4]
        elif kind == "expanded":
            p.grad = torch.ones(3, device=d).expand(2, 3)
            (p * 2).sum().backward()
        elif kind == "transposed":
            p.grad = torch.arange(6.0, device=d).reshape(3, 2).t()
            (p * 2).sum().backward()
            return p.grad, p.grad.stride()
        return p.grad
    return run


def _retain_grad_views_and_hooks(d):
    x = torch.arange(6.0, device=d).requires_grad_()
    v = x[1:4] * 1
    w = v[1:]
    w.retain_grad()
    v.retain_grad()
    (w * w).sum().backward()
    m = _mlp().to(d)
    opts = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in m.parameters()}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad()

    for p in m.parameters():
        p.register_post_accumulate_grad_hook(hook)
    for _ in range(2):
        m(X.to(d)).pow(2).sum().backward()
    m2 = _mlp().to(d)
    torch.autograd.backward(m2(X.to(d)).sum(), inputs=[m2[0].weight])
    return x.grad, v.grad, w.grad, list(m.parameters()), m2[0].weight.grad, m2[2].weight.grad is None


def _clip_nonfinite(foreach):
    def run(d):
        m = _mlp().to(d)
        m(X.to(d)).sum().backward()
        m[2].bias.grad[0] = float("nan")
        return nn.utils.clip_grad_norm_(m.parameters(), 1.0, error_if_nonfinite=True, foreach=foreach)
    return run


def _ema_and_swa(d):
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
    m = _mlp().to(d)
    ema = _mlp().to(d)
    torch.manual_seed(0)
    bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to(d)
    avg = AveragedModel(bn, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    opt = torch.optim.SGD(list(m.parameters()) + list(bn.parameters()), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (m(X.to(d)).sum() + bn(X.to(d)).pow(2).sum()).backward()
        opt.step()
        avg.update_parameters(bn)
        with torch.no_grad():
            torch._foreach_lerp_(list(ema.parameters()), list(m.parameters()), 0.1)
    return list(ema.parameters()), list(avg.parameters()), avg.n_averaged


def _swa_use_buffers_int_buffer(d):
    """torch sends PrivateUse1 down SWA's foreach path, which refuses BatchNorm's int64
    num_batches_tracked (integer _foreach_addcdiv_), as on CUDA; CPU takes the for-loop path."""
    from torch.optim.swa_utils import AveragedModel
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to(d)
    swa = AveragedModel(m, use_buffers=True)
    m(X.to(d))
    swa.update_parameters(m)
    swa.update_parameters(m)
    return list(swa.buffers())


def _fuse_bn(d):
    torch.manual_seed(0)
    conv, bn = nn.Conv2d(2, 3, 3).to(d), nn.BatchNorm2d(3).to(d)
    lin, bn1 = nn.Linear(3, 4).to(d), nn.BatchNorm1d(4).to(d)
    x = rand(2, 2, 5, 5).to(d)
    bn(conv(x))
    bn1(lin(X.to(d)))
    for mod in (conv, bn, lin, bn1):
        mod.eval()
    fc = torch.nn.utils.fuse_conv_bn_eval(conv, bn)
    fl = torch.nn.utils.fuse_linear_bn_eval(lin, bn1)
    return fc(x), bn(conv(x)), fl(X.to(d)), bn1(lin(X.to(d)))


def _master_weights(d):
    m = _mlp().to(d)
    master = [p.detach().clone().float().requires_grad_() for p in m.parameters()]
    m.half()
    opt = torch.optim.SGD(master, lr=0.1, momentum=0.9)
    for _ in range(2):
        m.zero_grad()
        m(X.to(d).half()).float().pow(2).sum().backward()
        for mp, p in zip(master, m.parameters()):
            mp.grad = p.grad.float()
        opt.step()
        with torch.no_grad():
            for mp, p in zip(master, m.parameters()):
                p.data.copy_(mp.data)
    return master, list(m.parameters())


# ---------------------------------------------------------------------------------------------------
# saving and loading


def _safetensors(d, tmp):
    from safetensors.torch import load, load_file, load_model, save, save_file, save_model
    m = _mlp().to(d)
    sd = dict(m.state_dict())
    sd["view"] = m[0].weight[1:3].t()
    p = os.path.join(tmp, f"a_{d.type}.safetensors")
    save_file(sd, p)
    loaded = load_file(p, device=str(d))
    b = load(save({"a": torch.arange(6.0, device=d).reshape(2, 3), "b": torch.ones(3, device=d).bfloat16()}))
    t = _lm(d)
    with torch.no_grad():
        t.emb.weight.mul_(2)
    pt = os.path.join(tmp, f"t_{d.type}.safetensors")
    save_model(t, pt)
    t2 = _lm(d)
    missing, unexpected = load_model(t2, pt, device=str(d))
    return (dict(sorted(loaded.items())), [v.device.type for v in loaded.values()], dict(sorted(b.items())),
            t2(IDS.to(d)), torch.tensor([t2.head.weight is t2.emb.weight]), missing, unexpected)


def _safetensors_shared_refused(d, tmp):
    from safetensors.torch import save_file
    save_file(_lm(d).state_dict(), os.path.join(tmp, f"s_{d.type}.safetensors"))


def _torch_load_forms(d, tmp):
    m = _lm(d)
    blob = _save_bytes({"sd": m.state_dict(), "view": m.emb.weight[1:3].t(),
                        "p": nn.Parameter(torch.ones(2, device=d)), "step": 3}).getvalue()
    dev = d.type
    outs = []
    for ml, where in (("cpu", "cpu"), (dev, dev), (torch.device("cpu"), "cpu"), ({f"{dev}:0": "cpu"}, "cpu"),
                      (lambda s, loc: s, "cpu"), (lambda s, loc: None, dev)):
        o = torch.load(io.BytesIO(blob), map_location=ml, weights_only=True)
        outs.append([o["sd"], o["view"], o["view"].stride(), o["p"], isinstance(o["p"], nn.Parameter),
                     o["step"], o["sd"]["emb.weight"].data_ptr() == o["sd"]["head.weight"].data_ptr(),
                     {t.device.type for t in [o["view"], o["p"], *o["sd"].values()]} == {where}])
    path = os.path.join(tmp, f"m_{dev}.pt")
    with open(path, "wb") as f:
        f.write(blob)
    for ml, where in ((None, dev), ("cpu", "cpu")):
        o = torch.load(path, mmap=True, map_location=ml, weights_only=True)
        outs.append([o["sd"], o["view"], o["view"].stride(), o["view"].device.type == where])
    return outs


def _optimizer_state_round_trip(d):
    m = _mlp().to(d)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    m(X.to(d)).sum().backward()
    opt.step()
    osd = torch.load(_save_bytes(opt.state_dict()), map_location=d)
    m2 = _mlp().to(d)
    m2.load_state_dict(m.state_dict())
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.1)
    opt2.load_state_dict(osd)
    m3 = _mlp()  # the tpu state loaded into a CPU optimizer
    m3.load_state_dict(m.state_dict())
    opt3 = torch.optim.Adam(m3.parameters(), lr=0.1)
    opt3.load_state_dict(copy.deepcopy(opt.state_dict()))  # (on CPU, load_state_dict would share the state)
    for mm, oo, x in ((m, opt, X.to(d)), (m2, opt2, X.to(d)), (m3, opt3, X)):
        oo.zero_grad()
        mm(x).sum().backward()
        oo.step()
    return list(m.parameters()), list(m2.parameters()), list(m3.parameters())


def _load_state_dict_forms(d):
    m = _mlp().to(d)
    sd = {k: v * 2 for k, v in _mlp().to(d).state_dict().items()}
    sd["extra"] = torch.ones(1, device=d)
    del sd["2.bias"]
    r = m.load_state_dict(sd, strict=False)
    m.load_state_dict({k: v.double() * 3 for k, v in _mlp().to(d).state_dict().items()})
    cpu_sd = _mlp().state_dict()
    cpu_sd["0.weight"] = torch.arange(12.0).reshape(3, 4).t()
    m2 = _mlp().to(d)
    m2.load_state_dict(cpu_sd)
    m3 = _mlp()
    m3.load_state_dict(m2.state_dict())  # a tpu state dict into a CPU model
    return list(m.parameters()), r.missing_keys, r.unexpected_keys, list(m2.parameters()), list(m3.parameters())


def _load_state_dict_shape_mismatch(d):
    sd = _mlp().to(d).state_dict()
    sd["0.weight"] = torch.ones(4, 4, device=d)
    _mlp().to(d).load_state_dict(sd)


def _deepcopy_flat_model(d):
    """``ema = deepcopy(model)`` after a backward, params and grads views of flat buffers: nn.Parameter's
    deepcopy gives each parameter a clone of its own and no .grad (the tpu kept the grads and the sharing)"""
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    g = _flat_grads(ps)
    m(X.to(d)).sum().backward()
    c = copy.deepcopy(m)
    cps = list(c.parameters())
    with torch.no_grad():
        cps[0].fill_(1)
    return (ps, cps, g, flat, [q.grad is None for q in cps], [isinstance(q, nn.Parameter) for q in cps],
            [cps[0].untyped_storage().data_ptr() == q.untyped_storage().data_ptr() for q in cps])


def _attributes_round_trip(d):
    """Python attributes on tensors and parameters survive torch.save/load and pickle (they were lost);
    deepcopy keeps a tensor's, drops a parameter's (nn.Parameter.__deepcopy__), as on CPU"""
    p = nn.Parameter(torch.arange(3.0, device=d))
    p.tag, p.grad = "x", torch.ones(3, device=d)
    t = torch.arange(6.0, device=d).reshape(2, 3).t()
    t.meta = {"a": 1}
    o = torch.load(_save_bytes({"p": p, "t": t}), weights_only=False)
    w = torch.load(_save_bytes({"p": p, "t": t}), weights_only=True, map_location="cpu")
    q = pickle.loads(pickle.dumps(p))
    c, c2 = copy.deepcopy(t), copy.deepcopy(p)
    return (o["p"], o["t"], o["t"].stride(), getattr(o["p"], "tag", None), o["p"].grad is None,
            getattr(o["t"], "meta", None), getattr(w["p"], "tag", None), getattr(w["t"], "meta", None),
            getattr(q, "tag", None), q.grad is None, getattr(c, "meta", None), getattr(c2, "tag", None),
            c2.grad is None, isinstance(c2, nn.Parameter))


def _zero3_release_gather(d):
    """DeepSpeed ZeRO-3 style: params released to empty(0) between steps, re-pointed at the gathered value"""
    m = _mlp().to(d)
    full = {n: p.detach().clone() for n, p in m.named_parameters()}
    shapes = {n: p.shape for n, p in m.named_parameters()}
    for _ in range(2):
        for n, p in m.named_parameters():
            p.data = full[n].clone().view(shapes[n])
        m(X.to(d)).pow(2).sum().backward()
        for n, p in m.named_parameters():
            full[n] = (full[n] - 0.1 * p.grad).clone()
            p.grad = None
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    return full, [p.shape for p in m.parameters()]


def _capturable(d):
    """capturable=True on the device (CPU refuses it: compared with CPU's plain step)"""
    m = _mlp().to(d)
    opt = torch.optim.AdamW(m.parameters(), lr=0.1, capturable=d.type != "cpu", amsgrad=True)
    for _ in range(2):
        opt.zero_grad()
        m(X.to(d)).sum().backward()
        opt.step()
    return list(m.parameters()), [opt.state[p]["step"] for p in m.parameters()]


def _deterministic_inits(d):
    w, c, g = torch.empty(4, 4, device=d), torch.empty(3, 3, 3, device=d), torch.empty(4, 2, 3, 3, device=d)
    nn.init.eye_(w)
    nn.init.dirac_(c)
    nn.init.dirac_(g, groups=2)
    o = torch.empty(6, 4, device=d)
    nn.init.orthogonal_(o, gain=2.0)
    return w, c, g, (o.t() @ o / 4).round(decimals=4)


def _pending_read_then_free(d):
    """values computed from a storage before it is freed (recorded, not yet run, in fused mode) keep them"""
    flat = torch.arange(6.0, device=d) * 1
    flat.mul_(3)
    y, v = flat * 2, flat[1:3] + 1
    flat.untyped_storage().resize_(0)
    flat.untyped_storage().resize_(24)
    flat.zero_()
    flat[2:4].add_(1)
    return y, v, flat


def _free_in_forward_hooks(d):
    """unshard in a forward pre-hook, reshard in the post-hook (FSDP's order), twice"""
    m = _mlp().to(d)
    ps, flat = _flatten(m)
    saved = flat.clone()
    flat.untyped_storage().resize_(0)

    def pre(mod, args):
        if flat.untyped_storage().nbytes() == 0:
            flat.untyped_storage().resize_(flat.numel() * 4)
            flat.copy_(saved)

    def post(mod, args, out):
        flat.untyped_storage().resize_(0)

    m.register_forward_pre_hook(pre)
    m.register_forward_hook(post)
    outs = [m(X.to(d)) for _ in range(2)]
    st = flat.untyped_storage()
    return outs + [st.nbytes(), st.cpu().nbytes(), st.tolist(), "of size 0" in str(st)]


def _legacy_format(d, tmp):
    """torch.save(_use_new_zipfile_serialization=False): the bytes follow the pickle; every tpu value
    loaded was uninitialised memory (uploaded before torch read the bytes)"""
    m = _mlp().to(d)
    obj = {"sd": m.state_dict(), "v": m[0].weight[1:3].t(), "p": nn.Parameter(torch.ones(2, device=d))}
    path = os.path.join(tmp, f"legacy_{d.type}.pt")
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    outs = []
    for kw in ({"weights_only": False}, {"weights_only": True}, {"weights_only": True, "map_location": "cpu"}):
        o = torch.load(path, **kw)
        outs += [o["sd"], o["v"], o["v"].stride(), isinstance(o["p"], nn.Parameter),
                 o["v"].untyped_storage().data_ptr() == o["sd"]["0.weight"].untyped_storage().data_ptr()]
    cpu = _mlp()  # a CPU legacy checkpoint loaded with map_location=device: views keep sharing
    b = io.BytesIO()
    torch.save({"sd": cpu.state_dict(), "v": cpu[0].weight[1:3].t()}, b, _use_new_zipfile_serialization=False)
    b.seek(0)
    o = torch.load(b, map_location=d, weights_only=True)
    o["v"].mul_(2)
    return outs + [o["sd"], o["v"], o["v"].stride(), o["v"].device.type == d.type]


def _prune_train(d):
    import torch.nn.utils.prune as prune
    m = _mlp().to(d)
    prune.l1_unstructured(m[0], "weight", amount=0.4)
    prune.ln_structured(m[2], "weight", amount=0.5, n=2, dim=0)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        m(X.to(d)).pow(2).sum().backward()
        opt.step()
    masks = [m[0].weight_mask, m[2].weight_mask]
    prune.remove(m[0], "weight")
    return list(m.parameters()), masks, m(X.to(d))


def _tmp_case(fn):
    return lambda d: fn(d, _TMP[0])


_TMP = [None]

CASES = {
    "flat_sgd_momentum_foreach": (_flat_params_train("SGD", momentum=0.9, foreach=True), {}),
    "flat_adam": (_flat_params_train("Adam"), {}),
    "flat_adamw_loop": (_flat_params_train("AdamW", foreach=False), {}),
    "flat_adam_fused": (_flat_params_train("Adam", fused=True), {}),
    "flat_grads_accumulated_foreach": (_flat_grads_accumulated(True), {}),
    "flat_grads_accumulated_loop": (_flat_grads_accumulated(False), {}),
    "flatten_dense_and_vectors": (_flatten_dense, {}),
    "flat_clip_and_scaler": (_flat_clip_and_scaler, {}),
    "flat_load_state_dict_and_cast": (_flat_load_state_dict_and_cast, {}),
    "set_on_params": (_set_on_params, {}),
    "fsdp_free_realloc": (_fsdp_free_realloc, {}),
    "fsdp1_typed_resize": (_fsdp1_typed_resize, {}),
    "fsdp_shard_loop": (_fsdp_shard_loop, {}),
    "realloc_view_write": (_realloc_view_write, {}),
    "share_memory": (_share_memory, {}),
    "tied_train_save_load": (_tied_train_save_load, {}),
    "meta_assign_tied": (_meta_assign_tied, {}),
    "meta_to_empty_strict_false": (_meta_to_empty_strict_false, {}),
    "future_overwrite_to": (_future_flag("set_overwrite_module_params_on_conversion", lambda m: m), {}),
    "future_overwrite_double": (_future_flag("set_overwrite_module_params_on_conversion", lambda m: m.double()), {}),
    "future_swap_to": (_future_flag("set_swap_module_params_on_conversion", lambda m: m), {}),
    "future_swap_bf16": (_future_flag("set_swap_module_params_on_conversion", lambda m: m.to(torch.bfloat16)),
                         HALF_TOL),
    "swap_tensors": (_swap_tensors, {}),
    "functional_call": (_functional_call, {}),
    "nonpersistent_buffer": (_nonpersistent_buffer, {}),
    "accumulate_micro_batches": (_accumulate_micro_batches, {}),
    "grad_assign_shape": (_grad_assign("shape"), {}),
    "grad_assign_dtype": (_grad_assign("dtype"), {}),
    "grad_assign_int": (_grad_assign("int"), {}),
    "grad_assign_view_numel": (_grad_assign("view_numel"), {}),
    "grad_assign_expanded": (_grad_assign("expanded"), {}),
    "grad_assign_transposed": (_grad_assign("transposed"), {}),
    "retain_grad_views_and_hooks": (_retain_grad_views_and_hooks, {}),
    "clip_nonfinite_foreach": (_clip_nonfinite(True), {}),
    "clip_nonfinite_loop": (_clip_nonfinite(False), {}),
    "ema_and_swa": (_ema_and_swa, {}),
    "swa_use_buffers_int_buffer": (_swa_use_buffers_int_buffer, {}),
    "fuse_bn": (_fuse_bn, {}),
    "master_weights_fp16": (_master_weights, HALF_TOL),
    "safetensors": (_tmp_case(_safetensors), {}),
    "safetensors_shared_refused": (_tmp_case(_safetensors_shared_refused), {}),
    "torch_load_forms": (_tmp_case(_torch_load_forms), {}),
    "optimizer_state_round_trip": (_optimizer_state_round_trip, {}),
    "load_state_dict_forms": (_load_state_dict_forms, {}),
    "load_state_dict_shape_mismatch": (_load_state_dict_shape_mismatch, {}),
    "deepcopy_flat_model": (_deepcopy_flat_model, {}),
    "attributes_round_trip": (_attributes_round_trip, {}),
    "zero3_release_gather": (_zero3_release_gather, {}),
    "capturable_adamw_amsgrad": (_capturable, {}),
    "deterministic_inits": (_deterministic_inits, {}),
    "pending_read_then_free": (_pending_read_then_free, {}),
    "free_in_forward_hooks": (_free_in_forward_hooks, {}),
    "legacy_format": (_tmp_case(_legacy_format), {}),
    "prune_train": (_prune_train, {}),
}

# the CPU reference takes another path than torch takes for PrivateUse1 (and CUDA): the error is torch's own
_CPU_DIFFERS = {"swa_use_buffers_int_buffer"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_params(eager_mode, case, tmp_path):
    _TMP[0] = str(tmp_path)
    fn, tol = CASES[case]
    if case in _CPU_DIFFERS:
        with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
            read(fn(torch.device(DEV)))
        assert_device_works()
        return
    D.check(lambda anchor: fn(anchor.device), torch.zeros(1), **tol)


# ---------------------------------------------------------------------------------------------------
# a freed storage (untyped_storage().resize_(0)): CPU reads freed memory (or segfaults); the tpu refuses


def _freed(shape=(2, 3)):
    x = torch.arange(6.0, device=DEV).view(shape)
    v = x[1]
    x.untyped_storage().resize_(0)
    return x, v


@pytest.mark.parametrize("use", ["read", "view_read", "write", "view_write", "new_view", "other_size"])
def test_freed_storage_refused_clearly(eager_mode, use):
    x, v = _freed()
    msg = {"new_view": "out of bounds|storage", "other_size": r"resize_\(12\).*freed \(resize_\(0\)\)"}.get(
        use, r"freed with untyped_storage\(\)\.resize_\(0\).*resize_\(24\)")
    with pytest.raises(RuntimeError, match=msg):
        if use == "read":
            read(x + 1)
        elif use == "view_read":
            read(v * 2)
        elif use == "write":
            x.copy_(torch.ones(2, 3, device=DEV))
            sync()
        elif use == "view_write":
            v.fill_(1)
            sync()
        elif use == "new_view":
            x[1]
        else:
            x.untyped_storage().resize_(12)
    assert_device_works()
    x.untyped_storage().resize_(24)  # re-allocated: usable again
    x.fill_(2)
    assert torch.equal(v.cpu(), torch.full((3,), 2.0))


def test_resize_of_a_live_storage_to_another_size_refused():
    x = torch.arange(6.0, device=DEV)
    with pytest.raises(RuntimeError, match=r"resize_\(12\).*only be freed"):
        x.untyped_storage().resize_(12)
    assert x.untyped_storage().resize_(24) is x.untyped_storage()  # its own size: nothing to do
    assert torch.equal(x.cpu(), torch.arange(6.0))


def test_freed_storage_memory_counters():
    """bytes leave the count when freed and come back when re-allocated; the storage stays one live
    allocation until it dies (once)"""
    gc.collect()
    torch.tpu.synchronize()
    n = 1 << 18
    x = torch.ones(n // 4, device=DEV)
    a1, live = torch.tpu.memory_allocated(), torch.tpu.memory_stats()["allocation.all.current"]
    x.untyped_storage().resize_(0)
    a2 = torch.tpu.memory_allocated()
    x.untyped_storage().resize_(n)
    a3 = torch.tpu.memory_allocated()
    assert a1 - a2 == n and a3 == a1, (a1, a2, a3)
    x.untyped_storage().resize_(0)
    assert torch.tpu.memory_stats()["allocation.all.current"] == live
    del x
    gc.collect()
    assert torch.tpu.memory_allocated() == a2
    assert torch.tpu.memory_stats()["allocation.all.current"] == live - 1
