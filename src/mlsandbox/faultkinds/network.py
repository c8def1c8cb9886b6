"""Faults of the network between the clients and the client-facing endpoints (``endpoint:NAME``), in
Toxiproxy's terms: each declares its toxic (or the endpoint's proxy disabled) once, for every backend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.faultkinds.base import FaultKind, FaultParams, Mechanism, NetworkEffect, Refused


class _NetworkFault(FaultParams):
    targets = ("endpoint",)
    category = "network"
    stream: Literal["upstream", "downstream"] = "downstream"


class LatencyFault(_NetworkFault):
    """Toxiproxy ``latency``: every chunk through the endpoint's proxy is delayed."""

    type: Literal["latency"] = "latency"
    latency_ms: int = Field(default=500, ge=1, le=60_000)
    jitter_ms: int = Field(default=0, ge=0, le=60_000)


LATENCY = FaultKind(
    params=LatencyFault,
    symptom="requests to the endpoint are slow",
    behaviour="Network",
    network=NetworkEffect("latency", {"latency": "latency_ms", "jitter": "jitter_ms"}),
    backends={
        "local": Mechanism("toxiproxy", 'toxic "latency" on the endpoint\'s proxy'),
        "kube": Mechanism("chaos-mesh", "NetworkChaos delay on the endpoint's pods", qdiscs=("netem",)),
        "sim": Mechanism("simulated", "latency and jitter added to every request"),
    },
)


class BandwidthFault(_NetworkFault):
    """Toxiproxy ``bandwidth``: the endpoint's throughput is capped at ``rate_kbps`` KB/s."""

    type: Literal["bandwidth"] = "bandwidth"
    rate_kbps: int = Field(default=16, ge=1)


BANDWIDTH = FaultKind(
    params=BandwidthFault,
    symptom="transfers through the endpoint crawl",
    behaviour="Network",
    network=NetworkEffect("bandwidth", {"rate": "rate_kbps"}),
    backends={
        "local": Mechanism("toxiproxy", 'toxic "bandwidth" on the endpoint\'s proxy'),
        "kube": Mechanism("chaos-mesh", "NetworkChaos bandwidth on the endpoint's pods", qdiscs=("tbf",)),
        "sim": Mechanism("simulated", "every byte charged at the capped rate"),
    },
)


class TimeoutFault(_NetworkFault):
    """Toxiproxy ``timeout``: data stops flowing; connections close after ``timeout_ms`` (0: never)."""

    type: Literal["timeout"] = "timeout"
    timeout_ms: int = Field(default=0, ge=0)


TIMEOUT = FaultKind(
    params=TimeoutFault,
    symptom="requests to the endpoint hang until the client times out",
    behaviour="Network",
    network=NetworkEffect("timeout", {"timeout": "timeout_ms"}),
    backends={
        "local": Mechanism("toxiproxy", 'toxic "timeout" on the endpoint\'s proxy'),
        "kube": Mechanism("chaos-mesh", "NetworkChaos loss 100 % on the endpoint's pods", qdiscs=("netem",)),
        "sim": Mechanism("simulated", "the connection stops: the client's timeout"),
    },
)


class ResetPeerFault(_NetworkFault):
    """Toxiproxy ``reset_peer``: connections are reset (TCP RST) after ``timeout_ms``."""

    type: Literal["reset_peer"] = "reset_peer"
    timeout_ms: int = Field(default=0, ge=0)


RESET_PEER = FaultKind(
    params=ResetPeerFault,
    symptom="connections to the endpoint are reset (connection reset by peer)",
    behaviour="Network",
    network=NetworkEffect("reset_peer", {"timeout": "timeout_ms"}),
    backends={
        "local": Mechanism("toxiproxy", 'toxic "reset_peer" on the endpoint\'s proxy'),
        "kube": Refused("Chaos Mesh has no TCP-reset action (use timeout or endpoint_down)"),
        "sim": Mechanism("simulated", "the connection reset: the client's error"),
    },
)


class EndpointDownFault(_NetworkFault):
    """The endpoint's proxy is disabled: connections are refused."""

    type: Literal["endpoint_down"] = "endpoint_down"


ENDPOINT_DOWN = FaultKind(
    params=EndpointDownFault,
    symptom="connections to the endpoint are refused",
    behaviour="Network",
    network=NetworkEffect(),
    backends={
        "local": Mechanism("toxiproxy", "the endpoint's proxy disabled"),
        "kube": Mechanism("chaos-mesh", "NetworkChaos loss 100 % on the endpoint's pods", qdiscs=("netem",)),
        "sim": Mechanism("simulated", "connections refused"),
    },
)
