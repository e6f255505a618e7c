"""The one cache of compiled XLA programs, shared by every executor.

In memory: a dict from a structural key (op or graph, input shapes and dtypes, static arguments) to
a compiled executable. On disk: JAX's persistent compilation cache (configured in
``platform.py``; TORCH_TPU_CACHE_DIR sets its folder, '' turns it off).
"""
from __future__ import annotations

from typing import Any, Callable

from .. import config
from . import caches, compile_log, counters, platform


def max_programs() -> int:
    return config.settings().max_cached_programs


_PROGRAMS: dict[Any, Any] = caches.register("programs", caches.Bounded(max_programs))
_counters = counters.counters


class _Launched:
    # one output of the program launched last. PJRT runs a device's programs in launch order (the CPU
    # client makes each execution wait for the previous one, GPU and TPU use one compute stream), so
    # once it is ready, everything launched before it has run, also programs whose results were dropped.
    last = None


def note_launch(outputs) -> None:
    """Called after launching a program with its outputs (a sequence of arrays, or one array)."""
    if type(outputs) in (list, tuple):
        if outputs:
            _Launched.last = outputs[0]
    elif outputs is not None:
        _Launched.last = outputs


def last_launched():
    """One output of the program launched last (None before the first)."""
    return _Launched.last


def wait_for_launched() -> None:
    """Block until every program launched so far has finished (their results may be gone)."""
    last = _Launched.last
    if last is not None and not last.is_deleted():  # a donated buffer: a later launch consumed it
        last.block_until_ready()


def lookup(key):
    prog = _PROGRAMS.get(key)
    if prog is not None:
        _counters["cache_hits"] += 1
    return prog


def store(key, prog) -> None:
    """Cache a program compiled elsewhere (SPMD programs over several processes' devices)."""
    _PROGRAMS[key] = prog


def compile_program(key, fn: Callable, example_args: tuple, device=None, donate: tuple = ()):
    """Trace ``fn`` for ``example_args`` (arrays or ShapeDtypeStructs), compile it and cache it."""
    jax = platform.jax()
    _counters["cache_misses"] += 1
    kwargs = {}
    if device is not None:
        kwargs["out_shardings"] = jax.sharding.SingleDeviceSharding(device)
    if donate:
        kwargs["donate_argnums"] = donate
    # A jitted function (not a lowered/compiled stage): its call path is JAX's C++ fast path.
    # It compiles now, for the example arguments, so failures surface here with the op's name.
    fn, name = compile_log.named(fn, key)  # traces and logs show the aten op / module / graph
    prog = jax.jit(fn, **kwargs)
    token = compile_log.start()
    with platform.X64():  # traced and compiled in JAX's 64-bit mode, like every call of it
        if device is not None and not example_args:
            with jax.default_device(device):
                prog.lower().compile()
        else:
            prog.lower(*example_args).compile()
    compile_log.done(token, key, name, example_args)
    _PROGRAMS[key] = prog
    return prog
