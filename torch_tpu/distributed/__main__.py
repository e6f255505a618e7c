"""``python -m torch.tpu.distributed`` / ``python -m torch_tpu.distributed``: see ``launch.main``.

Absolute import: under ``-m torch.tpu.distributed`` this file runs with that package name.
"""
import sys

from torch_tpu.distributed import launch

sys.exit(launch.main())
