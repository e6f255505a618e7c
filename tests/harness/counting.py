"""Counting what a case did on the device: compiles and cache counters (``counting``), live backend objects and
program caches (for growth checks), programs run and module calls seen, and torch's OpInfo database.
"""
from __future__ import annotations

import contextlib
import gc
import sys

import torch

import torch_tpu

from tests.harness.compare import sync


@contextlib.contextmanager
def counting():
    """``with counting() as c: ...`` then ``c.compiles``, ``c.cache_misses``, ``c.graph_compiles``
    (deltas of torch_tpu.stats() over the block, the device synchronised at the end)."""
    sync()
    before = torch_tpu.stats()

    class C:
        pass

    c = C()
    try:
        yield c
    finally:
        sync()
        after = torch_tpu.stats()
        for k in ("compiles", "cache_misses", "cache_hits", "graph_compiles", "executions", "flushes"):
            setattr(c, k, after.get(k, 0) - before.get(k, 0))


def backend_objects() -> int:
    """Live tensors and objects of torch_tpu's own classes (storages, lazy arrays, graph nodes...)."""
    n = 0
    for o in gc.get_objects():
        t = type(o)
        if issubclass(t, torch.Tensor) or str(t.__dict__.get("__module__", "")).startswith("torch_tpu"):
            n += 1
    return n


def program_cache_sizes() -> dict:
    """Best-effort sizes of the backend's in-process program caches (names change with the package
    layout; any module-level dict/OrderedDict/lru cache whose name says cache/entries/programs)."""
    sizes = {}
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("torch_tpu") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            low = attr.lower()
            if not any(w in low for w in ("cache", "entries", "programs", "graphs")):
                continue
            if isinstance(val, dict):
                sizes[f"{modname}.{attr}"] = len(val)
            elif hasattr(val, "cache_info"):
                try:
                    sizes[f"{modname}.{attr}"] = val.cache_info().currsize
                except Exception:  # noqa: BLE001
                    pass
    return sizes


def opinfo_db() -> list:
    """PyTorch's OpInfo database, with its per-sample search for the running unittest method turned off.

    Every sample iterator OpInfo makes calls ``extract_test_fn``, which walks ``inspect.stack()`` (reading
    the source lines of every frame under pytest) to find a ``unittest.TestCase`` method; these tests are
    plain functions, so it always found none, after spending 85% of test_op_consistency's time looking.
    """
    from torch.testing._internal import common_utils

    common_utils.extract_test_fn = _no_unittest_method
    from torch.testing._internal.opinfo import core

    core.extract_test_fn = _no_unittest_method  # bound by name at its import
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _no_unittest_method():
    return None


def programs_run(fn):
    """(``fn()``, how many programs ran for it): the executions counter around it, after a sync on each side
    (strict mode launches a program per op; fused mode's pending graph runs at the sync after)."""
    import torch_tpu

    torch_tpu.sync()
    before = torch_tpu.stats()["executions"]
    out = fn()
    torch_tpu.sync()
    return out, torch_tpu.stats()["executions"] - before


def module_calls_seen(fn) -> list:
    """The class names of the modules whose calls a global forward hook sees while ``fn()`` runs (under no_grad):
    code that stands one op for several modules' calls must make every call when such a hook is registered."""
    import torch

    names = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: names.append(type(mod).__name__))
    try:
        with torch.no_grad():
            fn()
    finally:
        handle.remove()
    return names
