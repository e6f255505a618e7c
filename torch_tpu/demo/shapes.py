"""The demo's synthetic data set: one filled shape per image on a white background.

Twelve classes: a circle, an axis-aligned square or an upright triangle, in red, green, blue or yellow.
The caption of a class is ``"a {color} {shape}"``.  Size and position vary: the shape's bounding box is a
square of side ``MIN_SIZE..MAX_SIZE`` pixels placed anywhere at least ``MARGIN`` pixels inside the image.
Shapes are drawn at 4x the resolution and box-filtered down, so their edges are anti-aliased.

Everything is deterministic: the same seed gives the same images, on any machine (numpy's PCG64 and PIL
drawing only).

    COLORS, SHAPES, PROMPTS, IMAGE_SIZE
    render(color, shape, size, x, y) -> uint8 array (IMAGE_SIZE, IMAGE_SIZE, 3)
    sample(rng, n) -> Sample(images uint8 (n, H, W, 3), labels int64 (n,), sizes, xs, ys)
    batches(seed, batch_size) -> iterator of Sample
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

__all__ = [
    "COLORS",
    "IMAGE_SIZE",
    "MARGIN",
    "MAX_SIZE",
    "MIN_SIZE",
    "PROMPTS",
    "SHAPES",
    "Sample",
    "batches",
    "class_of",
    "prompt_of",
    "render",
    "sample",
]

IMAGE_SIZE = 64
MIN_SIZE = 16  # side of the shape's bounding box, in pixels
MAX_SIZE = 40
MARGIN = 2
_SUPERSAMPLE = 4

# Saturated colours, far from each other and from white (yellow keeps a low blue channel).
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 220),
    "yellow": (240, 200, 0),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
WHITE = (255, 255, 255)

# Class index = color_index * len(SHAPES) + shape_index.
PROMPTS: tuple[str, ...] = tuple(f"a {c} {s}" for c in COLORS for s in SHAPES)


def prompt_of(color: str, shape: str) -> str:
    return f"a {color} {shape}"


def class_of(color: str, shape: str) -> int:
    return list(COLORS).index(color) * len(SHAPES) + SHAPES.index(shape)


def render(color: str, shape: str, size: int, x: int, y: int) -> np.ndarray:
    """One image: a filled ``shape`` of ``color`` whose bounding box is ``[x, x+size) x [y, y+size)``."""
    from PIL import Image, ImageDraw

    if color not in COLORS:
        raise ValueError(f"unknown colour {color!r}; expected one of {tuple(COLORS)}")
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    k = _SUPERSAMPLE
    big = Image.new("RGB", (IMAGE_SIZE * k, IMAGE_SIZE * k), WHITE)
    draw = ImageDraw.Draw(big)
    # PIL's box corners are inclusive; in supersampled pixels the box is [x*k, (x+size)*k - 1].
    x0, y0, x1, y1 = x * k, y * k, (x + size) * k - 1, (y + size) * k - 1
    fill = COLORS[color]
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    else:  # upright triangle: apex at the top middle, base along the bottom edge
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    small = big.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.uint8).copy()


@dataclasses.dataclass
class Sample:
    images: np.ndarray  # uint8 (n, IMAGE_SIZE, IMAGE_SIZE, 3)
    labels: np.ndarray  # int64 (n,), index into PROMPTS
    sizes: np.ndarray  # int64 (n,)
    xs: np.ndarray  # int64 (n,), left edge of the bounding box
    ys: np.ndarray  # int64 (n,), top edge of the bounding box

    @property
    def prompts(self) -> list[str]:
        return [PROMPTS[i] for i in self.labels]


def sample(rng: np.random.Generator, n: int, labels: np.ndarray | None = None) -> Sample:
    """``n`` random images (uniform class, size and position unless ``labels`` fixes the classes)."""
    if labels is None:
        labels = rng.integers(0, len(PROMPTS), size=n)
    labels = np.asarray(labels, dtype=np.int64)
    sizes = rng.integers(MIN_SIZE, MAX_SIZE + 1, size=n)
    span = IMAGE_SIZE - 2 * MARGIN - sizes + 1  # number of valid left (top) edges
    xs = MARGIN + np.floor(rng.random(n) * span).astype(np.int64)
    ys = MARGIN + np.floor(rng.random(n) * span).astype(np.int64)
    colors = list(COLORS)
    images = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for i in range(n):
        c, s = divmod(int(labels[i]), len(SHAPES))
        images[i] = render(colors[c], SHAPES[s], int(sizes[i]), int(xs[i]), int(ys[i]))
    return Sample(images, labels, sizes.astype(np.int64), xs, ys)


def batches(seed: int, batch_size: int) -> Iterator[Sample]:
    """An endless, deterministic stream of random batches."""
    rng = np.random.Generator(np.random.PCG64(seed))
    while True:
        yield sample(rng, batch_size)
