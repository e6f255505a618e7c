"""``python -m torch.tpu.distributed`` / ``python -m torch_tpu.distributed``: see ``launcher_env.main``.

Absolute import: under ``-m torch.tpu.distributed`` this file runs with that package name.
"""
import sys

from torch_tpu.distributed import launcher_env

sys.exit(launcher_env.main())
