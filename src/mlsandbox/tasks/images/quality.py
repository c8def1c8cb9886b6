"""What ``check_data_quality`` reports for a table of encoded images, and the preparation steps.

The profile: rows, label counts and the imbalance ratio, unreadable images (count and file names), the
distribution of image sizes, and brightness and sharpness (variance of the Laplacian) of the older images
against the newest fifth (a camera change shows there). Steps (each returns the new frame and what it
changed; the input is never modified):

* ``drop_unreadable``: drop rows whose image does not decode (and rows without a label);
* ``resize``: resize every image to the most common size;
* ``augment_brightness``: add a copy of every image at a random brightness (x0.4 to x1.8);
* ``augment_blur``: add a copy of every image blurred by a random radius (0.5 to 2.5 pixels).
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from mlsandbox.workloads.image_models import decode, image_bytes

Step = Literal["drop_unreadable", "resize", "augment_brightness", "augment_blur"]
STEPS: tuple[Step, ...] = get_args(Step)
RECENT_SHARE = 0.2
AUGMENT_SEED = 7


def _decoded(values: pd.Series) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = []
    for v in values:
        try:
            out.append(decode(v))
        except Exception:  # any decoding failure is an unreadable file
            out.append(None)
    return out


def _stats(pixels: np.ndarray) -> tuple[float, float]:
    """Mean brightness (0..255) and sharpness: the variance of the 4-neighbour Laplacian of the grey
    image over its own variance (so a darker image is not a blurrier one)."""
    grey = pixels.astype("float32").mean(axis=-1)
    lap = -4 * grey[1:-1, 1:-1] + grey[:-2, 1:-1] + grey[2:, 1:-1] + grey[1:-1, :-2] + grey[1:-1, 2:]
    return float(grey.mean()), float(lap.var() / max(float(grey.var()), 1e-6))


def profile(
    frame: pd.DataFrame,
    image_column: str,
    label_column: str,
    time_column: str | None,
    file_column: str | None,
) -> dict[str, Any]:
    """The data-quality profile of an image classification table."""
    missing = [c for c in (image_column, label_column) if c not in frame.columns]
    if missing:
        raise KeyError(f"columns {missing} are not in the data (columns: {list(frame.columns)})")
    ordered = frame.sort_values(time_column, kind="stable") if time_column in frame.columns else frame
    decoded = _decoded(ordered[image_column])
    bad = [i for i, d in enumerate(decoded) if d is None]
    names = (
        ordered[file_column].astype(str).tolist()
        if file_column in frame.columns
        else [str(i) for i in ordered.index]
    )
    sizes = Counter(f"{d.shape[1]}x{d.shape[0]}" for d in decoded if d is not None)
    counts = frame[label_column].value_counts()
    stats = [(i, _stats(d)) for i, d in enumerate(decoded) if d is not None]
    cut = int(len(ordered) * (1 - RECENT_SHARE))
    old = [s for i, s in stats if i < cut]
    new = [s for i, s in stats if i >= cut]

    def summary(rows: list[tuple[float, float]]) -> dict[str, float | None]:
        if not rows:
            return {"brightness_mean": None, "sharpness_median": None}
        return {
            "brightness_mean": round(float(np.mean([b for b, _ in rows])), 2),
            "sharpness_median": round(float(np.median([s for _, s in rows])), 3),
        }

    before, after = summary(old), summary(new)
    change: dict[str, float | None] = {"brightness_ratio": None, "sharpness_ratio": None}
    if before["brightness_mean"] and after["brightness_mean"] is not None:
        change["brightness_ratio"] = round(after["brightness_mean"] / before["brightness_mean"], 3)
    if before["sharpness_median"] and after["sharpness_median"] is not None:
        change["sharpness_ratio"] = round(after["sharpness_median"] / before["sharpness_median"], 3)
    return {
        "rows": len(frame),
        "label_counts": {str(k): int(v) for k, v in counts.sort_index().items()},
        "missing_labels": int(frame[label_column].isna().sum()),
        "imbalance_ratio": round(float(counts.max() / counts.min()), 2) if len(counts) else None,
        "unreadable_images": len(bad),
        "unreadable_examples": [names[i] for i in bad[:5]],
        "image_sizes": dict(sizes.most_common()),
        "common_size": sizes.most_common(1)[0][0] if sizes else None,
        "by_time": {
            "newest_rows_from": str(ordered[time_column].iloc[cut])
            if time_column in frame.columns and cut < len(ordered)
            else None,
            "older": before,
            "newest_fifth": after,
            **change,
        },
    }


def _png(img: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG", compress_level=6)
    return out.getvalue()


def _augmented(frame: pd.DataFrame, image_column: str, step: Step) -> tuple[pd.DataFrame, int]:
    from PIL import Image, ImageEnhance, ImageFilter

    rng = np.random.default_rng(AUGMENT_SEED)
    copies = []
    for _, row in frame.iterrows():
        try:
            with Image.open(io.BytesIO(image_bytes(row[image_column]))) as img:
                rgb = img.convert("RGB")
        except Exception:  # an unreadable image gets no copy
            continue
        if step == "augment_blur":
            out = rgb.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.5))))
        else:
            out = ImageEnhance.Brightness(rgb).enhance(float(rng.uniform(0.4, 1.8)))
        copy = row.copy()
        copy[image_column] = _png(out)
        copies.append(copy)
    if not copies:
        return frame.reset_index(drop=True), 0
    return pd.concat([frame, pd.DataFrame(copies)], ignore_index=True), len(copies)


def prepare(
    frame: pd.DataFrame, step: Step, *, image_column: str, label_column: str
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Apply one preparation ``step``; returns the new frame (fresh 0..n-1 index) and what changed."""
    if step == "drop_unreadable":
        keep = [d is not None for d in _decoded(frame[image_column])]
        out = frame.loc[np.asarray(keep, dtype=bool) & frame[label_column].notna().to_numpy()]
        return out.reset_index(drop=True), {"rows_removed": len(frame) - len(out)}
    if step == "resize":
        from PIL import Image

        decoded = _decoded(frame[image_column])
        sizes = Counter(d.shape[0] for d in decoded if d is not None and d.shape[0] == d.shape[1])
        if not sizes:
            return frame.reset_index(drop=True), {"images_resized": 0, "size": None}
        size = sizes.most_common(1)[0][0]
        out = frame.copy()
        resized = 0
        values = list(out[image_column])
        for i, d in enumerate(decoded):
            if d is not None and d.shape[:2] != (size, size):
                img = Image.fromarray(d).resize((size, size), Image.Resampling.BILINEAR)
                values[i] = _png(img)
                resized += 1
        out[image_column] = values
        return out.reset_index(drop=True), {"images_resized": resized, "size": f"{size}x{size}"}
    if step in ("augment_brightness", "augment_blur"):
        out, added = _augmented(frame, image_column, step)
        return out, {"images_added": added}
    raise ValueError(f"unknown preparation step {step!r}; choose one of {list(STEPS)}")


__all__ = ["STEPS", "Step", "prepare", "profile"]
