"""Pure builders of a workspace script's locked-down pod on kube (``run_python`` as a ``batch/v1`` Job).

What one run creates, all labelled with the sandbox and the job's id and removed with the Job:

- a **Secret** with the run's store credentials: temporary ones (MinIO STS ``AssumeRole``) whose session
  policy allows the episode's bucket only, never the sandbox's own keys (owned by the Job, so deleted
  with it);
- the **Job**: an init container fetches the workspace's files (the objects under
  :data:`WORKSPACE_PREFIX` of the episode's bucket) into a memory-backed ``emptyDir`` of the workspace
  quota's size (:data:`FETCH`), then the script runs in it under a supervisor (:data:`RUN`): the script
  is its child, with ``RLIMIT_NPROC`` (processes of the workspace's uid: a fork bomb stops there) and
  ``RLIMIT_FSIZE``; at the run's timeout the supervisor kills it; when it ends, every process left in the
  container is killed and the files the script made, changed or removed are written back to the bucket
  (regular files only: a symbolic link is never followed); the Job ends with the script's exit code. The
  pod runs as the workspace's own unprivileged uid with ``runAsNonRoot``, no service-account token
  (``automountServiceAccountToken: false``), no service links, the ``RuntimeDefault`` seccomp profile; each
  container has a read-only root file system, every capability dropped and no privilege escalation;
  requests equal limits (the workspace's memory-backed files count in the memory limit, as the local
  backend's tmpfs does); ``activeDeadlineSeconds`` is the run's timeout plus the write-back's grace; the
  only writable places are the workspace and a small memory-backed ``/tmp``;
- a **NetworkPolicy** (one per namespace, :func:`script_network_policy`) selecting the script pods:
  no ingress, egress only to DNS and to the sandbox's MinIO and MLflow pods on their ports. Kubernetes
  network policies add up, so the sandbox's broader allows must not select these pods
  (:data:`SCRIPT_SELECTOR_EXCLUSION`, which the operator's policies carry).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mlsandbox.backends.common.workspaces import MAX_PROCS, uid_of
from mlsandbox.backends.protocols import QUOTA_BYTES, Endpoints, JobSpec

from .manifests import (
    COMPONENT_LABEL,
    FINISHED_TTL_S,
    JOB_ID_LABEL,
    QUIET_ENV,
    SANDBOX_LABEL,
    SPEC_ANNOTATION,
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
TMP_LIMIT = "64Mi"
WORKSPACE_PREFIX = ".workspace/"
"""Where a workspace's files live in its episode's bucket (the key of ``a/b.py`` is ``.workspace/a/b.py``)."""
SEED_FILE = "/tmp/.mlsandbox-seed.json"
"""What the init container fetched (path -> size and modification time), for the write-back."""
WRITE_BACK_GRACE_S = 60
"""Seconds past the run's timeout the pod has to write the files back before the Job's deadline."""
DEFAULT_TIMEOUT_S = 24 * 3600.0
"""The supervisor's timeout of a run without one."""
SCRIPT_SELECTOR_EXCLUSION: dict[str, Any] = {
    "key": WORKLOAD_LABEL,
    "operator": "NotIn",
    "values": [SCRIPT_WORKLOAD],
}
"""A pod-selector expression that leaves the script pods out (for the sandbox's broader allows)."""
SERVICE_PORTS = {"minio": 9000, "mlflow": 5000}
"""The shared services a script reaches (chart component -> the pod's port)."""

FETCH = """\
import json, os, sys
import boto3
bucket, prefix, root, seed = sys.argv[1:5]
s3 = boto3.client("s3")
fetched = {}
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for obj in page.get("Contents", []):
        path = obj["Key"][len(prefix):]
        parts = path.split("/")
        if not path or ".." in parts or "" in parts:
            print(f"[mlsandbox] skipped {obj['Key']!r}: not a workspace path", file=sys.stderr)
            continue
        target = os.path.join(root, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        s3.download_file(bucket, obj["Key"], target)
        st = os.stat(target)
        fetched[path] = [st.st_size, st.st_mtime_ns]
with open(seed, "w") as f:
    json.dump(fetched, f)
"""
"""The init container's program: the workspace's objects into the workspace, and what it fetched."""

RUN = """\
import json, os, resource, signal, stat, subprocess, sys, time
timeout, procs, fsize = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bucket, prefix, root, seed = sys.argv[4:8]
script = sys.argv[8:]


def limits():
    resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))


child = subprocess.Popen([sys.executable, *script], preexec_fn=limits)
try:
    code = child.wait(timeout=timeout)
except subprocess.TimeoutExpired:
    child.kill()
    code = child.wait()
    print(f"[mlsandbox] timed out after {timeout:g} s; the script was killed", file=sys.stderr, flush=True)
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:
    pass
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            time.sleep(0.05)
    except ChildProcessError:
        break
try:
    with open(seed) as f:
        before = {k: tuple(v) for k, v in json.load(f).items()}
except (OSError, ValueError):
    before = {}
now = {}
for top, dirs, names in os.walk(root):
    for name in names:
        full = os.path.join(top, name)
        st = os.lstat(full)
        if stat.S_ISREG(st.st_mode):
            now[os.path.relpath(full, root)] = (full, (st.st_size, st.st_mtime_ns))
import boto3
s3 = boto3.client("s3")
for rel, (full, sig) in sorted(now.items()):
    if before.get(rel) != sig:
        try:
            s3.upload_file(full, bucket, prefix + rel)
        except Exception as e:
            print(f"[mlsandbox] could not write {rel!r} back to the workspace: {e}", file=sys.stderr)
for rel in sorted(set(before) - set(now)):
    try:
        s3.delete_object(Bucket=bucket, Key=prefix + rel)
    except Exception as e:
        print(f"[mlsandbox] could not remove {rel!r} from the workspace: {e}", file=sys.stderr)
sys.exit(128 - code if code < 0 else code)
"""
"""The script container's supervisor (see the module docstring): runs the script with its limits and
timeout, kills what it leaves, writes the workspace's changes back, exits with the script's code."""


def _names(spec: JobSpec) -> tuple[str, str]:
    name = job_name(spec.job_id)
    return name, f"{name}-creds"


def script_labels(spec: JobSpec, sandbox: str | None = None) -> dict[str, str]:
    name = job_name(spec.job_id)
    labels = {
        **check_labels(spec.labels),
        "app.kubernetes.io/part-of": "mlsandbox",
        COMPONENT_LABEL: SCRIPT_WORKLOAD,
        WORKLOAD_LABEL: SCRIPT_WORKLOAD,
        JOB_ID_LABEL: name,
    }
    if sandbox is not None:
        labels[SANDBOX_LABEL] = check_labels({SANDBOX_LABEL: sandbox})[SANDBOX_LABEL]
    if spec.workspace is not None:
        labels[WORKSPACE_LABEL] = check_labels({WORKSPACE_LABEL: spec.workspace})[WORKSPACE_LABEL]
    return labels


def credentials_secret(
    spec: JobSpec, namespace: str, credentials: Mapping[str, str], sandbox: str | None = None
) -> Manifest:
    """The run's scoped store credentials (``AccessKeyId``, ``SecretAccessKey``, ``SessionToken``)."""
    _, secret = _names(spec)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret, "namespace": namespace, "labels": script_labels(spec, sandbox)},
        "type": "Opaque",
        "stringData": {
            "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
            "AWS_SESSION_TOKEN": credentials["SessionToken"],
        },
    }


def owned_by(job: Mapping[str, Any]) -> Manifest:
    """The patch that makes an object owned by the created ``job`` (the cluster deletes it with the Job)."""
    meta = job["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
    return {"metadata": {"ownerReferences": [owner]}}


def _script_env(spec: JobSpec, endpoints: Endpoints, bucket: str) -> list[dict[str, Any]]:
    _, secret = _names(spec)
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
    sandbox: str | None = None,
    quota_bytes: int = QUOTA_BYTES,
    image_pull_policy: str = "IfNotPresent",
) -> Manifest:
    """The Job running the workspace script ``spec.args[0]`` (with ``spec.args[1:]``) in a locked-down
    pod (see the module docstring): its files come from ``bucket``, its credentials from
    :func:`credentials_secret` of the same ``spec``, its uid from ``spec.workspace``."""
    if spec.workload != SCRIPT_WORKLOAD or not spec.args or spec.workspace is None:
        raise ValueError(
            "a script job names its workload 'script', its workspace and its script's path first"
        )
    name, _ = _names(spec)
    labels = script_labels(spec, sandbox)
    resources = {"cpu": cpu_quantity(spec.cpus), "memory": memory_quantity(spec.memory_mb)}
    mounts = [{"name": "workspace", "mountPath": WORKSPACE_DIR}, {"name": "tmp", "mountPath": "/tmp"}]
    env = _script_env(spec, endpoints, bucket)
    timeout = spec.timeout_s if spec.timeout_s is not None else DEFAULT_TIMEOUT_S
    fetch = {
        "name": "workspace-files",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-I", "-c", FETCH, bucket, WORKSPACE_PREFIX, WORKSPACE_DIR, SEED_FILE],
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": mounts,
        "securityContext": container_security(),
    }
    supervisor = [
        "python", "-I", "-c", RUN, f"{timeout:g}", str(MAX_PROCS), str(quota_bytes),
        bucket, WORKSPACE_PREFIX, WORKSPACE_DIR, SEED_FILE,
    ]  # fmt: skip
    script = {
        "name": SCRIPT_WORKLOAD,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": [*supervisor, spec.args[0], *spec.args[1:]],
        "workingDir": WORKSPACE_DIR,
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": mounts,
        "securityContext": container_security(),
    }
    uid = uid_of(spec.workspace)
    security = {**pod_security(), "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    workspace_size = memory_quantity(max(1, quota_bytes >> 20))
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": FINISHED_TTL_S,
        "activeDeadlineSeconds": max(1, math.ceil(timeout)) + WRITE_BACK_GRACE_S,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": security,
                "initContainers": [fetch],
                "containers": [script],
                "volumes": [
                    {"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": workspace_size}},
                    {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_LIMIT}},
                ],
            },
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"mlsandbox.dev/job-id": spec.job_id, SPEC_ANNOTATION: spec.model_dump_json()},
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
    "FETCH",
    "RUN",
    "SCRIPT_SELECTOR_EXCLUSION",
    "SCRIPT_WORKLOAD",
    "WORKSPACE_PREFIX",
    "WRITE_BACK_GRACE_S",
    "credentials_secret",
    "owned_by",
    "script_job",
    "script_labels",
    "script_network_policy",
]
