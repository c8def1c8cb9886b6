"""The kube backend: a sandbox on a Kubernetes cluster (kind locally, any cluster at scale).

What is installed once per cluster (``make sandbox-up``: the chart's MinIO, MLflow and Prefect in the
*control namespace*, the operator, Chaos Mesh) is not this class's business; a sandbox ``<name>`` is a
``Sandbox`` object in the control namespace that the operator turns into the namespace
``sbx-<control namespace>-<name>`` (quota, limits, network isolation, the agent's RBAC). This class:

- ``up``: checks that the API server answers and that the sandbox's namespace exists and is Active (and,
  when the ``Sandbox`` object is there, that it is Ready); it installs nothing and says what to run when
  something is missing;
- ``down``: deletes what this backend made for the sandbox: its Jobs (and their pods), its model
  deployments (Deployments, Services, pods), its S3 Secret, its
  Chaos Mesh objects, and puts back every native fault it recorded (scale, image, Service port, quota,
  cordon). Idempotent; the namespace itself is the operator's (deleting the Sandbox removes it);
- ``status``: the chart's services as Deployments in the control namespace;
- ``runtime``: a :class:`~mlsandbox.backends.kube.runtime.KubeRuntime`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mlsandbox import paths
from mlsandbox.backends.kube.faults.control import SERVICES, KubeFaultControl
from mlsandbox.backends.protocols import BackendConfig, BackendType, Endpoints, ServiceStatus, Support
from mlsandbox.errors import BackendError, NotRunningError
from mlsandbox.plugins import services as plugin_specs

from . import cluster_state
from .cluster import ApiRefused, Cluster, TransientApiError
from .runtime import (
    BACKEND,
    IMAGE_ENV,
    SERVER_CPU_REQUEST_ENV,
    SERVER_IMAGE_ENV,
    STATIC_UNSUPPORTED,
    KubeRuntime,
    client_endpoints,
    workload_endpoints,
)

log = logging.getLogger(__name__)

CONTROL_NAMESPACE_ENV = "MLSANDBOX_CONTROL_NAMESPACE"
DEFAULT_CONTROL_NAMESPACE = "mlsandbox"
COMPONENT_LABEL = "app.kubernetes.io/component"
SANDBOX_API = ("mlsandbox.dev/v1alpha1", "Sandbox")
_HINT = "run `mlsandbox cluster up` (or `make sandbox-up`: a local cluster, the chart, the operator and a Sandbox)"


def sandbox_namespace(control_namespace: str, name: str) -> str:
    """The namespace the operator gives the Sandbox ``<control_namespace>/<name>`` (the same rule as
    :func:`mlsandbox.k8s_operator.resources.sandbox_namespace_name`, which sits above this layer)."""
    full = f"sbx-{control_namespace}-{name}"
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(f"{control_namespace}/{name}".encode()).hexdigest()[:8]
    return f"{full[:54].rstrip('-')}-{digest}"


class KubeBackend:
    """The sandbox ``name`` on the cluster of ``kubeconfig`` (or ``api_client``, or the default config)."""

    def __init__(
        self,
        name: str | None = None,
        *,
        control_namespace: str | None = None,
        namespace: str | None = None,
        kubeconfig: str | Path | None = None,
        api_client: Any | None = None,
        endpoints: Endpoints | None = None,
        image: str | None = None,
        server_image: str | None = None,
        server_cpu_request: float | None = None,
    ) -> None:
        self.name: str = paths.validate_sandbox_name(name or paths.default_sandbox_name())
        # Given no other cluster (no API client; no kubeconfig, or the recorded one, here or in
        # $KUBECONFIG): the cluster `mlsandbox cluster up` left running on this machine, if any, with its
        # endpoints and images.
        recorded = cluster_state.recorded_client() if api_client is None else None
        named = {str(kubeconfig or ""), os.environ.get("KUBECONFIG", "")} - {""}
        if recorded is not None and named - {recorded.kubeconfig}:
            recorded = None
        self.recorded = recorded
        self.control_namespace = (
            control_namespace
            or os.environ.get(CONTROL_NAMESPACE_ENV)
            or (recorded.control_namespace if recorded else None)
            or DEFAULT_CONTROL_NAMESPACE
        )
        self.namespace = namespace or sandbox_namespace(self.control_namespace, self.name)
        if kubeconfig is None and recorded is not None:
            kubeconfig = recorded.kubeconfig
        self._kubeconfig = str(kubeconfig) if kubeconfig is not None else None
        self._api_client = api_client
        self._cluster: Cluster | None = None
        self._endpoints = endpoints
        self._recorded_endpoints = recorded.endpoints if recorded else None
        self.image = image or os.environ.get(IMAGE_ENV) or (recorded.image if recorded else None)
        self.server_image = (
            server_image or os.environ.get(SERVER_IMAGE_ENV) or (recorded.server_image if recorded else None)
        )
        self.server_cpu_request = (
            server_cpu_request
            or float(os.environ.get(SERVER_CPU_REQUEST_ENV) or 0)
            or (recorded.server_cpu_request if recorded else None)
        )

    def __repr__(self) -> str:
        return f"KubeBackend(name={self.name!r}, namespace={self.namespace!r})"

    @property
    def kind(self) -> str:
        return BACKEND

    def support(self) -> Support:
        """What a kube sandbox refuses, known without a sandbox: the static refusals, and the fault types
        whose mechanism the cluster lacks (no Chaos Mesh CRDs; with no cluster reachable, those are
        marked as needing Chaos Mesh). The runtime's support adds what the running sandbox lacks."""
        from mlsandbox.backends.kube.faults.control import unavailable_on

        try:
            cluster: Cluster | None = self.cluster
        except NotRunningError:
            cluster = None
        refused = dict(STATIC_UNSUPPORTED)
        refused.update({f"fault:{kind}": why for kind, why in unavailable_on(cluster).items()})
        return Support(backend=BACKEND, unsupported=refused)

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            try:
                self._cluster = Cluster(self._api_client, kubeconfig=self._kubeconfig)
            except Exception as exc:  # no kubeconfig, unreadable config
                raise NotRunningError(f"no Kubernetes cluster configured ({exc}): {_HINT}") from exc
        return self._cluster

    # -------------------------------------------------------------------------------------- lifecycle

    def up(self, ephemeral: bool = False, timeout: float = 0.0) -> None:
        """Check that the cluster answers and the sandbox is ready (waiting up to ``timeout`` seconds);
        :class:`NotRunningError` saying what is missing otherwise. Then start the plug-ins' ``start: up``
        services as pods of the sandbox (:mod:`.plugin_services`; one that fails is left out with a
        warning). Nothing else is installed here, and ``ephemeral`` changes nothing: the sandbox lives as
        long as its ``Sandbox`` object."""
        self._wait_ready(timeout)
        if any(spec.start == "up" for spec in plugin_specs().values()):  # else no runtime is needed
            self._runtime(check=False).plugin_services.start_up()

    def _wait_ready(self, timeout: float = 0.0) -> None:
        deadline = time.monotonic() + timeout
        while (problem := self._problem()) is not None:
            if time.monotonic() >= deadline:
                raise NotRunningError(problem)
            time.sleep(1.0)

    def down(self) -> None:
        """Delete this sandbox's Jobs (flow runs' too), model deployments, source servers, Secret, Chaos Mesh objects and
        config variables; undo its recorded native faults."""
        try:
            self.cluster.version()
        except (TransientApiError, ApiRefused, NotRunningError):
            return  # no cluster: nothing of ours can be left on it
        runtime = self._runtime(check=False)
        runtime.faults.recover_all()
        runtime.serving.cleanup()
        runtime.sources.cleanup()
        runtime.plugin_services.cleanup()
        runtime.flows.delete_jobs()
        runtime.jobs.delete_all()
        try:  # the episodes' config variables a crashed client left on the chart's Prefect
            runtime.config.delete_tagged()
        except BackendError as exc:
            log.warning("sandbox %s: deleting its config variables failed: %s", self.name, exc)

    def is_alive(self) -> bool:
        """The sandbox is ready and every service's Deployment has its replicas ready."""
        if self._problem() is not None:
            return False
        return all(s.state == "running" for s in self.status() if s.name in SERVICES)

    def status(self) -> list[ServiceStatus]:
        """One row per service of the chart (its Deployment's readiness in the control namespace), then one
        per plug-in service of the sandbox (:mod:`.plugin_services`)."""
        try:
            deployments = self.cluster.list("apps/v1", "Deployment", self.control_namespace)
        except (TransientApiError, ApiRefused, NotRunningError):
            return [ServiceStatus(name=name, state="stopped") for name in SERVICES]
        by_component = {
            ((d.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL): d for d in deployments
        }
        pods = self._service_pods()
        plugins = self._plugin_deployments()
        nodes = {
            str((p.get("spec") or {}).get("nodeName") or "")
            for ps in [*pods.values(), *(ps for _, ps in plugins.values())]
            for p in ps
        }
        memory = self._pod_memory(nodes - {""})
        urls = self._urls()
        rows = []
        for name in SERVICES:
            dep = by_component.get(name)
            rows.append(
                ServiceStatus(
                    name=name,
                    state=_deployment_state(dep),
                    url=urls.get(name) if dep else None,
                    **_pod_facts(pods.get(name, []), memory),
                )
            )
        for name, (dep, ppods) in sorted(plugins.items()):
            rows.append(ServiceStatus(name=name, state=_deployment_state(dep), **_pod_facts(ppods, memory)))
        return rows

    def _plugin_deployments(self) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The plug-in services of the sandbox: name -> (its Deployment, its running pods)."""
        from .plugin_services import COMPONENT as PLUGIN_COMPONENT
        from .plugin_services import SERVICE_LABEL

        selector = f"{COMPONENT_LABEL}={PLUGIN_COMPONENT}"
        try:
            deps = self.cluster.list("apps/v1", "Deployment", self.namespace, selector)
            pods = self.cluster.list("v1", "Pod", self.namespace, selector)
        except (TransientApiError, ApiRefused):
            return {}
        out = {}
        for dep in deps:
            name = ((dep.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL)
            if name:
                mine = [
                    p
                    for p in pods
                    if ((p.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL) == name
                    and (p.get("status") or {}).get("phase") == "Running"
                ]
                out[name] = (dep, mine)
        return out

    def _service_pods(self) -> dict[str, list[dict[str, Any]]]:
        """The chart's running pods by component."""
        try:
            pods = self.cluster.list("v1", "Pod", self.control_namespace)
        except (TransientApiError, ApiRefused):
            return {}
        out: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            component = ((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL)
            if component and (pod.get("status") or {}).get("phase") == "Running":
                out.setdefault(component, []).append(pod)
        return out

    def _pod_memory(self, nodes: set[str]) -> dict[str, int]:
        """Working-set bytes of each pod (``namespace/name``) on ``nodes``, from each kubelet's resource
        metrics (:mod:`.replica_metrics`); {} where a kubelet does not answer (kwok)."""
        from .replica_metrics import pod_memory, read_resource_metrics

        out: dict[str, int] = {}
        for node in sorted(nodes):
            text = read_resource_metrics(self.cluster, node)
            if text is not None:
                out.update(pod_memory(text))
        return out

    def runtime(self) -> KubeRuntime:
        """Operations over the sandbox; :class:`NotRunningError` when it is not ready."""
        return self._runtime(check=True)

    # -------------------------------------------------------------------------------------- internals

    def _problem(self) -> str | None:
        try:
            version = self.cluster.version()
        except NotRunningError as exc:
            return str(exc)
        except (TransientApiError, ApiRefused) as exc:
            return f"the Kubernetes API server does not answer ({exc}): {_HINT}"
        ns = self.cluster.get("v1", "Namespace", self.namespace)
        if ns is None:
            return (
                f"sandbox {self.name!r}: namespace {self.namespace} does not exist on the cluster "
                f"(API server {version}): create the Sandbox {self.control_namespace}/{self.name} or {_HINT}"
            )
        phase = (ns.get("status") or {}).get("phase")
        if phase not in (None, "Active"):
            return f"sandbox {self.name!r}: namespace {self.namespace} is {phase}"
        try:
            sandbox = self.cluster.get(*SANDBOX_API, self.name, self.control_namespace)
        except ApiRefused:  # the CRD is not installed: the namespace alone is the sandbox
            sandbox = None
        if sandbox is not None:
            conditions = {c.get("type"): c for c in (sandbox.get("status") or {}).get("conditions") or []}
            ready = conditions.get("Ready")
            if ready is not None and ready.get("status") != "True":
                return f"sandbox {self.name!r} is not Ready: {ready.get('reason')}: {ready.get('message')}"
        return None

    def _runtime(self, *, check: bool) -> KubeRuntime:
        if check:
            self._wait_ready()
        credentials = self._credentials()
        endpoints = self._endpoints or client_endpoints(credentials, defaults=self._recorded_endpoints)
        services = self._service_names()
        inside = workload_endpoints(self.control_namespace, services, endpoints)
        return KubeRuntime(
            self.cluster,
            sandbox=self.name,
            namespace=self.namespace,
            control_namespace=self.control_namespace,
            endpoints=endpoints,
            workload_endpoints=inside,
            image=self.image,
            server_image=self.server_image,
            server_cpu_request=self.server_cpu_request,
        )

    def _credentials(self) -> dict[str, str]:
        """The S3 keys from the chart's MinIO Secret in the control namespace ({} when there is none)."""
        import base64

        try:
            secrets = self.cluster.list(
                "v1", "Secret", self.control_namespace, selector=f"{COMPONENT_LABEL}=minio"
            )
        except (TransientApiError, ApiRefused):
            return {}
        for secret in secrets:
            data = secret.get("data") or {}
            if "access-key" in data and "secret-key" in data:
                return {
                    "s3_access_key": base64.b64decode(data["access-key"]).decode(),
                    "s3_secret_key": base64.b64decode(data["secret-key"]).decode(),
                }
        return {}

    def _service_names(self) -> dict[str, str]:
        try:
            services = self.cluster.list("v1", "Service", self.control_namespace)
        except (TransientApiError, ApiRefused):
            return {}
        out: dict[str, str] = {}
        for svc in services:
            component = ((svc.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL)
            if component:
                out.setdefault(component, svc["metadata"]["name"])
        return out

    def _urls(self) -> dict[str, str]:
        e = self._endpoints or client_endpoints(defaults=self._recorded_endpoints)
        return {"minio": e.s3_url, "mlflow": e.mlflow_url, "prefect-server": e.prefect_api_url}

    def fault_control(self) -> KubeFaultControl:
        """The sandbox's fault control without the readiness check (for recovery after a crash)."""
        return self._runtime(check=False).faults


def _pod_facts(pods: list[dict[str, Any]], memory: dict[str, int]) -> dict[str, Any]:
    """``detail`` (pod, node, restarts), ``uptime_s`` (the pod's age) and ``rss_bytes`` (its containers'
    working set) of a service's running pods (the first one's age; every replica's memory)."""
    import datetime as dt

    if not pods:
        return {}
    first = pods[0]
    meta, status = first.get("metadata") or {}, first.get("status") or {}
    restarts = sum(
        c.get("restartCount") or 0
        for p in pods
        for c in (p.get("status") or {}).get("containerStatuses") or []
    )
    more = f" (+{len(pods) - 1})" if len(pods) > 1 else ""
    facts: dict[str, Any] = {
        "detail": f"pod {meta.get('name')}{more} on {(first.get('spec') or {}).get('nodeName') or '-'}, "
        f"{restarts} restart(s)"
    }
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        started = dt.datetime.fromisoformat(str(status.get("startTime")).replace("Z", "+00:00"))
        facts["uptime_s"] = max(0.0, (dt.datetime.now(dt.UTC) - started).total_seconds())
    used = [
        memory[key]
        for p in pods
        if (key := f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}")
        in memory
    ]
    if used:
        facts["rss_bytes"] = sum(used)
    return facts


def _deployment_state(
    dep: dict[str, Any] | None,
) -> Literal["running", "starting", "stopped", "unhealthy"]:
    if dep is None:
        return "stopped"
    want = (dep.get("spec") or {}).get("replicas", 1)
    ready = (dep.get("status") or {}).get("readyReplicas") or 0
    if not want:
        return "stopped"
    if ready >= want:
        return "running"
    return "starting" if (dep.get("status") or {}).get("updatedReplicas") else "unhealthy"


# ------------------------------------------------------------------------------------ registration


class KubeBackendConfig(BackendConfig):
    """The kube backend's config: the sandbox (a ``Sandbox`` of the control namespace), the cluster and
    the images; None takes the environment's value or the default."""

    type: Literal["kube"] = "kube"
    control_namespace: str | None = None
    """Where the chart and the ``Sandbox`` objects live (``$MLSANDBOX_CONTROL_NAMESPACE``, ``mlsandbox``)."""
    namespace: str | None = None
    """The sandbox's namespace (default: the operator's name for it)."""
    kubeconfig: str | None = None
    """The cluster's kubeconfig (default: ``$KUBECONFIG``, then the cluster ``mlsandbox cluster up``
    left running, then ``~/.kube/config``)."""
    endpoints: Endpoints | None = None
    """How this client reaches the chart's services (default: what ``mlsandbox cluster up`` recorded, or
    else the kind NodePorts, overridden by
    ``MLSANDBOX_KUBE_*``, with the S3 keys of the chart's MinIO Secret)."""
    image: str | None = None
    """The trainer image of Jobs and flow runs."""
    server_image: str | None = None
    """The model server image of deployments."""
    server_cpu_request: float | None = Field(default=None, gt=0, le=1)
    """The share of its machine's CPU a model-server replica requests, its limit staying the machine's
    (``$MLSANDBOX_KUBE_SERVER_CPU_REQUEST``, what ``mlsandbox cluster up`` recorded, else 1: requests =
    limits)."""


def _create(config: KubeBackendConfig) -> KubeBackend:
    return KubeBackend(
        config.name,
        control_namespace=config.control_namespace,
        namespace=config.namespace,
        kubeconfig=config.kubeconfig,
        endpoints=config.endpoints,
        image=config.image,
        server_image=config.server_image,
        server_cpu_request=config.server_cpu_request,
    )


BACKEND_TYPE = BackendType(
    name=BACKEND,
    description="a sandbox on a Kubernetes cluster: services, Jobs, Deployments and Chaos Mesh faults as pods",
    config=KubeBackendConfig,
    create=_create,
)
"""The ``kube`` entry of the ``mlsandbox.backends`` group."""


__all__ = ["BACKEND_TYPE", "BackendError", "KubeBackend", "KubeBackendConfig", "sandbox_namespace"]
