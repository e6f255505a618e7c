"""Every ``TORCH_TPU_*`` setting, declared once, parsed in one place.

``settings()`` returns the parsed values of the current environment. It re-parses only when one of the
variables changed (a test or launcher may set them after import), so callers never read ``os.environ``
themselves. A malformed value raises ``ConfigError`` naming the variable, the bad value and what it
accepts; ``import torch`` itself never fails because of one (see ``_registration``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable


class ConfigError(ValueError):
    pass


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError("expected 1/0 (or true/false, yes/no, on/off)")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        return value

    return parse


def _positive_seconds(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("expected a number of seconds") from None
    if not value > 0:
        raise ValueError("expected a positive number of seconds")
    return value


_PLATFORMS = {"gpu": "cuda", "cuda": "cuda", "tpu": "tpu", "cpu": "cpu"}


def _platform(text: str) -> str | None:
    value = text.strip().lower()
    if not value:
        return None
    if value not in _PLATFORMS:
        raise ValueError("expected one of cpu, gpu, tpu")
    return _PLATFORMS[value]


def _tpu_or_off(text: str) -> str | None:
    value = text.strip().lower()
    if value in ("", "0", "off", "no", "false"):
        return None
    if value != "tpu":
        raise ValueError("expected tpu (or empty/0: off)")
    return value


def _f32_math(text: str) -> str:
    value = text.strip().lower() or "auto"
    if value not in ("auto", "precise", "native"):
        raise ValueError("expected auto, precise or native")
    return value


def _text(text: str) -> str:
    return text


def _on_off_auto(text: str):
    return "auto" if text.strip().lower() == "auto" else _flag(text)


def _name_set(allowed: tuple, what: str) -> Callable[[str], frozenset]:
    """A parser of a comma list of ``allowed`` names (1/all: every one; 0/off/none or empty: none)."""
    def parse(text: str) -> frozenset:
        names = {t.strip().lower() for t in text.replace(";", ",").split(",") if t.strip()}
        if names & {"1", "true", "yes", "on", "all"}:
            return frozenset(allowed)
        if names & {"0", "false", "no", "off", "none"} and len(names) == 1:
            return frozenset()
        unknown = names - set(allowed)
        if unknown:
            raise ValueError(f"unknown {what} {sorted(unknown)}; expected a comma list of "
                             f"{', '.join(allowed)} (or 1/all, 0/none)")
        return frozenset(names)

    return parse


_LOG_TOPICS = ("compiles",)
_log_topics = _name_set(_LOG_TOPICS, "log topic(s)")
SEQUENCE_MAJOR_KERNELS = ("rotary", "attention")
_kernel_names = _name_set(SEQUENCE_MAJOR_KERNELS, "kernel(s)")


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str                      # the environment variable
    field: str                     # the attribute of Settings
    parse: Callable[[str], Any]
    default: Any                   # the value when the variable is unset
    doc: str


# The eager modes by the short names ``python -m torch_tpu generate --mode`` takes, which
# ``torch.tpu.eager_mode = "fused"`` and ``set_eager_mode("debug")`` take too (beside ``EagerMode``'s own names).
# Here (no torch import) so that the command line can list them before anything heavy loads.
EAGER_MODE_NAMES = {"eager": "DEFER_NEVER", "debug": "DEFER_NEVER_AND_LAUNCH_BLOCKING", "fused": "DEFER_AND_FUSE"}

VARIABLES = (
    Variable("TORCH_TPU_PLATFORM", "platform", _platform, None,
             "force a PJRT platform: cpu, gpu or tpu (default: TPU if usable, else CUDA GPU, else CPU)"),
    Variable("TORCH_TPU_DEVICE_INDEX", "device_index", _int_at_least(0), None,
             "which local device this process binds as tpu:0 (set from LOCAL_RANK by tpu_dist)"),
    Variable("TORCH_TPU_LAUNCH_BLOCKING", "launch_blocking", _flag, False,
             "start in DEFER_NEVER_AND_LAUNCH_BLOCKING: wait after every op"),
    Variable("TORCH_TPU_DEFER_AND_FUSE", "defer_and_fuse", _flag, False,
             "start in DEFER_AND_FUSE (fused eager)"),
    Variable("TORCH_TPU_MODULE_REPLAY", "module_replay", _flag, True,
             "eager modes record a repeated block's call once as one program and run that program on later "
             "calls while what the call depended on holds (0: every call runs its Python)"),
    Variable("TORCH_TPU_REPLAY_VERIFY", "replay_verify", _flag, False,
             "each replayed module call also runs its Python and raises ReplayMismatch where the two differ "
             "(for tests and debugging)"),
    Variable("TORCH_TPU_FUSED_MAX_NODES", "fused_max_nodes", _int_at_least(1), 2000,
             "flush a fused graph once it holds this many ops"),
    Variable("TORCH_TPU_FUSED_DONATE_INPLACE", "fused_donate_inplace", _flag, False,
             "fused graphs reuse the buffers of values replaced in place (less memory; a graph that fails "
             "while running then loses those values instead of undoing the writes)"),
    Variable("TORCH_TPU_COMPILE_THREADS", "compile_threads", _int_at_least(0), None,
             "threads that compile new programs in the background (fused graphs, strict ops' programs) while "
             "the program goes on (default: one per core but one, at least 1, at most 8); 0: compile on the "
             "calling thread"),
    Variable("TORCH_TPU_MAX_CACHED_PROGRAMS", "max_cached_programs", _int_at_least(16), 4096,
             "in-memory program and op-entry caches forget their oldest quarter beyond this many"),
    Variable("TORCH_TPU_CHECKS", "checks", _flag, True,
             "compute validity checks on the device (indices in range ...) and raise at the next wait; "
             "0 turns them off (out-of-range indices are then clamped or dropped by XLA)"),
    Variable("TORCH_TPU_CHECK_LOWERING", "check_lowering", _tpu_or_off, None,
             "'tpu': every program built is also lowered for a TPU (jax.export, the choices made for a TPU, "
             "Pallas kernels included) on whatever platform runs; a failure raises naming the op or graph"),
    Variable("TORCH_TPU_BUILD_FOR", "build_for", _tpu_or_off, None,
             "'tpu': every program is built as for a TPU (the TPU's choices of lowering; Pallas kernels in JAX's "
             "TPU interpret mode) and run on whatever platform runs: how CI executes the TPU's lowerings and "
             "compares them with CPU torch without a TPU"),
    Variable("TORCH_TPU_F32_MATH", "f32_math", _f32_math, "auto",
             "float32 log/tanh and the ops built from them: auto (precise versions where XLA's are coarser "
             "than CPU torch's: TPU), precise (everywhere), native (XLA's own)"),
    Variable("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "sequence_major_kernels", _kernel_names,
             frozenset(SEQUENCE_MAJOR_KERNELS),
             "for programs built for a TPU: Pallas kernels over diffusers' sequence-major layout, a comma list "
             "of 'rotary' (FLUX's rotary embedding, with the RMSNorm before it in compiled graphs, without "
             "XLA's [..., 64, 2] pairs, ops/rotary_kernel.py) and 'attention' (flash attention reading (batch, "
             "length, heads x head_dim) without permutes, ops/attention_kernel.py); both by default (FLUX.1-width "
             "compiled call 67.0 -> 61.4 ms on a v5e), none/0 for XLA's layouts and JAX's heads-major kernel"),
    Variable("TORCH_TPU_CPU_FALLBACK", "cpu_fallback", _flag, False,
             "run ops without a tpu lowering on the CPU (warns once per op, counted) instead of raising"),
    Variable("TORCH_TPU_KEEP_HOST_COPIES", "keep_host_copies", _flag, True,
             "a device tensor uploaded whole from a CPU tensor keeps that tensor while neither changes, so "
             "moving it back to the host (model and group offload, .to('cpu')) reads nothing from the device; 0 "
             "frees the host memory at the upload and reads every weight back"),
    Variable("TORCH_TPU_CACHE_DIR", "cache_dir", _text, None,
             "persistent compile cache folder (default ~/.cache/torch_tpu/xla-cache; empty: no disk cache)"),
    Variable("TORCH_TPU_CACHE_MAX_MB", "cache_max_mb", _int_at_least(1), 4096,
             "size bound of the persistent compile cache; least recently used entries go first"),
    Variable("TORCH_TPU_DIST_TIMEOUT", "dist_timeout_s", _positive_seconds, 60.0,
             "seconds a tpu_dist collective waits for its peers"),
    Variable("TORCH_TPU_DIST_XLA", "dist_xla", _flag, True,
             "under torchrun (RANK, WORLD_SIZE > 1, MASTER_ADDR, MASTER_PORT set) start JAX's distributed "
             "runtime on first device use and run tpu_dist collectives as XLA programs; 0: host-staged "
             "over gloo"),
    Variable("TORCH_TPU_COORDINATOR_ADDRESS", "coordinator_address", _text, None,
             "host:port of JAX's distributed coordinator (default: agreed through torchrun's store, "
             "else MASTER_ADDR:MASTER_PORT+1)"),
    Variable("TORCH_TPU_TINY_PIPELINES_DIR", "tiny_pipelines_dir", _text, None,
             "where the offline tiny pipelines are built (default ~/.cache/torch_tpu/tiny-pipelines)"),
    Variable("TORCH_TPU_LOG", "log", _log_topics, frozenset(),
             "log topics to stderr: 'compiles' (one line per XLA program built: name, input shapes, seconds, "
             "compiled or loaded from the disk cache, why it was new); same as TORCH_LOGS=torch_tpu"),
    Variable("TORCH_TPU_COMPILE_STATUS", "compile_status", _on_off_auto, "auto",
             "a status line on stderr while an XLA compilation takes longer than TORCH_TPU_COMPILE_STATUS_AFTER "
             "(1/0, or auto: when stderr is a terminal)"),
    Variable("TORCH_TPU_COMPILE_STATUS_AFTER", "compile_status_after_s", _positive_seconds, 1.0,
             "seconds a compilation runs before TORCH_TPU_COMPILE_STATUS announces it"),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    platform: str | None
    device_index: int | None
    launch_blocking: bool
    defer_and_fuse: bool
    module_replay: bool
    replay_verify: bool
    fused_max_nodes: int
    fused_donate_inplace: bool
    compile_threads: int | None
    max_cached_programs: int
    checks: bool
    check_lowering: str | None
    build_for: str | None
    f32_math: str
    sequence_major_kernels: frozenset
    cpu_fallback: bool
    keep_host_copies: bool
    cache_dir: str | None
    cache_max_mb: int
    dist_timeout_s: float
    dist_xla: bool
    coordinator_address: str | None
    tiny_pipelines_dir: str | None
    log: frozenset
    compile_status: Any
    compile_status_after_s: float


_NAMES = tuple(v.name for v in VARIABLES)
_cached: tuple[tuple, Settings] | None = None


def _parse(raw: tuple) -> Settings:
    values = {}
    for var, text in zip(VARIABLES, raw):
        if text is None:
            values[var.field] = var.default
            continue
        try:
            values[var.field] = var.parse(text)
        except ValueError as exc:
            raise ConfigError(f"{var.name}={text!r}: {exc} ({var.doc})") from None
    return Settings(**values)


# os.environ keeps its values encoded in ``_data`` (CPython on POSIX): reading the encoded keys there
# skips the encoding of every name and value, for a call made many times per op on a warm first call
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_ENCODED_NAMES = tuple(os.environ.encodekey(n) for n in _NAMES) if hasattr(os.environ, "encodekey") else None


def _raw() -> tuple:
    data = _ENVIRON_DATA
    if type(data) is dict and _ENCODED_NAMES is not None and getattr(os.environ, "_data", None) is data:
        return tuple(map(data.get, _ENCODED_NAMES))
    environ = os.environ
    return tuple(environ.get(name) for name in _NAMES)


def settings() -> Settings:
    """The settings of the current environment (parsed again only when a variable changed)."""
    global _cached
    raw = _raw()
    cached = _cached
    if cached is not None and cached[0] == raw:
        return cached[1]
    parsed = _parse(tuple(os.environ.get(name) for name in _NAMES))
    _cached = (raw, parsed)
    return parsed


def in_effect() -> dict[str, str]:
    """The TORCH_TPU_* variables set in this environment (for ``python -m torch_tpu info``)."""
    return {name: os.environ[name] for name in _NAMES if name in os.environ}


def default_cache_root() -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "torch_tpu")


def compile_cache_dir() -> str | None:
    """The persistent XLA compile cache folder, or None when disabled (TORCH_TPU_CACHE_DIR='')."""
    value = settings().cache_dir
    if value is None:
        return os.path.join(default_cache_root(), "xla-cache")
    return value or None
