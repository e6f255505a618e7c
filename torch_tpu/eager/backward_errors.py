"""Errors raised while autograd's engine runs tpu ops surface from ``backward()``, never kill the process.

A Python exception that leaves ``__torch_dispatch__`` inside the engine's worker thread unwinds through
a C++ device guard whose Python-backed methods may not throw: the process aborts ("terminate called
without an active exception"). So inside a graph task the router hands the failing op placeholder
outputs of torch's shapes and dtypes (zeros: the backward pass is already lost) and queues an engine
callback that re-raises the error when the graph task finishes, on the thread that called
``backward()`` / ``autograd.grad()``.
"""
from __future__ import annotations

import functools
import warnings

import torch

from ..tensor.tensor import TpuTensor, empty


def _meta_outputs(func, args, kwargs):
    # the op path's argument helpers load at the first op, not at ``import torch`` (this module does)
    from .arguments import to_meta

    return func(*to_meta(list(args)), **{k: to_meta(v) for k, v in kwargs.items()})

_QUEUED: set = set()  # graph tasks that already carry an error


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def defer(func, args, kwargs, exc: BaseException):
    """Placeholder outputs for ``func`` and the error queued for the end of the graph task; None when
    the outputs cannot be described (the caller then raises)."""
    try:
        meta_out = _meta_outputs(func, args, kwargs)
    except Exception:  # noqa: BLE001 - no meta kernel: no shapes to stand in
        # Raising would still abort the process. Empty stand-ins make autograd fail this backward
        # with "invalid gradient" at once (the queued callback never runs), so say the cause now.
        meta_out = _schema_stand_ins(func)
        if meta_out is None:
            return None
        warnings.warn(f"tpu: {func} failed in a backward pass ({type(exc).__name__}: {exc}); autograd "
                      f"reports it as an invalid gradient", RuntimeWarning, stacklevel=2)
    _queue(exc)
    return _placeholders(meta_out)


def _schema_stand_ins(func):
    """Empty tensors in the places of ``func``'s tensor returns; None when it returns anything else."""
    outs = []
    for r in func._schema.returns:
        if not isinstance(r.type, torch.TensorType):
            return None
        outs.append(torch.empty((0,), device="meta"))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _placeholders(x):
    if isinstance(x, torch.Tensor):
        return empty(tuple(x.shape), x.dtype)
    if type(x) in (list, tuple):
        return type(x)(_placeholders(e) for e in x)
    return x


# -------------------------------------------------------------------------------------------------
# User hooks that autograd's engine calls on the tpu device thread
# -------------------------------------------------------------------------------------------------
# The same abort happens when a user's Python hook raises there (a tensor hook, a module backward hook,
# a post-accumulate-grad hook, a saved-tensor unpack hook, checkpoint's recomputation): torch throws the
# error through the device's stream guard with the Python error still set, and the guard's Python-backed
# methods cannot run then. ``autograd.Function.backward`` is safe (torch stores its error first). So the
# hooks registered through these entry points run guarded: an exception inside a graph task that works
# on tpu tensors is queued like an op's error above (the same exception object leaves ``backward()``)
# and the hook counts as having returned None (a failed unpack hook: a placeholder of the saved shape).
# Unlike CPU torch, the rest of that backward pass still runs (its gradients accumulate) before the
# error is raised.


def _queue(exc: BaseException) -> None:
    task = torch._C._current_graph_task_id()
    if task not in _QUEUED:
        _QUEUED.add(task)

        def reraise(error=exc, task=task):
            _QUEUED.discard(task)
            raise error

        torch.autograd.Variable._execution_engine.queue_callback(reraise)


def _has_tpu_tensor(x) -> bool:
    if isinstance(x, torch.Tensor):
        return x.device.type == "tpu"
    if type(x) in (list, tuple):
        return any(_has_tpu_tensor(e) for e in x)
    if type(x) is dict:
        return any(_has_tpu_tensor(e) for e in x.values())
    return False


def guard_hook(hook, on_tpu: bool = False):
    """``hook`` (any arguments) whose exception, raised inside a backward pass over tpu tensors, is
    queued for the end of that backward pass instead of aborting the process. ``on_tpu``: the hook
    belongs to a tpu tensor (its argument may be None: the gradient of an unused output of a
    multi-output op, ``a, b = x.chunk(2)`` with a hook on ``a`` and backward through ``b``)."""
    if getattr(hook, "_tpu_guarded", False) or not callable(hook):
        return hook

    @functools.wraps(hook)
    def guarded(*args, **kwargs):
        try:
            return hook(*args, **kwargs)
        except BaseException as exc:
            if not in_backward() or not (on_tpu or _has_tpu_tensor(args) or _has_tpu_tensor(kwargs)):
                raise
            _queue(exc)
            return None

    guarded._tpu_guarded = True
    return guarded


class _Packed:
    """What a guarded pack hook saves for a tpu tensor: the user's packed value and the tensor's shape."""

    __slots__ = ("value", "shape", "dtype")

    def __init__(self, value, shape, dtype):
        self.value, self.shape, self.dtype = value, shape, dtype


def _guard_saved_hooks(pack, unpack):
    def pack_hook(t):
        packed = pack(t)
        if type(t) is TpuTensor:
            return _Packed(packed, tuple(t.shape), t.dtype)
        return packed

    def unpack_hook(packed):
        if type(packed) is not _Packed:
            return unpack(packed)
        try:
            return unpack(packed.value)
        except BaseException as exc:
            if not in_backward():
                raise
            _queue(exc)
            return empty(packed.shape, packed.dtype)

    return pack_hook, unpack_hook


_INSTALLED: list = []


def install() -> None:
    """Guard the hook entry points (see above); idempotent."""
    if _INSTALLED:
        return
    import torch.autograd.graph as graph
    import torch.utils.hooks as hooks

    register_hook = torch.Tensor.register_hook
    register_post = torch.Tensor.register_post_accumulate_grad_hook

    def tpu_register_hook(self, hook):
        # A view whose base (or another view of it) changed in place gets a new grad_fn the next time its
        # grad_fn is read, and that refresh clears the tensor's Python hook dict. Tensor.register_hook sets
        # the dict first and reads grad_fn after, so the refresh happened in between and torch dereferenced
        # the cleared dict (a segfault, CPU tensors too: ``v = y[:2]; y.add_(1); v.register_hook(f)``).
        # Reading grad_fn first refreshes it before the dict exists.
        if self.requires_grad:
            self.grad_fn  # noqa: B018 - the read refreshes a stale view's grad_fn
        return register_hook(self, guard_hook(hook, on_tpu=True))

    def tpu_register_post_accumulate_grad_hook(self, hook):
        return register_post(self, guard_hook(hook, on_tpu=True))

    functools.update_wrapper(tpu_register_hook, register_hook)
    functools.update_wrapper(tpu_register_post_accumulate_grad_hook, register_post)
    TpuTensor.register_hook = tpu_register_hook
    TpuTensor.register_post_accumulate_grad_hook = tpu_register_post_accumulate_grad_hook

    backward_hook_init = hooks.BackwardHook.__init__

    def init(self, module, user_hooks, user_pre_hooks):
        backward_hook_init(self, module, [guard_hook(h) for h in user_hooks],
                           [guard_hook(h) for h in user_pre_hooks])

    functools.update_wrapper(init, backward_hook_init)
    hooks.BackwardHook.__init__ = init
    # legacy ``Module.register_backward_hook``: a _WrappedHook on the output's grad_fn
    wrapped_hook = torch.nn.modules.module._WrappedHook
    wrapped_hook.__call__ = guard_hook(wrapped_hook.__call__)

    def enter(self):
        torch._C._autograd._push_saved_tensors_default_hooks(*_guard_saved_hooks(self.pack_hook, self.unpack_hook))

    functools.update_wrapper(enter, graph.saved_tensors_hooks.__enter__)
    graph.saved_tensors_hooks.__enter__ = enter
    # a user's TorchDispatchMode whose __torch_dispatch__ raises on a backward op: placeholders, as above
    from torch.utils import _python_dispatch

    mode_cls = _python_dispatch.TorchDispatchMode
    init_subclass = mode_cls.__dict__["__init_subclass__"].__func__

    def guarded_init_subclass(cls, **kwargs):
        init_subclass(cls, **kwargs)
        raw = cls.__dict__.get("__torch_dispatch__")
        if raw is not None and not isinstance(raw, (classmethod, staticmethod)) and callable(raw):
            cls.__torch_dispatch__ = _guard_dispatch(raw)

    mode_cls.__init_subclass__ = classmethod(guarded_init_subclass)
    _guard_fake_mode()
    _INSTALLED.append(True)


def _guard_fake_mode() -> None:
    """AOTAutograd traces a compiled graph's backward with fake tpu tensors through autograd's engine, on
    the tpu device thread: a fake kernel's error there (``_unique`` in index_fill's backward: a
    data-dependent shape) aborted the process. Such an error is queued for the end of the traced backward
    (so it leaves ``autograd.grad`` inside AOTAutograd, and torch.compile falls back as on the CPU) and the
    op gets fake placeholders of its meta shapes (empty tensors where none can be computed)."""
    from torch._subclasses import fake_tensor

    cls = fake_tensor.FakeTensorMode
    raw = cls.__dict__["__torch_dispatch__"]
    if getattr(raw, "_tpu_guarded", False):
        return

    @functools.wraps(raw)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            return raw(self, func, types, args, kwargs)
        except BaseException as exc:
            if not (in_backward() and isinstance(func, torch._ops.OpOverload)
                    and (_has_tpu_tensor(args) or _has_tpu_tensor(kwargs or {}))):
                raise
            try:
                meta_out = _meta_outputs(func, args, kwargs or {})
            except Exception:  # noqa: BLE001 - data-dependent or no meta kernel: empty stand-ins
                meta_out = _schema_stand_ins(func)
                if meta_out is None:
                    raise exc from None
            _queue(exc)
            return _fake_placeholders(self, meta_out)

    __torch_dispatch__._tpu_guarded = True
    cls.__torch_dispatch__ = __torch_dispatch__


def _fake_placeholders(mode, x):
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(x, torch.Tensor):
        return FakeTensor(mode, torch.empty(tuple(x.shape), dtype=x.dtype, device="meta"), torch.device("tpu", 0))
    if type(x) in (list, tuple):
        return type(x)(_fake_placeholders(mode, e) for e in x)
    return x


def _guard_dispatch(raw):
    @functools.wraps(raw)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            return raw(self, func, types, args, kwargs)
        except BaseException as exc:
            if in_backward() and (_has_tpu_tensor(args) or _has_tpu_tensor(kwargs or {})):
                out = defer(func, args, kwargs or {}, exc)
                if out is not None:
                    return out
            raise

    return __torch_dispatch__
