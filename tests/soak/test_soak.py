"""Soak and leaks (the ``soak`` tier): 100 short episodes on the session sandbox through the in-process env,
then 100 through the HTTP gateway (``mlsandbox serve`` as its own process); afterwards every count is back
to its baseline (MinIO buckets, MLflow active experiments and registered models, Prefect deployments, flow
runs and variables) and each process's memory and open descriptors are within the tolerance stated in
``benchmarks/bench_soak.py`` (:data:`TOLERANCE`). The figures go to ``.bench/soak.json``.

``MLSANDBOX_SOAK_EPISODES`` changes the number of episodes per interface (100 by default).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_soak

pytestmark = [pytest.mark.services, pytest.mark.soak]
EPISODES = int(os.environ.get("MLSANDBOX_SOAK_EPISODES", "100"))


def _check(result: dict[str, Any]) -> None:
    bench_soak.print_result(result)
    bench_soak.save([result])
    assert result["episodes"] == EPISODES and len(result["samples"]) >= 2
    base, after = result["baseline"], result["after"]
    assert set(bench_soak.COUNTS) <= set(after["counts"])
    assert {"minio", "mlflow", "prefect-server", "prefect-worker"} <= set(after["processes"])
    # Every process measured at the baseline still runs (a service stopped before is not measured).
    not_running = [
        f"{name}: baseline {proc}, after {after['processes'].get(name)}"
        for name, proc in base["processes"].items()
        if after["processes"].get(name, {}).get("rss_mib", 0) <= 0
    ]
    assert not_running == [], not_running
    assert result["leaks"] == [], result["leaks"]


def test_short_episodes_through_the_env_leave_nothing(sandbox: Any) -> None:
    _check(bench_soak.soak_env(sandbox, EPISODES))


def test_short_episodes_through_the_http_gateway_leave_nothing(sandbox: Any) -> None:
    result = bench_soak.soak_http(sandbox, EPISODES)
    assert "gateway" in result["after"]["processes"]
    _check(result)


def test_the_leak_check_finds_a_leak() -> None:
    """The comparison itself: a bucket left, a growing process and descriptors piling up are each found."""
    proc = {"rss_mib": 200.0, "fds": 10, "threads": 5}
    counts = dict.fromkeys(bench_soak.COUNTS, 1)
    base = {"counts": counts, "processes": {"mlflow": proc}}
    assert bench_soak.leaks(base, base) == []
    settled = {"counts": counts, "processes": {"mlflow": {**proc, "rss_mib": 260.0}}}
    assert bench_soak.leaks(base, settled, settled) == []
    after = {
        "counts": {**counts, "buckets": 2},
        "processes": {"mlflow": {"rss_mib": 400.0, "fds": 40, "threads": 5}},
    }
    middle = {"counts": counts, "processes": {"mlflow": {**proc, "rss_mib": 300.0}}}
    found = " | ".join(bench_soak.leaks(base, after, middle))
    assert "buckets: 1 -> 2" in found and "RSS 200.0 -> 400.0" in found, found
    assert "still growing" in found and "fds 10 -> 40" in found, found
    assert bench_soak.leaks(base, {"counts": counts, "processes": {}}) == ["mlflow: gone"]
    # MinIO's heap follows activity within its own bound (see TOLERANCE), and no further.
    minio = {"counts": counts, "processes": {"minio": {**proc, "rss_mib": 120.0}}}
    busy = {"counts": counts, "processes": {"minio": {**proc, "rss_mib": 275.0}}}
    assert bench_soak.leaks(minio, busy, minio) == []
    grown = {"counts": counts, "processes": {"minio": {**proc, "rss_mib": 300.0}}}
    assert bench_soak.leaks(minio, grown) == ["minio: RSS 120.0 -> 300.0 MiB (more than +160)"]
