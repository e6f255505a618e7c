"""A pixel-only judge of the demo's pictures: which colour and which shape, or neither.

No model is involved; it reads geometry from the pixels:

1. Rough foreground: pixels whose darkest channel is more than ``ROUGH_THRESHOLD`` below white.
   Too few of them: no shape.
2. Colour: the palette colour (``shapes.COLORS``) nearest to the mean rough-foreground colour.
3. Colour purity: each rough-foreground pixel must lie near the line from white to that colour (an
   anti-aliased or blurred edge is a mix of the two); if fewer than ``MIN_PURITY`` of them do, the picture
   is mixed colours or noise: rejected.
4. Shape mask: pixels at least half way from white to the colour (the 50 % contour of a blurred edge is
   where the sharp edge was).  Its largest 4-connected component must hold at least ``MIN_MAIN`` of the
   mask, and the rough foreground outside that component's (slightly grown) bounding box must be small:
   one object on a white background.
5. Shape from the component's bounding box: the aspect ratio must be near 1 and the side within the data
   set's size range (with slack); then the fill ratio of the box (square 1, circle pi/4, triangle 1/2)
   and the share of the area in the top half of the box (square and circle 1/2, upright triangle 1/4)
   must fall in the window of exactly one shape.

    judge(image) -> Verdict(color, shape, reason, features)
    matches(image, prompt) -> bool
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np

from . import shapes as _shapes

__all__ = ["Verdict", "judge", "matches", "parse_prompt"]

ROUGH_THRESHOLD = 60.0  # 0..255, how far below white the darkest channel must be
MIN_PIXELS = 40  # a size-16 triangle has 128
MIN_PURITY = 0.9
PURITY_DISTANCE = 70.0  # 0..255, distance of a pixel from the white-to-colour line
MIN_MAIN = 0.9
MAX_OUTSIDE = 0.05  # rough-foreground pixels outside the object's box, as a share of its area
ASPECT_RANGE = (0.8, 1.25)
SIZE_SLACK = 6

# (fill ratio window, top-half share window) per shape; the windows do not overlap.
SHAPE_WINDOWS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "square": ((0.90, 1.01), (0.42, 0.58)),
    "circle": ((0.70, 0.87), (0.42, 0.58)),
    "triangle": ((0.38, 0.62), (0.15, 0.35)),
}


@dataclasses.dataclass
class Verdict:
    color: str | None
    shape: str | None
    reason: str  # "ok" or why the picture was rejected
    features: dict

    @property
    def ok(self) -> bool:
        return self.color is not None and self.shape is not None


def parse_prompt(prompt: str) -> tuple[str, str]:
    words = prompt.strip().lower().split()
    if len(words) != 3 or words[0] != "a" or words[1] not in _shapes.COLORS or words[2] not in _shapes.SHAPES:
        raise ValueError(f"not a demo prompt: {prompt!r}; expected 'a <colour> <shape>' with colour in "
                         f"{tuple(_shapes.COLORS)} and shape in {_shapes.SHAPES}")
    return words[1], words[2]


def _largest_component(mask: np.ndarray) -> np.ndarray:
    """The largest 4-connected component of a boolean mask (breadth-first search)."""
    h, w = mask.shape
    seen = np.zeros_like(mask)
    best: list[tuple[int, int]] = []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        seen[y0, x0] = True
        comp = [(int(y0), int(x0))]
        queue = deque(comp)
        while queue:
            y, x = queue.popleft()
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    comp.append((ny, nx))
                    queue.append((ny, nx))
        if len(comp) > len(best):
            best = comp
    out = np.zeros_like(mask)
    if best:
        ys, xs = zip(*best)
        out[list(ys), list(xs)] = True
    return out


def _as_array(image) -> np.ndarray:
    arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"expected uint8 pixels, got {arr.dtype}")
    return arr.astype(np.float64)


def judge(image) -> Verdict:
    """Colour and shape of the single filled shape on white in ``image`` (PIL image or uint8 HxWx3)."""
    px = _as_array(image)
    dark = 255.0 - px  # per channel distance below white
    feats: dict = {}
    rough = dark.max(axis=2) > ROUGH_THRESHOLD
    n_rough = int(rough.sum())
    feats["rough_pixels"] = n_rough
    if n_rough < MIN_PIXELS:
        return Verdict(None, None, "no foreground", feats)

    names = list(_shapes.COLORS)
    palette_dark = 255.0 - np.array([_shapes.COLORS[c] for c in names], dtype=np.float64)
    mean_dark = dark[rough].mean(axis=0)
    # Compare directions, not magnitudes: a pale (blurred) shape still has its hue.
    unit = palette_dark / np.linalg.norm(palette_dark, axis=1, keepdims=True)
    cos = unit @ (mean_dark / max(np.linalg.norm(mean_dark), 1e-9))
    ci = int(np.argmax(cos))
    color = names[ci]
    feats["color_cos"] = float(cos[ci])

    target = palette_dark[ci]
    alpha = dark @ target / float(target @ target)  # 0 on white, 1 on the colour
    residual = np.linalg.norm(dark - alpha[..., None] * target, axis=2)
    purity = float((residual[rough] < PURITY_DISTANCE).mean())
    feats["purity"] = purity
    if purity < MIN_PURITY:
        return Verdict(None, None, f"mixed colours (purity {purity:.2f})", feats)

    mask = alpha > 0.5
    n_mask = int(mask.sum())
    if n_mask < MIN_PIXELS:
        return Verdict(color, None, "shape too faint", feats)
    main = _largest_component(mask)
    area = int(main.sum())
    feats["main_share"] = area / n_mask
    if area < MIN_MAIN * n_mask:
        return Verdict(color, None, f"several objects (largest holds {area / n_mask:.2f})", feats)
    ys, xs = np.nonzero(main)
    y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
    h, w = y1 - y0, x1 - x0
    grown = np.zeros_like(rough)
    grown[max(y0 - 2, 0):y1 + 2, max(x0 - 2, 0):x1 + 2] = True
    outside = int((rough & ~grown).sum())
    feats.update(box=(x0, y0, w, h), outside=outside)
    if outside > MAX_OUTSIDE * area:
        return Verdict(color, None, f"foreground outside the object ({outside} px)", feats)

    aspect = w / h
    fill = area / (w * h)
    top = float(main[y0:y0 + h // 2].sum() + (main[y0 + h // 2].sum() / 2 if h % 2 else 0)) / area
    feats.update(aspect=aspect, fill=fill, top=top)
    if not ASPECT_RANGE[0] <= aspect <= ASPECT_RANGE[1]:
        return Verdict(color, None, f"not as wide as tall (aspect {aspect:.2f})", feats)
    side = max(w, h)
    if not _shapes.MIN_SIZE - SIZE_SLACK <= side <= _shapes.MAX_SIZE + SIZE_SLACK:
        return Verdict(color, None, f"size {side} px out of range", feats)
    found = [s for s, ((f0, f1), (t0, t1)) in SHAPE_WINDOWS.items() if f0 <= fill <= f1 and t0 <= top <= t1]
    if len(found) != 1:
        return Verdict(color, None, f"no shape fits (fill {fill:.2f}, top {top:.2f})", feats)
    return Verdict(color, found[0], "ok", feats)


def matches(image, prompt: str) -> bool:
    """Whether ``image`` shows the colour and shape that ``prompt`` ('a red circle') asks for."""
    color, shape = parse_prompt(prompt)
    v = judge(image)
    return v.color == color and v.shape == shape


# pi/4: the fill ratio of a disk in its bounding box (documented above; kept for readers).
_CIRCLE_FILL = math.pi / 4
