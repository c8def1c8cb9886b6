"""The dataset spec of the image classification kind: photos of parts (shapes on textured backgrounds,
see :mod:`mlsandbox.data.images`) labelled by shape, or by inspection class (a disc that is ``ok`` or
carries a scratch, a chip or a stain), and the export's defects.

Stored as a user meets an exported image dataset: one Parquet file, a row per image with its file name,
capture time, the encoded PNG bytes (``image``) and the label. The defects an engineer has to notice:

* ``unreadable_rate``: files that do not decode (cut off mid-transfer, or empty);
* ``size_mismatch_rate``: images from another camera, saved at another size than the rest;
* ``label_probabilities``: class imbalance (a rare class is easy to ignore);
* ``shift``: the newest ``recent_share`` of the images and the hidden holdout come from a new camera:
  darker, brighter or blurrier in ``shift_share`` of them.

The hidden holdout has the common size, decodes, and is shifted like the newest images.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.image_vocabulary import PALETTE, ImageLabel, Shape, Texture, check_labels
from mlsandbox.data.spec import _check_name

Shift = Literal["none", "dark", "bright", "blur"]
SHIFT_BRIGHTNESS = {"dark": 0.35, "bright": 1.9}
"""The brightness factor of a shifted image."""
SHIFT_BLUR_RADIUS = 1.6
"""The Gaussian blur radius of a blurred image, in pixels."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageClassificationDataset(_Model):
    kind: Literal["image_classification"] = "image_classification"
    name: str = Field(max_length=30)
    rows: int = Field(default=1500, ge=100, le=50_000)
    holdout_rows: int = Field(default=600, ge=50, le=20_000)
    size: int = Field(default=32, ge=16, le=128)
    labels: list[ImageLabel] = Field(
        default_factory=lambda: list[ImageLabel](list[Shape](["circle", "square", "triangle", "cross"])),
        min_length=2,
    )
    """The classes: the shape in the image, or the inspected part's state (``ok``, ``scratch``, ``chip``,
    ``stain``); not both."""
    label_probabilities: list[float] | None = None
    textures: list[Texture] = Field(default_factory=lambda: list[Texture](["plain", "stripes"]), min_length=1)
    colours: list[str] = Field(default_factory=lambda: list(PALETTE), min_length=1)
    noise_std: float = Field(default=10.0, ge=0, le=64)
    unreadable_rate: float = Field(default=0.0, ge=0, le=0.3)
    size_mismatch_rate: float = Field(default=0.0, ge=0, le=0.4)
    shift: Shift = "none"
    shift_share: float = Field(default=0.8, ge=0, le=1)
    recent_share: float = Field(default=0.2, gt=0, le=0.5)
    formats: list[Literal["parquet"]] = Field(default_factory=lambda: ["parquet"], min_length=1)  # type: ignore[arg-type]
    image_column: str = "image"
    target: str = "label"
    time_column: str = "captured_at"
    file_column: str = "file"

    _names = field_validator("name", "image_column", "target", "time_column", "file_column")(_check_name)
    _labels = field_validator("labels")(check_labels)

    @model_validator(mode="after")
    def _consistent(self) -> ImageClassificationDataset:
        p = self.label_probabilities
        if p is not None and (len(p) != len(self.labels) or any(x <= 0 for x in p) or abs(sum(p) - 1) > 1e-6):
            raise ValueError(f"label_probabilities must be {len(self.labels)} positive numbers summing to 1")
        columns = [self.image_column, self.target, self.time_column, self.file_column]
        if len(set(columns)) != len(columns):
            raise ValueError(f"image_column, target, time_column and file_column must differ: {columns}")
        unknown = sorted(set(self.colours) - set(PALETTE))
        if unknown:
            raise ValueError(f"unknown colours {unknown}; known: {sorted(PALETTE)}")
        return self

    def probabilities(self) -> list[float]:
        return list(self.label_probabilities or [1 / len(self.labels)] * len(self.labels))


__all__ = ["SHIFT_BLUR_RADIUS", "SHIFT_BRIGHTNESS", "ImageClassificationDataset", "Shift"]
