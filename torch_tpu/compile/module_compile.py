"""``module.compile(backend="tpu", fullgraph=True)``: the module's calls go through ``warm_start.CompiledCall``,
so a later process reads what this one traced instead of tracing again.

Installed at registration by wrapping ``torch.nn.Module.compile`` (diffusers' ``compile_repeated_blocks``
calls it on each block); nothing of dynamo is imported here. Other backends, ``fullgraph=False`` (a graph
break would make one call several graphs) and ``dynamic=True`` (refused by the backend) are left to
``torch.compile`` as they were.
"""
from __future__ import annotations

import torch

_ORIGINAL = None


def _is_tpu_backend(backend) -> bool:
    if backend == "tpu":
        return True
    from .backend import tpu_backend

    return backend is tpu_backend


def _compile(self, *args, **kwargs):
    _ORIGINAL(self, *args, **kwargs)
    if args or not _is_tpu_backend(kwargs.get("backend")) or not kwargs.get("fullgraph") \
            or kwargs.get("dynamic") or kwargs.get("disable") or kwargs.get("options"):
        return
    from .backend import tpu_backend
    from .warm_start import CompiledCall

    self._compiled_call_impl = CompiledCall(self, self._compiled_call_impl, tpu_backend)


def install() -> None:
    global _ORIGINAL
    if _ORIGINAL is not None:
        return
    _ORIGINAL = torch.nn.Module.compile
    torch.nn.Module.compile = _compile
