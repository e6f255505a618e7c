"""Execution modes and the switch between them (``torch.tpu.eager_mode``, ``set_eager_mode``)."""
from __future__ import annotations

import contextlib
import enum
import os


class EagerMode(enum.Enum):
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"
    DEFER_AND_FUSE = "defer_and_fuse"


_AVAILABLE = set(EagerMode)


class _State:
    mode: EagerMode = EagerMode.DEFER_NEVER
    launch_blocking: bool = False
    fused: bool = False


def _check_available(mode: EagerMode) -> EagerMode:
    if not isinstance(mode, EagerMode):
        try:
            mode = EagerMode[str(mode)] if str(mode) in EagerMode.__members__ else EagerMode(mode)
        except ValueError:
            raise ValueError(f"unknown eager mode {mode!r}; choose one of {[m.name for m in EagerMode]}") from None
    if mode not in _AVAILABLE:
        raise NotImplementedError(
            f"torch_tpu: {mode.name} (fused eager) is not implemented in this version; "
            "use EagerMode.DEFER_NEVER (strict eager) or torch.compile(backend='tpu')")
    return mode


def get_mode() -> EagerMode:
    return _State.mode


def set_mode(mode: EagerMode) -> None:
    mode = _check_available(mode)
    from . import fused

    if _State.fused and mode is not EagerMode.DEFER_AND_FUSE:
        fused.flush()  # pending work runs before the mode changes
        fused.remove_module_hooks()
    _State.mode = mode
    _State.launch_blocking = mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    _State.fused = mode is EagerMode.DEFER_AND_FUSE
    if _State.fused:
        fused.install_module_hooks()


@contextlib.contextmanager
def eager_mode_context(mode: EagerMode):
    """``with torch.tpu.set_eager_mode(mode):`` runs the block in ``mode`` and restores the old one."""
    previous = _State.mode
    set_mode(mode)
    try:
        yield
    finally:
        from .. import sync

        sync()
        set_mode(previous)


def launch_blocking() -> bool:
    return _State.launch_blocking


def _init_from_environment() -> None:
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING", "0") not in ("", "0"):
        set_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") not in ("", "0"):
        set_mode(EagerMode.DEFER_AND_FUSE)


_init_from_environment()
