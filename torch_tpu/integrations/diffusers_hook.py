"""Patch a diffusers module as soon as diffusers executes it, without importing diffusers.

``when_executed(name, patch)``: if module ``name`` is already imported, ``patch(module)`` now; otherwise an
import hook calls ``patch(module)`` right after diffusers executes that module, before any other diffusers
module imports names from it (so a patched function is the one every model module sees). A patch that raises
leaves diffusers as it is. The hook steps aside once every module it waits for has been executed.
"""
from __future__ import annotations

import importlib.abc
import sys
from importlib.machinery import PathFinder

_WAITING: dict = {}  # module name -> the patch to run on it once executed (the hook is in sys.meta_path meanwhile)


def _run(patch, module) -> None:
    try:
        patch(module)
    except Exception:  # noqa: BLE001 - diffusers keeps its own code
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _WAITING.pop(fullname, None)
        if patch is None:
            return None
        if not _WAITING and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _run(patch, module)

        spec.loader.exec_module = exec_module
        return spec


_FINDER = _Finder()


def when_executed(name: str, patch) -> None:
    """``patch(module)`` for diffusers module ``name``: now if it is imported, else right after it executes."""
    module = sys.modules.get(name)
    if module is not None:
        _run(patch, module)
        return
    _WAITING[name] = patch
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def waiting(name: str) -> bool:
    """Whether the hook still waits for module ``name``."""
    return name in _WAITING
