"""diffusers' FLUX attention processor on tpu tensors is ONE op (tpu::flux_attention for a single-stream block,
tpu::flux_joint_attention for a double-stream one; 8 and 18 programs before in strict mode): FluxAttention gives
diffusers' own values on CPU in both eager modes and every float dtype, with and without rotary tables; every
call the op does not serve exactly (a mask, gradients, hooks, other backends, fused projections, other dtypes or
shapes, CPU tensors) is diffusers' own processor, errors included. The ops check their arguments on every
device."""
import pytest
import torch

import torch_tpu
from tests.harness.differential import module_calls_seen, programs_run

from diffusers.models.transformers import transformer_flux  # noqa: E402  (after torch_tpu: the hook patches it)

from torch_tpu.integrations import diffusers_flux, diffusers_hook

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}  # a result's last bits, after a dozen roundings

DIM, HEADS, HEAD_DIM, LENGTH, CONTEXT = 64, 4, 16, 10, 5


def _module(joint, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    if joint:  # a double block's: added projections and norms, to_out and to_add_out
        m = transformer_flux.FluxAttention(query_dim=DIM, heads=HEADS, dim_head=HEAD_DIM, added_kv_proj_dim=DIM,
                                           context_pre_only=False, bias=True, eps=1e-6, **kwargs)
    else:  # a single block's: pre_only, no output projection
        m = transformer_flux.FluxAttention(query_dim=DIM, heads=HEADS, dim_head=HEAD_DIM, out_dim=DIM, bias=True,
                                           eps=1e-6, pre_only=True, **kwargs)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m.to(dtype).eval()


def _inputs(joint, dtype, batch=2, length=LENGTH, context=CONTEXT, rotary=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, DIM, generator=g).to(dtype)
    c = torch.randn(batch, context, DIM, generator=g).to(dtype) if joint else None
    tables = None
    if rotary:
        angles = torch.randn(length + (context if joint else 0), HEAD_DIM // 2, generator=g) * 3
        tables = (angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1))
    return x, c, tables


def _to(t, device):
    if not isinstance(t, (torch.Tensor, tuple, list)):
        return t
    if isinstance(t, (tuple, list)):
        return type(t)(_to(u, device) for u in t)
    return t.to(device)


def _call(module, x, c, tables, device, **kwargs):
    m = module.to(device)
    kwargs = {k: _to(v, device) for k, v in kwargs.items()}
    out = m(_to(x, device), encoder_hidden_states=_to(c, device), image_rotary_emb=_to(tables, device), **kwargs)
    return out if isinstance(out, tuple) else (out,)


def _compare(got, want, dtype):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), w, **TOL[dtype])


def test_diffusers_processor_holds_the_serving_call():
    assert diffusers_flux.installed(), diffusers_hook.failure(diffusers_flux.TARGET)
    call = transformer_flux.FluxAttnProcessor.__call__
    assert hasattr(call, "__torch_tpu_original__")
    # FluxAttention.forward passes the processor the keyword arguments its signature names: it must read the same
    assert tuple(__import__("inspect").signature(call).parameters) == diffusers_flux._PARAMETERS


@pytest.mark.parametrize("rotary", [True, False], ids=["rotary", "no_rotary"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("joint", [False, True], ids=["single", "joint"])
def test_one_program_matching_diffusers_on_cpu(eager_mode, joint, dtype, rotary):
    module = _module(joint, dtype)
    x, c, tables = _inputs(joint, dtype, rotary=rotary)
    with torch.no_grad():
        want = _call(module, x, c, tables, "cpu")
        got, programs = programs_run(lambda: _call(module, x, c, tables, "tpu"))
    _compare(got, want, dtype)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (diffusers' own: 8 single, 18 joint)


def test_fused_mode_records_one_op():
    from torch_tpu.engine import fused as fused_engine

    module = _module(True).to("tpu")
    x, c, tables = _to(_inputs(True, torch.float32), "tpu")
    with torch.no_grad(), torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        out = module(x, encoder_hidden_states=c, image_rotary_emb=tables)
        torch_tpu.sync()
        assert fused_engine.last_flush()[0] == 1  # (diffusers' own: 18 recorded ops and the views)
    assert len(out) == 2


@pytest.mark.parametrize("joint", [False, True], ids=["single", "joint"])
def test_with_autograd_diffusers_own_ops_and_gradients_match_cpu(eager_mode, joint):
    module = _module(joint)
    x, c, tables = _inputs(joint, torch.float32)
    grads = {}
    for device in ("cpu", "tpu"):
        m = module.to(device)
        xd = x.detach().clone().to(device).requires_grad_()
        out, programs = programs_run(lambda: _call(m, xd, c, tables, device))
        sum(o.square().sum() for o in out).backward()
        grads[device] = (xd.grad.cpu(), m.to_q.weight.grad.cpu(), m.norm_k.weight.grad.cpu())
        m.zero_grad()
        if device == "tpu" and eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
            assert programs > 1  # diffusers' ops, each with its derivative
    for g, w in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


class _LoraLikeLinear(torch.nn.Linear):
    """A Linear subclass with its own forward, as adapters make them: the op must not skip it."""

    def forward(self, x):
        return super().forward(x) * 1.5


def _not_served(case):
    """(module, inputs, keyword arguments of the call) of a call the op leaves to diffusers."""
    joint = case not in ("mask_single", "tables_wrong_length")
    module = _module(joint)
    x, c, tables = _inputs(joint, torch.float32)
    kwargs = {}
    if case == "mask":  # a boolean mask over keys: diffusers' SDPA with it
        total = LENGTH + CONTEXT
        kwargs["attention_mask"] = (torch.arange(total) < total - 2).expand(2, 1, total, total)
    elif case == "mask_single":
        kwargs["attention_mask"] = torch.zeros(2, 1, LENGTH, LENGTH)
    elif case == "fused_projections":
        module.fuse_projections()
    elif case == "hook_on_to_q":
        module.to_q.register_forward_hook(lambda mod, args, out: out * 2)
    elif case == "instance_forward_on_norm":  # diffusers' HookRegistry and accelerate replace forward like this
        norm = module.norm_added_k
        plain = norm.forward
        norm.forward = lambda t: plain(t) * 0.5
    elif case == "adapter_linear":
        lora = _LoraLikeLinear(DIM, DIM)
        lora.load_state_dict(module.to_v.state_dict())
        module.to_v = lora
    elif case == "math_backend":  # another attention backend, on the processor itself
        module.processor._attention_backend = "_native_math"
    elif case == "context_other_dtype":  # diffusers' linear refuses a float64 context
        c = c.double()
    elif case == "tables_wrong_length":  # apply_rotary_emb's broadcast fails in diffusers
        tables = tuple(t[:-1] for t in tables)
    elif case == "tables_as_one_tensor":  # a complex-style single table: diffusers' own path
        tables = tables[0]
    elif case == "tables_without_sin":  # diffusers' apply_rotary_emb fails on it
        tables = (tables[0], None)
    elif case == "empty_context":  # no text tokens: diffusers' ops on empty tensors
        c, tables = c[:, :0], tuple(t[CONTEXT:] for t in tables)
    elif case == "batch_zero":
        x, c = x[:0], c[:0]
    elif case == "norm_without_eps":
        module.norm_q.eps = None
    elif case == "wide_x":  # x wider than the projections: diffusers' linear raises
        x = torch.randn(2, LENGTH, DIM + 8)
    return module, (x, c, tables), kwargs


NOT_SERVED = ["mask", "mask_single", "fused_projections", "hook_on_to_q", "instance_forward_on_norm",
              "adapter_linear", "math_backend", "context_other_dtype", "tables_wrong_length",
              "tables_as_one_tensor", "tables_without_sin", "norm_without_eps", "wide_x", "empty_context", "batch_zero"]


@pytest.mark.parametrize("case", NOT_SERVED)
def test_calls_it_does_not_serve_are_diffusers_own(case):
    """Each call gives what diffusers' processor gives on CPU (values, or an error of the same type)."""
    module, (x, c, tables), kwargs = _not_served(case)
    try:
        with torch.no_grad():
            want = _call(module, x, c, tables, "cpu", **kwargs)
    except Exception as exc:  # noqa: BLE001 - the tpu call must raise the same
        with pytest.raises(type(exc)):
            with torch.no_grad():
                _call(module, x, c, tables, "tpu", **kwargs)
        return
    with torch.no_grad():
        got, programs = programs_run(lambda: _call(module, x, c, tables, "tpu", **kwargs))
    assert programs > 1  # diffusers' ops
    _compare(got, want, torch.float32)


def test_a_dropout_that_drops_is_diffusers_own():
    """In training mode a dropout of 0 is an identity (served); one that drops draws its mask in diffusers' ops."""
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)
    module.train()
    with torch.no_grad():
        want = _call(module, x, c, tables, "cpu")
        got, programs = programs_run(lambda: _call(module, x, c, tables, "tpu"))
        _compare(got, want, torch.float32)
        assert programs == 1
        module.to_out[1].p = 0.5
        got, programs = programs_run(lambda: _call(module, x, c, tables, "tpu"))
    assert programs > 1
    image, text = got[0].cpu(), got[1].cpu()
    kept = image != 0  # to_out's dropout zeroes about half of x's stream and doubles the rest
    assert 0 < int(kept.sum()) < kept.numel()
    torch.testing.assert_close(image[kept], 2 * want[0][kept], **TOL[torch.float32])
    torch.testing.assert_close(text, want[1], **TOL[torch.float32])  # (the context's stream has no dropout)


def test_the_served_call_skips_no_watched_module_and_counts_as_one():
    """Without hooks the call is one program; a forward hook on any one submodule (here the last output
    projection) sends the whole call back to diffusers, and the hook sees its call as on CPU."""
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)
    seen = {}
    for device in ("cpu", "tpu"):
        calls = []
        handle = module.to_add_out.register_forward_hook(lambda mod, args, out: calls.append(tuple(out.shape)))
        with torch.no_grad():
            _call(module, x, c, tables, device)
        handle.remove()
        seen[device] = calls
    assert seen["tpu"] == seen["cpu"] == [(2, CONTEXT, DIM)]


def test_a_global_module_hook_sees_every_submodule_call(eager_mode):
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)
    seen = {device: module_calls_seen(lambda: _call(module, x, c, tables, device)) for device in ("cpu", "tpu")}
    assert seen["tpu"] == seen["cpu"] and seen["tpu"].count("Linear") == 8 and "RMSNorm" in seen["tpu"]


def test_autocast_is_diffusers_own():
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)
    out = {}
    for device in ("cpu", "tpu"):
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            out[device], programs = programs_run(lambda: _call(module, x, c, tables, device))
        if device == "tpu":
            assert programs > 1
    _compare(out["tpu"], out["cpu"], torch.bfloat16)


def test_cpu_modules_are_untouched():
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)
    original = transformer_flux.FluxAttnProcessor.__call__.__torch_tpu_original__
    with torch.no_grad():
        got = module(x, encoder_hidden_states=c, image_rotary_emb=tables)
        want = original(module.processor, module, x, c, None, tables)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def _op_args(device, **bad):
    def t(*shape, dtype=torch.float32):
        return torch.zeros(*shape, dtype=dtype)

    w = [t(DIM, DIM) for _ in range(8)]
    args = dict(x=t(2, LENGTH, DIM), context=t(2, CONTEXT, DIM), weights=w, biases=[t(DIM) for _ in range(8)],
                norm_weights=[t(HEAD_DIM) for _ in range(4)], eps=[1e-6] * 4,
                cos=t(LENGTH + CONTEXT, HEAD_DIM), sin=t(LENGTH + CONTEXT, HEAD_DIM), head_dim=HEAD_DIM)
    args.update(bad)
    return {k: _to(v, device) for k, v in args.items()}


@pytest.mark.parametrize("bad, message", [
    (dict(x=torch.zeros(2, LENGTH)), "must be \\(batch, length, features\\) of one batch"),
    (dict(context=torch.zeros(3, CONTEXT, DIM)), "must be \\(batch, length, features\\) of one batch"),
    (dict(weights=[torch.zeros(DIM, DIM)] * 7), "takes 8 weights and biases"),
    (dict(norm_weights=[torch.zeros(HEAD_DIM)] * 3), "takes 4 norm weights and eps"),
    (dict(biases=[torch.zeros(DIM)] * 7 + [torch.zeros(DIM + 1)]), "to_add_out's bias must be \\(64,\\)"),
    (dict(norm_weights=[torch.zeros(HEAD_DIM)] * 3 + [torch.zeros(HEAD_DIM + 2)]), "norm_added_k's weight must be"),
    (dict(weights=[torch.zeros(DIM, DIM)] * 3 + [torch.zeros(DIM, DIM + 1)] + [torch.zeros(DIM, DIM)] * 4),
     "add_q_proj must be a 2-d weight of 64 input features"),
    (dict(head_dim=12), "not whole heads of head_dim 12"),
    (dict(cos=torch.zeros(LENGTH, HEAD_DIM)), "cos must be a floating \\(15, 16\\) table"),
    (dict(sin=None), "cos and sin are given together"),
    (dict(context=torch.zeros(2, CONTEXT, DIM, dtype=torch.float64)), "context of torch.float64 and x of torch.float32"),
    (dict(x=torch.zeros(2, LENGTH, DIM, dtype=torch.int32)), "must be floating tensors of one dtype"),
    (dict(context=torch.zeros(2, 0, DIM), cos=torch.zeros(LENGTH, HEAD_DIM), sin=torch.zeros(LENGTH, HEAD_DIM)),
     "need a batch row, a token and a feature"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_op_names_what_was_wrong(bad, message, device):
    args = _op_args(device, **bad)
    with pytest.raises(RuntimeError, match=f"tpu::flux_joint_attention: .*{message}"):
        torch.ops.tpu.flux_joint_attention(*args.values())


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_single_op_names_what_was_wrong(device):
    args = _op_args(device)
    args.pop("context")
    args["weights"], args["biases"] = args["weights"][:3], args["biases"][:3]
    args["norm_weights"], args["eps"] = args["norm_weights"][:2], args["eps"][:2]
    with pytest.raises(RuntimeError, match="tpu::flux_attention: cos must be a floating \\(10, 16\\) table"):
        torch.ops.tpu.flux_attention(*args.values())


def test_a_refused_call_in_the_middle_of_a_sequence(eager_mode):
    """Ops before, the one op, a call diffusers refuses (its error raised at the call), then the values from
    before used again and changed in place: as on CPU."""
    module = _module(True)
    x, c, tables = _inputs(True, torch.float32)

    def run(device):
        m = module.to(device)
        xd, cd, td = _to(x, device), _to(c, device), _to(tables, device)
        with torch.no_grad():
            out = m(xd * 2 - 1, encoder_hidden_states=cd, image_rotary_emb=td)
            with pytest.raises(RuntimeError):
                m(xd, encoder_hidden_states=cd[..., :-1], image_rotary_emb=td)  # narrower context: linear raises
            out[0].add_(xd)
            out[1].mul_(cd)
            return [(o * 3).cpu() for o in out]

    for g, w in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(g, w, **TOL[torch.float32])


@pytest.mark.parametrize("joint", [False, True], ids=["single", "joint"])
def test_strided_inputs_and_inference_mode(eager_mode, joint):
    """Every other token of a longer x and a feature slice of a wider context (views with strides and offsets),
    tables sliced from longer ones, under inference_mode: one program, diffusers' values."""
    module = _module(joint)
    g = torch.Generator().manual_seed(3)
    big_x, big_c = torch.randn(2, 2 * LENGTH, DIM, generator=g), torch.randn(2, CONTEXT, DIM + 16, generator=g)
    total = LENGTH + (CONTEXT if joint else 0)
    angles = torch.randn(total + 4, HEAD_DIM // 2, generator=g)
    big_cos, big_sin = angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)

    def run(device):
        bx, bc, bcos, bsin = (t.to(device) for t in (big_x, big_c, big_cos, big_sin))
        c = bc[..., 16:] if joint else None
        return _call(module, bx[:, ::2], c, (bcos[2:2 + total], bsin[2:2 + total]), device)

    with torch.inference_mode():
        want = run("cpu")
        got, programs = programs_run(lambda: run("tpu"))
    _compare(got, want, torch.float32)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1


def test_eps_and_head_dim_are_part_of_the_programs_key(eager_mode):
    """Modules that differ only in eps, then in how the same width splits into heads, one after another in one
    process: each computes its own values, none reuses another's program."""
    x, c, tables = _inputs(True, torch.float32, rotary=False)
    for eps in (1e-6, 0.5, 1e-6):
        module = _module(True)
        for norm in (module.norm_q, module.norm_k, module.norm_added_q, module.norm_added_k):
            norm.eps = eps
        with torch.no_grad():
            _compare(_call(module, x, c, None, "tpu"), _call(module, x, c, None, "cpu"), torch.float32)
    torch.manual_seed(5)
    module = transformer_flux.FluxAttention(query_dim=DIM, heads=2, dim_head=32, added_kv_proj_dim=DIM,
                                            context_pre_only=False, bias=True, eps=1e-6).eval()
    with torch.no_grad():
        _compare(_call(module, x, c, None, "tpu"), _call(module, x, c, None, "cpu"), torch.float32)
