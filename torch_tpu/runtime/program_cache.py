"""The one cache of compiled XLA programs, shared by every executor.

In memory: a dict from a structural key (op or graph, input shapes and dtypes, static arguments) to a
compiled executable (a ``jax.stages.Compiled``, called through JAX's C++ path).

On disk (``disk_cache``: every entry holds its full key and a checksum, checked on load), every program
this backend compiles is kept twice over:
- under a digest of its lowered module (StableHLO text) plus the environment (platform, device, versions,
  XLA flags): what JAX's own persistent cache does, but verified;
- under its structural key, when that key means the same program in every process (``stable_keys``): an
  alias to the entry above, with the messages of the program's device-side checks (``ops.checks``: a
  caller learns them by tracing, and a program found by key is never traced). A warm process finds the
  executable from the key alone, without tracing, lowering or computing a module digest.
JAX's own persistent compilation cache is left off (``platform.py``): it does not check what it loads.

Why one module: every executor's programs pass through this one cache: its keys, its bound, compiling and loading
from disk keep one set of invariants, which would be spread thin over several modules.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import threading
import time
from typing import Any, Callable

from .. import config
from ..errors import OpError, out_of_memory
from . import (caches, compile_log, compile_pool, compile_status, counters, device_trace, disk_cache, platform,
               prefetch, stable_keys, tpu_lowering)


def max_programs() -> int:
    return config.settings().max_cached_programs


_PROGRAMS: dict[Any, Any] = caches.register("programs", caches.Bounded(max_programs))
_counters = counters.counters
_log = logging.getLogger("torch_tpu")


class Launched:
    """``Launched.last``: one output of the program launched last (set inline by the strict launcher's
    hot path, else by ``note_launch``)."""
    # PJRT runs a device's programs in launch order (the CPU
    # client makes each execution wait for the previous one, GPU and TPU use one compute stream), so
    # once it is ready, everything launched before it has run, also programs whose results were dropped.
    last = None


def note_launch(outputs, prog=None) -> None:
    """Called after launching ``prog`` with its outputs (a sequence of arrays, or one array)."""
    if device_trace.ACTIVE[0] is not None:  # torch_tpu.profile is recording
        device_trace.launched(prog if prog is not None else "program", outputs)
    if type(outputs) in (list, tuple):
        if outputs:
            Launched.last = outputs[0]
    elif outputs is not None:
        Launched.last = outputs


def last_launched():
    """One output of the program launched last (None before the first)."""
    return Launched.last


def wait_for_launched() -> None:
    """Block until every program launched so far has finished (their results may be gone)."""
    last = Launched.last
    if last is not None and not last.is_deleted():  # a donated buffer: a later launch consumed it
        last.block_until_ready()


def lookup(key):
    prog = _PROGRAMS.get(key)
    if prog is not None:
        _counters["cache_hits"] += 1
    return prog


def discard(key, device=None, donate: tuple = ()) -> None:
    """Forget the program of ``key`` in memory and its alias on disk (it returned other shapes than its
    callers expect: the next use traces and compiles it again)."""
    _PROGRAMS.pop(key, None)
    counters.add("cache_rejects", 1)
    alias = structural_disk_key(key, device, donate) if disk_cache.enabled() else None
    if alias is not None:
        disk_cache.flush_writes(30.0)  # (the alias of a program compiled just now may not be written yet)
        disk_cache.forget(alias)


def store(key, prog) -> None:
    """Cache a program compiled elsewhere (SPMD programs over several processes' devices)."""
    _PROGRAMS[key] = prog


def _where(device, donate: tuple) -> str:
    return f"|device={'-' if device is None else device.id}|donate={tuple(donate)!r}"


def structural_disk_key(key, device=None, donate: tuple = ()) -> str | None:
    """The disk key of a program found by its structural key (None: the key is not persistent)."""
    text = stable_keys.text(key)
    if text is None:
        return None
    return "program-by-key\n" + text + _where(device, donate) + "\n" + stable_keys.environment(True)


def _module_disk_key(lowered, text: str, device, donate: tuple) -> str:
    """The key of ``lowered``, whose module is ``text``. The module's text does not say everything: JAX drops
    unused arguments from it, so two programs with one module can take different argument lists. Their
    avals, weak types, donation and pytree structure (``args_info``, ``out_tree``) are part of the key."""
    h = hashlib.sha256(text.encode())
    h.update(f"\nargs={lowered.args_info!r}\nout={lowered.out_tree!r}".encode())
    return "program-by-module\n" + h.hexdigest() + _where(device, donate) + "\n" + stable_keys.environment(False)


def _serialize(compiled) -> bytes | None:
    from jax.experimental import serialize_executable

    try:
        return pickle.dumps(serialize_executable.serialize(compiled), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # e.g. a program with host callbacks: it just is not kept on disk
        _log.debug("torch_tpu: program not kept on disk: %r", exc)
        return None


@functools.lru_cache(maxsize=None)
def _initialize_cpu_kernels() -> None:
    """jaxlib fills in its LAPACK kernels' function pointers (the CPU custom calls of lu, cholesky,
    triangular_solve, eigh, svd, qr) only while it *lowers* a linear algebra primitive: an executable loaded
    from disk in a process that lowered none of them crashed (SIGSEGV) when run. Initialize them first."""
    try:
        from jax._src.lax import linalg as jax_linalg

        jax_linalg.initialize_lapack()
    except Exception as exc:  # another jaxlib layout: nothing to do, or nothing we can do
        _log.debug("torch_tpu: could not initialize jaxlib's LAPACK kernels: %r", exc)


def _load_module_entry(disk_key: str):
    payload = disk_cache.load(disk_key)
    if payload is None:
        return None
    from jax.experimental import serialize_executable

    _initialize_cpu_kernels()

    t0 = time.perf_counter()
    try:
        serialized, in_tree, out_tree = pickle.loads(payload)
        prog = serialize_executable.deserialize_and_load(serialized, in_tree, out_tree,
                                                         backend=platform.jax_device().client)
    except Exception as exc:  # verified bytes that this runtime cannot load: rebuild
        counters.add("cache_rejects", 1)
        _log.warning("torch_tpu: could not load a persistent cache entry (%r); rebuilding it", exc)
        disk_cache.forget(disk_key)
        return None
    counters.add("cache_loads", 1)
    counters.add("cache_load_seconds", time.perf_counter() - t0)
    return prog


def _alias_payload(module_key: str, checks) -> bytes:
    return json.dumps({"module": module_key, "checks": list(checks)}).encode()


def _load_alias(alias: str):
    """(program, its device-check messages) stored under a structural disk key, or None."""
    raw = disk_cache.load(alias)
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
        target, checks = entry["module"], tuple(entry["checks"])
        if type(target) is not str or not all(type(m) is str for m in checks):
            raise TypeError("not an alias")
    except (ValueError, KeyError, TypeError):  # verified bytes we cannot read: rebuild
        counters.add("cache_rejects", 1)
        disk_cache.forget(alias)
        return None
    prog = _load_module_entry(target)
    if prog is None:
        disk_cache.forget(alias)
        return None
    return prog, checks


def load_by_key(key, device=None, donate: tuple = ()):
    """(program, its device-check messages, "prefetched" or "loaded") of a persistent structural key from
    disk (no tracing), or None."""
    alias = structural_disk_key(key, device, donate)
    if alias is None:
        return None
    prefetch.seen(alias)
    found = prefetch.take(alias)
    if found is not None:
        return found[0], found[1], "prefetched"
    found = _load_alias(alias)
    return None if found is None else (found[0], found[1], "loaded")


def _usable(found, checks) -> bool:
    """Whether a program found by key can serve a caller that passed ``checks`` (see compile_program);
    fills ``checks`` from it."""
    stored = found[1]
    if checks is None:
        return not stored  # this caller learns checks by tracing only
    if checks and tuple(checks) != stored:
        return False  # the caller knows other checks (from an op description): trace it again
    if not checks:
        checks.extend(stored)
    return True


def compile_program(key, fn: Callable, example_args: tuple, device=None, donate: tuple = (), checks=None,
                    background: bool = False):
    """The program of ``fn`` for ``example_args`` (arrays, ShapeDtypeStructs or Python numbers): from
    memory, from disk, or traced and compiled now (so failures surface here, with the op's name).

    ``checks`` says how the caller learns the program's device-side checks: None, by tracing ``fn`` only
    (a program holding checks is then found by its module, traced in every process); or a list of their
    messages, which tracing ``fn`` fills (or the caller already knows): they are kept with the program's
    key, and a program found by key fills an empty list (one that holds other messages is not used).

    ``background``: when XLA has to compile, do that on a compile thread (``compile_pool``) and return a
    ``Future`` of the program (tracing and lowering errors still raise here); ``in_flight(key)`` finds it
    meanwhile."""
    jax = platform.jax()
    _counters["cache_misses"] += 1
    disk = disk_cache.enabled()
    if disk and not prefetch.started():
        prefetch.start_early()
    if disk:
        token = compile_log.start()
        found = load_by_key(key, device, donate)
        if found is not None and _usable(found, checks):
            prog = _PROGRAMS[key] = found[0]
            name = compile_log.program_name(fn, key)
            device_trace.remember(prog, name)
            compile_log.done(token, key, name, example_args, found[2])
            return prog
    kwargs = {}
    if device is not None:
        kwargs["out_shardings"] = jax.sharding.SingleDeviceSharding(device)
    if donate:
        kwargs["donate_argnums"] = donate
    fn, name = compile_log.named(fn, key)  # traces and logs show the aten op / module / graph
    if tpu_lowering.enabled():
        # before this platform's own lowering: on a TPU that lowering fails first, with Mosaic's error
        # instead of the check's, which names the program (and tracing again counts the program's device
        # checks again: counted from here on)
        tpu_lowering.check(fn, example_args, name)
    jitted = jax.jit(fn, **kwargs)
    token = compile_log.start()
    checks_before = _counters["device_checks_traced"]
    module_key = None
    with platform.X64():  # traced and compiled in JAX's 64-bit mode, like every call of it
        try:
            if device is not None and not example_args:
                with jax.default_device(device):
                    lowered = jitted.lower()
            else:
                lowered = jitted.lower(*example_args)
        except BaseException as exc:  # (compiled graphs trace here, outside the dispatcher)
            platform.after_interrupt(exc)
            raise
        # the module's text: its disk key, and on a TPU what is scanned before XLA:TPU compiles it
        on_tpu = platform.platform() == "tpu"
        text = lowered.as_text() if disk or on_tpu else None
        if disk:
            module_key = _module_disk_key(lowered, text, device, donate)
    # a caller that learns checks by tracing only finds a program with checks by its module (a program
    # found by key alone is never traced); the others find it by key, with the checks' messages
    alias = None
    if disk and (checks is not None or _counters["device_checks_traced"] == checks_before):
        alias = structural_disk_key(key, device, donate)
        if alias is not None:
            prefetch.seen(alias)  # (in the order this thread needs programs)
    prog, how = None, "loaded"
    if module_key is not None:
        if alias is None:
            # found by its module only (a compiled graph, a program holding checks): its module key goes in
            # the sequence a warm process reads ahead (a program with an alias is read ahead by that)
            prefetch.seen(module_key)
            prog = prefetch.take(module_key)
            how = "prefetched" if prog is not None else how
        if prog is None:
            prog = _load_module_entry(module_key)
    done = (key, module_key, alias, () if checks is None else tuple(checks), token, name, example_args,
            compile_status.stage() if prog is None else None)  # (the stage: from this thread's stack)
    if prog is None and on_tpu:
        tpu_lowering.refuse_uncompilable(text, name)
    if prog is None and background:
        with _FLIGHT_LOCK:
            future = compile_pool.submit(_compile_and_keep, lowered, done)
            if future is not None:
                _IN_FLIGHT[key] = future
                return future
    if prog is None:
        with platform.X64():
            prog = _compile_and_keep(lowered, done)
    else:
        _keep(prog, done, compiled_now=False, how=how)
    _PROGRAMS[key] = prog
    return prog


def _compile_and_keep(lowered, done):
    """XLA's compilation of ``lowered`` (on the caller's thread or a compile thread), kept on disk. Its
    failure names the program (an aten op, a fused or compiled graph); XLA running out of device memory
    while compiling (a program too large for it) is ``torch.OutOfMemoryError``, as at run time."""
    try:
        with platform.X64(), compile_status.compiling(done[5], done[7]):
            prog = lowered.compile()
    except Exception as exc:
        raise (out_of_memory(exc, f"compiling {done[5]}") or
               OpError(f"tpu: XLA could not compile {done[5]}: {type(exc).__name__}: {exc}")) from exc
    _keep(prog, done, compiled_now=True)
    return prog


def _keep(prog, done, compiled_now: bool, how: str = "loaded") -> None:
    key, module_key, alias, checks, token, name, example_args = done[:7]
    device_trace.remember(prog, name)  # the name a profile shows for its launches
    if module_key is not None and compiled_now:
        disk_cache.store(module_key, lambda compiled=prog: _serialize(compiled))
    if alias is not None:
        # written after the module entry (one writer thread, in order), and only if that entry is
        # there: some executables cannot be serialized (XLA:CPU's sort: "`LessThan` is not
        # serializable"), and an alias to nothing made every later process drop it and compile again
        payload = _alias_payload(module_key, checks)
        disk_cache.store(alias, lambda: payload if disk_cache.exists(module_key) else None)
    compile_log.done(token, key, name, example_args, "compiled" if compiled_now else how)


_IN_FLIGHT: dict = {}  # key -> Future of a program compiling on a compile thread
_FLIGHT_LOCK = threading.Lock()


def in_flight(key):
    """The program of ``key`` compiling in the background: the program once it is done (now kept in
    memory like any other), else its Future; None when none is."""
    with _FLIGHT_LOCK:
        future = _IN_FLIGHT.get(key)
        if future is None or not future.done():
            return future
        del _IN_FLIGHT[key]
    if future.exception() is not None:
        return future  # the caller gets the error from it (and the next one compiles again)
    prog = _PROGRAMS[key] = future.result()
    return prog


def find(key):
    """The program of ``key`` in memory, else the Future of it compiling (``in_flight``), else None; not
    counted as a cache hit (the caller's entry was)."""
    prog = _PROGRAMS.get(key)
    return prog if prog is not None else in_flight(key)


def wait_in_flight() -> None:
    """Wait until every program compiling in the background is compiled (and counted)."""
    with _FLIGHT_LOCK:
        futures = list(_IN_FLIGHT.values())
    for future in futures:
        future.exception()


def adopt(key, future):
    """The program of a finished ``future`` for ``key`` (waits for it; raises its compile error)."""
    try:
        prog = future.result()
    finally:
        with _FLIGHT_LOCK:
            if _IN_FLIGHT.get(key) is future:
                del _IN_FLIGHT[key]
    _PROGRAMS[key] = prog
    return prog


def _after_fork_in_child() -> None:
    _IN_FLIGHT.clear()  # their compile threads did not survive the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
prefetch.set_loader("program-by-key", _load_alias)
prefetch.set_loader("program-by-module", _load_module_entry)
stable_keys.register_kind("zeros")


def zeros(shape: tuple, jax_dtype, device):
    """A zero-filled device array (a cached program: kept on disk like every other)."""
    import numpy as np

    key = ("zeros", tuple(shape), np.dtype(jax_dtype), device.id)
    prog = lookup(key)
    if prog is None:
        jnp = platform.jax().numpy

        def fn():
            return jnp.zeros(shape, jax_dtype)

        prog = compile_program(key, fn, (), device=device)
    _counters["executions"] += 1
    try:
        return prog()
    except Exception as exc:
        oom = out_of_memory(exc, f"allocating a {list(shape)} {np.dtype(jax_dtype).name} tensor")
        if oom is None:
            raise
        raise oom from exc
