"""Chooses the PJRT platform and device, and configures JAX once, on first use.

JAX is imported lazily so that ``import torch`` (which autoloads this backend) stays light.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading

from .. import config

_LOCK = threading.Lock()
_FORKED = False  # this process was forked after its parent had started the XLA runtime


class ForkedProcessError(RuntimeError):
    pass


def forked() -> bool:
    return _FORKED


def runtime_started() -> bool:
    """Whether this process started JAX (or its parent had, before forking it)."""
    return _FORKED or jax.cache_info().currsize > 0


def _after_fork_in_child() -> None:
    global _FORKED
    # the parent had started JAX, or had a thread starting it (whose locks stay held here): its runtime
    # threads are gone in this process
    if jax.cache_info().currsize or _BACKGROUND:
        _FORKED = True
        jax.cache_clear()


def fork_error() -> ForkedProcessError:
    return ForkedProcessError(
        "torch_tpu: cannot use the tpu device in a forked subprocess: the parent process had already "
        "started the XLA runtime, which does not survive fork (using it would hang). Start workers with "
        "multiprocessing's 'spawn' start method (e.g. torch.multiprocessing.set_start_method('spawn') or "
        "DataLoader(multiprocessing_context='spawn')), or keep tpu work out of forked workers.")


def _configure_environment() -> None:
    # torch CUDA may share the GPU with XLA: never grab 75% of its memory up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # XLA may otherwise keep bfloat16/float16 intermediates in float32 inside a fused computation
    # ("excess precision"): results then differ from torch, which rounds every op's result to its dtype
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_allow_excess_precision" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_allow_excess_precision=false").strip()


class X64:
    """JAX's 64-bit mode for the current thread only: ``prev = X64.swap(True)`` ... ``X64.restore(prev)``
    (both are JAX's own C++ setters once JAX is loaded: about 0.1 us a pair). JAX's global
    ``jax_enable_x64`` is never changed, so user code in the same process sees JAX's default."""

    def swap(value):  # replaced by jax.enable_x64.swap_local on first device use
        jax()
        return X64.swap(value)

    def restore(prev):  # replaced by jax.enable_x64.set_local
        X64.restore(prev)

    def __init__(self):
        self.prev = None

    def __enter__(self):
        self.prev = X64.swap(True)
        return self

    def __exit__(self, *exc):
        X64.restore(self.prev)
        return False


def traced_without_x64(fn, *args):
    """``fn(*args)`` traced with JAX's 64-bit mode off, inside a program traced with it on: for what XLA:TPU
    or Mosaic cannot compile with 64-bit index arithmetic (the Pallas kernels, whose int64 indices Mosaic
    rejects; the SVD's Jacobi sweeps). Arguments and results must not be 64-bit. Pallas kernels traced here are
    interpreted where ``_pallas_interpreted`` says so."""
    prev = X64.swap(False)
    try:
        with _pallas_interpreted():
            return fn(*args)
    finally:
        X64.restore(prev)


def with_x64(fn):
    """Decorator: ``fn`` runs with JAX's 64-bit mode on for its thread (see X64)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        prev = X64.swap(True)
        try:
            return fn(*args, **kwargs)
        finally:
            X64.restore(prev)

    return wrapper


def _install_x64(jax_mod) -> None:
    state = getattr(jax_mod, "enable_x64", None)
    if state is None or not hasattr(state, "swap_local"):  # a JAX without thread-local x64: global
        jax_mod.config.update("jax_enable_x64", True)
        X64.swap = lambda value: None
        X64.restore = lambda prev: None
        return
    X64.swap = state.swap_local
    X64.restore = state.set_local


@functools.lru_cache(maxsize=None)
def jax():
    """Import and configure JAX (once; a second thread asking meanwhile waits for the first)."""
    if _FORKED:
        raise fork_error()
    with _LOCK:
        if _CONFIGURED:  # (lru_cache lets two threads in at once: the first configured it)
            return _CONFIGURED[0]
        config.settings()  # a malformed TORCH_TPU_* variable fails here, on first device use, by name
        _configure_environment()
        import jax as _jax

        # torch's int64 indices and float64 need JAX's 64-bit mode, but only while torch_tpu works:
        # every entry into JAX (dispatch, flushes, compiled graphs, transfers) switches it on for its
        # thread and back (X64), so the user's own JAX code keeps JAX's global setting.
        _install_x64(_jax)
        # JAX's own persistent compilation cache stays off: program_cache keeps every program on disk,
        # each entry checked against its key and a checksum when loaded (disk_cache.py).
        if config.compile_cache_dir():
            try:
                _jax.config.update("jax_enable_compilation_cache", False)
            except Exception:  # an old JAX without the option
                pass
        from . import compile_events, multiprocess

        compile_events.install(_jax)
        _register_fork_handler()
        # a torchrun worker joins JAX's distributed runtime now, before anything starts a backend
        multiprocess.maybe_start(_jax)
        _CONFIGURED.append(_jax)
        return _jax


_CONFIGURED: list = []    # the configured jax module, once jax() has run
_BACKGROUND: list = []    # the thread start_in_background() started (at most one per process)
_FORK_HANDLER: list = []


def _register_fork_handler() -> None:
    if not _FORK_HANDLER:
        _FORK_HANDLER.append(True)
        os.register_at_fork(after_in_child=_after_fork_in_child)


def start_in_background() -> None:
    """Start the platform on a daemon thread: import and configure JAX, open the device (~10 s for a TPU
    chip; JAX's device query is what takes it). Where a program says it will use the device before it does
    (``torch.accelerator.is_available()``, which diffusers asks while it is imported), this overlaps that
    wait with the program's own imports and loading; the first use then waits only for what is left. Then
    the same thread runs what registered with ``after_start`` (the persistent cache's prefetch, which would
    otherwise start at the first transfer). Once per process; a failure is left for the first use to raise
    again, where the caller sees it."""
    if _BACKGROUND or _FORKED or devices.cache_info().currsize:
        return
    _register_fork_handler()  # before the thread takes locks: a fork meanwhile must not inherit them held
    thread = threading.Thread(target=_start_quietly, name="torch_tpu-platform-start", daemon=True)
    _BACKGROUND.append(thread)
    thread.start()


_AFTER_START: list = []  # what the start thread runs once the device is open (``after_start``)


def after_start(fn) -> None:
    """Have the background start thread call ``fn()`` once the device is open (the persistent cache's
    prefetch registers its start: a warm process reads its programs while the program is still loading)."""
    _AFTER_START.append(fn)


def _start_quietly() -> None:
    try:
        devices()
        for fn in _AFTER_START:
            fn()
    except BaseException:  # raised again by the first use (lru_cache keeps no failure)
        pass


def _try_devices(jax_mod, platform: str):
    try:
        return jax_mod.devices(platform)
    except Exception:
        return []


@functools.lru_cache(maxsize=None)
def platform() -> str:
    """The PJRT platform in use: 'tpu', 'cuda' or 'cpu'."""
    jax_mod = jax()
    name = config.settings().platform
    if name:
        if not _try_devices(jax_mod, name):
            raise RuntimeError(
                f"TORCH_TPU_PLATFORM={name!r} was requested but JAX finds no {name} device "
                f"(installed jax {jax_mod.__version__}; for GPUs install jax[cuda], for TPUs libtpu)")
        return name
    for name in ("tpu", "cuda"):
        if _try_devices(jax_mod, name):
            return name
    return "cpu"


_TARGET = threading.local()


def target() -> str:
    """The platform the program being traced is built for: ``platform()``; 'tpu' while a TPU lowering check
    (TORCH_TPU_CHECK_LOWERING=tpu) traces it again on another platform, and for every program under
    TORCH_TPU_BUILD_FOR=tpu. Lowerings that choose by platform (attention kernels, precise float32 functions)
    read this, never ``platform()``."""
    return getattr(_TARGET, "name", None) or config.settings().build_for or platform()


def _pallas_interpreted():
    """Where Pallas TPU kernels traced now run in JAX's TPU interpret mode: programs built for a TPU
    (TORCH_TPU_BUILD_FOR=tpu) on another platform, but not a TPU lowering check's trace (``Targeting``), which
    must see the Mosaic kernels a TPU compiles."""
    if getattr(_TARGET, "name", None) is None and config.settings().build_for == "tpu" and platform() != "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.force_tpu_interpret_mode()
    return contextlib.nullcontext()


class Targeting:
    """``with Targeting("tpu"):`` traces on this thread as for that platform."""

    def __init__(self, name: str):
        self.name = name
        self.prev = None

    def __enter__(self):
        self.prev = getattr(_TARGET, "name", None)
        _TARGET.name = self.name
        return self

    def __exit__(self, *exc):
        _TARGET.name = self.prev
        return False


@functools.lru_cache(maxsize=None)
def devices():
    """The local PJRT devices of the chosen platform, in index order."""
    if _FORKED:  # (before the lock: a thread of the parent may have held it at the fork)
        raise fork_error()
    with _DEVICES_LOCK:  # one thread opens the device; another asking meanwhile waits, then reads JAX's
        return _local_devices()


_DEVICES_LOCK = threading.RLock()


def _local_devices():
    jax_mod = jax()
    plat = platform()
    devs = [d for d in jax_mod.local_devices(backend=plat)]
    if config.settings().device_index is not None and len(devs) > 1:
        # one process per device (torchrun): this process sees only its own device, as tpu:0
        idx = local_device_index()
        if not 0 <= idx < len(devs):
            raise RuntimeError(
                f"TORCH_TPU_DEVICE_INDEX={idx} (the local rank) names no device: this host has "
                f"{len(devs)} {plat} device(s); start at most {len(devs)} processes per host")
        devs = [devs[idx]]
        # programs without a placed input (factories, constants) land on this device too
        jax_mod.config.update("jax_default_device", devs[0])
    return devs


def device_count() -> int:
    return len(devices())


def local_device_index() -> int:
    """The device this process binds: 0, or the local rank under a multi-process launcher."""
    index = config.settings().device_index
    return 0 if index is None else index


def jax_device(index: int | None = None):
    devs = devices()
    idx = 0 if index is None else index
    if idx < 0 or idx >= len(devs):
        raise RuntimeError(
            f"tpu:{idx} does not exist: this process sees {len(devs)} {platform()} device(s)")
    return devs[idx]


def device_name(index: int | None = None) -> str:
    dev = jax_device(index)
    plat = platform()
    if plat == "cpu":
        return "cpu (XLA)"
    kind = getattr(dev, "device_kind", "") or plat
    if plat == "tpu" and not kind.upper().startswith("TPU"):
        kind = f"TPU {kind}"
    return kind


def after_interrupt(exc: BaseException) -> None:
    """Called when ``exc`` (an interrupt, not an error) left work that may have been inside JAX: a Ctrl-C
    delivered while jaxlib's weakref LRU cache computed a miss (JAX's tracing of ``jnp.multiply`` ...) left
    that key marked as being computed, and every later trace of it raised "RecursionError: Recursively
    calling"; emptying JAX's caches clears the mark (they refill as JAX traces again)."""
    if isinstance(exc, Exception) or jax.cache_info().currsize == 0:  # (JAX never imported: nothing to do)
        return
    try:
        jax().clear_caches()
    except Exception:  # noqa: BLE001 - best effort
        pass
