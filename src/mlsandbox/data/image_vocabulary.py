"""The vocabulary of generated images (shapes, textures, colours): data only, so that validating an image
dataset's spec imports no numpy; :mod:`mlsandbox.data.images` draws the images."""

from __future__ import annotations

from typing import Literal

Shape = Literal["circle", "square", "triangle", "cross"]
Texture = Literal["plain", "stripes", "checker", "dots"]

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "magenta": (200, 40, 200),
    "cyan": (40, 200, 210),
}
