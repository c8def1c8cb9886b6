"""What the serving pack adds to each step's telemetry in the audit log (for the console; never an
observation): the episode's deployments (the same views on every backend), each scrape target's metric
points between consecutive scrapes of the monitor since the previous step (requests per second, error
rate, latency quantiles, CPU, memory, replicas up), and the alerts with their start and end times.

Times are the runtime clock's (the monitor's snapshots are relative to its start, ``monitor.t0``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlsandbox.world.serving.monitoring import Snapshot, histogram_quantile

if TYPE_CHECKING:
    from mlsandbox.gateway.packs.serving.handlers import World

DEPLOYMENT_FIELDS = ("deployment", "model", "version", "machine", "replicas", "replicas_up")


@dataclass
class TelemetryCursor:
    """What the episode's telemetry has written so far (a pack state: ``ctx.pack_state``)."""

    series: dict[str, float] = field(default_factory=dict)
    """Each target's last snapshot time already written."""


def serving_telemetry(world: World, cursor: TelemetryCursor) -> dict[str, Any]:
    """The ``serving`` part of a step's telemetry: deployments, new metric points, alerts."""
    monitor = world.monitor
    deployments = [
        {k: v for k, v in view.model_dump(mode="json").items() if k in DEPLOYMENT_FIELDS}
        for view in world.serving.list()
    ]
    with monitor.lock:
        snapshots = {name: list(s) for name, s in monitor.series.items()}
        alerts = []
        for a in monitor.alerts:
            view = a.view()
            view["started_at"] = round(monitor.t0 + a.started_s, 3)
            view["resolved_at"] = None if a.resolved_s is None else round(monitor.t0 + a.resolved_s, 3)
            alerts.append(view)
    series = {}
    for target, snaps in snapshots.items():
        points = _points(cursor, target, snaps, monitor.t0)
        if points:
            series[target] = points
    return {"deployments": deployments, "series": series, "alerts": alerts}


def _points(cursor: TelemetryCursor, target: str, snaps: list[Snapshot], t0: float) -> list[dict[str, Any]]:
    """One point per interval between consecutive scrapes newer than what was already written."""
    last = cursor.series.get(target)
    out = []
    for prev, cur in itertools.pairwise(snaps):
        if last is not None and cur.t <= last:
            continue
        out.append(interval_point(prev, cur, t0))
    if snaps:
        cursor.series[target] = snaps[-1].t
    return out


def interval_point(prev: Snapshot, cur: Snapshot, t0: float) -> dict[str, Any]:
    """Figures of one target between two monitor snapshots (cumulative counters; ``t`` relative to
    ``t0``): the point is stamped with the later snapshot's time."""
    span = max(cur.t - prev.t, 1e-9)
    n = cur.total - prev.total
    bounds = sorted(cur.buckets)
    counts = [cur.buckets[b] - prev.buckets.get(b, 0.0) for b in bounds]
    point: dict[str, Any] = {
        "t": round(t0 + cur.t, 3),
        "rps": round(max(n, 0.0) / span, 3),
        "error_rate": round((cur.errors - prev.errors) / n, 4) if n > 0 else None,
    }
    for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms"), (0.99, "latency_p99_ms")):
        v = histogram_quantile(q, bounds, counts) if n > 0 else None
        point[key] = None if v is None else round(v * 1000.0, 3)
    point["cpu_percent"] = None if cur.cpu_percent is None else round(cur.cpu_percent, 1)
    point["memory_mb"] = None if cur.memory_mb is None else round(cur.memory_mb, 1)
    point["replicas_up"] = cur.replicas_up
    return point


__all__ = ["DEPLOYMENT_FIELDS", "TelemetryCursor", "interval_point", "serving_telemetry"]
