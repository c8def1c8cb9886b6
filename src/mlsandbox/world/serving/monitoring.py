"""Monitoring: scrape the serving processes into time series, evaluate alert rules, account SLO time.

Every ``scrape_interval_s`` (a ticker of the runtime's clock) the monitor reads each ready replica's and
the feature service's ``/metrics`` (Prometheus text) and, where the backend reads them, its CPU percent
and memory, all through the episode's
:class:`~mlsandbox.backends.protocols.serving.EpisodeServing`. Counters are accumulated per
target across replica restarts and replacements (a counter that went down started again from zero), so a
window's figures are differences of two snapshots: requests per second, the share of 5xx answers, latency
quantiles interpolated in the histogram buckets (as Prometheus' ``histogram_quantile``). For the deployment
that takes production traffic, the clients' view is added (``client_*``: every request, including those no
replica answered), live accuracy (predictions whose true label has arrived) and feature drift (the largest
PSI of a served feature against the training distribution).

Alert rules (scenario ``serving.alerts``) fire when their condition holds for ``for_s`` seconds and
resolve when it stops holding. The SLO is checked on the clients' view at every scrape; the seconds it is
violated are added to the episode's serving record's ``slo_violation_s`` (and the seconds observed to its
``observed_s``: :class:`~mlsandbox.world.episode.ServingRecord`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from mlsandbox.backends.protocols.clock import Clock, Ticker
from mlsandbox.backends.protocols.serving import FEATURE_SERVICE, EpisodeServing, ServingError
from mlsandbox.data.drift_stats import psi_categorical, psi_numeric
from mlsandbox.scenario.serving import METRICS, AlertRule, Serving
from mlsandbox.world.episode import ServingRecord
from mlsandbox.world.serving.traffic import TrafficGenerator

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 1.0
_MAX_SNAPSHOTS = 3600
_PSI_MIN_ROWS = 50
_CLIENT_METRICS = tuple(m for m in METRICS if m.startswith("client_"))


@dataclass
class Scrape:
    total: float = 0.0
    errors: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)


_READ = ("http_requests_total{", "http_errors_total{", "http_request_duration_seconds_bucket{")
"""The samples :func:`parse_scrape` reads (a line of any other is not handed to the parser)."""


def parse_scrape(text: str, path: str) -> Scrape:
    """Requests, 5xx answers and the latency histogram of ``path`` from a ``/metrics`` text."""
    out = Scrape()
    label = f'path="{path}"'
    # the monitor scrapes every replica several times a second: only the comments (which type the
    # families) and the samples read below are parsed, not the other paths' nor the _created/_sum ones
    kept = "\n".join(
        line
        for line in text.splitlines()
        if line.startswith("#") or (line.startswith(_READ) and label in line)
    )
    for fam in text_string_to_metric_families(kept + "\n"):
        for s in fam.samples:
            if s.labels.get("path") != path:
                continue
            if s.name == "http_requests_total":
                out.total += s.value
            elif s.name == "http_errors_total" and s.labels.get("kind") == "server":
                out.errors += s.value
            elif s.name == "http_request_duration_seconds_bucket":
                out.buckets[float(s.labels["le"])] = s.value
    return out


def histogram_quantile(q: float, bounds: list[float], counts: list[float]) -> float | None:
    """The q-quantile from cumulative bucket counts (upper bounds ascending, the last +Inf)."""
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


@dataclass
class Snapshot:
    t: float
    total: float
    errors: float
    buckets: dict[float, float]
    cpu_percent: float | None
    memory_mb: float | None
    replicas_up: int


@dataclass
class _Acc:
    """Accumulated counters of one target over all its processes, ever."""

    total: float = 0.0
    errors: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)
    last: dict[str, Scrape] = field(default_factory=dict)

    def add(self, proc: str, s: Scrape) -> None:
        prev = self.last.get(proc)
        if prev is None or s.total < prev.total:  # new process, or restarted: counting from zero
            prev = Scrape()
        self.total += s.total - prev.total
        self.errors += s.errors - prev.errors
        for le, v in s.buckets.items():
            self.buckets[le] = self.buckets.get(le, 0.0) + v - prev.buckets.get(le, 0.0)
        self.last[proc] = s


@dataclass
class Alert:
    id: str
    rule: str
    target: str
    metric: str
    op: str
    threshold: float
    severity: str
    started_s: float
    value: float | None
    state: str = "firing"
    resolved_s: float | None = None
    acked: bool = False

    def view(self) -> dict[str, Any]:
        return {
            "alert_id": self.id,
            "rule": self.rule,
            "target": self.target,
            "state": self.state,
            "severity": self.severity,
            "condition": f"{self.metric} {self.op} {self.threshold}",
            "value": None if self.value is None else round(self.value, 4),
            "started_s": round(self.started_s, 1),
            "resolved_s": None if self.resolved_s is None else round(self.resolved_s, 1),
            "acked": self.acked,
        }


class Monitor:
    """Scrapes, keeps the series, evaluates alerts; one per episode."""

    def __init__(
        self,
        spec: Serving,
        serving: EpisodeServing,
        record: ServingRecord,
        clock: Clock,
        *,
        production: str,
        traffic: TrafficGenerator | None = None,
        reference: pd.DataFrame | None = None,
    ) -> None:
        self.spec = spec
        self.serving = serving
        self.record = record
        """The episode's serving record: the SLO seconds go there."""
        self.clock = clock
        self.production = production
        self.traffic = traffic
        self.reference = reference
        self.t0 = clock.time()
        self.series: dict[str, deque[Snapshot]] = {}
        self._acc: dict[str, _Acc] = {}
        self.alerts: list[Alert] = []
        self._rules: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.RLock()
        self._ticker: Ticker | None = None
        self._last_tick: float | None = None
        self.scrape_seconds: deque[float] = deque(maxlen=1000)
        self._tick_lock = threading.Lock()

    # ------------------------------------------------------------------------------------- ticker

    def start(self) -> None:
        """Scrape every ``scrape_interval_s`` from now on (idempotent)."""
        if self._ticker is None:
            self._ticker = self.clock.every(self.spec.scrape_interval_s, self._scheduled, name="monitor")

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()

    def _scheduled(self) -> None:
        try:
            self.tick()
        except Exception as e:  # monitoring never dies of one bad scrape
            log.warning("monitor tick failed: %s", e)

    # -------------------------------------------------------------------------------------- scrape

    def tick(self) -> None:
        """One scrape of every target, then the SLO and the alert rules (also called on demand)."""
        with self._tick_lock:
            self._tick()

    def _tick(self) -> None:
        now = self.clock.time()
        t = now - self.t0
        for name, refs in self.serving.replicas().items():
            path = "/features" if name == FEATURE_SERVICE else "/predict"
            acc = self._acc.setdefault(name, _Acc())
            cpu, mem, up = 0.0, 0.0, 0
            have_stats = False
            for ref in refs:
                if not ref.ready:
                    continue
                up += 1
                t_s = self.clock.monotonic()
                with contextlib.suppress(ServingError):  # a replica that does not answer: no sample
                    text = self.serving.scrape(ref, timeout_s=SCRAPE_TIMEOUT_S)
                    acc.add(ref.replica, parse_scrape(text, path))
                self.scrape_seconds.append(self.clock.monotonic() - t_s)
                stats = self.serving.stats(ref)
                if stats.cpu_percent is not None and stats.memory_mb is not None:
                    cpu, mem, have_stats = cpu + stats.cpu_percent, mem + stats.memory_mb, True
            snap = Snapshot(
                t,
                acc.total,
                acc.errors,
                dict(acc.buckets),
                cpu if have_stats else None,
                mem if have_stats else None,
                up,
            )
            with self.lock:
                self.series.setdefault(name, deque(maxlen=_MAX_SNAPSHOTS)).append(snap)
        dt = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        self._slo(now, dt)
        self._evaluate(now)

    # ------------------------------------------------------------------------------------- figures

    def _at(self, series: deque[Snapshot], t: float) -> Snapshot | None:
        best = None
        for s in series:
            if s.t <= t:
                best = s
            else:
                break
        return best if best is not None else (series[0] if series else None)

    def stats(
        self,
        target: str,
        window_s: float,
        end: float | None = None,
        metrics: Collection[str] | None = None,
    ) -> dict[str, float | None]:
        """Every metric of ``target`` over the window ending at ``end`` (unix time; default now). With
        ``metrics``, the production clients' figures (live accuracy, feature drift, ``client_*``) are
        worked out only when named there (the others are None): an alert rule's tick needs one metric,
        and feature drift reads every row served in the window."""
        wanted = set(METRICS) if metrics is None else set(metrics)
        end = self.clock.time() if end is None else end
        out: dict[str, float | None] = dict.fromkeys(METRICS)
        with self.lock:
            series = self.series.get(target)
            s1 = self._at(series, end - self.t0) if series else None
            s0 = self._at(series, end - self.t0 - window_s) if series else None
            inside = [s for s in series if end - self.t0 - window_s < s.t <= end - self.t0] if series else []
        if s1 is not None and s0 is not None:
            span = max(s1.t - s0.t, 1e-9)
            n = s1.total - s0.total
            out["rps"] = n / span if s1 is not s0 else 0.0
            out["error_rate"] = (s1.errors - s0.errors) / n if n > 0 else None
            bounds = sorted(s1.buckets)
            counts = [s1.buckets[b] - s0.buckets.get(b, 0.0) for b in bounds]
            for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms"), (0.99, "latency_p99_ms")):
                v = histogram_quantile(q, bounds, counts)
                out[key] = None if v is None else v * 1000.0
            cpus = [s.cpu_percent for s in inside if s.cpu_percent is not None]
            mems = [s.memory_mb for s in inside if s.memory_mb is not None]
            out["cpu_percent"] = float(np.mean(cpus)) if cpus else None
            out["memory_mb"] = float(mems[-1]) if mems else None
            out["replicas_up"] = float(s1.replicas_up)
        if target == self.production and self.traffic is not None and self.traffic.t0 is not None:
            if wanted & set(_CLIENT_METRICS):
                out.update(self._client_view(end - window_s, end))
            if "live_accuracy" in wanted:
                pairs = self.traffic.labelled(end - window_s, end)
                out["live_accuracy"] = float(np.mean([str(p) == str(y) for p, y in pairs])) if pairs else None
            if "feature_drift_psi" in wanted:
                out["feature_drift_psi"] = self._psi(end - window_s, end)
        return out

    def _client_view(self, start: float, end: float) -> dict[str, float | None]:
        assert self.traffic is not None
        outcomes = self.traffic.log.window(start, end)
        span = max(min(end - start, end - (self.traffic.t0 or end)), 1e-9)
        if not outcomes:
            return {"client_rps": 0.0, "client_error_rate": None, "client_latency_p99_ms": None}
        bad = sum(1 for o in outcomes if o.status != 200)
        lat = [o.latency_s if o.status else self.traffic.traffic.timeout_s for o in outcomes]
        return {
            "client_rps": len(outcomes) / span,
            "client_error_rate": bad / len(outcomes),
            "client_latency_p99_ms": float(np.quantile(lat, 0.99)) * 1000.0,
        }

    def _psi(self, start: float, end: float) -> float | None:
        if self.reference is None or self.traffic is None:
            return None
        cur = self.traffic.served_features(start, end)
        if len(cur) < _PSI_MIN_ROWS:
            return None
        values = []
        for c in self.reference.columns:
            if c not in cur.columns:
                continue
            if pd.api.types.is_numeric_dtype(self.reference[c]):
                v = psi_numeric(self.reference[c].to_numpy(), cur[c].to_numpy(dtype=float))
            else:
                v = psi_categorical(self.reference[c], cur[c])
            if v is not None:
                values.append(v)
        return max(values) if values else None

    def drift_by_column(self, window_s: float) -> dict[str, float]:
        if self.reference is None or self.traffic is None:
            return {}
        end = self.clock.time()
        cur = self.traffic.served_features(end - window_s, end)
        if len(cur) < _PSI_MIN_ROWS:
            return {}
        out = {}
        for c in self.reference.columns:
            if c in cur.columns:
                if pd.api.types.is_numeric_dtype(self.reference[c]):
                    v = psi_numeric(self.reference[c].to_numpy(), cur[c].to_numpy(dtype=float))
                else:
                    v = psi_categorical(self.reference[c], cur[c])
                if v is not None:
                    out[c] = round(v, 4)
        return out

    def metrics_view(
        self, target: str, names: list[str], window_s: float, points: int = 10
    ) -> dict[str, Any]:
        end = self.clock.time()
        summary = self.stats(target, window_s, end, metrics=names)
        step = window_s / points
        series: dict[str, list[Any]] = {n: [] for n in names}
        for k in range(points):
            e = end - window_s + (k + 1) * step
            if e - self.t0 < 0:
                continue
            st = self.stats(target, step, e, metrics=names)
            for n in names:
                v = st.get(n)
                series[n].append([round(e - end, 1), None if v is None else round(v, 4)])
        return {
            "target": target,
            "window_s": window_s,
            "summary": {n: None if summary.get(n) is None else round(float(summary[n]), 4) for n in names},  # type: ignore[arg-type]
            "series": series,
        }

    # -------------------------------------------------------------------------------------- alerts

    def _slo(self, now: float, dt: float) -> None:
        if self.traffic is None or self.traffic.t0 is None or dt <= 0:
            return
        slo = self.spec.slo
        view = self._client_view(now - slo.window_s, now)
        self.record.observed_s += dt
        err, p99 = view["client_error_rate"], view["client_latency_p99_ms"]
        violated = (err is not None and err > slo.max_error_rate) or (
            p99 is not None and p99 > slo.latency_p99_ms
        )
        if violated:
            self.record.slo_violation_s += dt

    def _rule_targets(self, rule: AlertRule) -> list[str]:
        with self.lock:
            known = list(self.series)
        if rule.target == "*":
            return [t for t in known if t != FEATURE_SERVICE]
        return [rule.target] if rule.target in known else []

    def _evaluate(self, now: float) -> None:
        for rule in self.spec.alerts:
            for target in self._rule_targets(rule):
                value = self.stats(target, rule.window_s, now, metrics=(rule.metric,)).get(rule.metric)
                cond = value is not None and (
                    value > rule.threshold if rule.op == ">" else value < rule.threshold
                )
                st = self._rules.setdefault((rule.name, target), {"since": None, "alert": None})
                alert: Alert | None = st["alert"]
                if cond:
                    st["since"] = st["since"] or now
                    if alert is None and now - st["since"] >= rule.for_s:
                        with self.lock:
                            alert = Alert(
                                f"alert-{len(self.alerts) + 1}",
                                rule.name,
                                target,
                                rule.metric,
                                rule.op,
                                rule.threshold,
                                rule.severity,
                                now - self.t0,
                                value,
                            )
                            self.alerts.append(alert)
                        st["alert"] = alert
                    elif alert is not None:
                        alert.value = value
                else:
                    st["since"] = None
                    if alert is not None:
                        with self.lock:
                            alert.state, alert.resolved_s = "resolved", now - self.t0
                        st["alert"] = None

    def ack(self, alert_id: str) -> Alert:
        with self.lock:
            for a in self.alerts:
                if a.id == alert_id:
                    a.acked = True
                    return a
        raise KeyError(alert_id)
