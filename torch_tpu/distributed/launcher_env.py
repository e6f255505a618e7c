"""Environment for one process per device under ``torchrun`` on a single host.

``python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper`` (and ``python -m
torch.tpu.distributed``) print ``NAME=value`` lines, one per line, no spaces or comments, so that
``eval $(... | sed 's/^/export /')`` exports them. torchrun reads ``PET_*`` variables as defaults for
its flags, so a bare ``torchrun script.py`` then starts one process per device.
"""
from __future__ import annotations

import os
import socket
import sys


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(nproc_per_node: int | None = None) -> dict[str, str]:
    from ..runtime import platform

    plat = platform.platform()
    count = platform.device_count()
    nproc = nproc_per_node or count
    port = os.environ.get("MASTER_PORT") or str(free_port())
    addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    from .. import config
    from .constants import default_timeout_s

    env = {
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
        "NPROC_PER_NODE": str(nproc),
        "WORLD_SIZE": str(nproc),
        # torchrun's flags default to these
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": port,
        "TORCH_TPU_PLATFORM": {"cuda": "gpu"}.get(plat, plat),
        "TORCH_TPU_DIST_TIMEOUT": str(int(default_timeout_s())),
        # one compile cache for every rank: the ranks compile the same programs
        "TORCH_TPU_CACHE_DIR": config.compile_cache_dir() or "",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    return {k: v for k, v in env.items() if v != "" and " " not in v}


def print_environment(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="Print NAME=value lines for torchrun (one process per tpu device). "
                    "Use: eval $(python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper "
                    "| sed 's/^/export /')")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=None,
                        help="processes on this host (default: the number of devices)")
    args = parser.parse_args(argv)
    for name, value in environment(args.nproc_per_node).items():
        print(f"{name}={value}")


def main(argv=None) -> int:
    """``python -m torch.tpu.distributed [--nproc-per-node N] [script.py args...]``.

    Without a script: print the environment (like the single-host wrapper). With one: run it under
    torchrun with that environment.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    nproc = None
    if argv[:1] and argv[0].startswith("--nproc"):
        if "=" in argv[0]:
            nproc = int(argv.pop(0).split("=", 1)[1])
        else:
            argv.pop(0)
            nproc = int(argv.pop(0))
    if not argv or argv[0] in ("-h", "--help"):
        print_environment(([f"--nproc-per-node={nproc}"] if nproc else []) + argv)
        return 0
    env = environment(nproc)
    os.environ.update(env)
    from torch.distributed import run as torchrun

    torchrun.main([f"--nproc-per-node={env['NPROC_PER_NODE']}", f"--master-addr={env['MASTER_ADDR']}",
                   f"--master-port={env['MASTER_PORT']}", *argv])
    return 0
