"""Compiled mode: torch.compile(module, backend="tpu") (static shapes, one XLA program per graph)."""

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch._dynamo

import torch_tpu
from torch_tpu.compile import StaticShapeError

pytestmark = pytest.mark.slow


def _graph_compiles():
    return torch_tpu.stats()["graph_compiles"]


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=tol, atol=tol)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = self.norm(h).softmax(-1) * torch.arange(16, device=x.device, dtype=x.dtype)
        return self.fc2(h)


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_programs):
    # the tests count the graphs compiled: an entry kept on disk by an earlier run (or another worker) of the
    # same module would serve the call without compiling (warm start), so every test starts from an empty cache
    torch._dynamo.reset()
    yield


def test_compiled_module_matches_cpu_and_reuses_programs():
    torch.manual_seed(0)
    ref = MLP()
    m = copy.deepcopy(ref).to("tpu")
    c = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(3, 8)
    torch_tpu.reset_stats()
    with torch.no_grad():
        _close(c(x.to("tpu")), ref(x))
    assert _graph_compiles() == 1
    torch_tpu.reset_stats()
    x2 = torch.randn(3, 8)
    with torch.no_grad():
        _close(c(x2.to("tpu")), ref(x2))
    s = torch_tpu.stats()
    assert s["graph_compiles"] == 0 and s["compiles"] == 0  # seen shape: nothing compiles
    torch_tpu.reset_stats()
    x3 = torch.randn(5, 8)
    with torch.no_grad():
        _close(c(x3.to("tpu")), ref(x3))
    assert _graph_compiles() == 1  # a new shape compiles once


def test_module_compile_method_and_parameters_are_inputs():
    torch.manual_seed(1)
    ref = MLP()
    m = copy.deepcopy(ref).to("tpu")
    m.compile(backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(2, 8)
    with torch.no_grad():
        _close(m(x.to("tpu")), ref(x))
        # parameters are program inputs, not baked constants: new weights, same program
        ref.fc2.weight.mul_(2)
        m.fc2.weight.mul_(2)
        torch_tpu.reset_stats()
        _close(m(x.to("tpu")), ref(x))
    assert _graph_compiles() == 0


class Mutating(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x, y):
        self.count.add_(1)       # buffer mutation
        y[..., :2] = 0           # input view mutation
        y.view(-1).mul_(3)
        z = x.t()
        z.add_(1)                # mutation through a view of an input
        return x * 2 + self.count + y.sum()


def test_mutations_are_written_back():
    ref = Mutating()
    m = Mutating().to("tpu")
    c = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)
    x, y = torch.randn(4, 4), torch.randn(3, 4)
    xt, yt = x.to("tpu"), y.to("tpu")
    for _ in range(2):
        out_ref = ref(x, y)
        out = c(xt, yt)
        _close(out, out_ref)
        _close(xt, x)
        _close(yt, y)
        _close(m.count, ref.count)


def _optimizer_like_step(params, states, big_view, counts, decay):
    """In-place updates of many inputs under no_grad (an optimizer step): AOTAutograd's inference graph."""
    with torch.no_grad():
        torch._foreach_mul_(states, decay)
        torch._foreach_add_(states, params)
        torch._foreach_add_(params, torch._foreach_mul(states, -0.1))
        big_view.mul_(decay).add_(1.0)  # a view of a larger tensor
        counts.copy_(counts + 1.5)  # an integer input written from a float value
    return params[0].sum()


def test_inference_graph_writes_its_inputs_in_the_program(monkeypatch):
    """The new values of the inputs an inference graph writes come out of its program and go straight into
    the input tensors (views and casts as in CPU torch): no eager ``copy_`` per written input after it."""
    from torch_tpu.tensor import kernels

    def inputs(device):
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(3, 4, generator=g).to(device) for _ in range(5)]
        states = [torch.randn(3, 4, generator=g).to(device) for _ in range(5)]
        big = torch.randn(6, 4, generator=g).to(device)
        return params, states, big, torch.tensor([1, 2, 3]).to(device), torch.tensor(0.5).to(device)

    ref = inputs("cpu")
    tpu = inputs("tpu")
    c = torch.compile(_optimizer_like_step, backend="tpu", dynamic=False)
    eager_copies = []
    real = kernels.copy_into
    monkeypatch.setattr(kernels, "copy_into", lambda dst, src: eager_copies.append(dst.shape) or real(dst, src))
    for step in range(3):
        out_ref = _optimizer_like_step(ref[0], ref[1], ref[2][2:5], ref[3], ref[4])
        if step == 1:
            eager_copies.clear()  # compiled on the first call
        out = c(tpu[0], tpu[1], tpu[2][2:5], tpu[3], tpu[4])
        _close(out, out_ref)
        for name, a, b in zip(("params", "states"), tpu[:2], ref[:2]):
            for x, y in zip(a, b):
                _close(x, y)
        _close(tpu[2], ref[2])
        assert tpu[3].dtype == ref[3].dtype and tpu[3].cpu().tolist() == ref[3].tolist()
    assert eager_copies == []


@pytest.mark.parametrize("case", ["returns_input", "through_a_view", "returns_a_view"])
def test_inference_graph_returns_the_input_it_writes(case):
    """A graph that writes an input and also returns it (``copy_``'s result is an output): the returned
    tensor and the input hold the new values, as on CPU."""
    fns = {"returns_input": lambda x: x.mul_(2).add_(1),
           "through_a_view": lambda x: (x.t().__setitem__(x.t() > 0, 1.0), x)[1],
           "returns_a_view": lambda x: x.t().sub_(3)}
    fn = fns[case]
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    for _ in range(2):  # compiled call, then the cached program
        ref, t = x.clone(), x.clone().to("tpu")
        out_ref = fn(ref)
        out = torch.compile(fn, backend="tpu", dynamic=False)(t)
        _close(out, out_ref)
        _close(t, ref)


def test_dynamic_shapes_are_refused_clearly():
    m = MLP().to("tpu")
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="static shapes"):
        torch.compile(m, backend="tpu", dynamic=True)(torch.randn(3, 8).to("tpu"))
    torch._dynamo.reset()
    x = torch.randn(3, 8).to("tpu")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="static shapes"):
        torch.compile(m, backend="tpu")(x)
    assert issubclass(StaticShapeError, RuntimeError)


def test_graph_breaks_compile_each_piece():
    def f(x, w):
        y = torch.tanh(x @ w)
        torch._dynamo.graph_break()  # Python runs between the two compiled pieces
        return (y * 3).sum(-1)

    torch.manual_seed(2)
    x, w = torch.randn(4, 5), torch.randn(5, 6)
    c = torch.compile(f, backend="tpu", fullgraph=False, dynamic=False)
    torch_tpu.reset_stats()
    _close(c(x.to("tpu"), w.to("tpu")), f(x, w))
    assert _graph_compiles() == 2
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="graph_break"):
        torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)(x.to("tpu"), w.to("tpu"))


def test_training_gradients_match_cpu():
    torch.manual_seed(3)
    ref = MLP()
    m = copy.deepcopy(ref).to("tpu")
    c = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(6, 8)
    torch_tpu.reset_stats()
    c(x.to("tpu")).square().mean().backward()
    ref(x).square().mean().backward()
    assert _graph_compiles() == 2  # forward and backward programs
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


def _flux_transformer(layers, single, width=32):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    return FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=layers, num_single_layers=single,
        attention_head_dim=16, num_attention_heads=width // 16, joint_attention_dim=24,
        pooled_projection_dim=20, axes_dims_rope=(4, 6, 6))


def _flux_inputs(seq, txt=7, batch=1):
    g = torch.Generator().manual_seed(seq)
    return dict(
        hidden_states=torch.randn(batch, seq, 16, generator=g),
        encoder_hidden_states=torch.randn(batch, txt, 24, generator=g),
        pooled_projections=torch.randn(batch, 20, generator=g),
        timestep=torch.full((batch,), 0.5),
        img_ids=torch.stack([torch.zeros(seq), torch.arange(seq) // 4, torch.arange(seq) % 4], -1),
        txt_ids=torch.zeros(txt, 3),
        return_dict=False,
    )


def _to_tpu(d):
    return {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in d.items()}


def test_repeated_blocks_share_programs_across_depths():
    # compile count grows with block types x shapes, not with the number of blocks
    for (layers, single), seq in (((1, 1), 16), ((3, 3), 12)):
        ref = _flux_transformer(layers, single)
        m = copy.deepcopy(ref).to("tpu")
        m.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
        inputs = _flux_inputs(seq)
        torch_tpu.reset_stats()
        with torch.no_grad():
            out = m(**_to_tpu(inputs))[0]
            expect = ref(**inputs)[0]
        assert _graph_compiles() == 2, (layers, single)  # one double-stream + one single-stream block
        _close(out, expect, tol=2e-4)
        torch_tpu.reset_stats()
        with torch.no_grad():
            m(**_to_tpu(inputs))
        assert torch_tpu.stats()["graph_compiles"] == 0


def test_mini_flux_training_lowers_loss():
    model = _flux_transformer(1, 1).to("tpu")
    model.train()
    c = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = _to_tpu(_flux_inputs(16))
    target = torch.randn(1, 16, 16, generator=torch.Generator().manual_seed(9)).to("tpu")
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = (c(**inputs)[0] - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses


@pytest.fixture(scope="module")
def tiny():
    from torch_tpu.testing import tiny_pipelines as tp

    return lambda kind: tp.load_pipeline(kind, "tiny")


def _latents(pipe, size, steps=2):
    g = torch.Generator("cpu").manual_seed(0)
    return pipe(prompt="a red cat", num_inference_steps=steps, height=size, width=size,
                generator=g, output_type="latent").images


def test_sd3_static_shape_flow(tiny):
    pipe = tiny("sd3")
    pipe.to("tpu")
    eager = _latents(pipe, 64).cpu()
    pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    torch_tpu.reset_stats()
    warm = _latents(pipe, 64)  # warm-up compiles the transformer once
    assert _graph_compiles() == 1
    torch.testing.assert_close(warm.cpu(), eager, rtol=1e-4, atol=1e-4)
    torch_tpu.reset_stats()
    _latents(pipe, 64)
    s = torch_tpu.stats()
    assert s["graph_compiles"] == 0 and s["compiles"] == 0  # same height/width: nothing compiles
    torch_tpu.reset_stats()
    _latents(pipe, 64, steps=3)
    assert _graph_compiles() == 0  # num_inference_steps does not recompile the transformer
    torch_tpu.reset_stats()
    _latents(pipe, 64, steps=2)
    s = torch_tpu.stats()
    assert s["graph_compiles"] == 0 and s["compiles"] == 0  # a step count seen before: nothing compiles
    torch_tpu.reset_stats()
    _latents(pipe, 80)
    assert _graph_compiles() == 1  # a new height/width compiles once
    with pytest.raises(ValueError, match="_repeated_blocks"):
        pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)


@pytest.mark.parametrize("kind", ["flux", "flux2"])
@pytest.mark.parametrize("offload", [False, True])
def test_regional_compilation_pipelines(tiny, kind, offload):
    pipe = tiny(kind)
    if offload:
        pipe.enable_model_cpu_offload(device="tpu")
    else:
        pipe.to("tpu")
    eager = _latents(pipe, 64).cpu()
    pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    torch_tpu.reset_stats()
    out = _latents(pipe, 64)
    assert _graph_compiles() == 2
    torch.testing.assert_close(out.cpu(), eager, rtol=1e-4, atol=1e-4)
    torch_tpu.reset_stats()
    _latents(pipe, 64)
    assert _graph_compiles() == 0 and torch_tpu.stats()["compiles"] == 0


def test_default_backend_compiles_tpu_graphs():
    """torch.compile(model) without a backend (inductor, which has no tpu code generator) compiles a graph
    of tpu tensors with backend "tpu", as torch.compile(model) works on other devices; an extern-kernel-only
    graph (Linear) and a graph needing generated code (elementwise) alike, with backend="inductor" too."""
    torch.manual_seed(0)
    ref = MLP()
    m = copy.deepcopy(ref).to("tpu")
    x = torch.randn(3, 8)
    for kwargs in ({}, {"backend": "inductor"}):
        torch._dynamo.reset()
        torch_tpu.reset_caches()
        torch_tpu.reset_stats()
        with torch.no_grad():
            _close(torch.compile(m, **kwargs)(x.to("tpu")), ref(x))
            _close(torch.compile(m.fc1, **kwargs)(x.to("tpu")), ref.fc1(x))
            y = torch.compile(lambda t: (t * 2).sin() + 1, **kwargs)(x.to("tpu"))
        _close(y, (x * 2).sin() + 1)
        assert _graph_compiles() >= 3, torch_tpu.stats()


def test_default_backend_mixed_devices_fail_clearly():
    x = torch.randn(3, 4)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="backend='tpu'"):
        torch.compile(lambda a, b: a.sum() + b.to("tpu").sum())(x.to("tpu"), x)


def test_default_backend_leaves_cpu_graphs_to_inductor():
    x = torch.randn(3, 4)
    torch_tpu.reset_stats()
    torch.testing.assert_close(torch.compile(lambda t: t.cos() * 3)(x), x.cos() * 3)
    assert _graph_compiles() == 0


def test_every_lowered_op_has_a_shape_rule_for_fake_tensors():
    """torch.compile traces with fake tensors: an op without a meta kernel (or composite/decomposition)
    runs its real kernel on fake-device zeros, which fails for tpu, and inside a traced backward that
    aborted the process (fractional_max_pool3d's backward). Ops whose output shape depends on values
    have torch's own fake kernels."""
    from torch_tpu.ops import load, registry

    load()
    keys = ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
            "CompositeExplicitAutogradNonFunctional")
    missing = [str(op) for op, low in registry.LOWERINGS.items()
               if op.name().startswith("aten::") and not low.data_dependent
               and not any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), k) for k in keys)
               and op not in torch._decomp.meta_table]
    assert not missing, f"lowered ops without a meta kernel (add one in ops/meta_kernels.py): {missing}"
