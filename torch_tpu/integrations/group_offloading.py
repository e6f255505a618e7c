"""diffusers' group offloading onto the tpu: the offloaded model's blocks replay their recorded calls.

A model under ``apply_group_offloading`` (``enable_group_offload``) never moves to the tpu as a whole (its groups
are uploaded by hooks as they run), so nothing gave its blocks their replayers, and each block's forward is
wrapped by diffusers' ``HookRegistry``, which a replay of the whole call would skip. When the onload device is
the tpu, the model's blocks get replayers here, after the hooks are in place: a block's replayer takes the place
of its own forward inside the hooks (``eager/module_replay._hooked_forward``), so the hooks' Python (this group's
onload, the next one's prefetch, the offload after) runs at every call and only the forward itself replays. The
weights come back in new storages at every onload: the recording follows them (``replay_guards.ModuleTree``).
"""
from __future__ import annotations

import functools

import torch

from ..engine import module_graphs
from . import diffusers_hook

_MODULE = "diffusers.hooks.group_offloading"


def _on_tpu(device) -> bool:
    try:
        return torch.device(device).type == "tpu"
    except (TypeError, RuntimeError):
        return False


def _patch(module) -> None:
    original = module.apply_group_offloading
    if getattr(original, "__torch_tpu_original__", None) is not None:
        return

    @functools.wraps(original)
    def apply_group_offloading(module, onload_device, *args, **kwargs):
        out = original(module, onload_device, *args, **kwargs)
        if _on_tpu(onload_device):
            module_graphs.blocks_found(module)
        return out

    apply_group_offloading.__torch_tpu_original__ = original
    for holder in [module] + diffusers_hook.modules_holding("apply_group_offloading", original):
        holder.apply_group_offloading = apply_group_offloading


def install() -> None:
    diffusers_hook.when_executed(_MODULE, _patch)
