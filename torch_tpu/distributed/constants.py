"""Names and defaults of the tpu_dist backend."""
from __future__ import annotations

from .. import config

BACKEND_NAME = "tpu_dist"
ALIASES = ("tpu",)


def default_timeout_s() -> float:
    """Seconds a collective waits for its peers before failing (TORCH_TPU_DIST_TIMEOUT, default 60)."""
    return config.settings().dist_timeout_s
