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
deployments. Requests to the replicas from outside the cluster (predictions, production traffic, metric
scrapes) go through the API server's proxy (:class:`ServingRequests`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import BackendError

from . import manifests as M
from .cluster import ApiRefused, Cluster
from .secret import S3Secret

DEPLOYMENT_API = ("apps/v1", "Deployment")
SERVICE_API = ("v1", "Service")
COMPONENT = "model-server"
SERVER_PORT = 8080
FEATURE_COMPONENT = "feature-service"
FEATURE_SERVICE_NAME = "feature-service"
FEATURE_PORT = 8081
FEATURE_MODULE = "mlsandbox.workloads.feature_service"
FEATURE_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
DEPLOYMENT_LABEL = "mlsandbox.dev/deployment"
VERSION_LABEL = "mlsandbox.dev/model-version"
SPEC_ANNOTATION = "mlsandbox.dev/deployment-spec"
HISTORY_ANNOTATION = "mlsandbox.dev/version-history"
MODEL_SERVER_MODULE = "mlsandbox.workloads.model_server"
ROLLOUT_TIMEOUT_S = 120.0

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class ServingRefused(BackendError):
    """A deployment operation that cannot be done; ``code`` is an action error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
) -> M.Manifest:
    """The pods of a deployment (what changes when it serves another version)."""
    resources = {"cpu": M.cpu_quantity(spec.cpus), "memory": M.memory_quantity(spec.memory_mb)}
    args = ["--model-uri", f"models:/{spec.registry_name}/{spec.version}"]
    args += ["--feature-url", spec.feature_url] if spec.feature_url else []
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
    return {
        "metadata": {"labels": {**_labels(spec, sandbox), VERSION_LABEL: spec.version}},
        "spec": _pod_spec(container),
    }


def _server_container(
    name: str,
    image: str,
    image_pull_policy: str,
    args: list[str],
    module: str,
    env: list[dict[str, Any]],
    port: int,
    resources: Mapping[str, str],
) -> dict[str, Any]:
    """An HTTP server of the sandbox's image (``python -m module args``) on ``port`` (named ``http``),
    ready once ``/health`` answers, with requests = limits = ``resources`` and a writable ``/tmp``."""
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
        "resources": {"requests": dict(resources), "limits": dict(resources)},
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
) -> tuple[M.Manifest, M.Manifest]:
    """The episode's online feature service: a one-replica Deployment (the model-server image running
    the feature service over ``s3://bucket/key``) and its ClusterIP Service :data:`FEATURE_SERVICE_NAME`."""
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
    ]
    container = _server_container(
        FEATURE_COMPONENT,
        image,
        image_pull_policy,
        args,
        FEATURE_MODULE,
        M.container_env(endpoints, 0.5, s3_secret, {}),
        port,
        FEATURE_RESOURCES,
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


def pod_state(pod: Mapping[str, Any], memory_mb: int | None = None) -> dict[str, Any]:
    """One replica as the agent sees it: running (ready or not), starting, or exited with its exit code
    and reason (``OOMKilled`` with exit code 137, as on ``local``)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    row: dict[str, Any] = {
        "pod": meta.get("name"),
        "version": (meta.get("labels") or {}).get(VERSION_LABEL),
    }
    terminated = M.terminated_state(pod)
    containers = status.get("containerStatuses") or []
    if terminated is not None and not any("running" in (c.get("state") or {}) for c in containers):
        row["state"] = "exited"
        code = terminated.get("exitCode")
        if terminated.get("reason") == "OOMKilled":
            row.update(exit_code=M.OOM_EXIT, reason="OOMKilled")
            limit = f" (memory limit {memory_mb} MiB)" if memory_mb else ""
            row["message"] = f"killed by the kernel: out of memory{limit}"
        else:
            row.update(exit_code=code, reason=terminated.get("reason") or "Error")
        return row
    if meta.get("deletionTimestamp"):
        row["state"] = "stopping"
    elif status.get("phase") == "Running":
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        row["state"] = "running" if ready else "starting"
    else:
        row["state"] = "starting"
    for c in containers:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            row["reason"] = waiting["reason"]
            if waiting.get("message"):
                row["message"] = waiting["message"]
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            row["reason"] = cond.get("reason")
            row["message"] = cond.get("message")
    return row


def describe(
    deployment: Mapping[str, Any], pods: list[dict[str, Any]], service: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's view of a deployment (the same keys as on ``local``, plus the rollout and Service)."""
    spec = spec_of(deployment)
    if spec is None:
        raise ServingRefused("not_found", "the Deployment was not made by mlsandbox")
    status = deployment.get("status") or {}
    want = (deployment.get("spec") or {}).get("replicas", 0) or 0
    ordered = sorted(
        pods, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp")), p["metadata"]["name"])
    )
    states = [{"replica": i, **pod_state(p, spec.memory_mb)} for i, p in enumerate(ordered)]
    generation = (deployment.get("metadata") or {}).get("generation") or 0
    updated = status.get("updatedReplicas") or 0
    # Counted from the pods listed with the view, as on ``local``: the Deployment's readyReplicas lags
    # behind a replica that has just exited, and the view must not say "1 up" beside no running replica.
    ready = sum(1 for s in states if s["state"] == "running")
    complete = (
        (status.get("observedGeneration") or 0) >= generation
        and updated == want
        and (status.get("readyReplicas") or 0) == want
        and ready == want
        and (status.get("replicas") or 0) == want
    )
    out: dict[str, Any] = {
        "deployment": spec.deployment,
        "model": spec.model,
        "version": spec.version,
        "machine": spec.machine,
        "limits": {"cpus": spec.cpus, "memory_mb": spec.memory_mb},
        "environment": "default",
        "replicas": want,
        "replicas_up": ready,
        "replicas_updated": updated,
        "rollout": "complete" if complete else "progressing",
        "replica_states": states,
        "version_history": history_of(deployment),
    }
    if service is not None:
        ports = (service.get("spec") or {}).get("ports") or [{}]
        out["service"] = (
            f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{ports[0].get('port')}"
        )
    return out


# ------------------------------------------------------------------------------------------- runtime


class KubeServing:
    """The model deployments of the sandbox ``sandbox`` in ``namespace`` (the kube runtime's ``serving``).

    Methods raise :class:`ServingRefused` (``not_found``, ``conflict``, ``invalid_parameters``) for what
    cannot be done; they validate everything before creating anything, and a failed creation removes
    what it made.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        namespace: str,
        sandbox: str,
        image: str,
        endpoints: Endpoints,
        image_pull_policy: str = "IfNotPresent",
        rollout_timeout_s: float = ROLLOUT_TIMEOUT_S,
        port: int = SERVER_PORT,
        feature_port: int = FEATURE_PORT,
        secret: S3Secret | None = None,
    ) -> None:
        self.cluster = cluster
        self.port = port
        self.feature_port = feature_port
        self.namespace = namespace
        self.sandbox = sandbox
        self.image = image
        self.endpoints = endpoints
        self.image_pull_policy = image_pull_policy
        self.rollout_timeout_s = rollout_timeout_s
        self.secret = secret or S3Secret(cluster, namespace=namespace, sandbox=sandbox, endpoints=endpoints)

    def __repr__(self) -> str:
        return f"KubeServing(namespace={self.namespace!r}, sandbox={self.sandbox!r})"

    # ----------------------------------------------------------------------------------- operations

    def deploy(self, spec: ModelServerSpec, *, wait: bool = True) -> tuple[dict[str, Any], bool]:
        """Create the deployment and its Service, or roll the existing one to ``spec`` (its version,
        replicas and machine); (view, created). Waits for the rollout unless ``wait`` is False."""
        name = server_name(spec.deployment)
        existing = self._deployment(spec.deployment, missing_ok=True)
        if existing is not None:
            old = spec_of(existing)
            assert old is not None  # _deployment checks it
            if old.model != spec.model:
                raise ServingRefused(
                    "conflict",
                    f"deployment {spec.deployment!r} serves model {old.model!r}, not {spec.model!r}",
                )
            history = history_of(existing)
            if not history or history[-1] != spec.version:
                history.append(spec.version)
            self._apply(spec, history)
            return self._settled(spec.deployment, wait), False
        manifest = self._manifest(spec, [spec.version])
        service = model_server_service(spec, namespace=self.namespace, sandbox=self.sandbox, port=self.port)
        self.secret.ensure()
        try:
            self.cluster.create(manifest)
        except ApiRefused as exc:
            if exc.status == 409:
                raise ServingRefused(
                    "conflict", f"a Deployment named {name} already exists in {self.namespace}"
                ) from None
            raise ServingRefused(
                "invalid_parameters", f"the cluster refused deployment {spec.deployment!r}: {exc}"
            ) from None
        try:
            self.cluster.apply(service)
        except Exception as exc:
            self.cluster.delete(*DEPLOYMENT_API, name, self.namespace)
            raise ServingRefused(
                "unavailable", f"the Service of deployment {spec.deployment!r} could not be created: {exc}"
            ) from None
        return self._settled(spec.deployment, wait), True

    def scale(self, deployment: str, replicas: int, *, wait: bool = True) -> dict[str, Any]:
        """Set ``spec.replicas`` (the ReplicaSet replaces replicas that died)."""
        if replicas < 0:
            raise ServingRefused("invalid_parameters", f"replicas must be 0 or more, not {replicas}")
        dep = self._deployment(deployment)
        spec = spec_of(dep)
        assert spec is not None
        new = spec.model_copy(update={"replicas": replicas})
        body = {
            "metadata": {"annotations": {SPEC_ANNOTATION: new.model_dump_json()}},
            "spec": {"replicas": replicas},
        }
        self.cluster.patch(*DEPLOYMENT_API, dep["metadata"]["name"], self.namespace, body)
        return self._settled(deployment, wait)

    def rollback(self, deployment: str, version: str, *, wait: bool = True) -> dict[str, Any]:
        """Serve ``version`` again (a version the deployment served before; rolling update)."""
        dep = self._deployment(deployment)
        spec = spec_of(dep)
        assert spec is not None
        history = history_of(dep)
        if version not in history:
            raise ServingRefused(
                "conflict",
                f"deployment {deployment!r} never served version {version} "
                f"(served: {', '.join(history)}); use deploy_model for a new version",
            )
        if version == spec.version:
            raise ServingRefused("conflict", f"deployment {deployment!r} already serves version {version}")
        history.append(version)
        new = spec.model_copy(
            update={"version": version, "replicas": (dep.get("spec") or {}).get("replicas", spec.replicas)}
        )
        self._apply(new, history)
        return self._settled(deployment, wait)

    def undeploy(self, deployment: str) -> dict[str, Any]:
        """Delete the Deployment (its ReplicaSets and pods go with it) and its Service; the last view."""
        dep = self._deployment(deployment)
        view = describe(dep, self._pods(dep))
        name = dep["metadata"]["name"]
        self.cluster.delete(*DEPLOYMENT_API, name, self.namespace, propagation="Background")
        self.cluster.delete(*SERVICE_API, name, self.namespace)
        return view

    def get(self, deployment: str) -> dict[str, Any]:
        dep = self._deployment(deployment)
        service = self.cluster.get(*SERVICE_API, dep["metadata"]["name"], self.namespace)
        return describe(dep, self._pods(dep), service)

    def list(self, label: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """Every deployment of this sandbox (with ``label`` when given), by name."""
        deps = self._deployments(label)
        pods = self.cluster.list("v1", "Pod", self.namespace, self._selector(label))
        out = []
        for dep in sorted(deps, key=lambda d: d["metadata"]["name"]):
            mine = [
                p
                for p in pods
                if _labels_of(p).get(DEPLOYMENT_LABEL) == _labels_of(dep).get(DEPLOYMENT_LABEL)
            ]
            out.append(describe(dep, mine))
        return out

    def credits_per_second(self, label: tuple[str, str] | None = None) -> float:
        """What the deployments' replicas cost per second (desired replicas x their machine's price)."""
        total = 0.0
        for dep in self._deployments(label):
            spec = spec_of(dep)
            if spec is not None:
                total += ((dep.get("spec") or {}).get("replicas") or 0) * spec.credits_per_second
        return total

    def cleanup(self, label: tuple[str, str] | None = None) -> int:
        """Delete the deployments (with ``label`` when given), their Services and pods, and the feature
        service; how many deployments."""
        count = 0
        for component in (COMPONENT, FEATURE_COMPONENT):
            selector = self._selector(label, component)
            deps = self.cluster.list(*DEPLOYMENT_API, self.namespace, selector)
            for dep in deps:
                self.cluster.delete(
                    *DEPLOYMENT_API, dep["metadata"]["name"], self.namespace, propagation="Background"
                )
            for svc in self.cluster.list(*SERVICE_API, self.namespace, selector):
                self.cluster.delete(*SERVICE_API, svc["metadata"]["name"], self.namespace)
            for pod in self.cluster.list("v1", "Pod", self.namespace, selector):
                self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)
            count += len(deps) if component == COMPONENT else 0
        return count

    # ------------------------------------------------------------------------------ feature service

    @property
    def feature_url(self) -> str:
        """The feature service's in-cluster address (what the replicas get as ``--feature-url``)."""
        return f"http://{FEATURE_SERVICE_NAME}.{self.namespace}.svc:{self.feature_port}"

    def start_feature_service(
        self, bucket: str, key: str, id_column: str, labels: Mapping[str, str], *, wait: bool = True
    ) -> str:
        """Run the episode's feature service over ``s3://bucket/key`` (idempotent) and wait until its pod
        is ready; its in-cluster URL. ``unavailable`` when it is not ready within the rollout timeout."""
        deployment, service = feature_service_manifests(
            namespace=self.namespace,
            sandbox=self.sandbox,
            image=self.image,
            endpoints=self.endpoints,
            bucket=bucket,
            key=key,
            id_column=id_column,
            labels=labels,
            s3_secret=M.S3_SECRET_NAME,
            image_pull_policy=self.image_pull_policy,
            port=self.feature_port,
        )
        self.secret.ensure()
        try:
            self.cluster.apply(deployment)
            self.cluster.apply(service)
        except ApiRefused as exc:
            raise ServingRefused("unavailable", f"the cluster refused the feature service: {exc}") from None
        deadline = time.monotonic() + (self.rollout_timeout_s if wait else 0.0)
        while wait:
            if self.feature_pods(ready_only=True):
                break
            if time.monotonic() >= deadline:
                raise ServingRefused(
                    "unavailable", f"the feature service was not ready after {self.rollout_timeout_s:.0f} s"
                )
            time.sleep(0.25)
        return self.feature_url

    def feature_pods(
        self, label: tuple[str, str] | None = None, *, ready_only: bool = False
    ) -> list[dict[str, Any]]:
        pods = self.cluster.list("v1", "Pod", self.namespace, self._selector(label, FEATURE_COMPONENT))
        if ready_only:
            pods = [p for p in pods if pod_state(p)["state"] == "running"]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    # ------------------------------------------------------------------------------------ internals

    def _selector(self, label: tuple[str, str] | None, component: str = COMPONENT) -> str:
        selector = f"{M.SANDBOX_LABEL}={self.sandbox},{M.COMPONENT_LABEL}={component}"
        return selector + (f",{label[0]}={label[1]}" if label is not None else "")

    def _deployments(self, label: tuple[str, str] | None) -> list[dict[str, Any]]:
        deps = self.cluster.list(*DEPLOYMENT_API, self.namespace, self._selector(label))
        return [d for d in deps if spec_of(d) is not None]

    def _deployment(self, deployment: str, *, missing_ok: bool = False) -> Any:
        name = server_name(deployment)
        dep = self.cluster.get(*DEPLOYMENT_API, name, self.namespace)
        if dep is None:
            if missing_ok:
                return None
            known = ", ".join(sorted(d["deployment"] for d in self.list())) or "none"
            raise ServingRefused(
                "not_found", f"deployment {deployment!r} does not exist (deployments: {known})"
            )
        spec = spec_of(dep)
        if spec is None or _labels_of(dep).get(M.SANDBOX_LABEL) != self.sandbox:
            raise ServingRefused(
                "conflict",
                f"a Deployment named {name} exists in {self.namespace} that this sandbox did not make",
            )
        if spec.deployment != deployment:
            raise ServingRefused(
                "conflict", f"deployment {deployment!r} would share its cluster name with {spec.deployment!r}"
            )
        return dep

    def _pods(self, dep: Mapping[str, Any]) -> list[dict[str, Any]]:
        sel = f"{M.SANDBOX_LABEL}={self.sandbox},{DEPLOYMENT_LABEL}={_labels_of(dep).get(DEPLOYMENT_LABEL)}"
        return self.cluster.list("v1", "Pod", self.namespace, sel)

    def _manifest(self, spec: ModelServerSpec, history: list[str]) -> M.Manifest:
        return model_server_deployment(
            spec,
            namespace=self.namespace,
            sandbox=self.sandbox,
            image=self.image,
            endpoints=self.endpoints,
            s3_secret=M.S3_SECRET_NAME,
            history=history,
            image_pull_policy=self.image_pull_policy,
            port=self.port,
        )

    def _apply(self, spec: ModelServerSpec, history: list[str]) -> None:
        """Bring the Deployment to ``spec``: a new pod template starts a rolling update."""
        manifest = self._manifest(spec, history)
        self.secret.ensure()
        try:
            self.cluster.patch(
                *DEPLOYMENT_API,
                manifest["metadata"]["name"],
                self.namespace,
                {"metadata": manifest["metadata"], "spec": manifest["spec"]},
            )
        except ApiRefused as exc:
            raise ServingRefused("invalid_parameters", f"the cluster refused the rollout: {exc}") from None

    def _settled(self, deployment: str, wait: bool) -> dict[str, Any]:
        """The view once the rollout is complete (or after the timeout: ``rollout: progressing``)."""
        deadline = time.monotonic() + (self.rollout_timeout_s if wait else 0.0)
        while True:
            view = self.get(deployment)
            if view["rollout"] == "complete" or time.monotonic() >= deadline:
                return view
            time.sleep(0.25)


# -------------------------------------------------------------------------------- the request path


def proxy_client(api_client: Any, timeout_s: float = 5.0) -> httpx.Client:
    """An HTTP client for the API server of ``api_client`` (its address, credentials and CA), for its
    proxy subresources."""
    import ssl

    cfg = api_client.configuration
    if getattr(cfg, "refresh_api_key_hook", None) is not None:
        cfg.refresh_api_key_hook(cfg)
    headers = {}
    auth = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix("BearerToken")
    if auth:
        headers["authorization"] = auth
    verify: ssl.SSLContext | bool = False
    if cfg.verify_ssl:
        verify = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file else None
    if cert is not None and isinstance(verify, ssl.SSLContext):
        verify.load_cert_chain(*cert)
    return httpx.Client(
        headers=headers, verify=verify, timeout=timeout_s, limits=httpx.Limits(max_connections=64)
    )


@dataclass
class ProxiedReplica:
    """A pod of a deployment, reached through the API server's pod proxy (``url``); what the serving
    monitor reads of a replica."""

    name: str
    url: str
    ready: bool
    port: int | None = SERVER_PORT

    def alive(self) -> bool:
        return self.ready

    def process(self) -> None:
        """No process here to read CPU and memory from (they are in the cluster's metrics, not read)."""
        return None


@dataclass
class ProxiedDeployment:
    name: str
    replicas: list[ProxiedReplica]


class ServingRequests:
    """Requests from this process to the replicas of the deployments with ``label``, through the API
    server's proxy: predictions go to the deployment's Service
    (``/api/v1/namespaces/<ns>/services/<name>:http/proxy/predict``, which picks one of its ready pods, as
    any client of the Service gets), metrics are scraped from each pod
    (``.../pods/<pod>:<port>/proxy/metrics``). It reads the deployments back from the cluster at most
    every ``refresh_s``.

    It offers what the serving monitor and the production traffic use of local deployments (``lock``,
    ``items``, ``feature_service``, ``client``, ``post``, ``close``); the agent's credentials to the API
    server must allow the ``services/proxy`` and ``pods/proxy`` subresources in the namespace.
    """

    def __init__(
        self, serving: KubeServing, label: tuple[str, str] | None = None, refresh_s: float = 1.0
    ) -> None:
        self.serving = serving
        self.label = label
        self.refresh_s = refresh_s
        self.lock = threading.RLock()
        self._feature_service: ProxiedReplica | None = None
        self.client = proxy_client(serving.cluster.api_client)
        self._base = serving.cluster.api_client.configuration.host.rstrip("/")
        self._items: dict[str, ProxiedDeployment] = {}
        self._read_at = -1.0e9

    def _path(self, kind: str, name: str, port: int | None = None) -> str:
        port = self.serving.port if port is None else port
        return f"{self._base}/api/v1/namespaces/{self.serving.namespace}/{kind}/{name}:{port}/proxy"

    @property
    def feature_service(self) -> ProxiedReplica | None:
        """The feature service's pod, when the episode has one."""
        with self.lock:
            self._fresh()
            return self._feature_service

    @property
    def items(self) -> dict[str, ProxiedDeployment]:
        """The deployments by the agent's name, with their pods (read again when older than refresh_s)."""
        with self.lock:
            self._fresh()
            return self._items

    def _fresh(self) -> None:
        if time.monotonic() - self._read_at >= self.refresh_s:
            self.refresh()

    def refresh(self) -> None:
        deps = self.serving._deployments(self.label)
        pods = self.serving.cluster.list(
            "v1", "Pod", self.serving.namespace, self.serving._selector(self.label)
        )
        items: dict[str, ProxiedDeployment] = {}
        for dep in deps:
            spec = spec_of(dep)
            assert spec is not None  # _deployments keeps only ours
            mine = [
                p
                for p in pods
                if _labels_of(p).get(DEPLOYMENT_LABEL) == _labels_of(dep).get(DEPLOYMENT_LABEL)
            ]
            replicas = [
                ProxiedReplica(
                    p["metadata"]["name"],
                    self._path("pods", p["metadata"]["name"]),
                    pod_state(p)["state"] == "running",
                    self.serving.port,
                )
                for p in sorted(mine, key=lambda p: p["metadata"]["name"])
            ]
            items[spec.deployment] = ProxiedDeployment(spec.deployment, replicas)
        fs = None
        port = self.serving.feature_port
        fpods = self.serving.feature_pods(self.label)
        running = [p for p in fpods if pod_state(p)["state"] == "running"]
        if fpods:  # a running pod first; else the last one, not ready
            p = (running or fpods[-1:])[0]
            name = p["metadata"]["name"]
            fs = ProxiedReplica(name, self._path("pods", name, port), bool(running), port)
        with self.lock:
            self._items, self._feature_service, self._read_at = items, fs, time.monotonic()

    def post(self, name: str, body: bytes, timeout_s: float = 5.0) -> httpx.Response:
        """POST ``body`` to the deployment's ``/predict`` through its Service; the model server's answer.
        :class:`ServingRefused` when the deployment does not exist (``not_found``), when the API server
        cannot reach a ready replica (``unavailable``, with its reason) or times out (``timeout``)."""
        if name not in self.items:
            known = ", ".join(sorted(self._items)) or "none"
            raise ServingRefused("not_found", f"deployment {name!r} does not exist (deployments: {known})")
        url = self._path("services", server_name(name)) + "/predict"
        try:
            resp = self.client.post(
                url, content=body, headers={"content-type": "application/json"}, timeout=timeout_s
            )
        except httpx.TimeoutException:
            raise ServingRefused(
                "timeout", f"deployment {name!r} did not answer within {timeout_s} s"
            ) from None
        except httpx.HTTPError as e:
            raise ServingRefused(
                "unavailable", f"the API server is unreachable: {type(e).__name__}: {e}"
            ) from None
        if resp.status_code >= 500 and _is_api_status(resp):
            message = resp.json().get("message") or resp.text[:300]
            raise ServingRefused("unavailable", f"deployment {name!r} has no replica that answers: {message}")
        if resp.status_code == 403 and _is_api_status(resp):
            raise ServingRefused(
                "unavailable", f"the API server refused the proxy request: {resp.json().get('message')}"
            )
        return resp

    def close(self) -> None:
        self.client.close()


def _is_api_status(resp: httpx.Response) -> bool:
    """Whether the answer is the API server's own (a ``Status`` object), not the model server's."""
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == "Status"


def _labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


__all__ = [
    "KubeServing",
    "ModelServerSpec",
    "ServingRefused",
    "ServingRequests",
    "describe",
    "feature_service_manifests",
    "model_server_deployment",
    "model_server_service",
    "proxy_client",
    "server_name",
]
