"""Execution modes and the switch between them (``torch.tpu.eager_mode``, ``set_eager_mode``).

``set_mode`` is the one place a mode takes effect: it picks the launcher every executor uses
(``launchers.current``) and, for fused eager, installs the module hooks that end a graph when the
outermost ``nn.Module`` call returns.
"""
from __future__ import annotations

import enum
import threading

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
    """An ``EagerMode``, its name or value in any case ("DEFER_AND_FUSE", "defer_and_fuse"), or the name
    the command line gives it ("eager", "debug", "fused": ``config.EAGER_MODE_NAMES``)."""
    if isinstance(mode, EagerMode):
        return mode
    if isinstance(mode, str):
        text = mode.strip()
        short = config.EAGER_MODE_NAMES.get(text.lower())
        if short is not None:
            return EagerMode[short]
        if text.upper() in EagerMode.__members__:
            return EagerMode[text.upper()]
    names = ", ".join(f"{short!r} (EagerMode.{name})" for short, name in config.EAGER_MODE_NAMES.items())
    if isinstance(mode, str) and mode.strip().lower() in ("compile", "compiled"):
        raise ValueError(f"{mode!r} is not an eager mode: compiled mode is torch.compile(model, backend='tpu') "
                         f"(python -m torch_tpu generate --mode compile compiles the transformer so); the eager "
                         f"modes are {names}")
    raise ValueError(f"unknown eager mode {mode!r}; choose one of {names}")


def get_mode() -> EagerMode:
    return _mode


@dynamo_frames.host_only
def set_mode(mode) -> None:
    global _mode
    mode = _as_mode(mode)
    if launchers.current is launchers.FORKED:
        raise platform.fork_error()
    leaving = _mode is EagerMode.DEFER_AND_FUSE and mode is not EagerMode.DEFER_AND_FUSE
    try:
        if leaving or fused.waiting_graphs():
            fused.finish()  # pending work (and strict ops waiting for their programs) runs first
    finally:  # its error (a graph that failed) is raised with the mode changed: it must not stay fused
        if leaving:
            module_graphs.remove_module_hooks()
        _mode = mode
        launchers.current = _LAUNCHERS[mode]
        if mode is EagerMode.DEFER_AND_FUSE:
            module_graphs.install_module_hooks()


class eager_mode_context:
    """``torch.tpu.set_eager_mode(mode)``: switches now and for good as a plain call (like
    ``torch.set_grad_enabled``), and as ``with torch.tpu.set_eager_mode(mode):`` restores the previous mode
    when the block ends. (A generator context manager did nothing at all when called without ``with``.)

    The mode is one per process, not per thread (autograd runs backward on its own thread, and fused
    eager's pending graph is one per process). Blocks that threads open and close out of order still
    compose: a block that ends while a later-opened block is still open leaves the mode to that block
    and hands it the mode to restore, so every open block keeps the mode it set and, once all have
    ended, the mode from before the first is back. (Restoring each block's own previous mode left the
    process in fused mode after two threads' blocks ended in their opening order.)"""

    def __init__(self, mode):
        self.previous = _mode
        set_mode(mode)

    def __enter__(self):
        with _OPEN_LOCK:
            _OPEN.append(self)
        return None

    def __exit__(self, *exc_info):
        try:
            sync()
        finally:
            with _OPEN_LOCK:
                i = next((k for k, c in enumerate(_OPEN) if c is self), None)
                if i is not None and i < len(_OPEN) - 1:
                    _OPEN[i + 1].previous = self.previous  # a later block still open restores it
                    del _OPEN[i]
                else:
                    if i is not None:
                        del _OPEN[i]
                    set_mode(self.previous)
        return False


_OPEN: list = []  # the eager_mode_context blocks entered and not yet ended, in the order they began
_OPEN_LOCK = threading.RLock()


def init_from_settings() -> None:
    """The starting mode from TORCH_TPU_LAUNCH_BLOCKING / TORCH_TPU_DEFER_AND_FUSE."""
    settings = config.settings()
    if settings.launch_blocking:
        set_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    if settings.defer_and_fuse:
        set_mode(EagerMode.DEFER_AND_FUSE)
