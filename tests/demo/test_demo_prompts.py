"""The shipped demo through the library, as the README loads it: a prompt the model was not trained on is
warned about where the pipeline encodes it (only the CLI warned, and the image came out blank), at the
user's line; a long prompt says only what is true: no transformers "Token indices sequence length is longer
than the specified maximum" for a sequence the pipeline cuts, no diffusers "truncated because
`max_sequence_length` is set to 16 tokens" naming the wrong part (torch_tpu's own line says how many T5
tokens were cut)."""
import logging
import pathlib
import re
import warnings

import pytest
import torch

pytest.importorskip("diffusers")
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
LONG = ("a red circle on a big wide field of grass under a blue sky with clouds and birds flying around the sun "
        "at noon on a summer day in the countryside")


@pytest.fixture(scope="module")
def pipe():
    """The README's two lines that load the demo (the snippet's own code, run as written)."""
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "shipped import WEIGHTS" in b)
    loading = "\n".join(line for line in snippet.splitlines() if not line.startswith("image ="))
    namespace = {"torch": torch}
    exec("from diffusers import FluxPipeline\n" + loading, namespace)
    pipe = namespace["pipe"]
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _call(pipe, prompt):
    """One 1-step call; (warnings raised, the line that called the pipeline)."""
    import sys

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        pipe(prompt, height=64, width=64, num_inference_steps=1, generator=torch.Generator().manual_seed(0))
    return [w for w in caught if "torch_tpu" in str(w.message)], line


def test_a_prompt_the_demo_was_not_trained_on_is_warned_about_at_the_users_line(pipe):
    ours, line = _call(pipe, "a purple hexagon")
    assert len(ours) == 1, [str(w.message) for w in ours]
    message = str(ours[0].message)
    assert "knows only the 12 prompts it was trained on" in message and "'a purple hexagon'" in message
    assert ours[0].filename == __file__ and ours[0].lineno == line
    from torch_tpu.demo import shipped  # the CLI's words

    assert shipped.unknown_prompt("a purple hexagon") == "warning: " + message.removeprefix("torch_tpu: ")
    assert _call(pipe, "A Blue  Square")[0] == []  # one it knows: nothing


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_long_prompt_prints_no_false_alarms(pipe):
    records = _Records()  # what diffusers' and transformers' loggers say (their own handlers print it)
    loggers = [logging.getLogger(name) for name in ("diffusers", "transformers")]
    for logger in loggers:
        logger.addHandler(records)
    try:
        ours, line = _call(pipe, LONG)
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    err = "\n".join(records.lines)
    texts = sorted(str(w.message) for w in ours)
    assert len(texts) == 2 and "knows only the 12 prompts" in texts[0], texts
    assert re.fullmatch(r"torch_tpu: this model reads 16 T5 tokens; a prompt of \d+ tokens was cut to 16", texts[1])
    assert all(w.filename == __file__ and w.lineno == line for w in ours)
    assert "Token indices sequence length is longer" not in err, err  # transformers', for the pipeline's check
    assert "`max_sequence_length` is set to" not in err, err  # diffusers', naming the wrong cut part
    assert "CLIP can only handle sequences up to 77 tokens" in err  # true: CLIP's cut, diffusers' words


def test_the_capped_tokenizer_caps_every_call_that_does_not_ask_otherwise(pipe):
    t5 = pipe.tokenizer_2
    cap = t5.model_max_length
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert t5(LONG, padding="longest", return_tensors="pt").input_ids.shape[-1] == cap
        assert t5(LONG, max_length=512, padding="max_length", truncation=True).input_ids.__len__() == cap
    assert len(t5(LONG, truncation=False).input_ids) > cap  # asked for: the whole sequence
