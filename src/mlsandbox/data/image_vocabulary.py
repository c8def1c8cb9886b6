"""The vocabulary of generated images (shapes, inspection classes, textures, colours): data only, so that
validating an image dataset's spec imports no numpy; :mod:`mlsandbox.data.images` draws the images.

A dataset's classes are either shapes (a part is told by its outline) or inspection classes (the same
part, ``ok`` or carrying a defect: a ``scratch``, a ``chip`` out of its edge, a ``stain``), never both.
"""

from __future__ import annotations

from typing import Literal, get_args

Shape = Literal["circle", "square", "triangle", "cross"]
Inspection = Literal["ok", "scratch", "chip", "stain"]
ImageLabel = Literal[Shape, Inspection]
"""A class of generated images: a shape or an inspection class."""
Texture = Literal["plain", "stripes", "checker", "dots"]

SHAPES: frozenset[str] = frozenset(get_args(Shape))
INSPECTIONS: frozenset[str] = frozenset(get_args(Inspection))

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "magenta": (200, 40, 200),
    "cyan": (40, 200, 210),
}


def check_labels(labels: list[str]) -> list[str]:
    """``labels`` if they are distinct and all shapes or all inspection classes; else a ``ValueError``
    saying what is wrong (a field validator, so pydantic names the field)."""
    if len(set(labels)) != len(labels):
        raise ValueError(f"entries must be distinct, got {labels}")
    shapes = [x for x in labels if x in SHAPES]
    inspections = [x for x in labels if x in INSPECTIONS]
    if shapes and inspections:
        raise ValueError(
            f"mixes shape classes {shapes} with inspection classes {inspections}: an image dataset's "
            f"classes are either shapes ({sorted(SHAPES)}) or inspection classes ({sorted(INSPECTIONS)})"
        )
    return labels
