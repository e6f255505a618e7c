"""Print torchrun's environment for one process per device on this host (``NAME=value`` lines).

    eval $(python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper | sed 's/^/export /')
    torchrun --nproc_per_node=8 flux2_tp.py
"""
from torch_tpu.distributed.launcher_env import print_environment

if __name__ == "__main__":
    print_environment()
