"""A replica's CPU and memory on the kube backend, from its node's kubelet resource metrics: the parser,
the CPU percentage between readings, the per-node cache, and what a node that does not answer gives. The
node tier reads them from a real kubelet."""

from __future__ import annotations

import pytest
from test_kube_serving_episode import EPISODE, MemoryCluster, serving, spec

from mlsandbox.backends.kube.replica_metrics import ResourceMetrics, parse
from mlsandbox.backends.protocols.serving import ReplicaStats


def answer(cpu_s: float, at_ms: int, memory: float = 52_428_800.0, pod: str = "churn-1") -> str:
    """A ``/metrics/resource`` answer as the kubelet writes it (two containers, node-level lines too)."""
    return f"""# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{{container="model-server",namespace="sbx",pod="{pod}"}} {cpu_s} {at_ms}
container_cpu_usage_seconds_total{{container="other",namespace="sbx",pod="x"}} 1 {at_ms}
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{{container="model-server",namespace="sbx",pod="{pod}"}} {memory} {at_ms}
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{{container="model-server",namespace="sbx",pod="{pod}"}} 1.7e+09 {at_ms}
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 100 {at_ms}
"""


KEY = ("sbx", "churn-1", "model-server")


def test_the_kubelets_answer_is_read_per_container() -> None:
    found = parse(answer(12.5, 1_700_000_010_000))
    assert set(found) == {KEY, ("sbx", "x", "other")}
    usage = found[KEY]
    assert usage.cpu_s == 12.5 and usage.cpu_at == pytest.approx(1_700_000_010.0)
    assert usage.memory_bytes == 52_428_800.0 and usage.started_at == 1.7e9
    assert parse("") == {}


def test_cpu_is_the_share_of_a_core_between_two_readings_and_memory_the_working_set() -> None:
    texts = [answer(5.0, 1_700_000_010_000), answer(5.0, 1_700_000_010_000), answer(6.5, 1_700_000_020_000)]
    reads: list[str] = []
    now = [0.0]

    def read(node: str) -> str:
        reads.append(node)
        return texts[len(reads) - 1]

    metrics = ResourceMetrics(read, max_age_s=1.0, clock=lambda: now[0])
    # First reading: its average since it started (5 core-seconds in 10 s).
    assert metrics.usage("n1", KEY) == (pytest.approx(50.0), pytest.approx(50.0))
    assert metrics.usage("n1", KEY)[0] == pytest.approx(50.0) and reads == ["n1"]  # cached within a second
    now[0] = 2.0
    # The kubelet has not read the container again: the same figure as before, no division by zero.
    assert metrics.usage("n1", KEY)[0] == pytest.approx(50.0) and len(reads) == 2
    now[0] = 4.0
    # 1.5 core-seconds in 10 s: 15 %.
    assert metrics.usage("n1", KEY)[0] == pytest.approx(15.0)
    assert metrics.usage("n1", ("sbx", "gone", "model-server")) == (None, None)


def test_a_node_that_does_not_answer_says_nothing_and_is_asked_again_later() -> None:
    asked: list[str] = []
    now = [0.0]

    def read(node: str) -> None:
        asked.append(node)

    metrics = ResourceMetrics(read, max_age_s=1.0, retry_s=30.0, clock=lambda: now[0])
    assert metrics.usage("n1", KEY) == (None, None)
    now[0] = 10.0
    assert metrics.usage("n1", KEY) == (None, None) and asked == ["n1"]  # not asked again within 30 s
    now[0] = 31.0
    metrics.usage("n1", KEY)
    assert asked == ["n1", "n1"]
    garbled = ResourceMetrics(lambda node: "container_cpu_usage_seconds_total{ 1 2 3")
    assert garbled.usage("n1", KEY) == (None, None)


def test_replicas_gone_are_forgotten() -> None:
    metrics = ResourceMetrics(lambda node: answer(5.0, 1_700_000_010_000), max_age_s=0.0)
    metrics.usage("n1", KEY)
    metrics.forget(set())
    assert not metrics._last_cpu and not metrics._percent


def test_the_episodes_replicas_report_what_their_node_says() -> None:
    cluster = MemoryCluster()
    episode = serving(cluster, rollout_timeout_s=5.0).open("ep-1", EPISODE)
    episode.deploy(spec(replicas=2))
    for pods in cluster.pods_of.values():
        for i, pod in enumerate(pods):
            pod["spec"] = {"nodeName": f"node-{i}"}
    asked: list[str] = []

    def node_metrics(node: str) -> str | None:
        asked.append(node)
        if node == "node-1":
            return None  # no nodes/proxy right there, say
        refs = episode.replicas()["churn"]
        return answer(5.0, 1_700_000_010_000, pod=refs[0].replica).replace("sbx", "sbx-s1")

    episode._node_metrics = node_metrics  # type: ignore[method-assign]
    episode._usage._read_node = node_metrics
    first, second = episode.replicas()["churn"]
    stats = episode.stats(first)
    assert stats.memory_mb == pytest.approx(50.0) and stats.cpu_percent == pytest.approx(50.0)
    assert episode.stats(second) == ReplicaStats()
    assert sorted(set(asked)) == ["node-0", "node-1"]
    episode.close()
