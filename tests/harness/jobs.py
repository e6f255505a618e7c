"""Multi-process jobs as torchrun starts them: ``run_ranks`` starts one plain process per rank with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port) and collects each
rank's exit status and output; ``job_env`` is the environment they share (one compile cache, the tiny
pipelines' folder, this checkout on PYTHONPATH, no rank variables of the parent's)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.harness import REPO, hangs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_rank_variables(env: dict) -> dict:
    env = dict(env)
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "TORCH_TPU_DEVICE_INDEX", "PYTEST_CURRENT_TEST"):
        env.pop(var, None)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def job_env(tmp_path_factory):
    env = without_rank_variables(os.environ)
    # share one compile cache across the children (and with the rest of the suite when set)
    from torch_tpu import config

    env["TORCH_TPU_CACHE_DIR"] = config.compile_cache_dir() or str(tmp_path_factory.mktemp("xla-cache"))
    env.setdefault("TINY_ROOT", os.environ.get("TORCH_TPU_TINY_PIPELINES_DIR")
                   or str(tmp_path_factory.mktemp("pipes")))
    env["HF_HUB_OFFLINE"] = "1"
    return env


def run_ranks(argv: list[str], env: dict, nproc: int = 2, timeout: float = 150, extra: dict | None = None,
              rank0_only: bool = False) -> list[tuple[int | None, str, float]]:
    """Run ``python argv...`` as ``nproc`` ranks; return [(exit status, stdout and stderr, seconds)] per rank
    (status None: the rank was taken for hung, ``hangs.Progress`` with twice ``timeout`` seconds of CPU, and
    killed). ``rank0_only``: wait for
    rank 0 alone (the others are stuck on purpose)."""
    port = str(free_port())
    procs = []
    t0 = time.time()
    for rank in range(nproc):
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **(extra or {}))
        procs.append(subprocess.Popen([sys.executable, *argv], env=e, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    try:
        for p in procs[:1] if rank0_only else procs:
            progress = hangs.Progress(p.pid, 2 * timeout)  # a rank is hung when it stops, not when it is slow
            while True:
                try:
                    out, _ = p.communicate(timeout=2.0)
                    results.append((p.returncode, out, time.time() - t0))
                    break
                except subprocess.TimeoutExpired:
                    why = progress.verdict()
                    if why:
                        hangs.kill_tree(p)
                        out, _ = p.communicate()
                        results.append((None, out + f"\n[hang] {why}", time.time() - t0))
                        break
    finally:
        for p in procs:
            if p.poll() is None:
                hangs.kill_tree(p)
    return results


def spawn(script: str, scenario: str, out_dir, env: dict, **kw):
    """``run_ranks`` of ``script scenario out_dir``: the script's ``__main__`` runs its ``scenario_<name>``."""
    return run_ranks([script, scenario, str(out_dir)], env, **kw)


def assert_ok(results):
    for rank, (rc, out, _) in enumerate(results):
        assert rc == 0, f"rank {rank} exited with {rc}:\n{out[-6000:]}"
