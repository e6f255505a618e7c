"""The compile log: one line per XLA program built (name, input shapes, seconds, compiled or loaded from
the persistent cache, and why it was new).

Switched on by torch's logging mechanism (``TORCH_LOGS=torch_tpu``, or
``torch._logging.set_logs(modules={"torch_tpu": logging.INFO})``) or by ``TORCH_TPU_LOG=compiles`` (a stderr
handler of its own). Off, it costs one ``isEnabledFor`` check per compile and nothing per op.
"""
from __future__ import annotations

import collections
import logging
import sys
import threading
import time

from .. import config

LOGGER_NAME = "torch_tpu.compiles"
log = logging.getLogger(LOGGER_NAME)

_SEEN_LIMIT = 20000
_seen: "collections.OrderedDict" = collections.OrderedDict()    # hash of each key compiled before
_by_name: dict = {}                                              # program name -> last input signature
_handler: logging.Handler | None = None


def _configure_from_settings() -> None:
    """TORCH_TPU_LOG=compiles: log to stderr without TORCH_LOGS (idempotent)."""
    global _handler
    if "compiles" not in config.settings().log:
        return
    if _handler is None and not log.handlers and not logging.getLogger("torch_tpu").handlers:
        # torch's logging gives "torch_tpu" a handler when it initialises after our registration
        # (import torch); else (torch_tpu imported later) the log needs one of its own
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("[torch_tpu] %(message)s"))
        log.addHandler(_handler)
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)


def enabled() -> bool:
    if log.isEnabledFor(logging.INFO):
        return True
    if config.settings().log:
        _configure_from_settings()
        return log.isEnabledFor(logging.INFO)
    return False


def _describe(a) -> str:
    if isinstance(a, (int, float, complex, bool)):
        return f"{type(a).__name__}(dynamic)"
    shape = getattr(a, "shape", None)
    dtype = getattr(a, "dtype", None)
    if shape is None:
        return type(a).__name__
    return f"{dtype}[{','.join(str(s) for s in shape)}]"


def start() -> float | None:
    """Before compiling: a token for ``done`` (None when the log is off)."""
    if not enabled():
        return None
    return time.perf_counter()


def _reason(key, name: str, signature: tuple) -> str:
    try:
        h = hash(key)
    except TypeError:
        h = None
    if h is not None and h in _seen:
        return "compiled before in this process (evicted from the in-memory cache, or caches were reset)"
    previous = _by_name.get(name)
    if previous is None:
        return f"first program named {name}"
    if previous != signature:
        changed = [f"{old} -> {new}" for old, new in zip(previous, signature) if old != new]
        if len(previous) != len(signature):
            changed.insert(0, f"{len(previous)} -> {len(signature)} inputs")
        return "new input shapes/dtypes: " + "; ".join(changed[:4]) + (" ..." if len(changed) > 4 else "")
    return "same inputs as an earlier program of this name, new static arguments or structure"


def done(token, key, name: str, example_args: tuple, how: str = "compiled") -> None:
    """After building ``name`` for ``example_args``: one log line. ``how``: "compiled" (by XLA now),
    "loaded" (read from the persistent cache now) or "prefetched" (read ahead by a background thread)."""
    if token is None:
        return
    with _lock:  # (compile threads log too)
        _done(token, key, name, example_args, how)


_lock = threading.Lock()


def _done(token, key, name: str, example_args: tuple, how: str) -> None:
    seconds = time.perf_counter() - token
    signature = tuple(_describe(a) for a in example_args)
    reason = _reason(key, name, signature)
    shown = ", ".join(signature[:6]) + (f", ... ({len(signature)} inputs)" if len(signature) > 6 else "")
    verb = {"compiled": "compiled", "loaded": "loaded from cache",
            "prefetched": "loaded from cache (read ahead)"}[how]
    log.info("%s %s in %.3fs (%s): inputs (%s)", verb, name, seconds, reason, shown)
    _by_name[name] = signature
    try:
        _seen[hash(key)] = None
        while len(_seen) > _SEEN_LIMIT:
            _seen.popitem(last=False)
    except TypeError:
        pass


def named(fn, key) -> tuple:
    """(a function to jit, its name): ``fn`` itself, or a wrapper carrying the name (no cost per call:
    jit traces it once)."""
    name = program_name(fn, key)
    if name == getattr(fn, "__name__", None):
        return fn, name

    def program(*args):
        return fn(*args)

    program.__name__ = program.__qualname__ = name
    return program, name


def program_name(fn, key) -> str:
    """The name a program gets in traces and logs: the function's own (an aten op, a fused module,
    a compiled graph), or the kind of small program its key names (view-read, convert ...)."""
    name = getattr(fn, "__name__", None) or "program"
    if isinstance(key, tuple) and len(key) > 1 and key[0] == "op" and isinstance(key[1], str):
        return key[1].replace("::", ".", 1)  # an eager op's program: aten.add.Tensor, as torch prints it
    if name in ("fn", "<lambda>", "program", "graph_fn", "trace") and isinstance(key, tuple) and key \
            and isinstance(key[0], str):
        return key[0]
    return name
