"""Pure builders of a workspace script's locked-down pod on kube (``run_python`` as a ``batch/v1`` Job).

What one run creates, all labelled with the job's id and removed with it:

- a **ConfigMap** carrying the workspace's files (``binaryData`` ``f0``, ``f1``, ... and ``index.json``
  mapping each key to its path; a ConfigMap holds about 1 MiB, :data:`CONFIGMAP_MAX_BYTES` of files);
- a **Secret** with the run's store credentials: temporary ones (MinIO STS ``AssumeRole``) whose session
  policy allows the episode's bucket only, never the sandbox's own keys;
- the **Job**: an init container unpacks the ConfigMap into an ``emptyDir`` workspace (``sizeLimit`` the
  workspace quota), then the script runs in it. The pod runs as a non-root uid with
  ``runAsNonRoot``, no service-account token (``automountServiceAccountToken: false``), no service links,
  the ``RuntimeDefault`` seccomp profile; each container has a read-only root file system, every
  capability dropped and no privilege escalation; requests equal limits; ``activeDeadlineSeconds`` is the
  run's timeout; the only writable places are the workspace and a small ``/tmp``;
- a **NetworkPolicy** (one per namespace, :func:`script_network_policy`) selecting the script pods:
  no ingress, egress only to DNS and to the sandbox's MinIO and MLflow pods on their ports. Kubernetes
  network policies add up, so the sandbox's broader allows must not select these pods
  (:data:`SCRIPT_SELECTOR_EXCLUSION`, which the operator's policies carry).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any

from mlsandbox.backends.protocols import QUOTA_BYTES, Endpoints, JobSpec

from .manifests import (
    COMPONENT_LABEL,
    FINISHED_TTL_S,
    JOB_ID_LABEL,
    QUIET_ENV,
    WORKLOAD_LABEL,
    Manifest,
    check_labels,
    container_security,
    cpu_quantity,
    job_name,
    memory_quantity,
    pod_security,
)

SCRIPT_WORKLOAD = "script"
WORKSPACE_LABEL = "mlsandbox.dev/workspace"
WORKSPACE_DIR = "/workspace"
SEED_DIR = "/seed"
TMP_LIMIT = "64Mi"
CONFIGMAP_MAX_BYTES = 900 << 10
"""The workspace files one run carries (a ConfigMap holds at most 1 MiB, its keys and index included)."""
INDEX_KEY = "index.json"
SCRIPT_SELECTOR_EXCLUSION: dict[str, Any] = {
    "key": WORKLOAD_LABEL,
    "operator": "NotIn",
    "values": [SCRIPT_WORKLOAD],
}
"""A pod-selector expression that leaves the script pods out (for the sandbox's broader allows)."""
SERVICE_PORTS = {"minio": 9000, "mlflow": 5000}
"""The shared services a script reaches (chart component -> the pod's port)."""

UNPACK = """\
import base64, json, os, sys
seed, root = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(seed, "index.json")))
for key, path in sorted(index.items()):
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or "" in parts:
        sys.exit(f"refused path {path!r}")
    target = os.path.join(root, *parts)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(os.path.join(seed, key), "rb") as src, open(target, "xb") as dst:
        dst.write(src.read())
"""
"""The init container's program (standard library only): the ConfigMap's files into the workspace."""


def _names(spec: JobSpec) -> tuple[str, str, str]:
    name = job_name(spec.job_id)
    return name, f"{name}-files", f"{name}-creds"


def script_labels(spec: JobSpec) -> dict[str, str]:
    name = job_name(spec.job_id)
    labels = {
        **check_labels(spec.labels),
        "app.kubernetes.io/part-of": "mlsandbox",
        COMPONENT_LABEL: SCRIPT_WORKLOAD,
        WORKLOAD_LABEL: SCRIPT_WORKLOAD,
        JOB_ID_LABEL: name,
    }
    if spec.workspace is not None:
        labels[WORKSPACE_LABEL] = check_labels({WORKSPACE_LABEL: spec.workspace})[WORKSPACE_LABEL]
    return labels


def files_configmap(spec: JobSpec, namespace: str, files: Mapping[str, bytes]) -> Manifest:
    """The ConfigMap carrying the workspace's ``files`` (path -> bytes); ValueError when they are more than
    :data:`CONFIGMAP_MAX_BYTES` or a path leaves the workspace."""
    total = sum(len(data) for data in files.values())
    if total > CONFIGMAP_MAX_BYTES:
        raise ValueError(
            f"the workspace's files are {total} bytes: a run on kube carries at most {CONFIGMAP_MAX_BYTES}"
        )
    index: dict[str, str] = {}
    binary: dict[str, str] = {}
    for i, (path, data) in enumerate(sorted(files.items())):
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "" in parts:
            raise ValueError(f"{path!r} leaves the workspace")
        index[f"f{i}"] = path
        binary[f"f{i}"] = base64.b64encode(data).decode()
    _, cm_name, _ = _names(spec)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": namespace, "labels": script_labels(spec)},
        "data": {INDEX_KEY: json.dumps(index, sort_keys=True)},
        "binaryData": binary,
    }


def credentials_secret(spec: JobSpec, namespace: str, credentials: Mapping[str, str]) -> Manifest:
    """The run's scoped store credentials (``AccessKeyId``, ``SecretAccessKey``, ``SessionToken``)."""
    _, _, secret = _names(spec)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret, "namespace": namespace, "labels": script_labels(spec)},
        "type": "Opaque",
        "stringData": {
            "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
            "AWS_SESSION_TOKEN": credentials["SessionToken"],
        },
    }


def _script_env(spec: JobSpec, endpoints: Endpoints, bucket: str) -> list[dict[str, Any]]:
    _, _, secret = _names(spec)
    values = {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": endpoints.s3_url,
        "MLFLOW_S3_ENDPOINT_URL": endpoints.s3_url,
        "MLFLOW_TRACKING_URI": endpoints.mlflow_url,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "60",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "HOME": WORKSPACE_DIR,
        "MPLCONFIGDIR": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MLSANDBOX_BUCKET": bucket,
        "MLSANDBOX_WORKSPACE": WORKSPACE_DIR,
        **QUIET_ENV,
        **{k: v for k, v in spec.env.items() if k.startswith("MLSANDBOX_")},
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return env


def script_job(
    spec: JobSpec,
    *,
    namespace: str,
    image: str,
    endpoints: Endpoints,
    bucket: str,
    quota_bytes: int = QUOTA_BYTES,
    image_pull_policy: str = "IfNotPresent",
) -> Manifest:
    """The Job running the workspace script ``spec.args[0]`` (with ``spec.args[1:]``) in a locked-down
    pod (see the module docstring); its files and credentials come from :func:`files_configmap` and
    :func:`credentials_secret` of the same ``spec``."""
    if spec.workload != SCRIPT_WORKLOAD or not spec.args:
        raise ValueError("a script job names its workload 'script' and its script's path first")
    name, cm_name, _ = _names(spec)
    labels = script_labels(spec)
    resources = {"cpu": cpu_quantity(spec.cpus), "memory": memory_quantity(spec.memory_mb)}
    mounts = [{"name": "workspace", "mountPath": WORKSPACE_DIR}, {"name": "tmp", "mountPath": "/tmp"}]
    unpack = {
        "name": "workspace-files",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-I", "-S", "-c", UNPACK, SEED_DIR, WORKSPACE_DIR],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [*mounts, {"name": "seed", "mountPath": SEED_DIR, "readOnly": True}],
        "securityContext": container_security(),
    }
    script = {
        "name": SCRIPT_WORKLOAD,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", spec.args[0], *spec.args[1:]],
        "workingDir": WORKSPACE_DIR,
        "env": _script_env(spec, endpoints, bucket),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": mounts,
        "securityContext": container_security(),
    }
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": FINISHED_TTL_S,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": pod_security(),
                "initContainers": [unpack],
                "containers": [script],
                "volumes": [
                    {
                        "name": "workspace",
                        "emptyDir": {"sizeLimit": memory_quantity(max(1, quota_bytes >> 20))},
                    },
                    {"name": "tmp", "emptyDir": {"sizeLimit": TMP_LIMIT}},
                    {"name": "seed", "configMap": {"name": cm_name, "defaultMode": 0o444}},
                ],
            },
        },
    }
    if spec.timeout_s is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.timeout_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"mlsandbox.dev/job-id": spec.job_id},
        },
        "spec": job_spec,
    }


def script_network_policy(namespace: str, control_namespace: str) -> Manifest:
    """The script pods' NetworkPolicy: no ingress; egress to DNS and to MinIO's and MLflow's pods (in the
    control namespace, where the chart runs them) on their ports, nothing else."""
    control = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": control_namespace}}}
    services = [
        {
            "to": [{**control, "podSelector": {"matchLabels": {COMPONENT_LABEL: component}}}],
            "ports": [{"protocol": "TCP", "port": port}],
        }
        for component, port in SERVICE_PORTS.items()
    ]
    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "workspace-scripts",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "mlsandbox"},
        },
        "spec": {
            "podSelector": {"matchLabels": {WORKLOAD_LABEL: SCRIPT_WORKLOAD}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [dns, *services],
        },
    }


__all__ = [
    "CONFIGMAP_MAX_BYTES",
    "SCRIPT_SELECTOR_EXCLUSION",
    "SCRIPT_WORKLOAD",
    "UNPACK",
    "credentials_secret",
    "files_configmap",
    "script_job",
    "script_labels",
    "script_network_policy",
]
