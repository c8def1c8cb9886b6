"""Model deployments on the kube backend: an ``apps/v1`` Deployment of model servers and a Service each.

A deployment ``<name>`` of the agent is the Deployment :func:`server_name` (``<name>`` as a DNS label) in
the sandbox's namespace, with a ClusterIP Service of the same name selecting its pods:

- the pods run ``python -m mlsandbox.workloads.model_server --model-uri models:/<registry name>/<version>``
  in the model-server image on port 8080, with the service endpoints in their environment (the S3 keys
  from the sandbox's Secret, as Jobs) and the model's name and version; requests = limits from the
  scenario's machine (Guaranteed QoS: a replica over its memory is OOM-killed by the kernel); a readiness
  probe on ``/health``, so a replica takes traffic once its model is loaded;
- a new version of an existing deployment changes the pod template: Kubernetes' rolling update with
  ``maxUnavailable: 0`` (the new replicas must be ready before old ones stop, as on ``local``); the
  versions served are kept in an annotation (:data:`HISTORY_ANNOTATION`) for rollback;
- Deployment, Service and pods carry the sandbox label and the episode label (``mlsandbox.world.episode``):
  the gateway removes them when the episode closes and the operator's warm reset deletes them by label.

Everything is read back from the cluster (the spec is an annotation), so any process sees the same
deployments. This module builds the objects and reads the agent's view back
(:class:`~mlsandbox.backends.protocols.serving.DeploymentView`, the same as on ``local``); the operations,
and the requests that reach the replicas through the API server's proxy, are in
:mod:`mlsandbox.backends.kube.deployments`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.backends.protocols import Endpoints
from mlsandbox.backends.protocols.serving import DeploymentView, Limits, ReplicaView, ServingError

from . import manifests as M

DEPLOYMENT_API = ("apps/v1", "Deployment")
SERVICE_API = ("v1", "Service")
COMPONENT = "model-server"
SERVER_PORT = 8080
FEATURE_COMPONENT = "feature-service"
FEATURE_SERVICE_NAME = "feature-service"
FEATURE_PORT = 8081
FEATURE_ADMIN_PORT = 8082
"""The feature service's control listener, on its pod's loopback address only
(:mod:`mlsandbox.backends.kube.control_listener`)."""
FEATURE_FAULT_FILE = "/tmp/mlsandbox-fault/feature-service.json"
"""Its fault hook's control file, in the pod's /tmp emptyDir: a new pod starts without the fault."""
FEATURE_MODULE = "mlsandbox.workloads.feature_service"
SERVER_ADMIN_PORT = 8083
"""A model server's control listener, on its pod's loopback address only (as the feature service's)."""
SERVER_FAULT_FILE = "/tmp/mlsandbox-fault/model-server.json"
"""A replica's fault hook's control file, in its pod's /tmp emptyDir."""
SERVER_FAULT_MOUNT = "/etc/mlsandbox-fault"
SERVER_FAULT_KEY = "fault.json"
"""Where a replica finds its deployment's fault at start: the key of the deployment's fault Secret
(:func:`fault_secret_name`), mounted optional, so a replica started during the fault starts with it, as
every replica of a local deployment reads its deployment's one control file."""
FEATURE_CPUS = 0.5
FEATURE_MEMORY_MB = 512
"""The feature service's limits."""
DEPLOYMENT_LABEL = "mlsandbox.dev/deployment"
VERSION_LABEL = "mlsandbox.dev/model-version"
SPEC_ANNOTATION = "mlsandbox.dev/deployment-spec"
HISTORY_ANNOTATION = "mlsandbox.dev/version-history"
MODEL_SERVER_MODULE = "mlsandbox.workloads.model_server"
ROLLOUT_TIMEOUT_S = 120.0

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class ModelServerSpec(BaseModel):
    """What a deployment serves and where (kept on the Deployment as :data:`SPEC_ANNOTATION`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deployment: str = Field(min_length=1, max_length=64)
    model: str = Field(min_length=1)
    """The agent-visible registered model name."""
    registry_name: str = Field(min_length=1)
    version: str = Field(pattern=r"^[1-9][0-9]*$")
    replicas: int = Field(ge=0, le=64)
    machine: str
    cpus: float = Field(gt=0)
    memory_mb: int = Field(gt=0)
    credits_per_second: float = Field(default=0.0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels of every object (the episode label)."""
    feature_url: str | None = None
    """The feature service the replicas fetch features from, for requests by entity id."""
    response: str | None = None
    """The replicas' response shape (the model server's ``--response``; None: what the model is decides)."""


# ------------------------------------------------------------------------------------------ builders


def server_name(deployment: str) -> str:
    """The Deployment's and Service's name: ``deployment`` lowercased, ``_`` as ``-``; shortened with a
    hash when that is not a valid Service name (at most 63 characters, a letter first, no trailing ``-``)."""
    base = deployment.lower().replace("_", "-")
    if _DNS_1035.match(base):
        return base
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:8]
    head = base[:54].rstrip("-") or "d"
    return f"{head}-{digest}" if head[0].isalpha() else f"d{head[:53]}-{digest}"


def _labels(spec: ModelServerSpec, sandbox: str) -> dict[str, str]:
    return {
        **M.check_labels(spec.labels),
        "app.kubernetes.io/part-of": "mlsandbox",
        M.COMPONENT_LABEL: COMPONENT,
        M.SANDBOX_LABEL: M.check_labels({M.SANDBOX_LABEL: sandbox})[M.SANDBOX_LABEL],
        DEPLOYMENT_LABEL: server_name(spec.deployment),
    }


def selector(spec: ModelServerSpec, sandbox: str) -> dict[str, str]:
    """What the Deployment and the Service select (never the version: it changes on a rollout)."""
    return {M.SANDBOX_LABEL: sandbox, DEPLOYMENT_LABEL: server_name(spec.deployment)}


def server_env(spec: ModelServerSpec, endpoints: Endpoints, s3_secret: str | None) -> list[dict[str, Any]]:
    """The model server's environment: the service endpoints (S3 keys from ``s3_secret`` when given),
    thread counts from the machine's CPUs, and the model served."""
    served = {
        "MLSANDBOX_DEPLOYMENT": spec.deployment,
        "MLSANDBOX_MODEL_NAME": spec.model,
        "MLSANDBOX_REGISTRY_NAME": spec.registry_name,
        "MLSANDBOX_MODEL_VERSION": spec.version,
    }
    return M.container_env(endpoints, spec.cpus, s3_secret, served)


def pod_template(
    spec: ModelServerSpec,
    *,
    sandbox: str,
    image: str,
    endpoints: Endpoints,
    s3_secret: str | None = None,
    image_pull_policy: str = "IfNotPresent",
    port: int = SERVER_PORT,
    cpu_request: float = 1.0,
) -> M.Manifest:
    """The pods of a deployment (what changes when it serves another version); ``cpu_request``: the share
    of the machine's CPU a replica requests (see :func:`server_resources`)."""
    resources = server_resources(spec.cpus, spec.memory_mb, cpu_request)
    args = ["--model-uri", f"models:/{spec.registry_name}/{spec.version}"]
    args += ["--feature-url", spec.feature_url] if spec.feature_url else []
    args += ["--response", spec.response] if spec.response else []
    args += ["--fault-file", SERVER_FAULT_FILE, "--admin-port", str(SERVER_ADMIN_PORT)]
    args += ["--fault-from", f"{SERVER_FAULT_MOUNT}/{SERVER_FAULT_KEY}"]
    container = _server_container(
        COMPONENT,
        image,
        image_pull_policy,
        [*args[:2], "--host", "0.0.0.0", "--port", str(port), *args[2:]],
        MODEL_SERVER_MODULE,
        server_env(spec, endpoints, s3_secret),
        port,
        resources,
    )
    container["volumeMounts"].append({"name": "fault", "mountPath": SERVER_FAULT_MOUNT, "readOnly": True})
    pod = _pod_spec(container)
    pod["volumes"].append(
        {
            "name": "fault",
            "secret": {"secretName": fault_secret_name(spec.deployment), "optional": True},
        }
    )
    return {
        "metadata": {"labels": {**_labels(spec, sandbox), VERSION_LABEL: spec.version}},
        "spec": pod,
    }


def fault_secret_name(deployment: str) -> str:
    """The Secret holding the HTTP fault of ``deployment``'s replicas while one is set (a Secret: the
    agent's role reads ConfigMaps, never Secrets, so it cannot read the fault)."""
    return f"{server_name(deployment)}-fault"


def fault_secret(
    spec: ModelServerSpec, *, namespace: str, sandbox: str, fault: Mapping[str, Any]
) -> M.Manifest:
    """The deployment's fault Secret: ``fault`` (the fault hook's JSON) under :data:`SERVER_FAULT_KEY`,
    labelled as the deployment (its episode's clean-up selects it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": fault_secret_name(spec.deployment),
            "namespace": namespace,
            "labels": _labels(spec, sandbox),
        },
        "type": "Opaque",
        "stringData": {SERVER_FAULT_KEY: json.dumps(dict(fault), sort_keys=True)},
    }


def server_resources(cpus: float, memory_mb: int, cpu_request: float = 1.0) -> dict[str, dict[str, str]]:
    """Requests and limits of a server: limited to ``cpus`` and ``memory_mb`` (the kernel throttles and
    OOM-kills at the machine's size), requesting all of its memory and ``cpu_request`` (0 < x <= 1) of its
    CPU. At 1 (the default) requests = limits (Guaranteed QoS); below, the scheduler places replicas whose
    limits add up to more than the node's CPUs, and they share them under load (Burstable QoS), as
    processes of a local sandbox do."""
    if not 0 < cpu_request <= 1:
        raise ValueError(f"cpu_request must be in (0, 1], not {cpu_request}")
    limits = {"cpu": M.cpu_quantity(cpus), "memory": M.memory_quantity(memory_mb)}
    return {"requests": {**limits, "cpu": M.cpu_quantity(cpus * cpu_request)}, "limits": limits}


def _server_container(
    name: str,
    image: str,
    image_pull_policy: str,
    args: list[str],
    module: str,
    env: list[dict[str, Any]],
    port: int,
    resources: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """An HTTP server of the sandbox's image (``python -m module args``) on ``port`` (named ``http``),
    ready once ``/health`` answers, with ``resources`` (requests and limits) and a writable ``/tmp``."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-m", module, *args],
        "env": env,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        "resources": {kind: dict(values) for kind, values in resources.items()},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": M.container_security(),
    }


def _pod_spec(container: dict[str, Any]) -> dict[str, Any]:
    """A pod of one server container: restricted security, no API token, an emptyDir ``/tmp``."""
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": M.pod_security(),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }


def model_server_deployment(
    spec: ModelServerSpec,
    *,
    namespace: str,
    sandbox: str,
    image: str,
    endpoints: Endpoints,
    s3_secret: str | None = None,
    history: list[str] | None = None,
    image_pull_policy: str = "IfNotPresent",
    port: int = SERVER_PORT,
    cpu_request: float = 1.0,
) -> M.Manifest:
    """The ``apps/v1`` Deployment of ``spec``: rolling updates that keep every old replica until a new
    one is ready; the spec and the versions served (``history``, oldest first) as annotations."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": server_name(spec.deployment),
            "namespace": namespace,
            "labels": _labels(spec, sandbox),
            "annotations": {
                SPEC_ANNOTATION: spec.model_dump_json(),
                HISTORY_ANNOTATION: json.dumps(history if history is not None else [spec.version]),
            },
        },
        "spec": {
            "replicas": spec.replicas,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": selector(spec, sandbox)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": pod_template(
                spec,
                sandbox=sandbox,
                image=image,
                endpoints=endpoints,
                s3_secret=s3_secret,
                image_pull_policy=image_pull_policy,
                port=port,
                cpu_request=cpu_request,
            ),
        },
    }


def model_server_service(
    spec: ModelServerSpec, *, namespace: str, sandbox: str, port: int = SERVER_PORT
) -> M.Manifest:
    """The ClusterIP Service in front of the deployment's ready replicas (port 8080 by default)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": server_name(spec.deployment),
            "namespace": namespace,
            "labels": _labels(spec, sandbox),
            "annotations": {SPEC_ANNOTATION: spec.model_dump_json()},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector(spec, sandbox),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def feature_service_manifests(
    *,
    namespace: str,
    sandbox: str,
    image: str,
    endpoints: Endpoints,
    bucket: str,
    key: str,
    id_column: str,
    labels: Mapping[str, str],
    s3_secret: str | None = None,
    image_pull_policy: str = "IfNotPresent",
    port: int = FEATURE_PORT,
    cpu_request: float = 1.0,
) -> tuple[M.Manifest, M.Manifest]:
    """The episode's online feature service: a one-replica Deployment (the model-server image running
    the feature service over ``s3://bucket/key``, its fault hook's control listener on the pod's loopback
    port :data:`FEATURE_ADMIN_PORT`) and its ClusterIP Service :data:`FEATURE_SERVICE_NAME`."""
    meta_labels = {
        **M.check_labels(dict(labels)),
        "app.kubernetes.io/part-of": "mlsandbox",
        M.COMPONENT_LABEL: FEATURE_COMPONENT,
        M.SANDBOX_LABEL: M.check_labels({M.SANDBOX_LABEL: sandbox})[M.SANDBOX_LABEL],
    }
    match = {M.SANDBOX_LABEL: meta_labels[M.SANDBOX_LABEL], M.COMPONENT_LABEL: FEATURE_COMPONENT}
    args = [
        "--bucket",
        bucket,
        "--key",
        key,
        "--id-column",
        id_column,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--admin-port",
        str(FEATURE_ADMIN_PORT),
        "--fault-file",
        FEATURE_FAULT_FILE,
    ]
    container = _server_container(
        FEATURE_COMPONENT,
        image,
        image_pull_policy,
        args,
        FEATURE_MODULE,
        M.container_env(endpoints, 0.5, s3_secret, {}),
        port,
        server_resources(FEATURE_CPUS, FEATURE_MEMORY_MB, cpu_request),
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": FEATURE_SERVICE_NAME, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": match},
            "template": {"metadata": {"labels": meta_labels}, "spec": _pod_spec(container)},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": FEATURE_SERVICE_NAME, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "type": "ClusterIP",
            "selector": match,
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return deployment, service


# ------------------------------------------------------------------------------------------ read back

FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""Why a replica that is not running will not become ready without a change (a rollout fails on them)."""


def spec_of(obj: Mapping[str, Any]) -> ModelServerSpec | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
    if not raw:
        return None
    try:
        return ModelServerSpec.model_validate_json(raw)
    except ValueError:
        return None


def history_of(obj: Mapping[str, Any]) -> list[str]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def pod_state(pod: Mapping[str, Any], memory_mb: int | None = None, replica: int = 0) -> ReplicaView:
    """One replica as the agent sees it: running (ready), starting, stopping, or exited with its exit code
    and reason (``OOMKilled`` with exit code 137, as on ``local``)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    version = (meta.get("labels") or {}).get(VERSION_LABEL)
    terminated = M.terminated_state(pod)
    containers = status.get("containerStatuses") or []
    if terminated is not None and not any("running" in (c.get("state") or {}) for c in containers):
        if terminated.get("reason") == "OOMKilled":
            limit = f" (memory limit {memory_mb} MiB)" if memory_mb else ""
            return ReplicaView(
                replica=replica,
                version=version,
                state="exited",
                exit_code=M.OOM_EXIT,
                reason="OOMKilled",
                message=f"killed by the kernel: out of memory{limit}",
            )
        return ReplicaView(
            replica=replica,
            version=version,
            state="exited",
            exit_code=terminated.get("exitCode"),
            reason=terminated.get("reason") or "Error",
            message=terminated.get("message"),
        )
    if meta.get("deletionTimestamp"):
        state = "stopping"
    elif status.get("phase") == "Running":
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        state = "running" if ready else "starting"
    else:
        state = "starting"
    reason = message = None
    for c in containers:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            reason, message = waiting["reason"], waiting.get("message")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason, message = cond.get("reason"), cond.get("message")
    return ReplicaView(replica=replica, version=version, state=state, reason=reason, message=message)  # type: ignore[arg-type]


def running(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is running and ready (what takes requests and is scraped)."""
    return pod_state(pod).state == "running"


def describe(deployment: Mapping[str, Any], pods: list[dict[str, Any]]) -> DeploymentView:
    """The agent's view of a deployment, from the Deployment and its pods (the same keys as on ``local``).
    :class:`ServingError` ``conflict`` for a Deployment that mlsandbox did not make."""
    spec = spec_of(deployment)
    if spec is None:
        name = (deployment.get("metadata") or {}).get("name")
        raise ServingError("conflict", f"the Deployment {name} was not made by mlsandbox")
    status = deployment.get("status") or {}
    want = (deployment.get("spec") or {}).get("replicas", 0) or 0
    ordered = sorted(
        pods, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp")), p["metadata"]["name"])
    )
    states = [pod_state(p, spec.memory_mb, i) for i, p in enumerate(ordered)]
    generation = (deployment.get("metadata") or {}).get("generation") or 0
    # Counted from the pods listed with the view, as on ``local``: the Deployment's readyReplicas lags
    # behind a replica that has just exited, and the view must not say "1 up" beside no running replica.
    ready = sum(1 for s in states if s.state == "running")
    complete = (
        (status.get("observedGeneration") or 0) >= generation
        and (status.get("updatedReplicas") or 0) == want
        and (status.get("readyReplicas") or 0) == want
        and ready == want
        and (status.get("replicas") or 0) == want
    )
    return DeploymentView(
        deployment=spec.deployment,
        model=spec.model,
        version=spec.version,
        machine=spec.machine,
        limits=Limits(cpus=spec.cpus, memory_mb=spec.memory_mb),
        environment="default",
        replicas=want,
        replicas_up=ready,
        rollout="complete" if complete else "progressing",
        replica_states=states,
        version_history=history_of(deployment),
    )


def rollout_failure(replicas: list[ReplicaView], version: str) -> str | None:
    """Why a rollout to ``version`` cannot complete without a change, from the replicas it started: one
    of that version exited, or waits on an image it cannot get, a container that cannot be made, a crash
    loop. None while it may still complete."""
    for r in replicas:
        if r.version != version:
            continue
        if r.state == "exited" or (r.state == "starting" and r.reason in FAILING_REASONS):
            code = f" with exit code {r.exit_code}" if r.exit_code is not None else ""
            detail = f": {r.message}" if r.message else ""
            return f"a replica {r.state}{code} ({r.reason}){detail}"
    return None


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


__all__ = [
    "FEATURE_ADMIN_PORT",
    "SERVER_ADMIN_PORT",
    "ModelServerSpec",
    "describe",
    "fault_secret",
    "fault_secret_name",
    "feature_service_manifests",
    "model_server_deployment",
    "model_server_service",
    "pod_state",
    "rollout_failure",
    "server_name",
]
