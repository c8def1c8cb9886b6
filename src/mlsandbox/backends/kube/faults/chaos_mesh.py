"""Faults on the kube backend as Chaos Mesh resources (``chaos-mesh.org/v1alpha1``).

Each fault is a typed model (``type`` discriminator, like every config); :func:`chaos_resource` turns it
into the Chaos Mesh object to create in the sandbox's namespace. The targets are the pods of one
component of the sandbox (``app.kubernetes.io/component``: ``minio``, ``mlflow``, ``prefect-server``,
``prefect-worker``, ``trainer``, ...) in that namespace only, so a fault never reaches another sandbox;
deleting the object (or the namespace, when the sandbox goes) recovers it.

====================  =============  ================================================
fault ``type``        kind           Chaos Mesh action
====================  =============  ================================================
kill_service          PodChaos       pod-kill of every pod of a service (as ``local``)
pod_kill              PodChaos       pod-kill
pod_failure           PodChaos       pod-failure (the pod stays, its containers fail)
container_kill        PodChaos       container-kill of named containers
network_delay         NetworkChaos   delay (latency, jitter, correlation)
network_loss          NetworkChaos   loss (percent)
network_partition     NetworkChaos   partition from another component
network_bandwidth     NetworkChaos   bandwidth (rate, limit, buffer)
stress_cpu            StressChaos    cpu stressors (workers, load)
stress_memory         StressChaos    memory stressors (workers, size)
http_abort            HTTPChaos      abort requests to a port (and path, method)
http_delay            HTTPChaos      delay requests to a port (and path, method)
io_latency            IOChaos        latency on file operations under a volume path
io_fault              IOChaos        errno returned by file operations under a volume path
time_skew             TimeChaos      the containers' clocks shifted by an offset
====================  =============  ================================================

``chaos/*.yaml`` at the top of the repository holds one example of each (rendered from
:data:`EXAMPLES`; a unit test keeps them equal), usable with ``kubectl apply -f``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = "chaos-mesh.org/v1alpha1"
COMPONENT_LABEL = "app.kubernetes.io/component"
SANDBOX_LABEL = "mlsandbox.dev/sandbox"
FAULT_LABEL = "mlsandbox.dev/fault"

Mode = Literal["one", "all", "fixed", "fixed-percent", "random-max-percent"]
ClockId = Literal["CLOCK_REALTIME", "CLOCK_MONOTONIC", "CLOCK_BOOTTIME"]
_DURATION = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"
_NAME = r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$"

Manifest = dict[str, Any]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Target(_Model):
    """Pods of one component of the sandbox: all of them, or some (``mode`` and ``value``); ``labels``
    narrow them further (one job's pods)."""

    component: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    mode: Mode = "all"
    value: str | None = None
    """For ``fixed`` (a count) and the percent modes (a percentage)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """More labels the pods carry (besides the component's)."""

    def selector(self, namespace: str) -> dict[str, Any]:
        return {"namespaces": [namespace], "labelSelectors": {COMPONENT_LABEL: self.component, **self.labels}}

    def fields(self, namespace: str) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "selector": self.selector(namespace)}
        if self.value is not None:
            out["value"] = self.value
        return out


class _Fault(_Model):
    name: str = Field(pattern=_NAME)
    """Name of the fault in the episode; the Chaos Mesh object is ``mls-<name>``."""
    duration: str | None = Field(default=None, pattern=_DURATION)
    """How long the fault lasts (Chaos Mesh duration, e.g. ``30s``); ``None``: until deleted."""


class KillService(_Fault):
    type: Literal["kill_service"] = "kill_service"
    service: Literal["mlflow", "minio", "prefect-server", "prefect-worker"]


class PodKill(_Fault):
    type: Literal["pod_kill"] = "pod_kill"
    target: Target
    grace_period_s: int = Field(default=0, ge=0)


class PodFailure(_Fault):
    type: Literal["pod_failure"] = "pod_failure"
    target: Target


class ContainerKill(_Fault):
    type: Literal["container_kill"] = "container_kill"
    target: Target
    containers: list[str] = Field(min_length=1)


class NetworkDelay(_Fault):
    type: Literal["network_delay"] = "network_delay"
    target: Target
    latency_ms: int = Field(gt=0, le=600_000)
    jitter_ms: int = Field(default=0, ge=0)
    correlation: float = Field(default=0.0, ge=0, le=100)


class NetworkLoss(_Fault):
    type: Literal["network_loss"] = "network_loss"
    target: Target
    loss_percent: float = Field(gt=0, le=100)
    correlation: float = Field(default=0.0, ge=0, le=100)


class NetworkPartition(_Fault):
    type: Literal["network_partition"] = "network_partition"
    target: Target
    peer: Target
    direction: Literal["to", "from", "both"] = "both"


class NetworkBandwidth(_Fault):
    type: Literal["network_bandwidth"] = "network_bandwidth"
    target: Target
    rate: str = Field(pattern=r"^[0-9]+(bps|kbps|mbps|gbps)$")
    limit: int = Field(default=20_000, ge=1)
    buffer: int = Field(default=10_000, ge=1)


class StressCpu(_Fault):
    type: Literal["stress_cpu"] = "stress_cpu"
    target: Target
    workers: int = Field(default=1, ge=1, le=64)
    load: int = Field(default=100, ge=0, le=100)


class StressMemory(_Fault):
    type: Literal["stress_memory"] = "stress_memory"
    target: Target
    workers: int = Field(default=1, ge=1, le=64)
    size: str = Field(pattern=r"^[0-9]+(B|KB|MB|GB|%)$")


class _Http(_Fault):
    target: Target
    port: int = Field(ge=1, le=65535)
    path: str = "*"
    method: str | None = Field(default=None, pattern=r"^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)$")


class HttpAbort(_Http):
    type: Literal["http_abort"] = "http_abort"


class HttpDelay(_Http):
    type: Literal["http_delay"] = "http_delay"
    delay_ms: int = Field(gt=0, le=600_000)


class _Io(_Fault):
    target: Target
    volume_path: str = Field(pattern=r"^/")
    """Mount point of the volume the faults apply to (Chaos Mesh ``volumePath``)."""
    path: str | None = None
    """Only files matching this glob (default: everything under ``volume_path``)."""
    percent: int = Field(default=100, ge=1, le=100)
    """Share of the operations affected."""
    methods: list[str] = Field(default_factory=list)
    """Only these file operations (``read``, ``write``, ``open``, ...; empty: all)."""
    containers: list[str] = Field(default_factory=list)


class IoLatency(_Io):
    type: Literal["io_latency"] = "io_latency"
    delay_ms: int = Field(gt=0, le=600_000)


class IoFault(_Io):
    type: Literal["io_fault"] = "io_fault"
    errno: int = Field(default=5, ge=1, le=133)
    """The error returned (5: EIO, 28: ENOSPC, 13: EACCES)."""


class TimeSkew(_Fault):
    type: Literal["time_skew"] = "time_skew"
    target: Target
    offset: str = Field(pattern=r"^-?([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")
    """How far the clocks move (Go duration, e.g. ``-10m``, ``2h30m``)."""
    clock_ids: list[ClockId] = Field(default_factory=lambda: list[ClockId](["CLOCK_REALTIME"]))
    containers: list[str] = Field(default_factory=list)


ChaosFault = Annotated[
    KillService
    | PodKill
    | PodFailure
    | ContainerKill
    | NetworkDelay
    | NetworkLoss
    | NetworkPartition
    | NetworkBandwidth
    | StressCpu
    | StressMemory
    | HttpAbort
    | HttpDelay
    | IoLatency
    | IoFault
    | TimeSkew,
    Field(discriminator="type"),
]


def resource_name(fault: _Fault) -> str:
    return f"mls-{fault.name}"


def _percent(value: float) -> str:
    return re.sub(r"\.0$", "", f"{value:g}")


def _spec(fault: ChaosFault, namespace: str) -> tuple[str, dict[str, Any]]:
    """(kind, spec) of the Chaos Mesh object for ``fault``."""
    match fault:
        case KillService():
            return "PodChaos", {"action": "pod-kill", **Target(component=fault.service).fields(namespace)}
        case PodKill():
            spec: dict[str, Any] = {"action": "pod-kill", **fault.target.fields(namespace)}
            if fault.grace_period_s:
                spec["gracePeriod"] = fault.grace_period_s
            return "PodChaos", spec
        case PodFailure():
            return "PodChaos", {"action": "pod-failure", **fault.target.fields(namespace)}
        case ContainerKill():
            return "PodChaos", {
                "action": "container-kill",
                **fault.target.fields(namespace),
                "containerNames": list(fault.containers),
            }
        case NetworkDelay():
            delay = {
                "latency": f"{fault.latency_ms}ms",
                "jitter": f"{fault.jitter_ms}ms",
                "correlation": _percent(fault.correlation),
            }
            return "NetworkChaos", {"action": "delay", **fault.target.fields(namespace), "delay": delay}
        case NetworkLoss():
            loss = {"loss": _percent(fault.loss_percent), "correlation": _percent(fault.correlation)}
            return "NetworkChaos", {"action": "loss", **fault.target.fields(namespace), "loss": loss}
        case NetworkPartition():
            return "NetworkChaos", {
                "action": "partition",
                **fault.target.fields(namespace),
                "direction": fault.direction,
                "target": fault.peer.fields(namespace),
            }
        case NetworkBandwidth():
            bandwidth = {"rate": fault.rate, "limit": fault.limit, "buffer": fault.buffer}
            return "NetworkChaos", {
                "action": "bandwidth",
                **fault.target.fields(namespace),
                "bandwidth": bandwidth,
            }
        case StressCpu():
            stressors = {"cpu": {"workers": fault.workers, "load": fault.load}}
            return "StressChaos", {**fault.target.fields(namespace), "stressors": stressors}
        case StressMemory():
            memory: dict[str, Any] = {"workers": fault.workers, "size": fault.size}
            stressors = {"memory": memory}
            return "StressChaos", {**fault.target.fields(namespace), "stressors": stressors}
        case HttpAbort() | HttpDelay():
            spec = {
                **fault.target.fields(namespace),
                "target": "Request",
                "port": fault.port,
                "path": fault.path,
            }
            if fault.method:
                spec["method"] = fault.method
            if isinstance(fault, HttpAbort):
                spec["abort"] = True
            else:
                spec["delay"] = f"{fault.delay_ms}ms"
            return "HTTPChaos", spec
        case IoLatency() | IoFault():
            spec = {
                **fault.target.fields(namespace),
                "volumePath": fault.volume_path,
                "percent": fault.percent,
            }
            if fault.path is not None:
                spec["path"] = fault.path
            if fault.methods:
                spec["methods"] = list(fault.methods)
            if fault.containers:
                spec["containerNames"] = list(fault.containers)
            if isinstance(fault, IoLatency):
                spec.update(action="latency", delay=f"{fault.delay_ms}ms")
            else:
                spec.update(action="fault", errno=fault.errno)
            return "IOChaos", spec
        case TimeSkew():
            spec = {
                **fault.target.fields(namespace),
                "timeOffset": fault.offset,
                "clockIds": list(fault.clock_ids),
            }
            if fault.containers:
                spec["containerNames"] = list(fault.containers)
            return "TimeChaos", spec
    raise TypeError(f"not a chaos fault: {fault!r}")  # pragma: no cover - the union is exhaustive


def chaos_resource(fault: ChaosFault, *, namespace: str, sandbox: str) -> Manifest:
    """The Chaos Mesh object injecting ``fault`` into the sandbox whose pods live in ``namespace``."""
    kind, spec = _spec(fault, namespace)
    if fault.duration is not None:
        spec["duration"] = fault.duration
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": resource_name(fault),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/part-of": "mlsandbox",
                SANDBOX_LABEL: sandbox,
                FAULT_LABEL: fault.type,
            },
        },
        "spec": spec,
    }


_MLFLOW = Target(component="mlflow")
_TRAINER = Target(component="trainer")

EXAMPLES: dict[str, ChaosFault] = {
    "kill-service": KillService(name="kill-mlflow", service="mlflow"),
    "pod-kill": PodKill(name="kill-one-trainer", target=Target(component="trainer", mode="one")),
    "pod-failure": PodFailure(name="minio-down", target=Target(component="minio"), duration="60s"),
    "container-kill": ContainerKill(name="kill-mlflow-container", target=_MLFLOW, containers=["mlflow"]),
    "network-delay": NetworkDelay(
        name="slow-minio", target=Target(component="minio"), latency_ms=300, jitter_ms=50, duration="2m"
    ),
    "network-loss": NetworkLoss(name="lossy-mlflow", target=_MLFLOW, loss_percent=25, duration="2m"),
    "network-partition": NetworkPartition(
        name="trainer-cut-from-minio", target=_TRAINER, peer=Target(component="minio"), duration="1m"
    ),
    "network-bandwidth": NetworkBandwidth(
        name="thin-pipe-to-minio", target=Target(component="minio"), rate="1mbps", duration="5m"
    ),
    "stress-cpu": StressCpu(name="busy-trainer", target=_TRAINER, workers=2, load=80, duration="2m"),
    "stress-memory": StressMemory(name="squeeze-trainer", target=_TRAINER, size="256MB", duration="2m"),
    "http-abort": HttpAbort(name="mlflow-aborts", target=_MLFLOW, port=5000, path="/api/*", duration="1m"),
    "http-delay": HttpDelay(
        name="mlflow-slow-api", target=_MLFLOW, port=5000, path="/api/*", method="POST", delay_ms=2000
    ),
    "io-latency": IoLatency(
        name="slow-minio-disk",
        target=Target(component="minio"),
        volume_path="/data",
        delay_ms=100,
        duration="2m",
    ),
    "io-fault": IoFault(
        name="minio-disk-errors",
        target=Target(component="minio"),
        volume_path="/data",
        path="/data/**/*",
        errno=5,
        percent=50,
        methods=["write"],
        duration="1m",
    ),
    "time-skew": TimeSkew(name="trainer-clock-behind", target=_TRAINER, offset="-10m", duration="5m"),
}
"""One example of each fault type, rendered to ``chaos/<key>.yaml``."""

EXAMPLE_NAMESPACE = "sbx-default-demo"
EXAMPLE_SANDBOX = "demo"


def example_resources() -> dict[str, Manifest]:
    return {
        key: chaos_resource(fault, namespace=EXAMPLE_NAMESPACE, sandbox=EXAMPLE_SANDBOX)
        for key, fault in EXAMPLES.items()
    }
