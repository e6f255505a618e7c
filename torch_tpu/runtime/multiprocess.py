"""JAX's multi-process runtime for one process per device (torchrun and the tpu_dist launchers).

Under torchrun every worker has RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. When the
world has more than one process (and TORCH_TPU_DIST_XLA is not 0), ``maybe_start`` (called by
``platform.jax()`` before the first backend use) joins JAX's distributed runtime: every process binds
its own device (GPU: the one its LOCAL_RANK names; TPU: per-process chip settings; CPU: its own CPU
device, with XLA's gloo-backed CPU collectives) and sees the global device list, so collectives run as
XLA programs over a mesh of the group's devices (``spmd.py``, ``distributed/``).

The runtime belongs to the process, not to a process group: it starts on first device use and stops at
exit. What can go wrong and what this module does about it:
- a peer that never starts: a message after a few seconds, and JAX aborts after the init timeout;
- a peer that dies or hangs in a collective: the collective fails after TORCH_TPU_DIST_TIMEOUT (XLA:CPU's
  collective timeout; a dead peer fails it at once), ``collective_error`` names it; at exit such a
  process skips JAX's shutdown barrier (which would wait for the dead peer, then abort) and exits 1.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys
import threading

from .. import config

_OWNER_VAR = "TORCH_TPU_DIST_OWNER_PID"


class _State:
    active = False        # this process joined JAX's distributed runtime
    reason = ""           # why not, when a multi-process job runs without it
    rank = 0
    world = 1
    local_rank = 0
    failed = False        # a collective failed in this process (peer dead, stuck or mismatched)
    uncaught = False      # the main thread died of an exception
    device_of_rank: dict = {}
    issued: list = []     # the latest collectives issued, for error reports


def environment() -> dict | None:
    """torchrun's facts about this process, or None outside a multi-process job."""
    env = os.environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env["RANK"])
    except (KeyError, ValueError):
        return None
    if world <= 1:
        return None
    return {"rank": rank, "world": world, "local_rank": int(env.get("LOCAL_RANK", "0") or 0),
            "local_world": int(env.get("LOCAL_WORLD_SIZE", str(world)) or world),
            "master_addr": env.get("MASTER_ADDR"), "master_port": env.get("MASTER_PORT")}


def active() -> bool:
    return _State.active


def rank() -> int:
    return _State.rank


def note_failure() -> None:
    """A collective of this process failed or was refused: at exit, skip JAX's shutdown barrier."""
    _State.failed = True


def why_inactive() -> str:
    return _State.reason or "this process is not part of a multi-process job (RANK/WORLD_SIZE unset or 1)"


def maybe_start(jax_mod) -> None:
    """Join JAX's distributed runtime if this is a torchrun worker of a multi-process job.

    Called once by ``platform.jax()`` after JAX's config updates and before any backend exists."""
    env = environment()
    if env is None:
        return
    settings = config.settings()
    if not settings.dist_xla:
        _State.reason = "TORCH_TPU_DIST_XLA=0"
        return
    owner = os.environ.get(_OWNER_VAR)
    if owner and owner != str(os.getpid()):
        _State.reason = "a child of a torchrun worker (only the worker itself joins the runtime)"
        return
    if (env["master_addr"] is None or env["master_port"] is None) and settings.coordinator_address is None:
        _State.reason = "MASTER_ADDR/MASTER_PORT are not set"
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        _State.reason = ("JAX was used before torch_tpu's first device use, so its distributed runtime "
                         "could not start")
        import warnings

        warnings.warn(f"tpu_dist: {_State.reason}; collectives are host-staged over gloo")
        return
    os.environ[_OWNER_VAR] = str(os.getpid())
    timeout = settings.dist_timeout_s
    _configure_for_processes(env, timeout)
    if settings.device_index is None:
        # one process per device: bind the local rank's device before anything lists devices
        os.environ["TORCH_TPU_DEVICE_INDEX"] = str(env["local_rank"])
    address = _coordinator_address(env, settings, timeout)
    waiting = threading.Timer(min(10.0, timeout), _say_waiting, (env, address))
    waiting.daemon = True
    waiting.start()
    try:
        jax_mod.distributed.initialize(
            coordinator_address=address, num_processes=env["world"], process_id=env["rank"],
            local_device_ids=_local_device_ids(env), initialization_timeout=max(int(timeout), 60),
            heartbeat_timeout_seconds=max(int(timeout), 10), shutdown_timeout_seconds=max(int(timeout), 300))
    finally:
        waiting.cancel()
    _State.active = True
    _State.rank, _State.world, _State.local_rank = env["rank"], env["world"], env["local_rank"]
    _install_exit_hooks()


def _local_device_ids(env: dict):
    """Which of this host's GPUs the process keeps (JAX's local_device_ids; no effect on CPU): the one its
    local rank names, or the only one left visible when the launcher already set CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and len([v for v in visible.split(",") if v.strip()]) == 1:
        return [0]
    return [env["local_rank"]]


def _say_waiting(env, address) -> None:
    print(f"torch_tpu: rank {env['rank']} is waiting for all {env['world']} processes to start JAX's "
          f"distributed runtime (coordinator {address}); every process of a torchrun job must use the "
          "tpu device, or set TORCH_TPU_DIST_XLA=0 to keep collectives host-staged", file=sys.stderr,
          flush=True)


def _configure_for_processes(env: dict, timeout: float) -> None:
    """What the backends read when they start: a collective timeout (CPU), chip settings (TPU)."""
    flag = "--xla_cpu_collective_timeout_seconds"
    flags = os.environ.get("XLA_FLAGS", "")
    if flag not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}={max(int(round(timeout)), 1)}".strip()
    if _tpu_host():
        _tpu_process_environment(env)


def _tpu_host() -> bool:
    if config.settings().platform not in (None, "tpu"):
        return False
    import importlib.util

    return importlib.util.find_spec("libtpu") is not None


# Chips per host -> their bounds (single-host slices; multi-host jobs bring their own TPU_* settings).
_CHIP_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}


def _tpu_process_environment(env: dict) -> None:
    """One chip per process on one TPU host (unverified here: no TPU machine was available)."""
    local_world, local_rank = env["local_world"], env["local_rank"]
    if local_world != env["world"] or local_world not in _CHIP_BOUNDS:
        return  # multi-host: the TPU VM's own settings apply
    base = 8476
    os.environ.setdefault("TPU_VISIBLE_CHIPS", str(local_rank))
    os.environ.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")
    os.environ.setdefault("TPU_PROCESS_BOUNDS", _CHIP_BOUNDS[local_world])
    os.environ.setdefault("TPU_PROCESS_ADDRESSES", ",".join(f"localhost:{base + i}" for i in range(local_world)))
    os.environ.setdefault("TPU_PROCESS_PORT", str(base + local_rank))
    os.environ.setdefault("CLOUD_TPU_TASK_ID", str(env["rank"]))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _coordinator_address(env: dict, settings, timeout: float) -> str:
    """TORCH_TPU_COORDINATOR_ADDRESS; under torchrun a port rank 0 picks and publishes in the agent's
    store; otherwise MASTER_PORT + 1."""
    if settings.coordinator_address:
        return settings.coordinator_address
    addr, port = env["master_addr"], int(env["master_port"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        import datetime

        import torch.distributed as dist

        store = dist.TCPStore(addr, port, is_master=False, timeout=datetime.timedelta(seconds=timeout))
        key = (f"torch_tpu/jax_coordinator/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
               f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
        if env["rank"] == 0:
            chosen = f"{addr}:{_free_port()}"
            store.set(key, chosen)
            return chosen
        return store.get(key).decode()
    return f"{addr}:{port + 1}"


# ------------------------------------------------------------------------------------------------
# The coordination service's key-value store: device ids of the ranks, mismatch checks.
# ------------------------------------------------------------------------------------------------
def _client():
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError(f"tpu_dist: JAX's distributed runtime is not running ({why_inactive()})")
    return client


def store():
    """The coordination service's client: its key-value store."""
    return _client()


def _timeout_ms() -> int:
    return int(config.settings().dist_timeout_s * 1000)


def device_ids(ranks, own_device_id: int) -> tuple:
    """Global device ids bound by the given global ranks (exchanged once through the KV store)."""
    known = _State.device_of_rank
    if not known:
        client = _client()
        client.key_value_set(f"torch_tpu/device/{_State.rank}", str(own_device_id))
        for r in range(_State.world):
            if r == _State.rank:
                known[r] = own_device_id
            else:
                known[r] = int(client.blocking_key_value_get(f"torch_tpu/device/{r}", _timeout_ms()))
    return tuple(known[r] for r in ranks)


def ranks_of(device_ids) -> list:
    """The global ranks bound to these device ids (as known from ``device_ids``), else the ids."""
    rank_of = {d: r for r, d in _State.device_of_rank.items()}
    return [rank_of.get(d, d) for d in device_ids]


def check_same_collective(group_key: str, seq: int, members, description: str) -> None:
    """Debug check (TORCH_DISTRIBUTED_DEBUG=DETAIL): every member runs the same collective #seq."""
    client = _client()
    client.key_value_set(f"torch_tpu/check/{group_key}/{seq}/{_State.rank}", description)
    seen = {}
    for r in members:
        seen[r] = description if r == _State.rank else client.blocking_key_value_get(
            f"torch_tpu/check/{group_key}/{seq}/{r}", _timeout_ms())
    if len(set(seen.values())) > 1:  # every member sees it before issuing anything: they stay in step
        runs = "; ".join(f"rank {r} runs {d}" for r, d in seen.items())
        raise RuntimeError(f"tpu_dist: mismatched collective #{seq} on ranks {list(members)}: {runs}")


# ------------------------------------------------------------------------------------------------
# Errors and exit.
# ------------------------------------------------------------------------------------------------
_MARKERS = ("gloo", "collective", "timed out", "connection", "nccl", "deadline_exceeded", "peer")


def note_issued(description: str) -> None:
    issued = _State.issued
    issued.append(description)
    if len(issued) > 8:
        del issued[0]


def is_collective_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return _State.active and any(m in text for m in _MARKERS)


def collective_error(exc: BaseException, what: str = "") -> BaseException:
    """A runtime error of a collective program, named: which collective(s), which rank, why likely."""
    if not is_collective_failure(exc):
        return exc
    _State.failed = True
    recent = ", ".join(_State.issued[-4:]) or "none"
    head = f"tpu_dist: {what} failed" if what else "tpu_dist: a collective failed"
    return RuntimeError(
        f"{head} on rank {_State.rank} of {_State.world} (a peer process exited or is stuck, or the ranks "
        f"ran different collectives; TORCH_TPU_DIST_TIMEOUT={config.settings().dist_timeout_s:g}s; "
        f"TORCH_DISTRIBUTED_DEBUG=DETAIL checks that every rank runs the same collectives). "
        f"Latest collectives issued here: {recent}. {type(exc).__name__}: {exc}")


def _install_exit_hooks() -> None:
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        _State.uncaught = True
        previous(kind, value, tb)

    sys.excepthook = excepthook
    # atexit runs last-registered first: this runs before JAX's own clean-up (registered at import)
    atexit.register(_at_exit)


def _at_exit() -> None:
    """After a failed collective or an uncaught exception, skip JAX's shutdown barrier: it would wait
    for a dead or stuck peer and then abort. The peers see this process go at once and fail fast."""
    if _State.failed or _State.uncaught:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(1)
