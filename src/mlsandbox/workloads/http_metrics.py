"""Prometheus metrics of the sandbox's own HTTP services (model servers, the feature service).

:class:`MetricsMiddleware` is a pure ASGI middleware that counts every request but the scrape itself:
``http_requests_total{path,code}``, ``http_request_duration_seconds{path}`` (a histogram),
``http_requests_in_flight`` and ``http_errors_total{path,kind}`` (``kind``: ``server`` for a 5xx answer,
``client`` for a 4xx). It sits outside the fault hook, so injected delays and errors are measured like
real ones. :func:`metrics_response` renders a registry in the text exposition format for ``/metrics``.

Every service owns its :class:`~prometheus_client.CollectorRegistry` (no process-global state), so two
apps in one process (tests) never mix their figures.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Histogram buckets in seconds: fine below 100 ms where a healthy server answers."""


class HttpMetrics:
    """The request metrics of one service, in their own registry."""

    def __init__(self, service: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.service = service
        self.requests = Counter(
            "http_requests", "HTTP requests answered", ["path", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "Time from request to the end of the answer",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "http_errors", "HTTP answers with an error status", ["path", "kind"], registry=self.registry
        )
        self.in_flight = Gauge("http_requests_in_flight", "Requests being handled", registry=self.registry)
        # Children resolved once per (path, code): the hot path does no label lookups.
        self._children: dict[tuple[str, int], tuple[Any, Any, Any | None]] = {}

    def observe(self, path: str, code: int, seconds: float) -> None:
        key = (path, code)
        children = self._children.get(key)
        if children is None:
            kind = "server" if code >= 500 else "client" if code >= 400 else None
            children = (
                self.requests.labels(path, str(code)),
                self.latency.labels(path),
                self.errors.labels(path, kind) if kind else None,
            )
            self._children[key] = children
        req, lat, err = children
        req.inc()
        lat.observe(seconds)
        if err is not None:
            err.inc()


class MetricsMiddleware:
    """Pure ASGI middleware recording :class:`HttpMetrics` for every path in ``paths``."""

    def __init__(self, app: Any, metrics: HttpMetrics, paths: tuple[str, ...]) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = frozenset(paths)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in self.paths:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        metrics = self.metrics

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            metrics.in_flight.dec()
            metrics.observe(path, status, time.perf_counter() - start)


def metrics_response(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry's samples in the Prometheus text format, and the content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
