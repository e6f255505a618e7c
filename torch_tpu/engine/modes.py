"""Execution modes and the switch between them (``torch.tpu.eager_mode``, ``set_eager_mode``).

``set_mode`` is the one place a mode takes effect: it picks the launcher every executor uses
(``launchers.current``) and, for fused eager, installs the module hooks that end a graph when the
outermost ``nn.Module`` call returns.
"""
from __future__ import annotations

import enum

from .. import config
from ..runtime import dynamo_frames, platform
from . import fused, launchers, module_graphs
from .sync import sync


class EagerMode(enum.Enum):
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"
    DEFER_AND_FUSE = "defer_and_fuse"


_LAUNCHERS = {
    EagerMode.DEFER_NEVER: launchers.STRICT,
    EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING: launchers.LAUNCH_BLOCKING,
    EagerMode.DEFER_AND_FUSE: launchers.FUSED,
}
_mode = EagerMode.DEFER_NEVER


def _as_mode(mode) -> EagerMode:
    if isinstance(mode, EagerMode):
        return mode
    text = str(mode)
    if text in EagerMode.__members__:
        return EagerMode[text]
    try:
        return EagerMode(mode)
    except ValueError:
        raise ValueError(f"unknown eager mode {mode!r}; choose one of {[m.name for m in EagerMode]}") from None


def get_mode() -> EagerMode:
    return _mode


@dynamo_frames.host_only
def set_mode(mode) -> None:
    global _mode
    mode = _as_mode(mode)
    if launchers.current is launchers.FORKED:
        raise platform.fork_error()
    if _mode is EagerMode.DEFER_AND_FUSE and mode is not EagerMode.DEFER_AND_FUSE:
        fused.flush()  # pending work runs before the mode changes
        module_graphs.remove_module_hooks()
    _mode = mode
    launchers.current = _LAUNCHERS[mode]
    if mode is EagerMode.DEFER_AND_FUSE:
        module_graphs.install_module_hooks()


class eager_mode_context:
    """``torch.tpu.set_eager_mode(mode)``: switches now, as a plain call (like ``torch.set_grad_enabled``),
    and as ``with torch.tpu.set_eager_mode(mode):`` restores the previous mode when the block ends. (A
    generator context manager did nothing at all when called without ``with``.)"""

    def __init__(self, mode):
        self.previous = _mode
        set_mode(mode)

    def __enter__(self):
        return None

    def __exit__(self, *exc_info):
        try:
            sync()
        finally:
            set_mode(self.previous)
        return False


def init_from_settings() -> None:
    """The starting mode from TORCH_TPU_LAUNCH_BLOCKING / TORCH_TPU_DEFER_AND_FUSE."""
    settings = config.settings()
    if settings.launch_blocking:
        set_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    if settings.defer_and_fuse:
        set_mode(EagerMode.DEFER_AND_FUSE)
