"""Monitoring arithmetic: scrape parsing, histogram quantiles, counter resets, alert state machine, SLO;
scrapes through the episode's serving (an in-memory one) on a virtual clock's ticker."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from prometheus_client import generate_latest
from serving_fakes import InMemoryServing, ManualClock  # tests/unit is on sys.path

from mlsandbox.backends.protocols.serving import FEATURE_SERVICE, DeploymentSpec, Machine
from mlsandbox.scenario.serving import AlertRule, Serving
from mlsandbox.workloads.http_metrics import LATENCY_BUCKETS, HttpMetrics
from mlsandbox.world.episode import ServingRecord
from mlsandbox.world.serving.monitoring import (
    Monitor,
    Scrape,
    Snapshot,
    _Acc,
    histogram_quantile,
    parse_scrape,
)


def test_parse_scrape_reads_requests_errors_and_buckets_of_one_path() -> None:
    m = HttpMetrics("t")
    for _ in range(8):
        m.observe("/predict", 200, 0.004)
    m.observe("/predict", 503, 0.2)
    m.observe("/predict", 422, 0.001)
    m.observe("/health", 200, 0.001)
    s = parse_scrape(generate_latest(m.registry).decode(), "/predict")
    assert s.total == 10 and s.errors == 1  # 4xx is a client error, not a server one
    assert s.buckets[0.005] == 9 and s.buckets[float("inf")] == 10
    assert len(s.buckets) == len(LATENCY_BUCKETS) + 1


def test_parse_scrape_reads_the_same_as_every_sample_parsed() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    m = HttpMetrics("t")
    for path, status, seconds in [("/predict", 200, 0.003), ("/predictions", 500, 0.4), ("/predict", 502, 2.0),
                                  ("/health", 200, 0.001), ("/predict", 200, 0.03)]:  # fmt: skip
        m.observe(path, status, seconds)
    text = generate_latest(m.registry).decode()
    for path in ("/predict", "/predictions", "/health"):
        every = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
        mine = [s for s in every if s.labels.get("path") == path]
        expected = Scrape(
            total=sum(s.value for s in mine if s.name == "http_requests_total"),
            errors=sum(
                s.value for s in mine if s.name == "http_errors_total" and s.labels.get("kind") == "server"
            ),
            buckets={float(s.labels["le"]): s.value for s in mine if s.name.endswith("_bucket")},
        )
        assert parse_scrape(text, path) == expected and expected.total > 0


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    bounds = [0.01, 0.1, 1.0, float("inf")]
    assert histogram_quantile(0.5, bounds, [50, 100, 100, 100]) == pytest.approx(0.01)
    assert histogram_quantile(0.75, bounds, [50, 100, 100, 100]) == pytest.approx(0.055)
    assert histogram_quantile(0.99, bounds, [0, 0, 0, 10]) == 1.0  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, bounds, [0, 0, 0, 0]) is None


def test_accumulator_survives_replica_restarts() -> None:
    acc = _Acc()
    acc.add("r1", Scrape(10, 1, {0.1: 10, float("inf"): 10}))
    acc.add("r1", Scrape(15, 1, {0.1: 15, float("inf"): 15}))
    acc.add("r1", Scrape(3, 0, {0.1: 3, float("inf"): 3}))  # restarted: counts from zero again
    acc.add("r2", Scrape(4, 4, {0.1: 0, float("inf"): 4}))
    assert acc.total == 15 + 3 + 4 and acc.errors == 1 + 4
    assert acc.buckets[float("inf")] == 22 and acc.buckets[0.1] == 18


def _monitor(
    rule: AlertRule, serving: InMemoryServing | None = None, clock: ManualClock | None = None
) -> Monitor:
    spec = Serving(dataset="d", traffic=None, alerts=[rule])
    return Monitor(
        spec, serving or InMemoryServing(), ServingRecord(), clock or ManualClock(), production="churn"
    )


def _snap(t: float, total: float, slow: float) -> Snapshot:
    """``total`` requests so far, ``slow`` of them above 0.5 s."""
    return Snapshot(
        t, total, 0.0, {0.01: total - slow, 0.5: total - slow, float("inf"): total}, 10.0, 100.0, 1
    )


def test_alert_fires_after_its_duration_and_resolves() -> None:
    rule = AlertRule(name="Slow", metric="latency_p99_ms", threshold=200, for_s=2, window_s=2)
    mon = _monitor(rule)
    series: deque[Snapshot] = deque()
    mon.series["churn"] = series
    t0 = mon.t0
    history = [(0, 0, 0), (1, 100, 0), (2, 200, 0), (3, 300, 50), (4, 400, 100), (5, 500, 150), (6, 600, 200)]
    states: list[Any] = []
    for t, total, slow in history:
        series.append(_snap(t, total, slow))
        mon._evaluate(t0 + t)
        states.append([a.state for a in mon.alerts])
    # slow from t=3: pending at 3 and 4, firing once 2 s have passed (t=5)
    assert states[3] == [] and states[4] == [] and states[5] == ["firing"]
    assert mon.alerts[0].value is not None and mon.alerts[0].value > 200
    for t in (7, 8, 9):
        series.append(_snap(t, 600 + 100 * (t - 6), 200))  # fast again: no new slow requests
        mon._evaluate(t0 + t)
    assert [a.state for a in mon.alerts] == ["resolved"]
    assert mon.alerts[0].resolved_s is not None and mon.alerts[0].resolved_s > mon.alerts[0].started_s
    assert mon.ack(mon.alerts[0].id).acked
    with pytest.raises(KeyError):
        mon.ack("alert-99")


def test_stats_over_a_window() -> None:
    mon = _monitor(AlertRule(name="x", metric="rps", threshold=1))
    now = mon.clock.time()
    t = now - mon.t0
    mon.series["churn"] = deque([_snap(t - 10, 0, 0), _snap(t - 5, 50, 0), _snap(t, 150, 1)])
    st = mon.stats("churn", 5, now)
    assert st["rps"] == pytest.approx(20.0)
    assert st["error_rate"] == 0.0 and st["replicas_up"] == 1.0
    assert st["latency_p50_ms"] is not None and st["latency_p50_ms"] <= 10.0
    assert st["live_accuracy"] is None  # no traffic generator on this monitor


MACHINE = Machine(name="cpu-small", cpus=1.0, memory_mb=2048, credits_per_second=0.05)


def _spec(replicas: int = 2, version: str = "1") -> DeploymentSpec:
    return DeploymentSpec(
        deployment="churn",
        model="churn",
        registry_name="ep.churn",
        version=version,
        replicas=replicas,
        machine=MACHINE,
    )


def test_the_ticker_scrapes_ready_replicas_through_the_serving_and_counts_them_up() -> None:
    clock, serving = ManualClock(), InMemoryServing()
    serving.deploy(_spec(replicas=2))
    serving.start_feature_service("b", "k", "entity_id")
    mon = _monitor(AlertRule(name="x", metric="rps", threshold=1), serving, clock)
    mon.start()
    mon.start()  # idempotent: one ticker
    assert clock.tickers() == 1
    for _ in range(20):  # 10 requests per second for 10 s, spread over both replicas
        for _ in range(10):
            serving.request("churn", "/predict", b'{"entity_ids": ["a"]}', timeout_s=1.0)
        clock.advance(0.5)
        for _ in range(10):
            serving.request("churn", "/predict", b'{"entity_ids": ["a"]}', timeout_s=1.0)
        clock.advance(0.5)
    st = mon.stats("churn", 5.0)
    assert st["rps"] == pytest.approx(20.0)
    assert st["replicas_up"] == 2.0 and st["error_rate"] == 0.0
    assert st["cpu_percent"] == pytest.approx(20.0) and st["memory_mb"] == pytest.approx(200.0)
    assert st["latency_p50_ms"] is not None and st["latency_p50_ms"] <= 7.5
    assert mon.series[FEATURE_SERVICE][-1].replicas_up == 1  # scraped at /features: nothing counted
    assert mon.series[FEATURE_SERVICE][-1].total == 0

    # A replica that stops answering is neither scraped nor up; its counters are kept.
    serving.items["churn"].replicas[0].ready = False
    clock.advance(2.0)
    assert mon.series["churn"][-1].replicas_up == 1
    assert mon.series["churn"][-1].total == 400
    mon.stop()
    n = len(mon.series["churn"])
    clock.advance(5.0)
    assert len(mon.series["churn"]) == n  # stopped: no more scrapes


def test_a_replica_replaced_by_a_rollout_counts_from_zero_without_losing_the_total() -> None:
    clock, serving = ManualClock(), InMemoryServing()
    serving.deploy(_spec(replicas=1))
    mon = _monitor(AlertRule(name="x", metric="rps", threshold=1), serving, clock)
    for _ in range(30):
        serving.request("churn", "/predict", b'{"entity_ids": ["a"]}', timeout_s=1.0)
    mon.tick()
    serving.deploy(_spec(replicas=1, version="2"))  # a new replica, whose counters start at zero
    for _ in range(5):
        serving.request("churn", "/predict", b'{"entity_ids": ["a"]}', timeout_s=1.0)
    clock.advance(1.0)
    mon.tick()
    assert mon.series["churn"][-1].total == 35
