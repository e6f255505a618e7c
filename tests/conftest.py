"""Shared fixtures. ``eager_mode`` runs a test once per eager execution mode (strict and fused)."""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(params=["DEFER_NEVER", "DEFER_AND_FUSE"])
def eager_mode(request):
    import torch

    import torch_tpu

    mode = torch_tpu.EagerMode[request.param]
    with torch.tpu.set_eager_mode(mode):
        yield mode
