"""Errors raised while autograd's engine runs tpu ops surface from ``backward()``, never kill the process.

A Python exception that leaves ``__torch_dispatch__`` inside the engine's worker thread unwinds through
a C++ device guard whose Python-backed methods may not throw: the process aborts ("terminate called
without an active exception"). So inside a graph task the router hands the failing op placeholder
outputs of torch's shapes and dtypes (zeros: the backward pass is already lost) and queues an engine
callback that re-raises the error when the graph task finishes, on the thread that called
``backward()`` / ``autograd.grad()``.
"""
from __future__ import annotations

import warnings

import torch

from ..tensor.tensor import empty
from .arguments import to_meta

_QUEUED: set = set()  # graph tasks that already carry an error


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def defer(func, args, kwargs, exc: BaseException):
    """Placeholder outputs for ``func`` and the error queued for the end of the graph task; None when
    the outputs cannot be described (the caller then raises)."""
    try:
        meta_out = func(*to_meta(list(args)), **{k: to_meta(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001 - no meta kernel: no shapes to stand in
        # Raising would still abort the process. Empty stand-ins make autograd fail this backward
        # with "invalid gradient" at once (the queued callback never runs), so say the cause now.
        meta_out = _schema_stand_ins(func)
        if meta_out is None:
            return None
        warnings.warn(f"tpu: {func} failed in a backward pass ({type(exc).__name__}: {exc}); autograd "
                      f"reports it as an invalid gradient", RuntimeWarning, stacklevel=2)
    task = torch._C._current_graph_task_id()
    if task not in _QUEUED:
        _QUEUED.add(task)

        def reraise(error=exc, task=task):
            _QUEUED.discard(task)
            raise error

        torch.autograd.Variable._execution_engine.queue_callback(reraise)
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
