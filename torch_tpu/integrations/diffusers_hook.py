"""Patch a diffusers module as soon as diffusers executes it, without importing diffusers.

``when_executed(name, patch)``: if module ``name`` is already imported, ``patch(module)`` now; otherwise an
import hook calls ``patch(module)`` right after diffusers executes that module, before any other diffusers
module imports names from it (so a patched function is the one every model module sees). A patch that raises
leaves diffusers' code in place and its error is kept for ``failure(name)``. The hook steps aside once every
module it waits for has been executed.

diffusers asks ``torch.accelerator.is_available()`` while it is imported, which starts the platform (JAX's
imports) on a background thread: the patch runs while that thread adds to ``sys.modules``. ``modules_holding``
reads one copy of it, taken in a single step, and never calls a module's ``__getattr__`` (diffusers' lazy
modules import on attribute access).
"""
from __future__ import annotations

import importlib.abc
import sys
import types
from importlib.machinery import PathFinder

_WAITING: dict = {}  # module name -> the patch to run on it once executed (the hook is in sys.meta_path meanwhile)
_FAILURES: dict = {}  # module name -> the error its patch raised ("Type: message")


def _run(name, patch, module) -> None:
    try:
        patch(module)
    except Exception as error:  # noqa: BLE001 - diffusers keeps its own code
        _FAILURES[name] = f"{type(error).__name__}: {error}"


def failure(name: str) -> str | None:
    """The error the patch of diffusers module ``name`` raised, if it raised."""
    return _FAILURES.get(name)


def patch_each(names, patch_one) -> None:
    """``patch_one(name)`` for each name, each on its own: one that raises leaves the others patched; their
    errors are raised together at the end (``_run`` keeps them for ``failure``)."""
    errors = []
    for name in names:
        try:
            patch_one(name)
        except Exception as error:  # noqa: BLE001 - reported below, after the others are patched
            errors.append(f"{name}: {type(error).__name__}: {error}")
    if errors:
        raise RuntimeError("; ".join(errors))


def modules_holding(attribute: str, value) -> list:
    """The loaded diffusers modules whose own namespace binds ``attribute`` to ``value``."""
    loaded = sys.modules.copy()  # one step: another thread's imports cannot change it under the loop
    return [module for module_name, module in loaded.items()
            if module_name.startswith("diffusers.") and isinstance(module, types.ModuleType)
            and module.__dict__.get(attribute) is value]


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
            _run(fullname, patch, module)

        spec.loader.exec_module = exec_module
        return spec


_FINDER = _Finder()


def when_executed(name: str, patch) -> None:
    """``patch(module)`` for diffusers module ``name``: now if it is imported, else right after it executes."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, patch, module)
        return
    _WAITING[name] = patch
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def waiting(name: str) -> bool:
    """Whether the hook still waits for module ``name``."""
    return name in _WAITING
