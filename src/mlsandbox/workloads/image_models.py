"""The image models' own pieces, as scikit-learn estimators: decoding, :class:`ImageFeatures`,
:class:`ImagePixels` and :class:`SmallCNN` (see :mod:`mlsandbox.workloads.image_classifier`). A fitted
model holds only numpy arrays and these types, so it loads (skops) and serves without PyTorch. Imports
nothing from mlsandbox but the workloads' own constants."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin

INSTALL_TORCH = "pip install 'mlsandbox[rl]'"
"""The install command that brings PyTorch (named when an algorithm needs it and it is missing)."""
CELLS = 4
BINS = 8


# ------------------------------------------------------------------------------------------ decoding


def image_bytes(value: Any) -> bytes:
    """The encoded bytes of a cell: bytes as stored, or base64 text as a JSON request carries them."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value.encode()
    raise ValueError(f"expected image bytes, got {type(value).__name__}")


def decode(value: Any) -> Any:
    """An encoded image as an RGB ``uint8`` array (height, width, 3); the library's error when it
    cannot be read."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(image_bytes(value))) as img:
        img.load()
        return np.asarray(img.convert("RGB"))


def decode_all(values: Any, size: int | None) -> Any:
    """Every image as one ``(n, h, w, 3)`` array; a ``ValueError`` naming the first unreadable image or
    the first whose size differs (from ``size``, else from the first image's)."""
    import numpy as np

    arrays: list[Any] = []
    for i, value in enumerate(values):
        try:
            pixels = decode(value)
        except (OSError, ValueError, SyntaxError) as e:
            raise ValueError(f"cannot decode image {i}: {type(e).__name__}: {e}") from None
        want = size or (arrays[0].shape[0] if arrays else pixels.shape[0])
        if pixels.shape[:2] != (want, want):
            raise ValueError(
                f"image {i} is {pixels.shape[1]}x{pixels.shape[0]}, expected {want}x{want}: "
                "all input arrays must have the same shape"
            )
        arrays.append(pixels)
    if not arrays:
        raise ValueError("no image to read")
    return np.stack(arrays)


def _grey(pixels: Any) -> Any:
    return pixels.astype("float32").mean(axis=-1) / 255.0


def _orientation_histograms(grey: Any) -> Any:
    """Histograms of gradient orientations (unsigned, :data:`BINS` bins) weighted by magnitude, in a
    :data:`CELLS` x :data:`CELLS` grid and over the whole image: ``(n, (CELLS**2 + 1) * BINS)``."""
    import numpy as np

    gy, gx = np.gradient(grey, axis=(1, 2))
    magnitude = np.hypot(gx, gy)
    angle = np.mod(np.arctan2(gy, gx), np.pi)
    bins = np.minimum((angle / np.pi * BINS).astype(int), BINS - 1)
    n, h, w = grey.shape
    onehot = np.zeros((n, h, w, BINS), dtype="float32")
    np.put_along_axis(onehot, bins[..., None], magnitude[..., None].astype("float32"), axis=-1)
    ch, cw = h // CELLS, w // CELLS
    cells = onehot[:, : ch * CELLS, : cw * CELLS].reshape(n, CELLS, ch, CELLS, cw, BINS).sum(axis=(2, 4))
    whole = onehot.sum(axis=(1, 2))
    return np.concatenate([cells.reshape(n, -1), whole], axis=1) / float(h * w)


class ImageFeatures(TransformerMixin, BaseEstimator):
    """Rows with an encoded image in ``column`` to pixel features: the grey image downsampled to
    ``grid`` x ``grid``, an 8-bin histogram per colour channel and histograms of gradient orientations."""

    def __init__(self, column: str = "image", grid: int = 8) -> None:
        self.column = column
        self.grid = grid

    def fit(self, x: Any, y: Any = None) -> ImageFeatures:
        first = decode(x[self.column].iloc[0])
        self.size_ = int(first.shape[0])
        return self

    def transform(self, x: Any) -> Any:
        import numpy as np

        pixels = decode_all(x[self.column].tolist(), self.size_)
        grey = _grey(pixels)
        n, h, w = grey.shape
        g = self.grid
        small = grey[:, : h // g * g, : w // g * g].reshape(n, g, h // g, g, w // g).mean(axis=(2, 4))
        bins = (pixels.reshape(n, -1, 3) // 32).astype("int64") + np.arange(3) * 8
        flat = (bins + (np.arange(n) * 24)[:, None, None]).ravel()
        colour = np.bincount(flat, minlength=n * 24).reshape(n, 24) / float(h * w)
        return np.concatenate([small.reshape(n, -1), colour, _orientation_histograms(grey)], axis=1)


class ImagePixels(TransformerMixin, BaseEstimator):
    """Rows with an encoded image in ``column`` to a ``(n, 3, h, w)`` float array in [0, 1]."""

    def __init__(self, column: str = "image") -> None:
        self.column = column

    def fit(self, x: Any, y: Any = None) -> ImagePixels:
        self.size_ = int(decode(x[self.column].iloc[0]).shape[0])
        return self

    def transform(self, x: Any) -> Any:
        pixels = decode_all(x[self.column].tolist(), self.size_)
        return pixels.transpose(0, 3, 1, 2).astype("float32") / 255.0


# ------------------------------------------------------------------------------------------ the CNN


def _conv(x: Any, weight: Any, bias: Any) -> Any:
    """A 3x3 convolution with padding 1: ``(n, c, h, w)`` by ``(k, c, 3, 3)``."""
    import numpy as np

    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w 3 3
    return np.einsum("nchwij,kcij->nkhw", windows, weight, optimize=True) + bias[None, :, None, None]


def _pool(x: Any) -> Any:
    n, c, h, w = x.shape
    return x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


class SmallCNN(ClassifierMixin, BaseEstimator):
    """Two 3x3 convolution blocks (ReLU, 2x2 max-pool), global max pooling and a linear layer,
    trained with Adam and cross-entropy on PyTorch CPU; the fitted weights are numpy arrays and
    :meth:`predict_proba` runs in numpy."""

    def __init__(
        self,
        epochs: int = 12,
        learning_rate: float = 0.01,
        batch_size: int = 32,
        channels: int = 16,
        weight_decay: float = 0.0,
        class_weight: str | None = None,
        random_state: int = 0,
    ) -> None:
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.channels = channels
        self.weight_decay = weight_decay
        self.class_weight = class_weight
        self.random_state = random_state

    def fit(self, x: Any, y: Any, say: Any = None) -> SmallCNN:
        import numpy as np

        try:
            import torch
        except ImportError:
            raise ImportError(
                f"the cnn algorithm trains with PyTorch, which is not installed: {INSTALL_TORCH}"
            ) from None
        if self.class_weight not in (None, "balanced"):
            raise ValueError(f"class_weight must be None or 'balanced', got {self.class_weight!r}")
        if int(self.epochs) < 1 or int(self.batch_size) < 1 or int(self.channels) < 1:
            raise ValueError("epochs, batch_size and channels must be positive")
        self.classes_, codes = np.unique(np.asarray(y), return_inverse=True)
        torch.manual_seed(int(self.random_state))
        c = int(self.channels)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, c // 2 or 1, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(c // 2 or 1, c, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.AdaptiveMaxPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c, len(self.classes_)),
        )  # fmt: skip
        counts = np.bincount(codes, minlength=len(self.classes_)).astype("float32")
        weights = (
            torch.tensor(len(codes) / (len(counts) * counts)) if self.class_weight == "balanced" else None
        )
        loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
        optimiser = torch.optim.Adam(
            net.parameters(), lr=float(self.learning_rate), weight_decay=float(self.weight_decay)
        )
        data, target = torch.tensor(np.asarray(x, dtype="float32")), torch.tensor(codes, dtype=torch.long)
        generator = torch.Generator().manual_seed(int(self.random_state))
        for epoch in range(1, int(self.epochs) + 1):
            order = torch.randperm(len(data), generator=generator)
            total = 0.0
            for start in range(0, len(data), int(self.batch_size)):
                batch = order[start : start + int(self.batch_size)]
                optimiser.zero_grad()
                loss = loss_fn(net(data[batch]), target[batch])
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(batch)
            mean = total / len(data)
            if say is not None:
                say(f"epoch {epoch}/{self.epochs} loss={mean:.6g}")
            if not np.isfinite(mean):
                raise ArithmeticError(
                    f"loss is {mean} at epoch {epoch} with learning_rate={self.learning_rate:g}"
                )
        params = [p.detach().numpy().astype("float32").copy() for p in net.parameters()]
        self.conv1_w_, self.conv1_b_, self.conv2_w_, self.conv2_b_, self.head_w_, self.head_b_ = params
        return self

    def predict_proba(self, x: Any) -> Any:
        import numpy as np

        h = np.asarray(x, dtype="float32")
        h = _pool(np.maximum(_conv(h, self.conv1_w_, self.conv1_b_), 0))
        h = _pool(np.maximum(_conv(h, self.conv2_w_, self.conv2_b_), 0))
        logits = h.max(axis=(2, 3)) @ self.head_w_.T + self.head_b_
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, x: Any) -> Any:
        return self.classes_[self.predict_proba(x).argmax(axis=1)]


__all__ = ["INSTALL_TORCH", "ImageFeatures", "ImagePixels", "SmallCNN", "decode", "decode_all", "image_bytes"]
