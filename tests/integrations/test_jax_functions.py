"""JAX code inside a torch program and a torch model as JAX code, as torchax users write them:
``torch_tpu.call_jax(fn, *args, **kwargs)`` (differentiable through JAX's VJP) and
``params, fn = torch_tpu.extract_jax(module)`` (``fn(params, *inputs)`` pure JAX: jit, grad). Every value
and gradient is compared with CPU torch computing the same thing."""
import copy

import numpy as np
import pytest
import torch

import torch_tpu

jax = pytest.importorskip("jax")
jnp = jax.numpy

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


def _close(a, b, tol=1e-5):
    a = np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a)
    b = np.asarray(b.detach().cpu() if isinstance(b, torch.Tensor) else b)
    np.testing.assert_allclose(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("mode", MODES)
def test_call_jax_values_and_gradients_match_cpu_torch(mode):
    """A JAX function of nested arguments and keywords, returning a dict with an integer leaf, inside a
    torch computation: values, then gradients of a loss through it (JAX's VJP), equal CPU torch's."""
    torch.manual_seed(0)
    x0, w0, b0 = torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)

    def jax_layer(inputs, bias, *, scale):
        a, w = inputs
        h = jnp.tanh(a @ w + bias) * scale
        return {"h": h, "best": jnp.argmax(h, axis=1), "note": "static"}

    def torch_layer(a, w, bias, scale):
        h = torch.tanh(a @ w + bias) * scale
        return h, h.argmax(1)

    with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, mode)):
        x, w, b = (t.to("tpu").requires_grad_() for t in (x0, w0, b0))
        out = torch_tpu.call_jax(jax_layer, (x * 2, w), b, scale=1.5)
        assert out["note"] == "static" and out["h"].device == x.device and not out["best"].requires_grad
        loss = (out["h"] ** 2).sum() + out["h"][:, 0].mean()
        loss.backward()
        xc, wc, bc = (t.clone().requires_grad_() for t in (x0, w0, b0))
        h_ref, best_ref = torch_layer(xc * 2, wc, bc, 1.5)
        ((h_ref ** 2).sum() + h_ref[:, 0].mean()).backward()
        _close(out["h"], h_ref)
        assert out["best"].cpu().tolist() == best_ref.tolist()
        for got, ref in ((x.grad, xc.grad), (w.grad, wc.grad), (b.grad, bc.grad)):
            _close(got, ref)


def test_a_model_trains_through_call_jax_as_cpu_torch_does():
    """nn.Linear -> a JAX activation -> nn.Linear, three SGD steps: the weights follow CPU torch's."""
    torch.manual_seed(1)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    model.to("tpu")
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    data = [(torch.randn(5, 6), torch.randn(5, 2)) for _ in range(3)]
    for x, y in data:
        h = torch_tpu.call_jax(jax.nn.gelu, model[0](x.to("tpu")))
        loss = torch.nn.functional.mse_loss(model[1](h), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_ref = torch.nn.functional.mse_loss(ref[1](torch.nn.functional.gelu(ref[0](x), approximate="tanh")), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()
        _close(loss, loss_ref)
    for p, q in zip(model.parameters(), ref.parameters()):
        _close(p, q)


def test_call_jax_in_a_compiled_function_is_a_graph_break():
    """torch.compile(backend="tpu") of code calling call_jax: the torch parts compile, the JAX call runs
    between them (dynamo traced into it and died of a RecursionError); values and grads as CPU torch."""
    torch.manual_seed(4)
    ref = torch.nn.Linear(3, 4)
    lin = torch.nn.Linear(3, 4)
    lin.load_state_dict(ref.state_dict())
    lin.to("tpu")

    def f(x):
        return (torch_tpu.call_jax(jnp.sin, lin(x)) * 3).sum()

    x = torch.randn(2, 3)
    loss = torch.compile(f, backend="tpu")(x.to("tpu"))
    loss.backward()
    loss_ref = (torch.sin(ref(x)) * 3).sum()
    loss_ref.backward()
    _close(loss, loss_ref)
    _close(lin.weight.grad, ref.weight.grad)


def test_call_jax_runs_a_pallas_kernel():
    """A Pallas kernel (interpreted on the CPU platform) as a torch op."""
    from jax.experimental import pallas as pl

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + y_ref[...]

    def pallas_add(x, y):
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=torch_tpu.platform() == "cpu")(x, y)

    a, b = torch.randn(8, 16), torch.randn(8, 16)
    _close(torch_tpu.call_jax(pallas_add, a.to("tpu"), b.to("tpu")), a * 2 + b)


def test_call_jax_refuses_cpu_tensors_by_name():
    with pytest.raises(TypeError, match="tpu tensors.*leaf 1 is a cpu tensor"):
        torch_tpu.call_jax(jnp.add, torch.ones(2, device="tpu"), torch.ones(2))


class _Block(torch.nn.Module):
    """Embedding + positions + causal attention + layer norm + MLP, returning a dict: what a text
    encoder does, with an integer input and an arange built inside the forward."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 16)
        self.pos = torch.nn.Embedding(8, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.norm = torch.nn.LayerNorm(16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, ids, *, extra=None, causal=True):
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        q, k, v = self.qkv(h).view(*ids.shape, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        h = self.norm(h + a.transpose(1, 2).reshape(h.shape))
        if extra is not None:
            h = h + extra
        return {"hidden": h + self.mlp(h) * self.scale, "pooled": h.mean(1)}


def test_extract_jax_gives_a_pure_function_jit_and_grad_match_cpu_torch():
    torch.manual_seed(2)
    cpu = _Block().eval()
    ids = torch.randint(0, 11, (2, 8))
    extra = torch.randn(2, 8, 16)
    ref = cpu(ids, extra=extra)
    ref["hidden"].sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in cpu.named_parameters()}

    model = _Block()
    model.load_state_dict(cpu.state_dict())
    model.eval().to("tpu")
    params, fn = torch_tpu.extract_jax(model)
    assert set(params) == {n for n, _ in cpu.named_parameters()} | {"scale"}
    assert all(isinstance(a, jax.Array) for a in params.values())
    ids_j, extra_j = jnp.asarray(ids.numpy().astype(np.int32)), jnp.asarray(extra.numpy())
    out = jax.jit(fn)(params, ids_j, extra=extra_j)
    _close(out["hidden"], ref["hidden"])
    _close(out["pooled"], ref["pooled"])
    grads = jax.jit(jax.grad(lambda p: fn(p, ids_j, extra=extra_j)["hidden"].sum()))(params)
    for name, g in ref_grads.items():
        _close(grads[name], g, tol=1e-4)
    # another signature (no extra, not causal, 5 tokens) traces again; the first one stays cached
    short = ids[:, :5]
    _close(fn(params, jnp.asarray(short.numpy()), causal=False)["hidden"],
           cpu(short, causal=False)["hidden"])


def test_extract_jax_of_a_module_whose_decompositions_write_in_place_matches_cpu_torch():
    """torch decomposes ``nn.RMSNorm`` with an in-place ``add_`` of eps: decomposed under functionalize, the
    write stayed in the graph and the function could not be built (FLUX's q/k norms)."""
    torch.manual_seed(5)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.RMSNorm(16, eps=1e-6), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    params, fn = torch_tpu.extract_jax(copy.deepcopy(cpu).to("tpu"))
    got = torch_tpu.from_jax(jax.jit(fn)(params, torch_tpu.to_jax(x.to("tpu")))).cpu()
    with torch.no_grad():
        torch.testing.assert_close(got, cpu(x))


@pytest.mark.parametrize("on_device", [False, True], ids=["cpu_module", "tpu_module"])
def test_extract_jax_of_a_bfloat16_module_matches_cpu_torch(on_device):
    """A bfloat16 module, on the CPU or the device (NumPy has no bfloat16: a CPU module's weights failed to
    copy), its parameters bfloat16 JAX arrays with CPU's values, its function CPU torch's output."""
    torch.manual_seed(4)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(16, 4)).to(torch.bfloat16)
    x = torch.randn(3, 8).to(torch.bfloat16)
    model = copy.deepcopy(cpu).to("tpu") if on_device else cpu
    params, fn = torch_tpu.extract_jax(model)
    for name, p in cpu.named_parameters():
        assert params[name].dtype == jnp.bfloat16
        assert torch.equal(torch_tpu.from_jax(params[name]).cpu(), p.detach())
    got = torch_tpu.from_jax(fn(params, torch_tpu.to_jax(x.to("tpu")))).cpu()
    with torch.no_grad():
        torch.testing.assert_close(got, cpu(x))


def test_extract_jax_trains_in_jax_like_torch_sgd():
    """Three plain-JAX SGD steps on extract_jax's params give the weights torch's SGD gives."""
    torch.manual_seed(3)
    cpu = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    params, fn = torch_tpu.extract_jax(cpu)  # a CPU module: its weights are copied to the device
    opt = torch.optim.SGD(cpu.parameters(), lr=0.05)
    data = [(torch.randn(7, 4), torch.randn(7, 1)) for _ in range(3)]

    @jax.jit
    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((fn(p, x) - y) ** 2))(p)
        return loss, jax.tree_util.tree_map(lambda w, d: w - 0.05 * d, p, g)

    for x, y in data:
        loss, params = step(params, jnp.asarray(x.numpy()), jnp.asarray(y.numpy()))
        ref = torch.nn.functional.mse_loss(cpu(x), y)
        opt.zero_grad()
        ref.backward()
        opt.step()
        _close(loss, ref)
    for name, p in cpu.named_parameters():
        _close(params[name], p)


def test_extract_jax_refuses_what_a_pure_function_cannot_do():
    drop = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5)).train().to("tpu")
    params, fn = torch_tpu.extract_jax(drop)
    with pytest.raises(NotImplementedError, match="random numbers.*module.eval"):
        fn(params, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="missing"):
        fn({}, jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="JAX arrays, got a torch tensor"):
        fn(params, torch.ones(2, 3))
    with pytest.raises(TypeError, match="nn.Module"):
        torch_tpu.extract_jax(lambda x: x)
    norm = torch.nn.BatchNorm1d(3).train().to("tpu")
    params, fn = torch_tpu.extract_jax(norm)
    with pytest.warns(RuntimeWarning, match="updates buffers in place.*dropped"):
        out = fn(params, jnp.ones((4, 3)))
    assert out.shape == (4, 3)
