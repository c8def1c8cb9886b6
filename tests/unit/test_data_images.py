"""Images: PNGs decode with the recorded labels; the shape sits where the manifest says."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from mlsandbox.data import ImageDataset, generate_images


def test_images_decode_with_recorded_labels_and_attributes() -> None:
    spec = ImageDataset(
        name="shapes", count=60, size=32, textures=["plain", "stripes", "checker"], noise_std=4
    )
    g = generate_images(spec, 5)
    assert len(g.files) == 60 and g.labels.num_rows == 60
    rows = g.labels.to_pylist()
    assert {r["label"] for r in rows} == {"circle", "square", "triangle"}
    for row in rows:
        image = Image.open(io.BytesIO(g.files[row["file"]]))
        assert image.format == "PNG" and image.size == (32, 32) and image.mode == "RGB"
        pixels = np.asarray(image, dtype=float)
        centre = pixels[round(row["cy"]), round(row["cx"])]
        assert np.abs(centre - np.array(spec.background)).max() > 40, "the shape covers its centre"
        corner = pixels[0, 0]
        assert np.abs(corner - np.array(spec.background)).max() < 20, "the background at a corner"
    assert g.manifest["images"] == rows


def test_shapes_are_separable_by_fill_ratio() -> None:
    """Squares fill their box fully, circles ~79%, triangles ~33%: labels carry real signal."""
    g = generate_images(ImageDataset(name="s", count=90, noise_std=0), 1)
    ratios: dict[str, list[float]] = {}
    for row in g.labels.to_pylist():
        ratios.setdefault(row["label"], []).append(row["pixels_inside"] / (2 * row["radius"]) ** 2)
    assert min(ratios["square"]) > max(ratios["circle"]) > min(ratios["circle"]) > max(ratios["triangle"])


def test_same_seed_same_png_bytes() -> None:
    spec = ImageDataset(name="s", count=5, noise_std=10)
    assert generate_images(spec, 2).files == generate_images(spec, 2).files
    assert generate_images(spec, 2).files != generate_images(spec, 3).files


def test_bad_image_specs() -> None:
    with pytest.raises(ValidationError, match="unknown colours \\['mauve'\\]"):
        ImageDataset(name="s", count=1, colours=["mauve"])
    with pytest.raises(ValidationError, match="entries must be distinct"):
        ImageDataset(name="s", count=1, shapes=["circle", "circle"])
