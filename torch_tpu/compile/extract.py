"""``torch_tpu.extract_jax(module)``: a torch module as a pure JAX function and its weights (torchax's name).

``params, fn = extract_jax(module)``: ``params`` maps each parameter and buffer name to a ``jax.Array``
(the tensor's own buffer for a module on the tpu, no copy); ``fn(params, *inputs, **kwargs)`` computes
``module(*inputs, **kwargs)`` from JAX arrays with JAX operations only, so ``jax.jit``, ``jax.grad``,
``jax.vmap`` and optax take it. For each new signature (shapes and dtypes of params and inputs, the
non-array arguments) the module is traced once on fake tpu tensors into an aten graph (functionalised,
decomposed as ``torch.compile(backend="tpu")`` decomposes), and the graph is interpreted over the JAX
values with the op table every executor uses (``compile.lowering``).

What a pure function cannot do is refused or left out, and said so: random ops (dropout in training
mode) raise (call ``module.eval()``), in-place updates of buffers (BatchNorm's running statistics in
training mode) are not returned (warned), device-side index checks do not raise (JAX clamps the index).
"""
from __future__ import annotations

import collections.abc

import torch

from ..runtime import platform
from ..tensor.interop import to_jax
from ..tensor.tensor import TpuTensor

__all__ = ["extract_jax"]


def _params_of(module: torch.nn.Module) -> dict:
    out = {}
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if isinstance(t, TpuTensor):
            out[name] = to_jax(t.detach())
        else:  # a module on the CPU: its weights copied to the device (a private copy, which the module may
            # train on; through the tpu tensor's upload, which takes every dtype: NumPy has no bfloat16)
            out[name] = to_jax(t.detach().cpu().to("tpu"))
    return out


def _to_jax_tree(x):
    """torch's output structure with JAX arrays for leaves, as JAX pytrees (a transformers ModelOutput
    or any other mapping becomes a dict)."""
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_to_jax_tree(e) for e in x)
    if isinstance(x, collections.abc.Mapping):
        return {k: _to_jax_tree(v) for k, v in x.items()}
    return x


class _Traced:
    """One signature's aten graph, its interpreter and how many of its outputs are the module's."""

    def __init__(self, module, names, param_specs, in_spec, leaves, array_slots):
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils import _pytree as pytree

        from . import lowering
        from .aot import decompositions

        mode = FakeTensorMode()
        device = torch.device("tpu", 0)

        def fake(shape, dtype):
            return FakeTensor(mode, torch.empty(shape, dtype=dtype, device="meta"), device)

        self.out_spec = None

        def run(param_list, array_list):
            leaf_list = list(leaves)
            for slot, a in zip(array_slots, array_list):
                leaf_list[slot] = a
            args, kwargs = pytree.tree_unflatten(leaf_list, in_spec)
            out = torch.func.functional_call(module, dict(zip(names, param_list)), tuple(args), kwargs,
                                             tie_weights=False, strict=True)
            flat, self.out_spec = pytree.tree_flatten(out)
            self.static_out = [None if isinstance(x, torch.Tensor) else x for x in flat]
            return [x for x in flat if isinstance(x, torch.Tensor)]

        fake_params = [fake(shape, dtype) for shape, dtype in param_specs]
        fake_arrays = [fake(leaves[s].shape, _torch_dtype(leaves[s].dtype)) for s in array_slots]
        with mode:
            # decomposed first, then functionalised: a decomposition may write in place (torch's rms_norm
            # adds eps with ``add_``), which decomposing under functionalize left in the graph
            decomposed = make_fx(run, decomposition_table=decompositions())(fake_params, fake_arrays)
            gm = make_fx(torch.func.functionalize(decomposed, remove="mutations_and_views"))(fake_params, fake_arrays)
        self.plan = lowering._Plan(gm)
        if self.plan.random:
            raise NotImplementedError(
                f"torch_tpu.extract_jax: {type(module).__name__} draws random numbers (dropout in training "
                "mode?), which a pure JAX function of (params, inputs) cannot; call module.eval() first")
        self.n_out = sum(x is None for x in self.static_out)
        if self.plan.writebacks:
            import warnings

            warnings.warn(f"torch_tpu.extract_jax: {type(module).__name__} updates buffers in place (BatchNorm's "
                          "running statistics in training mode?); fn returns the outputs only, the updates are "
                          "dropped: call module.eval() first", RuntimeWarning, stacklevel=4)

    def __call__(self, param_arrays, input_arrays):
        from torch.utils import _pytree as pytree

        prev = platform.X64.swap(True)  # the op table's lowerings are written for JAX's 64-bit mode
        try:
            outs = self.plan.program(*param_arrays, *input_arrays)[: self.n_out]
        finally:
            platform.X64.restore(prev)
        it = iter(outs)
        flat = [next(it) if s is None else s for s in self.static_out]
        return _to_jax_tree(pytree.tree_unflatten(flat, self.out_spec))


def _torch_dtype(jax_dtype):
    from ..runtime import dtypes

    return dtypes.to_torch_dtype(jax_dtype)


def extract_jax(module: torch.nn.Module):
    """``(params, fn)``: the module's parameters and buffers as a dict of ``jax.Array`` by name, and a pure
    JAX function with ``fn(params, *inputs, **kwargs) == module(*inputs, **kwargs)`` (inputs as JAX
    arrays; other arguments as Python values)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"torch_tpu.extract_jax expects a torch.nn.Module, got {type(module).__name__}")
    jax = platform.jax()
    params = _params_of(module)
    names = tuple(params)
    traced: dict = {}

    def fn(params, *inputs, **kwargs):
        if not isinstance(params, collections.abc.Mapping) or set(params) != set(names):
            missing, extra = set(names) - set(params), set(params) - set(names)
            raise ValueError(f"torch_tpu.extract_jax: fn's params must be the dict extract_jax returned "
                             f"(missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]})")
        from torch.utils import _pytree as pytree

        param_arrays = [params[n] for n in names]
        leaves, in_spec = pytree.tree_flatten((list(inputs), kwargs))
        array_slots = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)]
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                raise TypeError(f"torch_tpu.extract_jax: fn takes JAX arrays, got a torch tensor (input leaf {i}); "
                                "use torch_tpu.to_jax(t)")
        static = tuple(None if i in array_slots else _static_key(x) for i, x in enumerate(leaves))
        param_specs = tuple((tuple(a.shape), _torch_dtype(a.dtype)) for a in param_arrays)
        key = (param_specs, str(in_spec), static,
               tuple((tuple(leaves[i].shape), str(leaves[i].dtype)) for i in array_slots))
        entry = traced.get(key)
        if entry is None:  # leaves: the arrays' places hold their shapes only (a tracer must not leak)
            holders = [_Shape(x) if i in array_slots else x for i, x in enumerate(leaves)]
            entry = traced[key] = _Traced(module, names, param_specs, in_spec, holders, array_slots)
        return entry(param_arrays, [leaves[i] for i in array_slots])

    return params, fn


class _Shape:
    """Stands for an array leaf while tracing (only its shape and dtype are read)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, a):
        self.shape, self.dtype = tuple(a.shape), a.dtype


def _static_key(x):
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)
