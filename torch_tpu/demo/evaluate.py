"""Generate the twelve demo prompts over several seeds with the real FluxPipeline and judge the pixels.

Each (prompt, seed) image uses its own CPU generator seeded with ``seed``, so an image does not depend
on how the prompts are batched, and CPU torch and the tpu device start from the same noise.

    generate(pipe, prompts, seed, **call) -> list of PIL images
    evaluate(pipe, seeds, prompts=PROMPTS, **call) -> Report
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from . import judge as _judge
from . import shapes as _shapes

__all__ = ["Report", "evaluate", "generate", "grid"]


@dataclasses.dataclass
class Report:
    results: list[tuple[str, int, bool, str]]  # (prompt, seed, correct, verdict)
    images: dict[tuple[str, int], np.ndarray]

    @property
    def accuracy(self) -> float:
        return sum(ok for _, _, ok, _ in self.results) / max(len(self.results), 1)

    def summary(self) -> str:
        lines = [f"accuracy: {self.accuracy:.3f} ({sum(r[2] for r in self.results)}/{len(self.results)})"]
        by_prompt: dict[str, list[bool]] = {}
        for p, _, ok, _ in self.results:
            by_prompt.setdefault(p, []).append(ok)
        for p, oks in by_prompt.items():
            lines.append(f"  {p:<20s} {sum(oks)}/{len(oks)}")
        fails = [f"{p!r} seed {s}: {v}" for p, s, ok, v in self.results if not ok]
        if fails:
            lines.append("failures:")
            lines += ["  " + f for f in fails]
        return "\n".join(lines)


def generate(pipe, prompts, seed: int, **call):
    gens = [torch.Generator("cpu").manual_seed(int(seed)) for _ in prompts]
    return pipe(prompt=list(prompts), generator=gens, **call).images


def evaluate(pipe, seeds, prompts=_shapes.PROMPTS, **call) -> Report:
    results, images = [], {}
    for seed in seeds:
        for prompt, img in zip(prompts, generate(pipe, prompts, seed, **call)):
            arr = np.asarray(img.convert("RGB"))
            v = _judge.judge(arr)
            color, shape = _judge.parse_prompt(prompt)
            ok = v.color == color and v.shape == shape
            verdict = f"{v.color} {v.shape}" if v.ok else f"{v.color} ? ({v.reason})"
            results.append((prompt, int(seed), ok, verdict))
            images[(prompt, int(seed))] = arr
    return Report(results, images)


def grid(images: dict[tuple[str, int], np.ndarray], prompts=_shapes.PROMPTS, pad: int = 2):
    """A PIL image: one row per prompt, one column per seed."""
    from PIL import Image

    seeds = sorted({s for _, s in images})
    h, w, _ = next(iter(images.values())).shape
    canvas = np.full(((h + pad) * len(prompts) + pad, (w + pad) * len(seeds) + pad, 3), 128, np.uint8)
    for i, p in enumerate(prompts):
        for j, s in enumerate(seeds):
            if (p, s) in images:
                y, x = pad + i * (h + pad), pad + j * (w + pad)
                canvas[y:y + h, x:x + w] = images[(p, s)]
    return Image.fromarray(canvas)


@torch.no_grad()
def vae_reconstructions(vae, device: str, n: int = 240, seed: int = 12345, batch: int = 60):
    """Judge accuracy of VAE reconstructions (posterior mean) of ``n`` fresh data set images.

    Returns (accuracy, mean squared error in [-1, 1] units, {(prompt, i): reconstruction}).
    """
    from .train import images_to_tensor

    rng = np.random.Generator(np.random.PCG64(seed))
    ok, se, count, images = 0, 0.0, 0, {}
    for i in range(0, n, batch):
        s = _shapes.sample(rng, min(batch, n - i))
        x = images_to_tensor(s.images).to(device)
        rec = vae.decode(vae.encode(x).latent_dist.mean).sample.float().cpu().clamp(-1, 1)
        se += float(((rec - x.cpu()) ** 2).sum())
        count += rec.numel()
        arr = ((rec + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        for j, (img, lab) in enumerate(zip(arr, s.labels)):
            ok += _judge.matches(img, _shapes.PROMPTS[lab])
            images[(_shapes.PROMPTS[lab], i + j)] = img
    return ok / n, se / count, images
