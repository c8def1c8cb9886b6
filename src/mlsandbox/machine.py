"""What a measurement ran on: the same block in every ``.bench/*.json`` and calibration record, so that
figures from two hosts can be told apart. The same 2-core kind of machine can be twice as fast on one host
as on another; ``reference_ms`` (a fixed single-core workload) says which kind of host a figure came from."""

from __future__ import annotations

import os
import platform
import random
import time
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def reference_ms(repeat: int = 3) -> float:
    """Milliseconds for a fixed single-threaded workload (sorting 200,000 Python floats and 2M numpy
    floats), best of ``repeat``: smaller is a faster core."""
    import numpy as np

    values = [random.Random(0).random() for _ in range(200_000)]
    array = np.random.default_rng(0).random(2_000_000)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        sorted(values)
        np.sort(array, kind="quicksort")
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def describe() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "reference_ms": reference_ms(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def summary(machine: dict[str, Any]) -> str:
    return (
        f"machine: {machine['cpus']} x {machine['cpu_model']}, reference workload {machine['reference_ms']} ms "
        f"(smaller is faster), load average {machine['load_average_1m']}"
    )


__all__ = ["cpu_model", "describe", "reference_ms", "summary"]
