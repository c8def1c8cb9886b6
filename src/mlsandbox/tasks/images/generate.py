"""Generate an image classification dataset: training rows with their defects, the hidden holdout and a
manifest of every defect (rows by position in the training file)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.data.images import ImageDataset, generate_images
from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.tasks.images.spec import SHIFT_BLUR_RADIUS, SHIFT_BRIGHTNESS, ImageClassificationDataset

_START = datetime(2024, 1, 1)
_SPAN_DAYS = 365
OTHER_SIZES = (24, 48, 64)
"""Sizes an image of another camera may have (the spec's own size excluded)."""


@dataclass(frozen=True, eq=False)
class GeneratedImageClassification:
    train: pd.DataFrame
    """``file``, ``captured_at`` (ISO), ``image`` (PNG bytes), ``label``."""
    holdout: pd.DataFrame
    """``image``, ``label``: the common size, readable, shifted like the newest images."""
    manifest: dict[str, Any]


def _png(img: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=False, compress_level=6)
    return out.getvalue()


def shifted(data: bytes, shift: str) -> bytes:
    """An image's bytes as the new camera takes it (``dark``, ``bright`` or ``blur``)."""
    from PIL import Image, ImageEnhance, ImageFilter

    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
    if shift == "blur":
        return _png(rgb.filter(ImageFilter.GaussianBlur(SHIFT_BLUR_RADIUS)))
    return _png(ImageEnhance.Brightness(rgb).enhance(SHIFT_BRIGHTNESS[shift]))


def resized(data: bytes, size: int) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return _png(img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))


def _pool(spec: ImageClassificationDataset, seed: int, name: str, rows: int) -> tuple[list[bytes], list[str]]:
    """``rows`` images with labels drawn from the spec's probabilities (generated uniformly, then picked)."""
    p = spec.probabilities()
    rng = rng_for(seed, spec.name, name, "labels")
    wanted = rng.choice(len(spec.labels), size=rows, p=p)
    need = np.bincount(wanted, minlength=len(spec.labels))
    count = math.ceil(max(need) * len(spec.labels) * 1.3) + 40
    images = generate_images(
        ImageDataset(
            name=f"{spec.name}_{name}"[:40],
            count=count,
            size=spec.size,
            shapes=spec.labels,
            colours=spec.colours,
            textures=spec.textures,
            noise_std=spec.noise_std,
        ),
        seed,
    )
    by_label: dict[str, list[bytes]] = {s: [] for s in spec.labels}
    for row in images.labels.to_pylist():
        by_label[row["label"]].append(images.files[row["file"]])
    taken = {s: 0 for s in spec.labels}
    files: list[bytes] = []
    labels: list[str] = []
    for code in wanted:
        label = spec.labels[int(code)]
        files.append(by_label[label][taken[label] % len(by_label[label])])
        taken[label] += 1
        labels.append(label)
    return files, labels


def generate_image_classification(
    spec: ImageClassificationDataset, seed: int
) -> GeneratedImageClassification:
    check_seed(seed)
    images, labels = _pool(spec, seed, "train", spec.rows)
    held_images, held_labels = _pool(spec, seed, "holdout", spec.holdout_rows)
    rng = rng_for(seed, spec.name, "image-defects")
    recent_from = round(spec.rows * (1 - spec.recent_share))
    shifted_rows: list[int] = []
    held_shifted: list[int] = []
    if spec.shift != "none":
        recent = np.arange(recent_from, spec.rows)
        shifted_rows = sorted(recent[rng.random(len(recent)) < spec.shift_share].tolist())
        for i in shifted_rows:
            images[i] = shifted(images[i], spec.shift)
        held_shifted = np.flatnonzero(rng.random(spec.holdout_rows) < spec.shift_share).tolist()
        for i in held_shifted:
            held_images[i] = shifted(held_images[i], spec.shift)
    order = rng.permutation(spec.rows)
    n_bad = round(spec.unreadable_rate * spec.rows)
    n_size = round(spec.size_mismatch_rate * spec.rows)
    unreadable = sorted(order[:n_bad].tolist())
    mismatched = sorted(order[n_bad : n_bad + n_size].tolist())
    sizes = [s for s in OTHER_SIZES if s != spec.size]
    other_size: dict[int, int] = {}
    for i in mismatched:
        other_size[i] = sizes[int(rng.integers(len(sizes)))]
        images[i] = resized(images[i], other_size[i])
    for k, i in enumerate(unreadable):
        data = images[i]
        images[i] = b"" if k % 4 == 3 else data[: max(16, int(len(data) * float(rng.uniform(0.2, 0.6))))]
    seconds = np.sort(rng.integers(0, _SPAN_DAYS * 86_400, size=spec.rows))
    stamps = [(_START + timedelta(seconds=int(s))).isoformat(sep=" ") for s in seconds]
    files = [f"IMG_{i + 1:05d}.png" for i in range(spec.rows)]
    frame = pd.DataFrame(
        {
            spec.file_column: files,
            spec.time_column: stamps,
            spec.image_column: images,
            spec.target: labels,
        }
    )
    holdout = pd.DataFrame({spec.image_column: held_images, spec.target: held_labels})
    counts = pd.Series(labels).value_counts()
    manifest = {
        "generator": "image_classification",
        "dataset": spec.name,
        "seed": seed,
        "rows": spec.rows,
        "size": spec.size,
        "labels": list(spec.labels),
        "label_counts": {s: int(counts.get(s, 0)) for s in spec.labels},
        "unreadable": [files[i] for i in unreadable],
        "size_mismatches": {files[i]: f"{s}x{s}" for i, s in other_size.items()},
        "shift": {
            "kind": spec.shift,
            "recent_from": stamps[recent_from] if recent_from < spec.rows else None,
            "recent_shifted_images": len(shifted_rows),
            "holdout_shifted_images": len(held_shifted),
        },
        "holdout_rows": spec.holdout_rows,
    }
    return GeneratedImageClassification(train=frame, holdout=holdout, manifest=manifest)


__all__ = [
    "OTHER_SIZES",
    "GeneratedImageClassification",
    "generate_image_classification",
    "resized",
    "shifted",
]
