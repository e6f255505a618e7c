"""Shared fixtures. ``eager_mode`` runs a test once per eager execution mode (strict and fused)."""
import os
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every module call the eager modes replay (eager/module_replay.py) also runs its Python, and the two must agree
# (ReplayMismatch otherwise): a guard that misses a change fails the test that made it
os.environ.setdefault("TORCH_TPU_REPLAY_VERIFY", "1")

# XLA:CPU spends most of a cold suite compiling thousands of tiny programs. Leaving XNNPACK out (Eigen runs
# the dots and convolutions) changes how XLA builds a program, not what it computes, and cuts a tiny
# program's compile from ~200 to ~120 ms here. Not used: the older LLVM IR emitters and LLVM -O0 (2-4x
# faster compiles), which change float results (var/std of float32 near its range, strict vs fused RNG).
# Set TORCH_TPU_TEST_XLA_DEFAULTS=1 to run the suite with XLA's default code generation.
_FAST_COMPILE_FLAGS = ("--xla_cpu_use_xnnpack=false",)


def _use_fast_compile_flags() -> None:
    if os.environ.get("TORCH_TPU_TEST_XLA_DEFAULTS") == "1" or os.environ.get("_TORCH_TPU_TEST_FLAGS_SET"):
        return
    os.environ["_TORCH_TPU_TEST_FLAGS_SET"] = "1"  # once per run: xdist workers and children inherit it
    current = os.environ.get("XLA_FLAGS", "")
    wanted = [f for f in _FAST_COMPILE_FLAGS if f.split("=")[0] not in current]
    if not wanted:
        return
    flags = " ".join([current, *wanted]).strip()
    # an XLA that does not know a flag aborts the process: try them once in a child first
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"], capture_output=True,
                           env={**os.environ, "XLA_FLAGS": flags}, timeout=120)
    if probe.returncode == 0:
        os.environ["XLA_FLAGS"] = flags


_use_fast_compile_flags()


_DYNAMO_WATCHED = ("automatic_dynamic_shapes", "assume_static_by_default", "recompile_limit",
                   "accumulated_recompile_limit", "suppress_errors", "capture_scalar_outputs", "disable")


@pytest.fixture(autouse=True)
def _dynamo_settings_kept():
    """A test that leaves dynamo's settings changed (an interrupt landing inside ``config.patch``'s enter,
    a test patching by hand and failing before it restores) changes how every later compiled test in its
    worker traces: automatic dynamic shapes off made a per-shape test compile statically per shape. The
    settings are put back after each test, with a warning that names what the test left behind."""
    config = sys.modules.get("torch._dynamo.config")
    before = {k: getattr(config, k) for k in _DYNAMO_WATCHED if hasattr(config, k)} if config else None
    yield
    if before is None:
        return
    left = {k: getattr(config, k) for k in before if getattr(config, k) != before[k]}
    if left:
        for k in left:
            setattr(config, k, before[k])
        import warnings

        warnings.warn(f"the test left torch._dynamo.config changed: {left} (put back to {before})", stacklevel=1)


@pytest.fixture(params=["DEFER_NEVER", "DEFER_AND_FUSE"])
def eager_mode(request):
    import torch

    import torch_tpu

    mode = torch_tpu.EagerMode[request.param]
    with torch.tpu.set_eager_mode(mode):
        yield mode


@pytest.fixture
def fresh_programs(monkeypatch, tmp_path):
    """Programs built from here on are built anew: an empty persistent cache and empty in-memory caches
    (for a test that changes a setting programs depend on, or counts what building them does)."""
    import torch_tpu

    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    torch_tpu.reset_caches()
    yield
    torch_tpu.reset_caches()


@pytest.fixture
def watchdog():
    """A test that stops making progress (its processes use no CPU for two minutes) or uses more than
    ``TORCH_TPU_TEST_CPU_BUDGET`` seconds of CPU (default 600) prints every thread's stack and ends its
    process: a hang fails loudly instead of holding the suite, and a slow machine is no hang
    (``harness/hangs.py``). Files of cases that may hang use it: ``pytestmark = pytest.mark.usefixtures("watchdog")``."""
    from tests.harness import hangs

    with hangs.watch_this_process(float(os.environ.get("TORCH_TPU_TEST_CPU_BUDGET", "600"))):
        yield


def pytest_collection_modifyitems(session, config, items):
    # with whole files per worker (--dist loadfile) and files in collection order (--no-loadscope-reorder), a
    # long file collected last kept one core busy alone at the end: the files marked slow go first
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the order within kept
    shard = os.environ.get("TORCH_TPU_TEST_SHARD")  # "i/n": every n-th case from the i-th (the TPU lane
    if shard:                                       # splits a long file over calls with a time limit)
        index, count = (int(part) for part in shard.split("/"))
        items[:] = items[index::count]
    # the TPU lane restarts a run that a compiler abort ended, from the case after the one that aborted
    start = int(os.environ.get("TORCH_TPU_TEST_FROM", "0"))
    count = int(os.environ.get("TORCH_TPU_TEST_COUNT", "0")) or len(items)
    items[:] = items[start:start + count]


def _record_outcome(**fields) -> None:
    import json

    with open(os.environ["TORCH_TPU_TEST_OUTCOMES"], "a") as out:
        out.write(json.dumps(fields) + "\n")


def pytest_runtest_logstart(nodeid, location):
    """With TORCH_TPU_TEST_OUTCOMES=FILE, each case's start and outcome (a failure's text too) are appended to
    FILE as they happen: a run that a native abort kills keeps what it learned, and the case that aborted is
    the last one started (the TPU lane reads it)."""
    if os.environ.get("TORCH_TPU_TEST_OUTCOMES"):
        _record_outcome(case=nodeid, when="start", outcome="started")


def pytest_runtest_logreport(report):
    if os.environ.get("TORCH_TPU_TEST_OUTCOMES") and (report.when == "call" or not report.passed):
        _record_outcome(case=report.nodeid, when=report.when, outcome=report.outcome,
                        text="" if report.passed else str(report.longrepr)[-4000:])


# marker -> the variable a file so marked runs with (set to "tpu" unless the environment sets it already)
_FILE_SETTINGS = {"check_lowering": "TORCH_TPU_CHECK_LOWERING", "build_for_tpu": "TORCH_TPU_BUILD_FOR"}
_set_here: set = set()


def _file_settings_for(item) -> None:
    """A file marked ``check_lowering`` runs with TORCH_TPU_CHECK_LOWERING=tpu (every program it builds, in
    this process and in its children, also lowered for a TPU), one marked ``build_for_tpu`` with
    TORCH_TPU_BUILD_FOR=tpu (every program built as for a TPU and run here, Pallas kernels interpreted), unless
    the variable is set already (=0 runs it without): CI's TPU lanes, inside the main run, so each of those
    files runs once instead of twice. The in-memory program caches, whose keys do not hold these settings, are
    emptied at each switch: a program built without the setting earlier in this worker (another file,
    collection) is built again with it, as in a process started with the variable set."""
    changed = False
    for marker, variable in _FILE_SETTINGS.items():
        wanted = item.get_closest_marker(marker) is not None and (
            variable in _set_here or variable not in os.environ)
        if wanted == (variable in _set_here):
            continue
        if wanted:
            os.environ[variable] = "tpu"
            _set_here.add(variable)
        else:
            os.environ.pop(variable, None)
            _set_here.discard(variable)
        changed = True
    tpu = sys.modules.get("torch_tpu")
    if changed and tpu is not None:
        tpu.reset_caches()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Files marked ``check_lowering`` or ``build_for_tpu`` run with that TPU setting (``_file_settings_for``).

    With TORCH_TPU_TEST_TIMES=FILE, append each test's wall seconds and the XLA compile seconds, compiles and
    disk-cache loads of this process during it (children's are in TORCH_TPU_CASE_TIMES): where the time goes."""
    _file_settings_for(item)
    out = os.environ.get("TORCH_TPU_TEST_TIMES")
    if not out:
        yield
        return
    import time

    def counters():
        tpu = sys.modules.get("torch_tpu")
        if tpu is None:
            return 0.0, 0, 0
        s = tpu.stats()
        return s["compile_seconds"], s["compiles"], s["cache_loads"]

    before, t0 = counters(), time.perf_counter()
    yield
    wall, after = time.perf_counter() - t0, counters()
    delta = [max(0, a - b) for a, b in zip(after, before)]  # a test that resets the counters undercounts
    with open(out, "a") as f:
        f.write(f"{wall:.3f}\t{delta[0]:.3f}\t{delta[1]}\t{delta[2]}\t{item.nodeid}\n")
