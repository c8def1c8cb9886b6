"""The data-source servers of an episode as Kubernetes objects of the sandbox's namespace: for each, a
one-replica Deployment and a ClusterIP Service (what the episode's jobs and the agent's code reach), and
for PostgreSQL a Secret holding its admin password.

- The HTTP API source runs ``python -m mlsandbox.workloads.api_source`` from the gateway image (the
  source imports more of the package than the model-server image carries) on port 8000, with its control
  listener on the pod's loopback address only (:mod:`mlsandbox.workloads.api_source_admin`: the datasets
  and the fault are written through it, over a port-forward), its datasets in an emptyDir.
- PostgreSQL runs Debian's server from ``mlsandbox/postgres`` (``workloads/Dockerfile.postgres``) on port
  5432, its data directory in an emptyDir.

Every object carries the episode's labels, so the operator's warm reset and the backend's cleanup remove
them with the episode's other objects. Names end with a digest of the episode id: two episodes of one
sandbox never share a server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from mlsandbox.backends.protocols.sources import API_SOURCE, POSTGRES

from . import manifests as M

API_PORT = 8000
API_ADMIN_PORT = 8001
POSTGRES_PORT = 5432
POSTGRES_ADMIN = "mlsandbox"
"""The PostgreSQL admin role (as on ``local``)."""
API_ROOT = "/var/lib/mlsandbox-api"
API_FAULT_FILE = "/tmp/mlsandbox-fault/api-source.json"
"""In the container's /tmp emptyDir: a restarted container keeps it, a new pod starts without it."""
PG_DATA_MOUNT = "/var/lib/mlsandbox-pg"
PASSWORD_KEY = "password"
SOURCE_LABEL = "mlsandbox.dev/source"
"""Which source server a pod runs (``api-source``, ``postgres``)."""

API_CPUS, API_MEMORY_MB = 0.5, 512
POSTGRES_CPUS, POSTGRES_MEMORY_MB = 0.5, 256


def object_name(service: str, episode_id: str) -> str:
    """The Deployment, Service and Secret name of ``service`` for the episode (a DNS label)."""
    if service not in (API_SOURCE, POSTGRES):
        raise ValueError(f"unknown source service {service!r}")
    return f"{service}-{hashlib.sha256(episode_id.encode()).hexdigest()[:10]}"


def labels(service: str, sandbox: str, episode_labels: Mapping[str, str]) -> dict[str, str]:
    return {
        **M.check_labels(dict(episode_labels)),
        "app.kubernetes.io/part-of": "mlsandbox",
        M.COMPONENT_LABEL: service,
        M.SANDBOX_LABEL: M.check_labels({M.SANDBOX_LABEL: sandbox})[M.SANDBOX_LABEL],
        SOURCE_LABEL: service,
    }


def selector(service: str, sandbox: str, episode_labels: Mapping[str, str]) -> dict[str, str]:
    """What the Deployment and the Service select (the episode's server of that kind)."""
    every = labels(service, sandbox, episode_labels)
    return {key: every[key] for key in (*episode_labels, M.SANDBOX_LABEL, SOURCE_LABEL)}


def _resources(cpus: float, memory_mb: int, cpu_request: float) -> dict[str, dict[str, str]]:
    limits = {"cpu": M.cpu_quantity(cpus), "memory": M.memory_quantity(memory_mb)}
    return {"requests": {**limits, "cpu": M.cpu_quantity(cpus * cpu_request)}, "limits": limits}


def _deployment(
    name: str, namespace: str, meta: dict[str, str], match: dict[str, str], pod: dict[str, Any]
) -> M.Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": meta},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": match},
            "template": {"metadata": {"labels": meta}, "spec": pod},
        },
    }


def _service(name: str, namespace: str, meta: dict[str, str], match: dict[str, str], port: int) -> M.Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": meta},
        "spec": {
            "type": "ClusterIP",
            "selector": match,
            "ports": [{"name": "server", "port": port, "targetPort": "server", "protocol": "TCP"}],
        },
    }


def _pod(container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": M.pod_security(),
        "containers": [container],
        "volumes": volumes,
    }


def api_source_manifests(
    *,
    namespace: str,
    sandbox: str,
    episode_id: str,
    episode_labels: Mapping[str, str],
    image: str,
    image_pull_policy: str = "IfNotPresent",
    cpu_request: float = 1.0,
) -> tuple[M.Manifest, M.Manifest]:
    """The episode's HTTP API source: its Deployment and Service (port :data:`API_PORT`)."""
    name = object_name(API_SOURCE, episode_id)
    meta = labels(API_SOURCE, sandbox, episode_labels)
    match = selector(API_SOURCE, sandbox, episode_labels)
    container = {
        "name": API_SOURCE,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-m", "mlsandbox.workloads.api_source"],
        "args": [
            "--root",
            API_ROOT,
            "--host",
            "0.0.0.0",
            "--port",
            str(API_PORT),
            "--admin-port",
            str(API_ADMIN_PORT),
            "--fault-file",
            API_FAULT_FILE,
        ],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HOME", "value": "/tmp"},
            *({"name": k, "value": v} for k, v in M.QUIET_ENV.items()),
        ],
        "ports": [{"name": "server", "containerPort": API_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "server"},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        "resources": _resources(API_CPUS, API_MEMORY_MB, cpu_request),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "data", "mountPath": API_ROOT}],
        "securityContext": M.container_security(),
    }
    volumes = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    return (
        _deployment(name, namespace, meta, match, _pod(container, volumes)),
        _service(name, namespace, meta, match, API_PORT),
    )


def postgres_manifests(
    *,
    namespace: str,
    sandbox: str,
    episode_id: str,
    episode_labels: Mapping[str, str],
    image: str,
    password: str,
    image_pull_policy: str = "IfNotPresent",
    cpu_request: float = 1.0,
) -> tuple[M.Manifest, M.Manifest, M.Manifest]:
    """The episode's PostgreSQL server: its Secret (the admin password), Deployment and Service (port
    :data:`POSTGRES_PORT`)."""
    name = object_name(POSTGRES, episode_id)
    meta = labels(POSTGRES, sandbox, episode_labels)
    match = selector(POSTGRES, sandbox, episode_labels)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": meta},
        "type": "Opaque",
        "stringData": {PASSWORD_KEY: password},
    }
    container = {
        "name": POSTGRES,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "env": [
            {"name": "POSTGRES_USER", "value": POSTGRES_ADMIN},
            {
                "name": "POSTGRES_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": name, "key": PASSWORD_KEY}},
            },
        ],
        "ports": [{"name": "server", "containerPort": POSTGRES_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "tcpSocket": {"port": "server"},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        "resources": _resources(POSTGRES_CPUS, POSTGRES_MEMORY_MB, cpu_request),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "data", "mountPath": PG_DATA_MOUNT},
            {"name": "run", "mountPath": "/var/run/postgresql"},
        ],
        "securityContext": M.container_security(),
    }
    volumes = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "run", "emptyDir": {"sizeLimit": "1Mi"}},
    ]
    return (
        secret,
        _deployment(name, namespace, meta, match, _pod(container, volumes)),
        _service(name, namespace, meta, match, POSTGRES_PORT),
    )


__all__ = [
    "API_ADMIN_PORT",
    "API_PORT",
    "POSTGRES_ADMIN",
    "POSTGRES_PORT",
    "SOURCE_LABEL",
    "api_source_manifests",
    "labels",
    "object_name",
    "postgres_manifests",
    "selector",
]
