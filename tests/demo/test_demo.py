"""The demo model's pieces: the synthetic data set, the pixel judge, the model's construction and a few
training steps on CPU torch (the trained model's own test needs the shipped weights)."""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from torch_tpu.demo import judge, model, shapes, train

pytestmark = pytest.mark.slow


def _rng(seed):
    return np.random.Generator(np.random.PCG64(seed))


def test_data_set_is_deterministic_and_in_range():
    a = shapes.sample(_rng(7), 48)
    b = shapes.sample(_rng(7), 48)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.images.shape == (48, shapes.IMAGE_SIZE, shapes.IMAGE_SIZE, 3) and a.images.dtype == np.uint8
    assert a.sizes.min() >= shapes.MIN_SIZE and a.sizes.max() <= shapes.MAX_SIZE
    assert (a.xs >= shapes.MARGIN).all() and (a.xs + a.sizes <= shapes.IMAGE_SIZE - shapes.MARGIN).all()
    assert (a.ys >= shapes.MARGIN).all() and (a.ys + a.sizes <= shapes.IMAGE_SIZE - shapes.MARGIN).all()
    # white outside the bounding box, the shape's colour at its centre
    for img, lab, s, x, y in zip(a.images, a.labels, a.sizes, a.xs, a.ys):
        outside = np.ones(img.shape[:2], bool)
        outside[y:y + s, x:x + s] = False
        assert (img[outside] == 255).all()
        color = shapes.PROMPTS[lab].split()[1]
        np.testing.assert_array_equal(img[y + 3 * s // 4, x + s // 2], shapes.COLORS[color])
    assert len(set(shapes.PROMPTS)) == 12


def test_judge_reads_every_data_set_image():
    s = shapes.sample(_rng(3), 240)
    wrong = [(shapes.PROMPTS[l], judge.judge(img)) for img, l in zip(s.images, s.labels)
             if not judge.matches(img, shapes.PROMPTS[l])]
    assert wrong == []


@pytest.mark.parametrize("shape", shapes.SHAPES)
@pytest.mark.parametrize("size", [shapes.MIN_SIZE, shapes.MAX_SIZE])
def test_judge_at_the_size_extremes(shape, size):
    for color in shapes.COLORS:
        img = shapes.render(color, shape, size, 5, 9)
        v = judge.judge(img)
        assert (v.color, v.shape) == (color, shape), v


def test_judge_rejects_noise_blank_and_mixtures():
    rng = _rng(11)
    cases = {
        "uniform noise": rng.integers(0, 256, (64, 64, 3)).astype(np.uint8),
        "grey noise": np.clip(128 + rng.normal(0, 60, (64, 64, 3)), 0, 255).astype(np.uint8),
        "faint noise": np.clip(255 - np.abs(rng.normal(0, 40, (64, 64, 3))), 0, 255).astype(np.uint8),
        "blank": np.full((64, 64, 3), 255, np.uint8),
        "all red": np.broadcast_to(np.array(shapes.COLORS["red"], np.uint8), (64, 64, 3)).copy(),
        "two shapes": np.minimum(shapes.render("blue", "square", 16, 2, 2),
                                 shapes.render("blue", "circle", 16, 40, 40)),
        "two colours": np.minimum(shapes.render("red", "square", 20, 2, 2),
                                  shapes.render("green", "square", 20, 30, 30)),
        "wide rectangle": _rectangle(40, 16),
        "diamond": _diamond(30),
    }
    accepted = {k: judge.judge(v) for k, v in cases.items() if judge.judge(v).ok}
    assert accepted == {}


def _rectangle(w, h):
    img = np.full((64, 64, 3), 255, np.uint8)
    img[10:10 + h, 10:10 + w] = shapes.COLORS["green"]
    return img


def _diamond(size):
    img = np.full((64, 64, 3), 255, np.uint8)
    c = size // 2
    yy, xx = np.mgrid[:size, :size]
    img[10:10 + size, 10:10 + size][np.abs(yy - c) + np.abs(xx - c) <= c] = shapes.COLORS["yellow"]
    return img


def test_parse_prompt():
    assert judge.parse_prompt("a yellow triangle") == ("yellow", "triangle")
    with pytest.raises(ValueError, match="not a demo prompt"):
        judge.parse_prompt("a purple circle")


@pytest.fixture(scope="module")
def untrained():
    return model.build_pipeline(model.DemoConfig(), seed=0)


def test_prompts_embed_differently(untrained):
    cfg = model.DemoConfig()
    with torch.no_grad():
        embeds, pooled, _ = untrained.encode_prompt(prompt=list(shapes.PROMPTS), prompt_2=None,
                                                    max_sequence_length=cfg.max_sequence_length)
    for name, e in (("pooled CLIP", pooled), ("T5", embeds)):
        d = torch.cdist(e.flatten(1), e.flatten(1))
        off = d[~torch.eye(len(shapes.PROMPTS), dtype=torch.bool)]
        assert off.min() > 0.05 * e.flatten(1).norm(dim=1).mean(), name


def test_build_is_deterministic(untrained):
    again = model.build_pipeline(model.DemoConfig(), seed=0)
    for name in ("transformer", "vae", "text_encoder", "text_encoder_2"):
        a, b = getattr(untrained, name).state_dict(), getattr(again, name).state_dict()
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=f"{name}.{k}")


def test_a_few_training_steps_save_and_load(tmp_path):
    """Both stages run, the losses are finite, the folder loads with FluxPipeline and generates 64x64."""
    from diffusers import FluxPipeline

    cfg = train.TrainConfig(vae_steps=3, vae_batch=4, transformer_steps=3, transformer_batch=4, warmup=1,
                            log_every=1, latent_cache=8)
    info = train.train(str(tmp_path), device="cpu", cfg=cfg, progress=False)
    for stage in ("vae", "transformer"):
        assert np.isfinite(info["stages"][stage]["final_loss"])
    saved = json.loads((tmp_path / "torch_tpu_demo.json").read_text())
    assert saved["generation"]["height"] == shapes.IMAGE_SIZE
    pipe = FluxPipeline.from_pretrained(str(tmp_path), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    call = dict(saved["generation"], num_inference_steps=2)
    img = pipe(prompt="a red circle", generator=torch.Generator("cpu").manual_seed(0), **call).images[0]
    assert img.size == (shapes.IMAGE_SIZE, shapes.IMAGE_SIZE)


# A demo model small enough that compiling its training programs takes seconds.
_TINY = model.DemoConfig(vae_channels=(4, 8, 8, 8), vae_groups=4, latent_channels=4, vae_mid_attention=True,
                         heads=2, head_dim=16, rope=(4, 6, 6), double_layers=1, single_layers=1)


def _train_stage(stage, device, compile, steps, on_step=None):
    pipe = model.build_pipeline(_TINY, seed=0)
    pipe.set_progress_bar_config(disable=True)
    pipe.to(device)
    cfg = train.TrainConfig(vae_steps=steps, vae_batch=4, transformer_steps=steps, transformer_batch=4,
                            warmup=2, log_every=1, latent_cache=8)
    if stage == "vae":
        stats = train.train_vae(pipe.vae, cfg, device, progress=False, compile=compile, on_step=on_step)
        trained = pipe.vae
    else:
        train.fit_latent_stats(pipe.vae, device, seed=5, n=16, batch=16)
        stats = train.train_transformer(pipe, _TINY, cfg, device, progress=False, compile=compile,
                                        on_step=on_step)
        trained = pipe.transformer  # holds the EMA of its weights now
    return stats, {k: v.detach().cpu() for k, v in trained.state_dict().items()}


@pytest.mark.parametrize("stage", ["vae", "transformer"])
def test_compiled_training_matches_cpu_torch(stage):
    """``compile=True`` on the tpu (loss forward + backward, AdamW step and EMA under torch.compile) gives
    CPU torch's weights after a few steps of warmup and schedule, and compiles only in its first steps
    (the learning rate and EMA decay change every step: a Python float among them would recompile).
    Strict eager on the tpu ends as close to CPU torch (measured: VAE weights within 5e-5 relative,
    transformer within 3e-5)."""
    import torch._dynamo

    import torch_tpu  # noqa: F401  (the tpu device)

    steps = 5
    cpu_stats, cpu = _train_stage(stage, "cpu", False, steps)
    frames = []
    _, tpu = _train_stage(stage, "tpu", True, steps,
                          on_step=lambda i: frames.append(torch._dynamo.utils.counters["stats"]["unique_graphs"]))
    assert frames[1] > 0 and frames[-1] == frames[1], f"dynamo graphs after each step: {frames}"
    assert cpu.keys() == tpu.keys()
    for k in cpu:
        if stage == "vae" and cpu[k].dim() == 1:
            # Biases (and norm shifts) ahead of a GroupNorm: the norm removes them, so their gradients are
            # rounding noise (they differ between CPU torch and strict eager as much) and Adam turns
            # noise into steps of about lr. Bounded by Adam's steps, not compared.
            bound = 2 * train.TrainConfig.vae_lr * steps
            assert (tpu[k] - cpu[k]).abs().max() <= bound, f"{stage} {k} after {steps} steps"
            continue
        torch.testing.assert_close(tpu[k], cpu[k], rtol=1e-3, atol=2e-4, msg=f"{stage} {k} after {steps} steps")


def test_train_modes_on_the_command_line():
    """--mode of ``train``: auto compiles the transformer's step and the VAE's optimizer step, compiled
    both stages' steps; eager/fused leave the eager mode to
    _setup; ``compiled`` is a training mode only."""
    from torch_tpu.demo import __main__ as cli

    assert cli._stage_modes("auto") == {"vae": train.COMPILED_OPTIMIZER, "transformer": train.COMPILED}
    assert cli._stage_modes("compiled") == {"vae": train.COMPILED, "transformer": train.COMPILED}
    assert cli._stage_modes("fused") is None and cli._stage_modes("eager") is None
    assert cli._parser().parse_args(["train", "--out", "x", "--mode", "compiled"]).mode == "compiled"
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["eval", "--model", "x", "--mode", "compiled"])
