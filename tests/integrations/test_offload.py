"""diffusers' offloading on the tpu device, each compared with the same pipeline offloaded the same way on CPU torch.

Group offloading (``enable_group_offload`` / ``apply_group_offloading``) block and leaf level, with and without
``use_stream=True`` (and ``record_stream``), and to disk (``offload_to_disk_path``); model and sequential CPU
offload. Each runs twice in strict and fused eager (and the transformer's blocks compiled once), and the second
call must read no weight back from the device (``stats()["device_to_host_bytes"]``: the image alone).

Found here and fixed: group offloading failed at the first forward (``param.data = moved`` raised torch's
"incompatible tensor type"); ``use_stream=True`` was refused (the device had no streams); to disk,
``safetensors.torch.load_file(device="tpu")`` raised "device tpu is invalid"; model offload read every weight
back at every call, and sequential offload's ``.to("meta")`` read each weight back too.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

import torch_tpu
from torch_tpu.testing import tiny_pipelines as tp

pytestmark = pytest.mark.slow

RES = 64
STEPS = 2
TOL = 1e-4
IMAGE_BYTES = RES * RES * 3 * 4  # the float32 image output_type="np" reads
COMPONENTS = ("transformer", "text_encoder", "text_encoder_2", "vae")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("offload-pipelines")


def _pipe(root):
    pipe = tp.load_pipeline("flux", "tiny", dtype=torch.float32, root=root)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _run(pipe):
    return pipe(prompt="a golden retriever surfing a wave", num_inference_steps=STEPS, height=RES, width=RES,
                generator=torch.Generator("cpu").manual_seed(0), output_type="np").images


def _group_offload(pipe, device, offload_type, *, stream=False, record=False, disk=None):
    from diffusers.hooks import apply_group_offloading

    kw = dict(onload_device=torch.device(device), offload_device=torch.device("cpu"), offload_type=offload_type,
              use_stream=stream, record_stream=record)
    if offload_type == "block_level":
        kw["num_blocks_per_group"] = 1
    # (a folder per model: diffusers names a group's file after the group's module path, which two models share.
    # T5 stays in memory: diffusers 0.42's offload to disk leaves its tied embedding as uninitialised memory,
    # garbage on CPU torch too)
    disks = {name: None if disk is None or name == "text_encoder_2" else os.path.join(disk, name)
             for name in COMPONENTS}
    # diffusers' model method; transformers' models take the function
    pipe.transformer.enable_group_offload(**kw, offload_to_disk_path=disks["transformer"])
    for name in COMPONENTS[1:]:
        apply_group_offloading(getattr(pipe, name), **kw, offload_to_disk_path=disks[name])


def _twice(pipe):
    """The pipeline's images on its second call, and what that call moved."""
    first = _run(pipe)
    torch_tpu.reset_stats()
    second = _run(pipe)
    stats = torch_tpu.stats()
    assert np.array_equal(first, second)
    return second, stats


_CPU_REFERENCE = []


def _reference(root):
    """CPU torch's image of the same pipeline (offloading moves weights, it changes no value)."""
    if not _CPU_REFERENCE:
        _CPU_REFERENCE.append(_run(_pipe(root)))
    return _CPU_REFERENCE[0]


def _close(out, ref, what):
    d = float(np.abs(out - ref).max())
    assert d < TOL, f"{what}: max abs diff tpu vs cpu = {d:.3g}"


def _no_weight_read_back(stats, what):
    assert stats["device_to_host_bytes"] == IMAGE_BYTES, (what, stats["device_to_host_bytes"])


@pytest.mark.parametrize("offload_type", ["block_level", "leaf_level"])
@pytest.mark.parametrize("stream", ["no_stream", "stream", "stream_record"])
def test_group_offload_matches_cpu(root, eager_mode, offload_type, stream):
    pipe = _pipe(root)
    _group_offload(pipe, "tpu", offload_type, stream=stream != "no_stream", record=stream == "stream_record")
    out, stats = _twice(pipe)
    what = f"group offload {offload_type} {stream}"
    _close(out, _reference(root), what)
    _no_weight_read_back(stats, what)
    weights = sum(p.nbytes for name in COMPONENTS for p in getattr(pipe, name).parameters())
    assert stats["host_to_device_bytes"] >= weights  # every weight went up for its group's call
    for name in COMPONENTS:  # and is back on the host
        assert all(p.device.type == "cpu" for p in getattr(pipe, name).parameters()), name


@pytest.mark.parametrize("stream", ["no_stream", "stream_record"])
def test_group_offloaded_blocks_replay_inside_the_hooks(root, eager_mode, stream, monkeypatch):
    """Block-level group offload: each block's forward replays its recorded program inside diffusers' hooks (the
    hooks' onload and prefetch run at every call; the weights come back in new storages each time), so a call
    past the first two records nothing and replays every block; CPU's image. Before, the hooked blocks were
    refused ("has hooks or a forward of its own") and ran op by op."""
    from torch_tpu.eager import module_replay

    monkeypatch.delenv("TORCH_TPU_REPLAY_VERIFY", raising=False)  # (a verified replay records again: counted)
    pipe = _pipe(root)
    _group_offload(pipe, "tpu", "block_level", stream=stream != "no_stream", record=stream == "stream_record")
    _run(pipe)  # (with streams, diffusers traces the groups' order in the first call and prefetches from the second
    out, stats = _twice(pipe)  # on: a few modules see new arguments' layouts then, and record once more)
    _close(out, _reference(root), f"group offload block_level {stream}")
    _no_weight_read_back(stats, f"group offload block_level {stream}")
    blocks = [b for b in pipe.transformer.modules()
              if type(b).__name__ in ("FluxTransformerBlock", "FluxSingleTransformerBlock")]
    status = dict(line.split(": ", 1) for line in module_replay.status(pipe.transformer))
    for name, block in pipe.transformer.named_modules():
        if block in blocks:
            assert status.get(name) == "1 recorded", (name, status)
    assert stats["module_recordings"] == 0 and stats["module_replays"] >= STEPS * len(blocks), stats


@pytest.mark.parametrize("offload_type", ["block_level", "leaf_level"])
def test_group_offload_to_disk_matches_cpu(root, tmp_path, eager_mode, offload_type):
    pipe = _pipe(root)
    _group_offload(pipe, "tpu", offload_type, disk=str(tmp_path / "groups"))
    out, stats = _twice(pipe)
    what = f"group offload to disk {offload_type}"
    _close(out, _reference(root), what)
    _no_weight_read_back(stats, what)


def test_group_offload_streams_with_compiled_blocks(root):
    """The transformer's blocks compiled (diffusers' recipe beside offloading: its onload runs outside the
    compiled code), its weights prefetched on a stream."""
    pipe = _pipe(root)
    _group_offload(pipe, "tpu", "block_level", stream=True, record=True)
    pipe.transformer.compile_repeated_blocks(backend="tpu", dynamic=False)
    out, stats = _twice(pipe)
    _close(out, _reference(root), "group offload with compiled blocks")
    _no_weight_read_back(stats, "group offload with compiled blocks")


@pytest.mark.parametrize("method", ["enable_model_cpu_offload", "enable_sequential_cpu_offload"])
def test_cpu_offload_reads_no_weight_back(root, eager_mode, method, monkeypatch):
    monkeypatch.delenv("TORCH_TPU_REPLAY_VERIFY", raising=False)  # (a verified replay records again: counted)
    pipe = _pipe(root)
    getattr(pipe, method)(device="tpu")
    out, stats = _twice(pipe)
    _close(out, _reference(root), method)
    _no_weight_read_back(stats, method)
    if method == "enable_model_cpu_offload":  # each model moved back as the host tensors it came from
        assert stats["host_copy_bytes_reused"] >= sum(p.nbytes for p in pipe.transformer.parameters())
        # the blocks' recordings serve the weights that came back in new storages: nothing is recorded again
        # (it was every block once per call: a move gave the parameters and buffers new objects)
        assert stats["module_recordings"] == 0 and stats["module_replays"] > 0, stats
