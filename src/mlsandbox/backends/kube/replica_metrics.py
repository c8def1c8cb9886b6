"""CPU and memory of the kube backend's pods, from their node's kubelet (a replica's for the serving
monitor, a service's for ``mlsandbox status``): the resource metrics endpoint (``/metrics/resource``, what metrics-server itself scrapes), read through the API server's
node proxy (``/api/v1/nodes/<node>/proxy/metrics/resource``; the credentials need ``nodes/proxy``).

- Memory is the container's working set (``container_memory_working_set_bytes``, what the kubelet
  compares with the memory limit), in MiB.
- CPU is a percentage of one core, as ``psutil``'s on the local backend: the cumulative
  ``container_cpu_usage_seconds_total`` between two readings of the same container, over the kubelet's
  timestamps of those readings; the first reading of a container gives its average since it started
  (``container_start_time_seconds``).
- One read of a node serves every replica on it for ``max_age_s`` (a second by default): a scrape round
  over N replicas reads each node once. A node that does not answer (no right, no kubelet behind it, as
  under kwok) gives None, which is what the protocol's
  :class:`~mlsandbox.backends.protocols.serving.ReplicaStats` says for "not read", and is asked again
  only after ``retry_s`` (30 s by default), so the monitor's ticks do not wait on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

CPU = "container_cpu_usage_seconds_total"
MEMORY = "container_memory_working_set_bytes"
START = "container_start_time_seconds"


@dataclass(frozen=True)
class ContainerUsage:
    """One container's figures in one read of its node (seconds are the kubelet's clock)."""

    cpu_s: float | None = None
    cpu_at: float | None = None
    memory_bytes: float | None = None
    started_at: float | None = None


Key = tuple[str, str, str]
"""(namespace, pod, container)."""


def parse(text: str) -> dict[Key, ContainerUsage]:
    """The containers of a ``/metrics/resource`` answer (Prometheus text format)."""
    found: dict[Key, dict[str, float | None]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (CPU, MEMORY, START):
                continue
            labels = sample.labels
            if not {"namespace", "pod", "container"} <= labels.keys():
                continue
            row = found.setdefault((labels["namespace"], labels["pod"], labels["container"]), {})
            if sample.name == CPU:
                at = sample.timestamp
                row["cpu_s"], row["cpu_at"] = sample.value, float(at) if at is not None else None
            elif sample.name == MEMORY:
                row["memory_bytes"] = sample.value
            else:
                row["started_at"] = sample.value
    return {k: ContainerUsage(**v) for k, v in found.items()}


def read_resource_metrics(cluster: Any, node: str, timeout_s: float = 5.0) -> str | None:
    """``node``'s ``/metrics/resource`` through the API server (``cluster.core``, a CoreV1Api); None when
    it cannot be read (no kubelet behind the node, no ``nodes/proxy`` right, no answer)."""
    try:
        response: Any = cluster.core.connect_get_node_proxy_with_path(
            node, "metrics/resource", _preload_content=False, _request_timeout=timeout_s
        )
        return bytes(response.data).decode()
    except Exception:  # whatever the client raises, the figures are not read
        return None


def pod_memory(text: str) -> dict[str, int]:
    """Working-set bytes of each pod (``namespace/name``: the sum of its containers') in a node's answer."""
    out: dict[str, int] = {}
    for (namespace, pod, _), usage in parse(text).items():
        if usage.memory_bytes is not None:
            key = f"{namespace}/{pod}"
            out[key] = out.get(key, 0) + int(usage.memory_bytes)
    return out


class ResourceMetrics:
    """Per-container CPU % and memory, read from nodes by ``read_node`` (node name -> the endpoint's text,
    or None when it cannot be read)."""

    def __init__(
        self,
        read_node: Callable[[str], str | None],
        *,
        max_age_s: float = 1.0,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_node = read_node
        self.max_age_s = max_age_s
        self.retry_s = retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[float, Mapping[Key, ContainerUsage] | None]] = {}
        self._last_cpu: dict[Key, tuple[float, float]] = {}
        self._percent: dict[Key, float] = {}

    def usage(self, node: str, key: Key) -> tuple[float | None, float | None]:
        """(CPU % of one core, memory in MiB) of the container ``key`` on ``node``; None for what the node
        does not say."""
        figures = self._node(node)
        if figures is None or key not in figures:
            return None, None
        u = figures[key]
        memory_mb = u.memory_bytes / 2**20 if u.memory_bytes is not None else None
        return self._cpu_percent(key, u), memory_mb

    def forget(self, keep: set[Key]) -> None:
        """Drop what is remembered of containers not in ``keep`` (replicas gone)."""
        with self._lock:
            for key in [k for k in self._last_cpu if k not in keep]:
                del self._last_cpu[key]
                self._percent.pop(key, None)

    def _node(self, node: str) -> Mapping[Key, ContainerUsage] | None:
        now = self._clock()
        with self._lock:
            cached = self._nodes.get(node)
        if cached is not None and now - cached[0] < (
            self.max_age_s if cached[1] is not None else self.retry_s
        ):
            return cached[1]
        text = self._read_node(node)
        try:
            figures = parse(text) if text is not None else None
        except ValueError:
            figures = None
        with self._lock:
            self._nodes[node] = (now, figures)
        return figures

    def _cpu_percent(self, key: Key, u: ContainerUsage) -> float | None:
        if u.cpu_s is None or u.cpu_at is None:
            return None
        with self._lock:
            last = self._last_cpu.get(key)
            if last is not None and u.cpu_at > last[1]:
                percent = max(0.0, 100.0 * (u.cpu_s - last[0]) / (u.cpu_at - last[1]))
                self._last_cpu[key] = (u.cpu_s, u.cpu_at)
                self._percent[key] = percent
                return percent
            if last is not None and key in self._percent:  # the kubelet has not read it again yet
                return self._percent[key]
            self._last_cpu[key] = (u.cpu_s, u.cpu_at)
        if u.started_at is not None and u.cpu_at > u.started_at:
            return max(0.0, 100.0 * u.cpu_s / (u.cpu_at - u.started_at))
        return None


__all__ = ["ContainerUsage", "ResourceMetrics", "parse", "pod_memory", "read_resource_metrics"]
