"""``__torch_dispatch__`` of the tpu tensor: routes each aten call, once per op (cached by id).

Routes, in order: a handler from the tables (the tensor layer's storage kernels, this layer's
rewrites, handlers added by integrations such as collectives); a view (metadata only); a
CompositeImplicit "maybe-view" op (torch decides whether it copies); otherwise the op path.
"""
from __future__ import annotations


from ..engine import call_sites
from ..runtime import caches
from ..runtime.platform import X64, after_interrupt
from ..tensor.tensor import TpuTensor
from ..tensor.views import MATH_BITS_SEEN, run_view
from . import backward_errors, math_bits
from . import op_store  # noqa: F401  (light: the "op" key kind and the loader of op descriptions, which a
#                          warm process reads ahead from its first transfer, before the op path loads)

# Handlers added by integrations (collectives, GradScaler's ops, fused optimizers); they take precedence
# over the tables of storage kernels and rewrites, which load with the op path at the first op routed
# (this module loads at ``import torch``, which must stay light).
_ADDED_HANDLERS: dict = {}
_ROUTES: dict = caches.register("op routes", {})


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    if len(types) > 1 or types[0] is not TpuTensor:
        # another tensor subclass takes part (AsyncCollectiveTensor, DTensor ...): let it unwrap first
        if any(not issubclass(t, TpuTensor) for t in types):
            return NotImplemented
    route = _ROUTES.get(id(func))  # id: OpOverload.__hash__ is Python code, too slow for every op
    if route is None:
        route = _ROUTES[id(func)] = _route(func)
    kwargs = kwargs or {}
    prev = X64.swap(True)  # JAX's 64-bit mode for this thread while the op runs (platform.X64)
    try:
        if MATH_BITS_SEEN[0] and not func.is_view and math_bits.has_math_bits(args, kwargs):
            return math_bits.run_resolved(route, func, args, kwargs)
        return route(func, args, kwargs)
    except BaseException as exc:  # (KeyboardInterrupt, SystemExit too: any of them aborts there)
        if backward_errors.in_backward():  # raising here would abort the process (see backward_errors)
            out = backward_errors.defer(func, args, kwargs, exc)
            if out is not None:
                return out
        after_interrupt(exc)
        raise
    finally:
        X64.restore(prev)


def _decompose(func, args, kwargs):
    return func.decompose(*args, **kwargs)


def _user_kernel(func, args, kwargs):
    return func._op_dk(_PRIVATEUSE1, *args, **kwargs)


_PRIVATEUSE1 = None
# namespaces whose PrivateUse1 kernels are torch's or torch_tpu's own (factories, collectives): never
# routed to them from here
_OWN_NAMESPACES = ("aten", "prims", "c10d", "_c10d_functional", "c10d_functional", "tpu")


def has_user_kernel(func) -> bool:
    """A user's kernel for the tpu device (``torch.library.custom_op(...).register_kernel("tpu")``,
    ``Library.impl(..., "PrivateUse1")``): the op runs it, as torch's dispatcher would without
    ``__torch_dispatch__`` in the way (not the op's default implementation, nor "no lowering")."""
    import torch

    global _PRIVATEUSE1
    if func.namespace in _OWN_NAMESPACES:
        return False
    _PRIVATEUSE1 = torch._C.DispatchKey.PrivateUse1
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "PrivateUse1")


def _route(func):
    from ..tensor.kernels import KERNELS
    from .fallbacks import has_composite_implicit
    from .op_path import run_op
    from .rewrites import REWRITES

    handler = _ADDED_HANDLERS.get(func) or REWRITES.get(func) or KERNELS.get(func)
    if handler is not None:
        return handler
    if has_user_kernel(func):
        return _user_kernel
    if func.is_view:
        return _decompose if has_composite_implicit(func) else run_view
    return run_op


def has_own_route(func) -> bool:
    """Whether eager runs ``func`` by a route of its own (a storage kernel, a rewrite, a view, a user's
    kernel), not through the op table's op path."""
    from .op_path import run_op

    return _route(func) is not run_op


def add_handlers(handlers: dict) -> None:
    """More handlers (collectives, from the distributed integration); forgets cached routes."""
    _ADDED_HANDLERS.update(handlers)
    _ROUTES.clear()


def install() -> None:
    TpuTensor.__torch_dispatch__ = classmethod(torch_dispatch)


call_sites.set_dispatch_code(torch_dispatch.__code__)  # (fused mode finds the user's frames from it)
