"""Throughput of the image trainer; figures printed and saved to ``.bench/images.json``.

Run: ``.venv/bin/python benchmarks/bench_images.py [--rows N] [--epochs E]`` (defaults 1000 and 4).

On one generated dataset of 32x32 PNG images (already clean: readable, one size), each algorithm of the
image kind is fitted as the trainer job fits it (:func:`mlsandbox.workloads.image_classifier.fit_job`:
decode, featurise, fit, validate), one thread (``threadpoolctl`` and ``torch.set_num_threads(1)``), and
the figures are images per second: of the whole fit (training images over its wall time) and of
prediction (the validation images, again, over the time ``predict`` takes). The CNN is measured only where
PyTorch is installed. On a shared, loaded machine the figures carry the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary

OUT = Path(__file__).resolve().parents[1] / ".bench" / "images.json"


def _measure(frame: Any, algorithm: str, hyperparams: dict[str, Any]) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    from mlsandbox.workloads import image_classifier

    with threadpool_limits(limits=1):
        t0 = time.perf_counter()
        metrics, model = image_classifier.fit_job(
            frame, algorithm, hyperparams, 1, "label", "image", lambda _: None
        )
        fit_s = time.perf_counter() - t0
        train_images = round(len(frame) * (1 - image_classifier.VALIDATION_FRACTION))
        t0 = time.perf_counter()
        model.predict(frame[["image"]])
        predict_s = time.perf_counter() - t0
    return {
        "hyperparams": hyperparams,
        "train_images": train_images,
        "fit_s": round(fit_s, 3),
        "fit_images_per_s": round(train_images / fit_s, 1),
        "predict_images_per_s": round(len(frame) / predict_s, 1),
        "val_accuracy": metrics["val_accuracy"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=4)
    opts = parser.parse_args()
    from mlsandbox.tasks.images.generate import generate_image_classification
    from mlsandbox.tasks.images.spec import ImageClassificationDataset
    from mlsandbox.workloads.image_classifier import torch_available

    machine = describe_machine()
    print(machine_summary(machine))
    frame = generate_image_classification(ImageClassificationDataset(name="bench", rows=opts.rows), 1).train
    runs: dict[str, Any] = {"logistic_regression": _measure(frame, "logistic_regression", {})}
    if torch_available():
        import torch

        torch.set_num_threads(1)
        runs["cnn"] = _measure(frame, "cnn", {"epochs": opts.epochs})
    else:
        print("PyTorch is not installed: the cnn is not measured (pip install 'mlsandbox[rl]')")
    print(f"{'algorithm':<22} {'fit s':>8} {'fit img/s':>10} {'predict img/s':>14} {'val acc':>8}")
    for name, r in runs.items():
        print(f"{name:<22} {r['fit_s']:>8.2f} {r['fit_images_per_s']:>10.1f} "
              f"{r['predict_images_per_s']:>14.1f} {r['val_accuracy']:>8.3f}")  # fmt: skip
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        json.dumps({"machine": machine, "rows": opts.rows, "size": 32, "runs": runs}, indent=2) + "\n"
    )
    print(f"saved {OUT}")


if __name__ == "__main__":
    main()
