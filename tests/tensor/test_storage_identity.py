"""Storages as libraries see them: data_ptr()/untyped_storage() identity, saving with safetensors,
transformers and diffusers straight from the device, and untyped-storage operations that never crash."""

import copy
import os
import pickle
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch


def test_pointers_identify_storages_like_cpu():
    cpu = torch.randn(4, 6)
    x = cpu.to("tpu")
    y = torch.randn(3, device="tpu")
    s = x.untyped_storage()
    assert s.data_ptr() != 0 and x.data_ptr() == s.data_ptr()
    assert s.nbytes() == cpu.untyped_storage().nbytes() and s.device == x.device
    # views: same storage object, byte offsets as on CPU
    for view in (x[1], x[:, 2], x.t(), x.view(torch.int32)[2:]):
        assert view.untyped_storage() is s
        assert view.untyped_storage().data_ptr() == s.data_ptr()
    for tpu_view, cpu_view in ((x[1], cpu[1]), (x[:, 2], cpu[:, 2]), (x[2:, 3:], cpu[2:, 3:])):
        assert tpu_view.data_ptr() - x.data_ptr() == cpu_view.data_ptr() - cpu.data_ptr()
    # distinct storages never share or overlap an address range, and the address is stable
    assert y.data_ptr() >= s.data_ptr() + s.nbytes() or y.data_ptr() + 12 <= s.data_ptr()
    x.add_(1)
    assert x.data_ptr() == s.data_ptr() and x.untyped_storage() is s
    with warnings.catch_warnings():  # "TypedStorage is deprecated" (once per process)
        warnings.simplefilter("ignore")
        assert x.storage().data_ptr() == s.data_ptr()  # TypedStorage (safetensors' fallback)


def test_untyped_storage_operations_work_or_raise_clearly():
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = cpu.to("tpu")
    s = x.untyped_storage()
    assert bytes(s.cpu()) == bytes(cpu.untyped_storage())
    assert s.tolist() == cpu.untyped_storage().tolist()
    clone = s.clone()  # segfaulted before
    assert clone.data_ptr() != s.data_ptr() and bytes(clone.cpu()) == bytes(s.cpu())
    assert bytes(copy.deepcopy(s).cpu()) == bytes(s.cpu())
    assert bytes(pickle.loads(pickle.dumps(s)).cpu()) == bytes(s.cpu())
    # copy_ writes the tensor's value, as on CPU
    other = torch.full((3, 4), 7.0)
    s.copy_(other.untyped_storage())
    cpu.untyped_storage().copy_(other.untyped_storage())
    assert torch.equal(x.cpu(), cpu)
    x.mul_(2)
    assert bytes(clone.cpu()) != bytes(x.untyped_storage().cpu())  # the clone shares nothing
    s.copy_(clone)
    assert torch.equal(x.cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4))
    with pytest.raises(RuntimeError, match="size does not match"):
        s.copy_(torch.zeros(2).untyped_storage())
    for bad in (lambda: s.resize_(4), lambda: s.fill_(0), lambda: s.float()):
        with pytest.raises(RuntimeError, match="tpu storage"):
            bad()
    assert s.share_memory_() is s  # a no-op, as torch's for every storage but the CPU's
    # a tensor re-pointed at the storage (as on CPU) shares it
    y = torch.empty(0, device="tpu").set_(s)
    assert y.shape == (12,) and y.untyped_storage() is s
    y[0] = -1.0
    assert x.cpu()[0, 0].item() == -1.0


def test_untyped_storage_allocated_on_tpu():
    s = torch.UntypedStorage(8, device="tpu")  # segfaulted before (no allocator)
    assert s.device.type == "tpu" and s.nbytes() == 8 and s.tolist() == [0] * 8
    assert torch.UntypedStorage([1, 2, 3], device="tpu").tolist() == [1, 2, 3]
    assert torch.UntypedStorage(3).device.type == "cpu"


def test_safetensors_save_file_from_device(tmp_path):
    from safetensors.torch import load_file, save_file, save_model

    a = torch.randn(3, 5).to(torch.bfloat16)
    b = torch.arange(6, dtype=torch.int64)
    path = tmp_path / "t.safetensors"
    save_file({"a": a.to("tpu"), "b": b.to("tpu")}, str(path))
    loaded = load_file(str(path))
    assert torch.equal(loaded["a"], a) and torch.equal(loaded["b"], b)
    # shared tensors are detected as on CPU (refused by save_file, deduplicated by save_model)
    x = torch.randn(4, device="tpu")
    with pytest.raises(RuntimeError, match="share memory"):
        save_file({"x": x, "view": x[:2]}, str(tmp_path / "shared.safetensors"))
    tied = torch.nn.Linear(4, 4, bias=False)
    model = torch.nn.Sequential(tied, tied).to("tpu")
    save_model(model, str(tmp_path / "m.safetensors"))
    assert torch.equal(load_file(str(tmp_path / "m.safetensors"))["0.weight"], tied.weight.cpu())


def test_save_pretrained_from_device_and_reload(tmp_path):
    import transformers
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg).to("tpu")
    model.save_pretrained(tmp_path / "llama")
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "llama")
    expected = model.state_dict()
    for name, value in reloaded.state_dict().items():
        assert torch.equal(value, expected[name].cpu()), name
    assert reloaded.lm_head.weight.data_ptr() == reloaded.model.embed_tokens.weight.data_ptr()

    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=4, layers_per_block=1, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",))
    vae = vae.to(torch.bfloat16).to("tpu")
    vae.save_pretrained(tmp_path / "vae")
    expected = vae.state_dict()
    for name, value in AutoencoderKL.from_pretrained(tmp_path / "vae", torch_dtype=torch.bfloat16).state_dict().items():
        assert value.dtype == torch.bfloat16 and torch.equal(value, expected[name].cpu()), name


def test_set_to_a_tpu_storage_under_a_default_device_mode():
    """``torch.set_default_device("cpu")`` leaves a torch-function mode active; ``set_`` of a tpu storage
    then sent its internal meta call back through dispatch and failed ("storage on different device
    tpu:0")."""
    torch.set_default_device("cpu")
    try:
        x = torch.arange(12, dtype=torch.float32).to("tpu")
        y = torch.empty(0, device="tpu").set_(x.untyped_storage())
        z = torch.empty(0, device="tpu").set_(x[2:])
        y[0] = -1.0
        assert x.cpu()[0].item() == -1.0 and z.shape == (10,) and z.cpu()[0].item() == 2.0
    finally:
        torch.set_default_device(None)
