"""Tokenizers built without the Hub: byte-level CLIP BPE, a T5 unigram and a Mistral (Tekken-like) BPE."""
from __future__ import annotations

# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------

_WORDS = (
    "a an the of and in on with at to is it this that for from by as are be was or "
    "cat dog photo picture painting image red blue green yellow black white small large big "
    "sky sun moon tree house car city street mountain river sea water forest flower "
    "man woman person child girl boy face hand light dark night day sign says hello world "
    "you ai reasons about descriptions give structured responses focusing object objects "
    "relationships attribution actions without speculation"
).split()


def _byte_alphabet() -> list[str]:
    """The 256 printable characters GPT-2 style byte-level BPE uses for the bytes 0..255, by byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _left_to_right_merges(symbol_lists: list[list[str]]) -> list[tuple[str, str]]:
    """Merges that glue each symbol list together from the left: [a, b, c] -> (a, b), (ab, c)."""
    merges: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for symbols in symbol_lists:
        acc = symbols[0]
        for sym in symbols[1:]:
            pair = (acc, sym)
            if pair not in seen:
                seen.add(pair)
                merges.append(pair)
            acc = acc + sym
    return merges


def make_clip_tokenizer(model_max_length: int = 77):
    """A CLIP byte-level BPE tokenizer with a tiny vocabulary (a few hundred entries)."""
    from transformers import CLIPTokenizer

    alphabet = _byte_alphabet()
    vocab: dict[str, int] = {}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    for ch in alphabet:
        vocab.setdefault(ch + "</w>", len(vocab))
    # CLIP appends "</w>" to the last symbol of each word.
    words = [w for w in _WORDS if len(w) > 1]
    merges = _left_to_right_merges([list(w[:-1]) + [w[-1] + "</w>"] for w in words])
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab.setdefault("<|startoftext|>", len(vocab))
    vocab.setdefault("<|endoftext|>", len(vocab))
    return CLIPTokenizer(
        vocab=vocab,
        merges=list(merges),
        model_max_length=model_max_length,
    )


def make_t5_tokenizer(model_max_length: int = 512, cls=None):
    """A T5 (Unigram) tokenizer: <pad>=0, </s>=1, <unk>=2, then single characters and a few words
    (``cls``: a T5TokenizerFast subclass to build instead, e.g. ``CappedT5Tokenizer``)."""
    from transformers import T5TokenizerFast

    pieces: list[tuple[str, float]] = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    chars = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    pieces += [(c, -5.0) for c in chars]
    pieces += [("\u2581" + c, -4.5) for c in chars]
    pieces += [("\u2581" + w, -3.0) for w in _WORDS if len(w) > 1]
    return (cls or T5TokenizerFast)(vocab=pieces, extra_ids=0, model_max_length=model_max_length)


# Mistral (Tekken) control tokens at their real ids.
MISTRAL_SPECIALS = (
    "<unk>",  # 0
    "<s>",  # 1
    "</s>",  # 2
    "[INST]",  # 3
    "[/INST]",  # 4
    "[AVAILABLE_TOOLS]",  # 5
    "[/AVAILABLE_TOOLS]",  # 6
    "[TOOL_RESULTS]",  # 7
    "[/TOOL_RESULTS]",  # 8
    "[TOOL_CALLS]",  # 9
    "[IMG]",  # 10
    "<pad>",  # 11
    "[IMG_BREAK]",  # 12
    "[IMG_END]",  # 13
    "[PREFIX]",  # 14
    "[MIDDLE]",  # 15
    "[SUFFIX]",  # 16
    "[SYSTEM_PROMPT]",  # 17
    "[/SYSTEM_PROMPT]",  # 18
    "[TOOL_CONTENT]",  # 19
)
_MISTRAL_NUM_SPECIALS = 32  # 20..31 are "<SPECIAL_i>" placeholders, like the real tokenizer's.

# Accepts message contents given as a string or as a list of {"type": "text"|"image", ...} items,
# which is what Flux2Pipeline's ``format_input`` produces.
_MISTRAL_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}"
    "{%- set content = message['content'] %}"
    "{%- else %}"
    "{%- set ns = namespace(text='') %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %}{%- set ns.text = ns.text + item['text'] %}"
    "{%- elif item['type'] == 'image' %}{%- set ns.text = ns.text + '[IMG]' %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- set content = ns.text %}"
    "{%- endif %}"
    "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + content + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{- '[INST]' + content + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}{{- content + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}"
)


def make_mistral_tokenizer(model_max_length: int = 2048):
    """A byte-level BPE with Mistral's control tokens, wrapped in PreTrainedTokenizerFast."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = list(MISTRAL_SPECIALS) + [
        f"<SPECIAL_{i}>" for i in range(len(MISTRAL_SPECIALS), _MISTRAL_NUM_SPECIALS)
    ]
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(specials)}
    alphabet = _byte_alphabet()
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    space = alphabet[ord(" ")]  # "Ġ"
    words = [space + w for w in _WORDS] + [w.capitalize() for w in _WORDS if len(w) > 1]
    merges = _left_to_right_merges([list(w) for w in words])
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        chat_template=_MISTRAL_CHAT_TEMPLATE,
        model_max_length=model_max_length,
        padding_side="left",
    )


def vocab_size(tokenizer, multiple: int = 64) -> int:
    n = len(tokenizer)
    return ((n + multiple - 1) // multiple) * multiple
