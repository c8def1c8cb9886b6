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


INSPECTION = ImageDataset(
    name="inspect", count=600, shapes=["ok", "scratch", "chip", "stain"], textures=["plain"], noise_std=8
)


def test_inspection_classes_are_drawn_deterministically_per_seed() -> None:
    spec = INSPECTION.model_copy(update={"count": 40})
    first, again, other = generate_images(spec, 4), generate_images(spec, 4), generate_images(spec, 5)
    assert first.files == again.files and first.labels.equals(again.labels)
    assert first.files != other.files
    rows = first.labels.to_pylist()
    assert {r["label"] for r in rows} == {"ok", "scratch", "chip", "stain"}
    for label in ("ok", "scratch", "chip", "stain"):
        names = [r["file"] for r in rows if r["label"] == label]
        assert [first.files[n] for n in names] == [again.files[n] for n in names], label
    assert first.manifest["classes"] == ["ok", "scratch", "chip", "stain"]


def test_a_defect_is_small_and_drawn_where_the_manifest_says() -> None:
    """Without noise: a chip shows the background inside the part's disc, a scratch or a stain darkens
    the part's colour, an ok part is whole; every defect covers a small share of the part."""
    from mlsandbox.data.images import DEFECT_DARKNESS

    spec = INSPECTION.model_copy(update={"count": 80, "noise_std": 0.0, "colours": ["yellow"]})
    g = generate_images(spec, 2)
    yellow = np.array([230, 210, 40])
    for row in g.labels.to_pylist():
        pixels = np.asarray(Image.open(io.BytesIO(g.files[row["file"]])), dtype=float).reshape(-1, 3)
        part = int((np.abs(pixels - yellow).max(axis=1) < 2).sum())
        if row["label"] == "ok":
            assert row["defect_pixels"] == 0 and part == row["pixels_inside"]
            continue
        assert 0 < row["defect_pixels"] < 0.12 * (row["pixels_inside"] + row["defect_pixels"]), row
        if row["label"] == "chip":
            assert part == row["pixels_inside"], "the bite is no longer part of the part"
        else:
            dark = np.round(yellow * DEFECT_DARKNESS[row["label"]])
            assert int((np.abs(pixels - dark).max(axis=1) < 2).sum()) == row["defect_pixels"], row
            assert part == row["pixels_inside"] - row["defect_pixels"]


def test_inspection_classes_are_learnable_from_pixel_features() -> None:
    """A pixel-feature logistic regression on 400 images tells the four classes apart on 200 others far
    above chance (a quarter), though each defect is a few dozen pixels."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from mlsandbox.workloads.image_models import ImageFeatures

    g = generate_images(INSPECTION, 0)
    rows = g.labels.to_pylist()
    frame = pd.DataFrame({"image": [g.files[r["file"]] for r in rows], "label": [r["label"] for r in rows]})
    train, test = frame.iloc[:400], frame.iloc[400:]
    model = make_pipeline(ImageFeatures("image"), StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(train[["image"]], train["label"])
    assert f1_score(test["label"], model.predict(test[["image"]]), average="macro") > 0.65


def test_shape_and_inspection_classes_do_not_mix() -> None:
    with pytest.raises(ValidationError, match=r"shapes\n.*mixes shape classes \['circle'\] with inspection"):
        ImageDataset(name="s", count=1, shapes=["circle", "scratch"])
    with pytest.raises(ValidationError, match=r"shapes\.1\n.*'ok', 'scratch', 'chip' or 'stain'"):
        ImageDataset(name="s", count=1, shapes=["ok", "dent"])  # type: ignore[list-item]
    assert ImageDataset(name="s", count=1, shapes=["ok", "chip"]).shapes == ["ok", "chip"]
