"""Small labelled PNG images: one part per image on a background, with texture, colour and noise.

The label is the part's shape (``circle``, ``square``, ...), or, for inspection classes, the state of one
part, a disc: ``ok``, or carrying a small defect: a ``scratch`` (a thin dark line across it), a ``chip``
(a bite out of its edge, the background showing) or a ``stain`` (a darker blot on it). Each image's
class, centre, size, colour and texture (and a defect's place, angle and size) are drawn per image and
recorded in the manifest and in the labels table (``file``, ``label`` and those attributes). Drawn with
Pillow, textured and noised with numpy, encoded by Pillow's PNG writer (no timestamps: the same spec and
seed give the same bytes).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlsandbox.data.image_vocabulary import INSPECTIONS, PALETTE, ImageLabel, Shape, Texture, check_labels
from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.spec import _check_name


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageDataset(_Model):
    kind: Literal["images"] = "images"
    name: str
    count: int = Field(ge=1, le=200_000)
    size: int = Field(default=32, ge=16, le=256)
    shapes: list[ImageLabel] = Field(
        default_factory=lambda: list[ImageLabel](list[Shape](["circle", "square", "triangle"])), min_length=2
    )
    """The classes: shapes, or inspection classes (``ok``, ``scratch``, ``chip``, ``stain``), not both."""
    colours: list[str] = Field(default_factory=lambda: list(PALETTE), min_length=1)
    textures: list[Texture] = Field(default_factory=lambda: list[Texture](["plain"]), min_length=1)
    noise_std: float = Field(default=8.0, ge=0, le=128)
    """Gaussian pixel noise, in grey levels."""
    background: tuple[int, int, int] = (20, 20, 20)
    min_fraction: float = Field(default=0.35, gt=0.1, le=0.9)
    """Smallest shape size as a fraction of the image side (largest: min + 0.3, capped at 0.9); an
    inspected part's size is :data:`INSPECTION_FRACTION` (the same product at the same distance)."""

    _name = field_validator("name")(_check_name)
    _labels = field_validator("shapes")(check_labels)

    @field_validator("textures", "colours")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"entries must be distinct, got {v}")
        return v

    @field_validator("colours")
    @classmethod
    def _known_colours(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(PALETTE))
        if unknown:
            raise ValueError(f"unknown colours {unknown}; known: {sorted(PALETTE)}")
        return v


@dataclass(frozen=True, eq=False)
class GeneratedImages:
    files: dict[str, bytes]
    """PNG bytes by file name (``img_000000.png``, ...: names do not reveal the labels)."""
    labels: pa.Table
    manifest: dict[str, Any]


def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "triangle":
        return [
            (cx + r * math.cos(a), cy + r * math.sin(a)) for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)
        ]
    w = r / 3
    return [
        (cx - w, cy - r), (cx + w, cy - r), (cx + w, cy - w), (cx + r, cy - w), (cx + r, cy + w), (cx + w, cy + w),
        (cx + w, cy + r), (cx - w, cy + r), (cx - w, cy + w), (cx - r, cy + w), (cx - r, cy - w), (cx - w, cy - w),
    ]  # fmt: skip


def _mask(shape: str, size: int, cx: float, cy: float, r: float) -> np.ndarray:
    from PIL import Image, ImageDraw

    canvas = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(canvas)
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        draw.ellipse(box, fill=255)
    elif shape == "square":
        draw.rectangle(box, fill=255)
    else:
        draw.polygon(_polygon(shape, cx, cy, r), fill=255)
    return np.asarray(canvas) > 127


INSPECTION_FRACTION = (0.6, 0.8)
"""An inspected part's diameter as a fraction of the image side (smallest, largest)."""
DEFECT_DARKNESS = {"scratch": 0.35, "stain": 0.45}
"""The brightness factor of a scratch's and a stain's pixels (of the part's colour)."""


def _defect(
    label: str, size: int, cx: float, cy: float, r: float, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, float]]:
    """The pixels a defect covers (a chip: the bite taken out of the part; a scratch or a stain: the
    pixels darkened) and where it is; ``ok`` covers none."""
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    dx, dy = xx - cx, yy - cy
    if label == "scratch":
        angle = float(rng.uniform(0, math.pi))
        offset = float(rng.uniform(-0.4, 0.4)) * r
        half = math.sqrt(r * r - offset * offset)
        length = float(rng.uniform(0.5, 0.9)) * 2 * half
        start = float(rng.uniform(-half, half - length))
        along = dx * math.cos(angle) + dy * math.sin(angle)
        across = -dx * math.sin(angle) + dy * math.cos(angle) - offset
        width = max(1.0, size / 32)
        mask = (np.abs(across) <= width / 2) & (along >= start) & (along <= start + length)
        return mask, {"defect_angle": angle, "defect_size": length}
    if label == "chip":
        angle = float(rng.uniform(0, 2 * math.pi))
        radius = float(rng.uniform(0.25, 0.35)) * r
        mask = np.hypot(dx - r * math.cos(angle), dy - r * math.sin(angle)) <= radius
        return mask, {"defect_angle": angle, "defect_size": radius}
    if label == "stain":
        angle = float(rng.uniform(0, 2 * math.pi))
        distance = float(rng.uniform(0, 0.5)) * r
        a = float(rng.uniform(0.22, 0.32)) * r
        b = a * float(rng.uniform(0.6, 1.0))
        tilt = float(rng.uniform(0, math.pi))
        ex, ey = dx - distance * math.cos(angle), dy - distance * math.sin(angle)
        u = ex * math.cos(tilt) + ey * math.sin(tilt)
        v = -ex * math.sin(tilt) + ey * math.cos(tilt)
        mask = (u / a) ** 2 + (v / b) ** 2 <= 1
        return mask, {"defect_angle": angle, "defect_size": a}
    return np.zeros((size, size), dtype=bool), {"defect_angle": 0.0, "defect_size": 0.0}


def _texture(kind: str, size: int, period: int) -> np.ndarray:
    """Brightness factor per pixel inside the shape."""
    yy, xx = np.mgrid[0:size, 0:size]
    if kind == "stripes":
        return np.where((xx // period) % 2 == 0, 1.0, 0.55)
    if kind == "checker":
        return np.where(((xx // period) + (yy // period)) % 2 == 0, 1.0, 0.55)
    if kind == "dots":
        return np.where(((xx % period) < period // 2) & ((yy % period) < period // 2), 0.55, 1.0)
    return np.ones((size, size))


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(out, format="PNG", optimize=False, compress_level=6)
    return out.getvalue()


def generate_images(spec: ImageDataset, seed: int) -> GeneratedImages:
    check_seed(seed)
    rng = rng_for(seed, spec.name, "images")
    size = spec.size
    files: dict[str, bytes] = {}
    rows: list[dict[str, Any]] = []
    for index in range(spec.count):
        shape = spec.shapes[int(rng.integers(len(spec.shapes)))]
        colour = spec.colours[int(rng.integers(len(spec.colours)))]
        texture = spec.textures[int(rng.integers(len(spec.textures)))]
        inspected = shape in INSPECTIONS
        if inspected:
            low, high = INSPECTION_FRACTION
            fraction = low + float(rng.random()) * (high - low)
        else:
            fraction = spec.min_fraction + float(rng.random()) * min(0.3, 0.9 - spec.min_fraction)
        r = fraction * size / 2
        cx = float(rng.uniform(r + 1, size - r - 1))
        cy = float(rng.uniform(r + 1, size - r - 1))
        inside = _mask("circle" if inspected else shape, size, cx, cy, r)
        defect: dict[str, Any] = {}
        covered = np.zeros_like(inside)
        if inspected:
            covered, where = _defect(shape, size, cx, cy, r, rng)
            covered &= inside
            if shape == "chip":
                inside &= ~covered
            defect = {"defect_pixels": int(covered.sum()), **{k: round(v, 3) for k, v in where.items()}}
        pixels = np.empty((size, size, 3), dtype=np.float64)
        pixels[:] = spec.background
        factor = _texture(texture, size, max(2, size // 8))[inside]
        pixels[inside] = np.outer(factor, PALETTE[colour])
        if shape in DEFECT_DARKNESS:
            pixels[covered] *= DEFECT_DARKNESS[shape]
        if spec.noise_std:
            pixels += rng.standard_normal(pixels.shape) * spec.noise_std
        name = f"img_{index:06d}.png"
        files[name] = _png(np.clip(np.round(pixels), 0, 255).astype(np.uint8))
        rows.append(
            {
                "file": name,
                "label": shape,
                "colour": colour,
                "texture": texture,
                "cx": round(cx, 3),
                "cy": round(cy, 3),
                "radius": round(r, 3),
                "pixels_inside": int(inside.sum()),
                **defect,
            }
        )
    labels = pa.Table.from_pylist(rows)
    manifest = {
        "generator": "images",
        "dataset": spec.name,
        "seed": seed,
        "count": spec.count,
        "size": size,
        "classes": list(spec.shapes),
        "label_counts": {s: sum(1 for r in rows if r["label"] == s) for s in spec.shapes},
        "images": rows,
    }
    return GeneratedImages(files=files, labels=labels, manifest=manifest)
