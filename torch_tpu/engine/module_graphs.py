"""Fused eager's graph boundaries at module calls: the outermost model call and each block of a stack are
graphs of their own (module hooks installed while fused mode is on)."""
from __future__ import annotations

import sys
import threading
import weakref

from . import fused


# -------------------------------------------------------------------------------------------------
# Graph boundaries at module calls: the outermost call and its blocks are graphs of their own.
# -------------------------------------------------------------------------------------------------
# A model call's graph starts when the call starts (the glue before it, latent preparation or a scheduler
# step, is flushed first) and ends when it returns, so every denoising step is the same graph. Inside it,
# each outermost block (diffusers' ``_repeated_blocks`` classes, or the children of a ModuleList of one
# class that have children of their own) is a graph of its own too: structurally identical blocks have the
# same graph key and share one program, so compile time does not grow with depth, and blocks that differ
# compile side by side.
_HOOKS = []   # [pre-hook id, hook id] while fused mode's global hooks are installed
_HOOK_IDS = []  # the ids torch gave them at the first install (see install_module_hooks)


class _Calls(threading.local):
    depth = 0        # nesting depth of module calls
    block = None     # the outermost repeated block now running
    outer = None     # the frame of the outermost module call


_CALLS = _Calls()
_SCANNED: "weakref.WeakSet" = weakref.WeakSet()   # outermost modules whose blocks were found
# modules that are repeated blocks: their pre-hooks stay when fused mode ends (they do nothing then; see
# install_module_hooks)
_BLOCKS: "weakref.WeakSet" = weakref.WeakSet()


def repeated_blocks(root) -> list:
    """The blocks of ``root``: modules of a class its ``_repeated_blocks`` names (diffusers), and the
    children of a ModuleList that have children of their own and share their class with another child
    (transformer layers, a VAE's or a UNet's up and down blocks; not a list of Linears). Blocks alike in
    their parameters' names, shapes and dtypes share one program; the others are graphs of their own too, so
    that a first call compiles them side by side: a VAE decoder's last, largest up blocks (their channels
    differ from the others') were one graph with the decoder, the longest compile of the demo's first image."""
    import torch

    names = set()
    for m in root.modules():
        names.update(getattr(m, "_repeated_blocks", None) or ())
    found = []
    for m in root.modules():
        if names and type(m).__name__ in names:
            found.append(m)
        elif isinstance(m, torch.nn.ModuleList) and len(m) >= 2:
            groups: dict = {}
            for child in m:
                if any(True for _ in child.children()):
                    groups.setdefault(type(child), []).append(child)
            for members in groups.values():
                if len(members) >= 2:
                    found.extend(members)
    return found


_BLOCK_INSTALLER = [None]  # eager's: gives a model's repeated blocks their replayers (eager/module_replay.py)


def set_block_installer(fn) -> None:
    _BLOCK_INSTALLER[0] = fn


def blocks_found(root) -> None:
    """A model moved to the device or called in fused mode: its repeated blocks get their replayers."""
    if _BLOCK_INSTALLER[0] is not None:
        _BLOCK_INSTALLER[0](root)


def start_block(args, kwargs) -> None:
    """Fused mode, before a block's graph starts (its pre-hook, or its recorded program): the views among its
    arguments are read and the glue recorded before it is a graph of its own."""
    _read_views((args, kwargs))
    _cut()


def is_own_hook(hook) -> bool:
    """Whether a module's forward pre-hook is fused mode's own block boundary."""
    return hook is _block_pre_hook


def _enter_root(module) -> None:
    if module not in _SCANNED:
        _SCANNED.add(module)
        blocks_found(module)
        for block in repeated_blocks(module):
            if block not in _BLOCKS:
                _BLOCKS.add(block)
                # its own hook sees keyword arguments too (global pre-hooks get positional ones only)
                block.register_forward_pre_hook(_block_pre_hook, with_kwargs=True)


def _cut(module=None) -> None:
    if fused._STATE.graph.nodes:
        fused.flush_for(None if module is None else type(module).__name__)


_VIEW_READER = [None]  # the tensor layer's: reads a tpu view's value (cached on the tensor), else None


def set_view_reader(fn) -> None:
    _VIEW_READER[0] = fn


def _read_views(x) -> None:
    """Read the value of every view among a block's arguments before its graph starts: the first block
    of a stack often gets views (a Linear's output reshaped) where the next get whole tensors, and a view
    read inside the block would make its graph differ from theirs."""
    t = type(x)
    if t in (tuple, list):
        for e in x:
            _read_views(e)
    elif t is dict:
        for e in x.values():
            _read_views(e)
    elif _VIEW_READER[0] is not None:
        _VIEW_READER[0](x)


def _compiling() -> bool:
    """Whether dynamo is tracing the module call whose hook runs (a ``module.compile()``'d block, as
    ``compile_repeated_blocks`` makes them): that call becomes one compiled program, there is nothing to
    cut or count, and the hooks' host work (flushing a graph through JAX, reading frames) cannot be
    traced. ``is_compiling()`` is a constant to dynamo, so the traced hook is empty."""
    import torch

    return torch.compiler.is_compiling()


def _pre_hook(module, args):
    if _compiling():
        return
    calls = _CALLS
    if calls.depth and not _executing(calls.outer):
        # the outermost call was left by an exception the hooks never saw (KeyboardInterrupt)
        calls.depth = 0
        calls.block = None
    if calls.depth == 0:
        calls.outer = sys._getframe(1)  # the outermost module call's frame
        # read the views among its arguments with the glue: the first denoising step passes the packed
        # latents (a reshape of a permuted view), later steps the scheduler's whole output, and a view
        # read inside the call would make the first step's graph differ from the others'
        _read_views((args, _call_kwargs(calls.outer)))
        _cut()  # the glue recorded before this model call is a graph of its own
        _enter_root(module)
    calls.depth += 1


def _call_kwargs(frame):
    """The keyword arguments of the module call whose frame (torch's ``_call_impl``, or its ``inner``)
    runs a global pre-hook: such hooks get the positional arguments only, and a pipeline calls its
    model with keywords."""
    try:
        kwargs = frame.f_locals.get("kwargs")
    except Exception:  # not the frame we expect: the positional arguments only
        return None
    return kwargs if type(kwargs) is dict else None


def _executing(frame) -> bool:
    """Whether a frame is still running: CPython refuses to clear a running frame."""
    try:
        frame.clear()
    except RuntimeError:
        return True
    return False


def _block_pre_hook(module, args, kwargs):
    if _compiling():
        return None
    calls = _CALLS
    if _HOOKS and calls.block is None and calls.depth > 1:  # an outermost block, inside a model call
        _read_views((args, kwargs))
        _cut()
        calls.block = module
    return None


def _post_hook(module, args, output):
    if _compiling():
        return
    calls = _CALLS
    calls.depth = max(calls.depth - 1, 0)
    if calls.block is module:
        # the views it returns (a single-stream FLUX block returns two slices of one tensor) are read in
        # its graph: read by the next block's pre-hook, they made a two-node graph of their own per block
        _read_views(output)
        calls.block = None
        _cut(module)
    elif calls.depth == 0:
        calls.outer = None
        _cut(module)


def foreign_global_hooks() -> bool:
    """Whether torch holds global module hooks other than fused mode's own (a user's or a library's: code that
    skips module calls must then make them)."""
    from torch.nn.modules import module as torch_module

    own = set(_HOOKS)
    return any(i not in own for i in torch_module._global_forward_pre_hooks) or any(
        i not in own for i in torch_module._global_forward_hooks)


def install_module_hooks() -> None:
    """Fused mode's global module hooks, under the ids torch gave them the first time. A compiled block
    (``compile_repeated_blocks``) is guarded by dynamo on the ids of torch's global hooks and on its own
    hooks: new ids at each switch into fused mode (``with set_eager_mode(...)`` around every pipeline
    call) failed those guards, recompiled every block at every call, and hit dynamo's recompile limit,
    an error with ``fullgraph=True``. So the ids stay the same, and blocks keep their pre-hooks."""
    if _HOOKS:
        return
    from torch.nn.modules import module as torch_module

    if not _HOOK_IDS:
        pre = torch_module.register_module_forward_pre_hook(_pre_hook)
        post = torch_module.register_module_forward_hook(_post_hook, always_call=True)
        _HOOK_IDS.extend((pre.id, post.id))
    else:  # (what register_module_forward_*hook do, with the ids of the first time)
        torch_module._global_forward_pre_hooks[_HOOK_IDS[0]] = _pre_hook
        torch_module._global_forward_hooks[_HOOK_IDS[1]] = _post_hook
        torch_module._global_forward_hooks_always_called[_HOOK_IDS[1]] = True
    _HOOKS.extend(_HOOK_IDS)


def remove_module_hooks() -> None:
    """Remove the global hooks (a module call in another mode pays nothing for them); the pre-hooks of
    repeated blocks stay (they do nothing outside fused mode, and their ids stay the same)."""
    if _HOOKS:
        from torch.nn.modules import module as torch_module

        torch_module._global_forward_pre_hooks.pop(_HOOK_IDS[0], None)
        torch_module._global_forward_hooks.pop(_HOOK_IDS[1], None)
        torch_module._global_forward_hooks_always_called.pop(_HOOK_IDS[1], None)
        _HOOKS.clear()
    _SCANNED.clear()
    _CALLS.depth = 0
    _CALLS.block = None
    _CALLS.outer = None
