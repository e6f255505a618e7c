"""Hugging Face transformers models with tiny configs (random init, offline): tpu equals CPU.

Forward outputs must match CPU within fp32 tolerance; greedy `generate` must produce exactly the
same token ids (the logits margins of these random models are far above the fp32 error).
"""

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import transformers

ATOL = 1e-4
RTOL = 1e-4


def to_tpu(d):
    return {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def close(actual, expected, atol=ATOL, rtol=RTOL):
    assert actual.device.type == "tpu"
    torch.testing.assert_close(actual.cpu(), expected, atol=atol, rtol=rtol)


def pair(model_cls, config, attn):
    """A randomly initialised model on CPU and an identical copy on tpu."""
    torch.manual_seed(0)
    config._attn_implementation = attn
    cpu = model_cls(config).eval()
    dev = copy.deepcopy(cpu).to("tpu")
    return cpu, dev


def ids(vocab, batch=2, length=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=g)


ATTN = pytest.mark.parametrize("attn", ["sdpa", "eager"])


@ATTN
def test_bert(attn):
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64,
    )
    cpu, dev = pair(transformers.BertModel, config, attn)
    x = ids(99)
    mask = torch.ones_like(x)
    mask[1, 5:] = 0
    inputs = dict(input_ids=x, attention_mask=mask, token_type_ids=(torch.arange(7) > 3).long().expand(2, 7))
    with torch.no_grad():
        ref, got = cpu(**inputs), dev(**to_tpu(inputs))
    close(got.last_hidden_state, ref.last_hidden_state)
    close(got.pooler_output, ref.pooler_output)


def _check_generate(cpu, dev, inputs, max_new_tokens=5, **kw):
    gen = dict(max_new_tokens=max_new_tokens, do_sample=False, **kw)
    with torch.no_grad():
        ref = cpu.generate(**inputs, **gen, output_logits=True, return_dict_in_generate=True)
        got = dev.generate(**to_tpu(inputs), **gen, output_logits=True, return_dict_in_generate=True)
    assert got.sequences.device.type == "tpu"
    assert torch.equal(got.sequences.cpu(), ref.sequences)
    assert len(got.logits) == len(ref.logits) == max_new_tokens
    for g, r in zip(got.logits, ref.logits):
        close(g, r)
    return got.sequences.cpu()


@ATTN
def test_gpt2(attn):
    config = transformers.GPT2Config(vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    cpu, dev = pair(transformers.GPT2LMHeadModel, config, attn)
    x = ids(101)
    with torch.no_grad():
        ref, got = cpu(input_ids=x, labels=x), dev(input_ids=x.to("tpu"), labels=x.to("tpu"))
    close(got.logits, ref.logits)
    close(got.loss, ref.loss)
    out = _check_generate(cpu, dev, dict(input_ids=x), pad_token_id=0)
    assert out.shape == (2, 12)


@ATTN
def test_llama_generate_kv_cache(attn):
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    cpu, dev = pair(transformers.LlamaForCausalLM, config, attn)
    x = ids(128)
    mask = torch.ones_like(x)
    x[1, :2] = 0  # left padding
    mask[1, :2] = 0
    inputs = dict(input_ids=x, attention_mask=mask)
    with torch.no_grad():
        close(dev(**to_tpu(inputs)).logits, cpu(**inputs).logits)
    # generate uses the model's DynamicCache: one prefill, then 1-token steps reading the cache
    out = _check_generate(cpu, dev, inputs, max_new_tokens=6)
    assert out.shape == (2, 13)


def test_llama_generate_static_cache():
    # StaticCache preallocates K/V and writes each step in place (index_copy_ into a buffer), so
    # this checks in-place writes into persistent device tensors. disable_compile: generate would
    # otherwise torch.compile the decode step, which is tested elsewhere.
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    cpu, dev = pair(transformers.LlamaForCausalLM, config, "sdpa")
    x = ids(128, length=6, seed=3)
    _check_generate(cpu, dev, dict(input_ids=x), max_new_tokens=5, cache_implementation="static",
                    disable_compile=True)


def test_t5_conditional_generation():
    config = transformers.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )
    cpu, dev = pair(transformers.T5ForConditionalGeneration, config, "eager")
    x = ids(96, length=9)
    mask = torch.ones_like(x)
    mask[0, 6:] = 0
    labels = ids(96, length=5, seed=1)
    inputs = dict(input_ids=x, attention_mask=mask)
    with torch.no_grad():
        ref, got = cpu(**inputs, labels=labels), dev(**to_tpu(inputs), labels=labels.to("tpu"))
    close(got.logits, ref.logits)
    close(got.encoder_last_hidden_state, ref.encoder_last_hidden_state)
    close(got.loss, ref.loss)
    _check_generate(cpu, dev, inputs, max_new_tokens=4, min_new_tokens=4)


@ATTN
def test_clip_model(attn):
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=32),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16,
    )
    cpu, dev = pair(transformers.CLIPModel, config, attn)
    torch.manual_seed(1)
    inputs = dict(input_ids=ids(99, length=6), pixel_values=torch.randn(3, 3, 32, 32))
    with torch.no_grad():
        ref, got = cpu(**inputs), dev(**to_tpu(inputs))
    close(got.logits_per_image, ref.logits_per_image)
    close(got.text_embeds, ref.text_embeds)
    close(got.image_embeds, ref.image_embeds)
    close(got.vision_model_output.last_hidden_state, ref.vision_model_output.last_hidden_state)


@ATTN
def test_vit(attn):
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=32,
        patch_size=8, num_channels=3,
    )
    cpu, dev = pair(transformers.ViTModel, config, attn)
    torch.manual_seed(1)
    pix = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref, got = cpu(pixel_values=pix), dev(pixel_values=pix.to("tpu"))
    close(got.last_hidden_state, ref.last_hidden_state)
    close(got.pooler_output, ref.pooler_output)
