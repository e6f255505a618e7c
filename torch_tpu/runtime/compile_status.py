"""A live status line while an XLA compilation takes long, so a cold first step that sits still says why.

``with compiling(name):`` wraps every XLA compilation (``program_cache._compile_and_keep``, on the caller's
thread or a compile thread). A ticker thread looks at the compilations running; one still running after
``TORCH_TPU_COMPILE_STATUS_AFTER`` seconds (default 1) is announced on stderr, and its end too:

    torch_tpu: compiling FluxTransformer2DModel (fused graph) with XLA ... (1.0 s so far)
    torch_tpu: compiled FluxTransformer2DModel (fused graph) in 5.3 s

A model's first call may instead build many programs of a fraction of a second each (strict eager: one per
op and shapes), none announced, adding up to seconds. So compilations are also summed per stage, the
outermost ``nn.Module`` on the stack of the code that asked for the program (the code outside modules:
its function, ``FlowMatchEulerDiscreteScheduler.step``): once a stage's programs have taken the threshold
in all, a running count is announced (again as its time doubles), and when the stage has gone quiet, its total:

    torch_tpu: compiling CLIPTextModel with XLA: 14 programs so far, 1.0 s
    torch_tpu: compiled 59 programs for CLIPTextModel (2.7 s of XLA compilation)

(seconds of compilation summed over the compile threads).

``TORCH_TPU_COMPILE_STATUS``: auto (default: when stderr is a terminal), 1, 0; ``python -m torch_tpu
generate`` turns it on, ``--quiet`` off. Short compilations print nothing.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import sys
import threading
import time

from .. import config
from . import device_trace

__all__ = ["close_stages", "compiling", "enabled", "stage"]

_LOCK = threading.Lock()
_RUNNING: dict = {}  # id -> [name, start, announced]
_IDS = itertools.count()
_TICKER = None
_TICK_S = 0.1


def enabled() -> bool:
    mode = config.settings().compile_status
    if mode == "auto":
        try:
            return sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(mode)


def _say(text: str) -> None:
    line = f"torch_tpu: {text}"
    try:
        bars = sys.modules.get("tqdm")  # a progress bar being drawn (diffusers' steps): tqdm clears it and
        if bars is not None and getattr(bars.tqdm, "_instances", None):  # draws it again below the line
            bars.tqdm.write(line, file=sys.stderr)
            return
        print(line, file=sys.stderr, flush=True)
    except (ValueError, OSError):  # a closed stderr: nothing to tell
        pass


def _tick() -> None:
    while True:
        time.sleep(_TICK_S)
        after = config.settings().compile_status_after_s
        now = time.perf_counter()
        with _LOCK:
            due = [c for c in _RUNNING.values() if not c[2] and now - c[1] >= after]
            for c in due:
                c[2] = True
            quiet = _closing(lambda st: now - st.last >= _QUIET_S)
        for name, start, _ in due:
            _say(f"compiling {name} with XLA ... ({now - start:.1f} s so far)")
        _say_closed(quiet)


class _Stage:
    """The compilations asked for by one stage (see the module's doc)."""

    __slots__ = ("count", "seconds", "running", "last", "next_report", "announced")

    def __init__(self, after: float):
        self.count = 0
        self.seconds = 0.0
        self.running = 0
        self.last = time.perf_counter()
        self.next_report = after
        self.announced = False


_STAGES: dict = {}  # stage name -> _Stage (under _LOCK)
_QUIET_S = 1.0  # a stage announced and compiling nothing for this long is over: its total is said


def stage():
    """The stage asking for a program now (this thread's stack): the class of the outermost ``nn.Module``
    whose method is running (``AutoencoderKL`` for ``vae.decode``), else the innermost function outside
    torch, torch_tpu and JAX; None while the status is off (no stack is walked)."""
    if not enabled():
        return None
    import torch

    frame = sys._getframe(1)
    module = user = None
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            this = frame.f_locals.get("self")
            if isinstance(this, torch.nn.Module):
                module = this
        if user is None and not code.co_filename.startswith(_libraries()):
            user = code.co_qualname
        frame = frame.f_back
    return type(module).__name__ if module is not None else user


@functools.lru_cache(maxsize=None)
def _libraries() -> tuple:
    """Folders whose functions are no stage: torch_tpu, torch, JAX, Python's threading."""
    import jax
    import torch

    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torch_tpu/
    folders = [ours + os.sep] + [os.path.dirname(m.__file__) + os.sep for m in (torch, jax)]
    return (*folders, threading.__file__, "<frozen ", "<string>")


def _closing(over) -> list:
    """The announced stages ``over(stage)`` says are over (none of their compilations running), removed."""
    done = [(name, st) for name, st in _STAGES.items() if st.announced and not st.running and over(st)]
    for name, _ in done:
        del _STAGES[name]
    return done


def _say_closed(done: list) -> None:
    for name, st in done:
        _say(f"compiled {st.count} programs for {name} ({st.seconds:.1f} s of XLA compilation)")


def close_stages() -> None:
    """Say the totals of the announced stages that compile nothing now (a program's end: at exit, and
    ``python -m torch_tpu generate`` after the pipeline call)."""
    with _LOCK:
        done = _closing(lambda st: True)
    _say_closed(done)


def _stage_began(name) -> list:
    """A compilation of stage ``name`` begins (under _LOCK): the other announced stages that compile
    nothing now are over (returned: said by the caller outside the lock)."""
    st = _STAGES.get(name)
    if st is None:
        st = _STAGES[name] = _Stage(config.settings().compile_status_after_s)
    st.running += 1
    return _closing(lambda other: other is not st)


def _stage_ended(name, took: float):
    """A compilation of stage ``name`` ended (under _LOCK); the running line to say, if it is due."""
    st = _STAGES.get(name)
    if st is None:
        return None
    st.running -= 1
    st.count += 1
    st.seconds += took
    st.last = time.perf_counter()
    if st.count < 2 or st.seconds < st.next_report:  # (one program alone: its own line says it)
        return None
    st.announced = True
    st.next_report = 2 * st.seconds
    return f"compiling {name} with XLA: {st.count} programs so far, {st.seconds:.1f} s"


@contextlib.contextmanager
def compiling(name: str, stage_name=None):
    """Announce ``name``'s compilation if it runs past the threshold (and then its end), and count it in
    ``stage_name``'s (``stage()``, found on the thread that asked for the program); a recording
    ``torch_tpu.profile`` gets its span."""
    global _TICKER
    began = time.perf_counter()
    if not enabled():
        try:
            yield
        finally:
            _record(name, began)
        return
    key = next(_IDS)
    entry = [name, began, False]
    with _LOCK:
        _RUNNING[key] = entry
        over = _stage_began(stage_name) if stage_name is not None else []
        if _TICKER is None:
            _TICKER = threading.Thread(target=_tick, name="torch_tpu-compile-status", daemon=True)
            _TICKER.start()
            atexit.register(close_stages)
    _say_closed(over)
    try:
        yield
    finally:
        took = time.perf_counter() - began
        with _LOCK:
            del _RUNNING[key]
            running_line = _stage_ended(stage_name, took) if stage_name is not None else None
        if entry[2] or took >= config.settings().compile_status_after_s:  # (also when the ticker was late)
            _say(f"compiled {name} in {took:.1f} s")
        if running_line:
            _say(running_line)
        _record(name, began)


def _record(name: str, began: float) -> None:
    rec = device_trace.current()
    if rec is not None:
        rec.compiled(name, began, time.perf_counter())
