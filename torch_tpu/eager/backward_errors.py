"""Errors raised while autograd's engine runs tpu ops surface from ``backward()``, never kill the process.

A Python exception that leaves ``__torch_dispatch__`` inside the engine's worker thread unwinds through
a C++ device guard whose Python-backed methods may not throw: the process aborts ("terminate called
without an active exception"). So inside a graph task the router hands the failing op placeholder
outputs of torch's shapes and dtypes (zeros: the backward pass is already lost) and queues an engine
callback that re-raises the error when the graph task finishes, on the thread that called
``backward()`` / ``autograd.grad()``.
"""
from __future__ import annotations

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
    except Exception:  # noqa: BLE001 - no shapes to stand in: let the original error through
        return None
    task = torch._C._current_graph_task_id()
    if task not in _QUEUED:
        _QUEUED.add(task)

        def reraise(error=exc, task=task):
            _QUEUED.discard(task)
            raise error

        torch.autograd.Variable._execution_engine.queue_callback(reraise)
    return _placeholders(meta_out)


def _placeholders(x):
    if isinstance(x, torch.Tensor):
        return empty(tuple(x.shape), x.dtype)
    if type(x) in (list, tuple):
        return type(x)(_placeholders(e) for e in x)
    return x
