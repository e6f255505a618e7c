"""diffusers' adaptive layer norms on tpu tensors are ONE op (tpu::ada_layer_norm; silu, linear, layer_norm, add,
mul and add before: six programs in strict mode): AdaLayerNormZero, AdaLayerNormZeroSingle and
AdaLayerNormContinuous give diffusers' own values on CPU in both eager modes and every float dtype; every call the
op does not serve exactly (gradients, other norms, other shapes or dtypes, hooks, CPU tensors) is diffusers' own
forward, errors included. The op checks its arguments on every device."""
import pytest
import torch

import torch_tpu
from tests.harness.differential import module_calls_seen, programs_run, run_isolated

from diffusers.models import normalization  # noqa: E402  (after torch_tpu: the import hook patches it)

from torch_tpu.integrations import diffusers_hook, diffusers_norms

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=4e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=1.6e-2)}  # a result's last bit, after up to six roundings


def _zero(dim=32):
    return normalization.AdaLayerNormZero(dim), lambda m, x, e: m(x, emb=e)


def _single(dim=32):
    return normalization.AdaLayerNormZeroSingle(dim), lambda m, x, e: m(x, emb=e)


def _continuous(dim=32, **kwargs):
    kwargs = {"elementwise_affine": False, "eps": 1e-6, **kwargs}
    return normalization.AdaLayerNormContinuous(dim, dim, **kwargs), lambda m, x, e: m(x, e)


KINDS = {"zero": _zero, "single": _single, "continuous": _continuous}


def _module(kind, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    module, call = KINDS[kind](**kwargs)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.to(dtype), call


def _inputs(dtype, batch=2, length=7, dim=32, emb_batch=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(batch, length, dim, generator=g) * 3 + 1).to(dtype)
    e = torch.randn(batch if emb_batch is None else emb_batch, dim, generator=g).to(dtype)
    return x, e


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _run(module, call, x, e, device):
    m = module.to(device)
    return _as_tuple(call(m, x.to(device), e.to(device)))


def test_diffusers_classes_hold_the_serving_forwards():
    assert diffusers_norms.installed(), diffusers_hook.failure(diffusers_norms.TARGET)
    for name in ("AdaLayerNormZero", "AdaLayerNormZeroSingle", "AdaLayerNormContinuous"):
        forward = getattr(normalization, name).forward
        assert forward.__name__ == "forward" and hasattr(forward, "__torch_tpu_original__")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_program_matching_diffusers_on_cpu(eager_mode, kind, dtype):
    module, call = _module(kind, dtype)
    x, e = _inputs(dtype)
    with torch.no_grad():
        want = _run(module, call, x, e, "cpu")
        got, programs = programs_run(lambda: _run(module, call, x, e, "tpu"))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, **TOL[dtype])
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1  # (diffusers' own: 6)


def test_the_gates_are_views_of_one_projection():
    """AdaLayerNormZero's gate and feed-forward modulations are chunks of the op's projection, as in
    diffusers: they alias its storage, and an in-place change to one is seen through the others' base."""
    module, call = _module("zero")
    x, e = _inputs(torch.float32)
    with torch.no_grad():
        out, gate_msa, shift_mlp, scale_mlp, gate_mlp = _run(module, call, x, e, "tpu")
        base = gate_msa._base
        assert base is not None and all(t._base is base for t in (shift_mlp, scale_mlp, gate_mlp))
        assert base.shape == (2, 6 * 32)
        gate_msa.mul_(0)
        assert float(base[:, 64:96].abs().sum().cpu()) == 0.0


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_with_autograd_diffusers_own_ops_and_gradients_match_cpu(eager_mode, kind):
    module, call = _module(kind)
    x, e = _inputs(torch.float32)
    grads = {}
    for device in ("cpu", "tpu"):
        m = module.to(device)
        xd = x.detach().clone().to(device).requires_grad_()
        out, programs = programs_run(lambda: _as_tuple(call(m, xd, e.to(device))))
        sum(o.float().square().sum() for o in out).backward()
        grads[device] = (xd.grad.cpu(), m.linear.weight.grad.cpu())
        m.zero_grad()
        if device == "tpu" and eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
            assert programs > 1  # diffusers' ops, each with its derivative
    for g, w in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def _hooked(module):
    module.linear.register_forward_hook(lambda mod, args, out: out * 2)
    return module


@pytest.mark.parametrize("call_kind", ["fp32_layer_norm", "affine_norm", "rms_norm", "emb_batch_one",
                                       "conditioning_float32", "hook_on_linear", "instance_forward_on_linear",
                                       "own_timestep_embedding",
                                       "two_dim_x", "wrong_width", "autocast"])
def test_calls_it_does_not_serve_are_diffusers_own(call_kind):
    """Each call gives what diffusers' forward gives on CPU (values, or the same error), through its ops."""
    dtype = torch.float32
    x, e = _inputs(dtype)
    if call_kind == "fp32_layer_norm":
        torch.manual_seed(0)
        module, call = normalization.AdaLayerNormZero(32, norm_type="fp32_layer_norm"), lambda m, x, e: m(x, emb=e)
    elif call_kind == "affine_norm":
        module, call = _module("continuous", elementwise_affine=True)
    elif call_kind == "rms_norm":
        module, call = _module("continuous", norm_type="rms_norm")
    elif call_kind == "emb_batch_one":  # broadcast over x's batch
        module, call = _module("zero")
        x, e = _inputs(dtype, emb_batch=1)
    elif call_kind == "conditioning_float32":  # AdaLayerNormContinuous casts it to x's dtype first
        module, call = _module("continuous", torch.bfloat16)
        x, e = x.bfloat16(), e
    elif call_kind == "hook_on_linear":
        module, call = _module("single")
        module = _hooked(module)
    elif call_kind == "instance_forward_on_linear":  # diffusers' HookRegistry, accelerate: forward on the instance
        module, call = _module("zero")
        plain = module.linear.forward
        module.linear.forward = lambda t: plain(t) * 0.5
    elif call_kind == "own_timestep_embedding":  # AdaLayerNormZero(num_embeddings=...): diffusers embeds itself
        torch.manual_seed(0)
        module = normalization.AdaLayerNormZero(32, num_embeddings=10)
        timestep, labels = torch.tensor([3, 7]), torch.tensor([1, 2])
        call = lambda m, x, e: m(x, timestep=timestep.to(x.device), class_labels=labels.to(x.device),  # noqa: E731
                                 hidden_dtype=torch.float32)
    elif call_kind == "two_dim_x":
        module, call = _module("single")
        x = x[0]
    elif call_kind == "autocast":  # bf16 linear and float32 layer_norm under autocast, on either device
        module, plain = _module("zero")

        def call(m, x, e):
            with torch.autocast(x.device.type, dtype=torch.bfloat16):
                return plain(m, x, e)
    else:  # x wider than the module: diffusers' layer_norm raises
        module, call = _module("zero")
        x, e = _inputs(dtype, dim=40)
        e = e[:, :32]
    try:
        with torch.no_grad():
            want = _run(module, call, x, e, "cpu")
    except Exception as exc:  # noqa: BLE001 - the tpu call must raise the same
        with pytest.raises(type(exc)):
            with torch.no_grad():
                _run(module, call, x, e, "tpu")
        return
    with torch.no_grad():
        got, programs = programs_run(lambda: _run(module, call, x, e, "tpu"))
    assert programs > 1  # diffusers' ops
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, **TOL[w.dtype])


def test_cpu_modules_are_untouched():
    module, call = _module("zero")
    x, e = _inputs(torch.float32)
    with torch.no_grad():
        got = _as_tuple(call(module, x, e))
        want = _as_tuple(normalization.AdaLayerNormZero.forward.__torch_tpu_original__(module, x, emb=e))
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("bad, message", [
    (dict(x=torch.zeros(2, 7)), "must be \\(batch, length, dim\\)"),
    (dict(emb=torch.zeros(3, 32)), "emb's batch 3 must be x's batch 2"),
    (dict(weight=torch.zeros(6 * 32, 31)), "weight must be"),
    (dict(bias=torch.zeros(5)), "bias must be"),
    (dict(emb=torch.zeros(2, 32, dtype=torch.float64)), "of one dtype"),
    (dict(x=torch.zeros(2, 7, 32, dtype=torch.int32)), "floating tensors"),
    (dict(scale_chunk=0), "two different chunks of 6"),
    (dict(shift_chunk=6), "two different chunks of 6"),
])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_the_op_names_what_was_wrong(bad, message, device):
    args = dict(x=torch.zeros(2, 7, 32), emb=torch.zeros(2, 32), weight=torch.zeros(6 * 32, 32),
                bias=torch.zeros(6 * 32), chunks=6, scale_chunk=1, shift_chunk=0, eps=1e-6)
    args.update(bad)
    moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(RuntimeError, match=f"tpu::ada_layer_norm: .*{message}"):
        torch.ops.tpu.ada_layer_norm(*moved.values())


def test_a_refused_call_in_the_middle_of_a_sequence(eager_mode):
    """Ops before, the one op, a call diffusers refuses (its error raised at the call), then the values from
    before used again: as on CPU."""
    module, call = _module("zero")
    x, e = _inputs(torch.float32)

    def run(device):
        m = module.to(device)
        xd, ed = x.to(device), e.to(device)
        with torch.no_grad():
            out = _as_tuple(call(m, xd * 2 - 1, ed))
            with pytest.raises(RuntimeError):
                call(m, xd[..., :31], ed)  # narrower than the norm: layer_norm raises
            out[0].add_(xd)
            return [(o * 3).cpu() for o in out]

    for g, w in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_patched_when_diffusers_was_imported_before_torch_tpu():
    """TORCH_DEVICE_BACKEND_AUTOLOAD=0, diffusers' FLUX model imported first: ``import torch_tpu`` patches the
    loaded classes, and a FLUX block's norm on tpu is one program."""
    out = run_isolated("""
        import diffusers.models.transformers.transformer_flux as tf
        from diffusers.models import normalization
        assert not hasattr(normalization.AdaLayerNormZero.forward, "__torch_tpu_original__")
        import torch
        import torch_tpu
        from tests.harness.differential import programs_run
        assert hasattr(tf.AdaLayerNormZero.forward, "__torch_tpu_original__")
        m = tf.AdaLayerNormZero(16)
        x, e = torch.randn(1, 4, 16), torch.randn(1, 16)
        with torch.no_grad():
            want = m(x, emb=e)
            mt = m.to("tpu")
            xt, et = x.to("tpu"), e.to("tpu")
            got, launched = programs_run(lambda: mt(xt, emb=et))
        assert launched == 1, launched
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, atol=1e-5, rtol=1e-5)
        print("patched")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, prelude=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "patched" in out.stdout


def test_fused_mode_records_one_op():
    from torch_tpu.engine import fused as fused_engine

    module, call = _module("zero")
    m = module.to("tpu")
    x, e = (t.to("tpu") for t in _inputs(torch.float32))
    with torch.no_grad(), torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        torch_tpu.sync()
        out = call(m, x, e)
        torch_tpu.sync()
        assert fused_engine.last_flush()[0] == 1  # (diffusers' own: 6 recorded ops)
    assert len(out) == 5


def test_a_global_module_hook_sees_every_submodule_call(eager_mode):
    """A user's global forward hook expects each module call: with one registered, diffusers' forward runs."""
    module, call = _module("single")
    x, e = _inputs(torch.float32)
    seen = {device: module_calls_seen(lambda: _run(module, call, x, e, device)) for device in ("cpu", "tpu")}
    assert seen["tpu"] == seen["cpu"] and "Linear" in seen["tpu"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_strided_inputs_and_inference_mode(eager_mode, kind):
    """Every other token of a wider x and a conditioning column slice (views with strides and offsets), under
    inference_mode: one program, diffusers' values."""
    module, call = _module(kind)
    g = torch.Generator().manual_seed(3)
    big_x, big_e = torch.randn(2, 14, 32, generator=g), torch.randn(2, 48, generator=g)
    x, e = big_x[:, ::2], big_e[:, 16:]
    with torch.inference_mode():
        want = _as_tuple(call(module, x, e))
        m = module.to("tpu")
        bx, be = big_x.to("tpu"), big_e.to("tpu")
        got, programs = programs_run(lambda: _as_tuple(call(m, bx[:, ::2], be[:, 16:])))
    for gt, w in zip(got, want):
        torch.testing.assert_close(gt.cpu(), w, **TOL[torch.float32])
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert programs == 1


def test_eps_is_part_of_the_programs_key(eager_mode):
    """Norms that differ only in eps, at the same shapes, one after another in one process: each computes its
    own values, none reuses another's program."""
    x, e = _inputs(torch.float32)
    for eps in (1e-6, 0.5, 1e-6):
        module, call = _module("continuous", eps=eps)
        with torch.no_grad():
            want = _run(module, call, x, e, "cpu")
            got = _run(module, call, x, e, "tpu")
        torch.testing.assert_close(got[0].cpu(), want[0], **TOL[torch.float32])
