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


# Files that take the longest (their isolated-case children, pipelines, torchrun), scheduled first: with
# whole files per worker (--dist loadfile), a long file collected last kept one core busy alone at the end.
_SLOW_FIRST = ["test_op_consistency.py", "test_hostile_workflows.py", "test_distributed.py",
               "test_hostile_ecosystem.py", "test_hostile_functional.py", "test_hostile_autograd_modes.py",
               "test_coldstart.py", "test_hostile_backward.py", "test_hostile_compile_sequences.py",
               "test_hostile_plumbing.py", "test_hostile_modules.py", "test_hostile_opinfo.py",
               "test_hostile_views_modes.py", "test_hostile_sequences.py", "test_fuzz_values.py",
               "test_fuzz_compiled.py", "test_fuzz_autograd.py", "test_fuzz_training.py", "test_demo.py",
               "test_compile.py"]


def pytest_collection_modifyitems(session, config, items):
    rank = {name: k for k, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept
