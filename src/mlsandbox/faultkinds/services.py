"""Faults of the sandbox's services: its core services (``service:NAME``) and its own HTTP services
(``http:NAME``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.faultkinds.base import FaultKind, FaultParams, Mechanism


class KillServiceFault(FaultParams):
    """SIGKILL of the service's process group; recovery restarts it."""

    targets = ("service",)
    category = "service"
    type: Literal["kill_service"] = "kill_service"


KILL_SERVICE = FaultKind(
    params=KillServiceFault,
    symptom="the service is down: its clients' connections are refused until it is restarted",
    behaviour="KillService",
    backends={
        "local": Mechanism("signal", "SIGKILL of the service's process group"),
        "kube": Mechanism("native", "the service's Deployment scaled to zero"),
        "sim": Mechanism("simulated", "connections refused, health probes fail"),
    },
)


class FreezeServiceFault(FaultParams):
    """SIGSTOP of the service's process group (it hangs: connections open, nothing answers); SIGCONT."""

    targets = ("service",)
    category = "service"
    type: Literal["freeze_service"] = "freeze_service"


FREEZE_SERVICE = FaultKind(
    params=FreezeServiceFault,
    symptom="the service hangs: connections open, requests time out",
    behaviour="FreezeService",
    backends={
        "local": Mechanism("signal", "SIGSTOP of the service's process group, SIGCONT to recover"),
        "kube": Mechanism("chaos-mesh", "PodChaos pod-failure on the service's pods"),
        "sim": Mechanism("simulated", "requests time out after the clients' timeouts"),
    },
)


class RestartServiceFault(FaultParams):
    """An unplanned restart: SIGTERM, then the service starts again (requests fail meanwhile)."""

    targets = ("service",)
    category = "service"
    instant = True
    type: Literal["restart_service"] = "restart_service"


RESTART_SERVICE = FaultKind(
    params=RestartServiceFault,
    symptom="requests to the service fail while it restarts",
    behaviour="RestartService",
    backends={
        "local": Mechanism("signal", "SIGTERM, then the service is started again"),
        "kube": Mechanism("native", "the service's pods deleted (its Deployment makes new ones)"),
        "sim": Mechanism("simulated", "down for the service's calibrated restart time"),
    },
)


class CrashLoopFault(FaultParams):
    """The service dies again at every step boundary while active, even after a restart."""

    targets = ("service",)
    category = "service"
    type: Literal["crash_loop"] = "crash_loop"


CRASH_LOOP = FaultKind(
    params=CrashLoopFault,
    symptom="the service keeps dying, even after a restart",
    behaviour="CrashLoop",
    backends={
        "local": Mechanism("signal", "SIGKILL again at every step boundary it answers"),
        "kube": Mechanism("native", "scaled to zero again at every step boundary it answers"),
        "sim": Mechanism("simulated", "killed again at every step boundary it answers"),
    },
)


class HttpErrorsFault(FaultParams):
    """One of the sandbox's own HTTP services (a model server, an API data source) answers ``error_rate``
    of its requests with ``status`` and delays every request by ``delay_ms``, through the service's
    internal fault hook (a control file the agent cannot reach). Targets: ``http:NAME`` of a service that
    registered its hook. On the feature service the fault is the process's own state: restarting it
    (``restart_service feature-service``) clears it, which counts as the agent's mitigation."""

    targets = ("http",)
    category = "service"
    type: Literal["http_errors"] = "http_errors"
    error_rate: float = Field(default=0.5, ge=0, le=1)
    status: int = Field(default=503, ge=500, le=599)
    delay_ms: int = Field(default=0, ge=0, le=60_000)


HTTP_ERRORS = FaultKind(
    params=HttpErrorsFault,
    symptom="the HTTP service answers a share of its requests with 5xx errors, or slowly",
    behaviour="HttpErrors",
    backends={
        "local": Mechanism("fault-hook", "the service's fault hook (a control file)"),
        "kube": Mechanism(
            "fault-hook",
            "the service's fault hook, written through a control listener on its pod's loopback address "
            "over a port-forward (the episode's API sources and feature service; model deployments are "
            "refused: their replicas have none)",
        ),
        "sim": Mechanism("simulated", "a seeded share of the requests answered with the status, delayed"),
    },
)
