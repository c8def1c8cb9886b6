"""Pure builders of what the kube backend creates for an episode, and the mapping of what it reads back.

Training and other batch workloads run as ``batch/v1`` Jobs: the same ``python -m mlsandbox.workloads.<w>
*args`` as on the local backend, the same environment (service endpoints, thread counts from ``cpus``,
``spec.env``), and requests equal to limits from the :class:`~mlsandbox.backends.protocols.JobSpec` (so a job
that allocates more than ``memory_mb`` is OOM-killed by the kernel, exit status 137, as on ``local``).
:func:`job_status` maps a Job and its pod back to the backend-neutral :class:`JobStatus`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mlsandbox.backends.protocols import Endpoints, JobSpec, JobStatus
from mlsandbox.backends.protocols.jobs import JobState
from mlsandbox.workloads.contract import NOTE_PREFIX, endpoint_env, parse_result, thread_env

JOB_ID_LABEL = "mlsandbox.dev/job-id"
WORKLOAD_LABEL = "mlsandbox.dev/workload"
COMPONENT_LABEL = "app.kubernetes.io/component"
S3_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "access-key", "AWS_SECRET_ACCESS_KEY": "secret-key"}
FINISHED_TTL_S = 3600
QUIET_ENV = {"GIT_PYTHON_REFRESH": "quiet"}
"""What every workload container of the images gets besides its own: the images carry no git, and
GitPython (imported by MLflow) would otherwise warn about it at length on every start, burying what the
job itself printed in the log tail an agent reads."""
OOM_EXIT = 137

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

Manifest = dict[str, Any]


def job_name(job_id: str) -> str:
    """The Job's name: the job id with ``.`` and ``_`` as ``-`` (a DNS label); ValueError if impossible."""
    name = re.sub(r"[._]", "-", job_id.lower())
    if not _NAME_RE.match(name) or len(name) > 52:  # 52: the pod name adds a 11-character suffix
        raise ValueError(f"job id {job_id!r} cannot name a Kubernetes Job (at most 52 letters, digits, '-')")
    return name


def cpu_quantity(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def memory_quantity(memory_mb: int) -> str:
    return f"{memory_mb}Mi"


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value):
            raise ValueError(f"{key}={value!r} is not a valid Kubernetes label")
    return dict(labels)


def container_security() -> dict[str, Any]:
    """The restricted container security context of every workload container (a fresh copy)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security() -> dict[str, Any]:
    """The restricted pod security context of every workload pod (a fresh copy)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_env(
    endpoints: Endpoints,
    cpus: float,
    s3_secret: str | None,
    extra: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A workload container's environment: the service endpoints, thread counts for ``cpus``, then
    ``extra`` and ``overrides``. With ``s3_secret`` the S3 keys come from that Secret, unless
    ``overrides`` sets them."""
    overrides = overrides or {}
    values = {
        **endpoint_env(**endpoints.model_dump()),
        **thread_env(cpus),
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
        **QUIET_ENV,
        **extra,
        **overrides,
    }
    env: list[dict[str, Any]] = []
    for name, value in values.items():
        if s3_secret and name in S3_SECRET_KEYS and name not in overrides:
            ref = {"secretKeyRef": {"name": s3_secret, "key": S3_SECRET_KEYS[name]}}
            env.append({"name": name, "valueFrom": ref})
        else:
            env.append({"name": name, "value": value})
    return env


def job_env(spec: JobSpec, endpoints: Endpoints, s3_secret: str | None) -> list[dict[str, Any]]:
    """The job's environment, as on ``local``; with ``s3_secret`` the S3 keys come from that Secret."""
    return container_env(endpoints, spec.cpus, s3_secret, {"MLSANDBOX_JOB_ID": spec.job_id}, spec.env)


QDISC_LABEL_PREFIX = "qdisc.mlsandbox.dev/"
"""A node's labels ``qdisc.mlsandbox.dev/<name>: "true"|"false"``: whether its kernel has that queueing
discipline (the real node probes it at start; a node without the label is taken to have it)."""
ENV_BUCKET = "mlsandbox-environments"
"""The bucket of the sandbox's MinIO holding built environments (``<key>/site.tar``, ``<key>/info.json``)."""
ENV_DIR = "/opt/mlsandbox-env"
"""Where a job's environment is unpacked (read-only for the workload)."""
ENV_VOLUME = "environment"
ENV_SIZE_LIMIT = "2Gi"
ENV_FETCH = """\
import subprocess, sys, time
import boto3
bucket, key, root = sys.argv[1:4]
t0 = time.monotonic()
body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"]
tar = subprocess.Popen(["tar", "-x", "-f", "-", "-C", root, "--no-same-owner"], stdin=subprocess.PIPE)
for chunk in body.iter_chunks(1 << 20):
    tar.stdin.write(chunk)
tar.stdin.close()
if tar.wait() != 0:
    sys.exit(f"[mlsandbox] could not unpack environment {key}: tar exited with {tar.returncode}")
print(f"[mlsandbox] environment {key} unpacked in {time.monotonic() - t0:.1f} s", flush=True)
"""
"""The init container's program: stream the environment's archive from the object store through ``tar``
(the backend's own archive; tar unpacks it several times faster than Python's tarfile) into ``root``."""
ENV_BOOT = (
    "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)
"""Run a workload module on an environment's packages alone: ``python -S`` leaves the image's own
site-packages out, :func:`site.addsitedir` adds the environment's (with its ``.pth`` files), as a venv."""


def environment_object(key: str) -> str:
    """The object (in :data:`ENV_BUCKET`) holding environment ``key``'s packages."""
    return f"{key}/site.tar"


def environment_init(
    key: str,
    image: str,
    image_pull_policy: str,
    env: list[dict[str, Any]],
    resources: Mapping[str, str],
) -> dict[str, Any]:
    """The init container unpacking environment ``key`` into the job's :data:`ENV_DIR` volume."""
    return {
        "name": "environment",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-I", "-c", ENV_FETCH, ENV_BUCKET, environment_object(key), ENV_DIR],
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [{"name": ENV_VOLUME, "mountPath": ENV_DIR}],
        "securityContext": container_security(),
    }


def training_job(
    spec: JobSpec,
    *,
    namespace: str,
    image: str,
    endpoints: Endpoints,
    s3_secret: str | None = None,
    image_pull_policy: str = "IfNotPresent",
    module: str | None = None,
) -> Manifest:
    """A ``batch/v1`` Job running ``spec`` once (no retries), killed after ``timeout_s`` if set.

    ``module`` (a module of :mod:`mlsandbox.workloads`) overrides ``spec.workload``'s. With
    ``spec.environment`` naming a built environment (not ``default``), an init container unpacks its
    packages (:func:`environment_init`) and the workload runs on them alone (:data:`ENV_BOOT`)."""
    name = job_name(spec.job_id)
    workload = module or spec.workload
    labels = {
        **check_labels(spec.labels),
        "app.kubernetes.io/part-of": "mlsandbox",
        COMPONENT_LABEL: workload,
        WORKLOAD_LABEL: workload,
        JOB_ID_LABEL: name,
    }
    resources = {"cpu": cpu_quantity(spec.cpus), "memory": memory_quantity(spec.memory_mb)}
    env = job_env(spec, endpoints, s3_secret)
    mounts: list[dict[str, Any]] = [
        {"name": "work", "mountPath": "/work"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "work", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    command = ["python", "-m", f"mlsandbox.workloads.{workload}", *spec.args]
    init: list[dict[str, Any]] = []
    if spec.environment not in (None, "default"):
        init.append(environment_init(str(spec.environment), image, image_pull_policy, env, resources))
        mounts.append({"name": ENV_VOLUME, "mountPath": ENV_DIR, "readOnly": True})
        volumes.append({"name": ENV_VOLUME, "emptyDir": {"sizeLimit": ENV_SIZE_LIMIT}})
        command = ["python", "-S", "-c", ENV_BOOT, ENV_DIR, f"mlsandbox.workloads.{workload}", *spec.args]
    container = {
        "name": spec.workload,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": command,
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "workingDir": "/work",
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
                **({"initContainers": init} if init else {}),
                "containers": [container],
                "volumes": volumes,
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


# ------------------------------------------------------------------------------------------ read back


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def terminated_state(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not pod:
        return None
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        if "terminated" in state:
            return state["terminated"]
        last = container.get("lastState") or {}
        if "terminated" in last:
            return last["terminated"]
    return None


def container_began(pod: Mapping[str, Any] | None) -> bool:
    """Whether one of the pod's containers started (it runs or ran): not while the pod waits for the
    quota, the scheduler or its image."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any({"running", "terminated"} & set(s.get("state") or {}) for s in statuses)


def container_started(pod: Mapping[str, Any] | None) -> float | None:
    """When the pod's first container started running (seconds since the epoch); None before that, or
    when the status does not say."""
    starts = []
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        for phase in ("running", "terminated"):
            at = _timestamp((state.get(phase) or {}).get("startedAt"))
            if at is not None:
                starts.append(at)
    return min(starts) if starts else None


def job_status(
    job_id: str, job: Mapping[str, Any], pod: Mapping[str, Any] | None = None, logs: str = ""
) -> JobStatus:
    """The backend-neutral status of a Job (and its pod, for exit codes; its logs, for the result line).

    An OOM-killed container reports exit code 137 like the local backend; a Job stopped by its deadline
    is ``failed`` with the exit code of its killed container (137 when SIGKILLed), else ``None``.
    """
    status = job.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    terminated = terminated_state(pod)
    exit_code = terminated.get("exitCode") if terminated else None
    if terminated and terminated.get("reason") == "OOMKilled":
        exit_code = OOM_EXIT
    state: JobState
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        state = "succeeded"
        exit_code = 0 if exit_code is None else exit_code
    elif "Failed" in conditions or "FailureTarget" in conditions:
        state = "failed"
    elif (job.get("spec") or {}).get("suspend"):
        state = "cancelled"
    elif (status.get("active") or status.get("startTime")) and container_began(pod):
        state = "running"
    else:
        # No container has started yet: the pod is not created (quota), not scheduled (a cordoned or
        # full node) or its image not there; like a job waiting for capacity on local, it is queued.
        state = "queued"
    started = container_started(pod)
    if started is None and state != "queued":
        started = _timestamp(status.get("startTime"))  # the pod is gone (cancelled) or does not say
    return JobStatus(
        job_id=job_id,
        state=state,
        exit_code=exit_code,
        started_at=started,
        finished_at=_timestamp(status.get("completionTime"))
        or (_timestamp(terminated.get("finishedAt")) if terminated else None),
        result=parse_result(logs) if state == "succeeded" else {},
    )


def oom_killed(pod: Mapping[str, Any] | None) -> bool:
    terminated = terminated_state(pod)
    return bool(terminated and terminated.get("reason") == "OOMKilled")


# ------------------------------------------------------------------------------ the runtime's additions

SANDBOX_LABEL = "mlsandbox.dev/sandbox"
SPEC_ANNOTATION = "mlsandbox.dev/job-spec"
CANCELLED_ANNOTATION = "mlsandbox.dev/cancelled"
S3_SECRET_NAME = "mlsandbox-s3"


def sandbox_job(
    spec: JobSpec,
    *,
    namespace: str,
    sandbox: str,
    image: str,
    endpoints: Endpoints,
    s3_secret: str | None = None,
    image_pull_policy: str = "IfNotPresent",
    module: str | None = None,
) -> Manifest:
    """:func:`training_job` labelled with the sandbox (Job and pod) and carrying its spec (annotation), so
    that any process can read the job back, list it and clean it up from the cluster alone."""
    manifest = training_job(
        spec,
        namespace=namespace,
        image=image,
        endpoints=endpoints,
        s3_secret=s3_secret,
        image_pull_policy=image_pull_policy,
        module=module,
    )
    for meta in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        meta["labels"][SANDBOX_LABEL] = check_labels({SANDBOX_LABEL: sandbox})[SANDBOX_LABEL]
    manifest["metadata"]["annotations"][SPEC_ANNOTATION] = spec.model_dump_json()
    return manifest


def s3_secret(name: str, *, namespace: str, sandbox: str, endpoints: Endpoints) -> Manifest:
    """The Secret Jobs read their S3 keys from (:data:`S3_SECRET_KEYS`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "mlsandbox", SANDBOX_LABEL: sandbox},
        },
        "type": "Opaque",
        "stringData": {"access-key": endpoints.s3_access_key, "secret-key": endpoints.s3_secret_key},
    }


def cancel_patch() -> Manifest:
    """Suspending a Job makes its controller delete the active pods; the Job stays, readable as cancelled."""
    return {"metadata": {"annotations": {CANCELLED_ANNOTATION: "true"}}, "spec": {"suspend": True}}


def resize_containers(container: str, cpus: float, memory_mb: int) -> list[dict[str, Any]]:
    """The ``pods/resize`` body's containers: requests = limits (the pod keeps its Guaranteed QoS class)."""
    resources = {"cpu": cpu_quantity(cpus), "memory": memory_quantity(memory_mb)}
    return [{"name": container, "resources": {"requests": dict(resources), "limits": dict(resources)}}]


def spec_of(job: Mapping[str, Any]) -> JobSpec | None:
    """The :class:`JobSpec` a Job was made from (None for a Job this backend did not make)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
    if not raw:
        return None
    try:
        return JobSpec.model_validate_json(raw)
    except ValueError:
        return None


def job_notes(job: Mapping[str, Any], pod: Mapping[str, Any] | None, memory_mb: int | None) -> list[str]:
    """What the cluster says about a job that its own log cannot (lines as the local backend's notes):
    an OOM kill, the deadline, a cancellation, a pod that cannot start (image, quota, scheduling)."""
    notes: list[str] = []
    status = job.get("status") or {}
    terminated = terminated_state(pod)
    if terminated and terminated.get("reason") == "OOMKilled":
        limit = f", memory limit {memory_mb} MiB" if memory_mb else ""
        notes.append(f"killed: out of memory (OOMKilled{limit}, exit code {OOM_EXIT})")
    elif terminated and terminated.get("exitCode") not in (None, 0):
        reason = terminated.get("reason") or "Error"
        notes.append(f"container exited with code {terminated.get('exitCode')} ({reason})")
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" or cond.get("type") not in ("Failed", "FailureTarget"):
            continue
        if cond.get("reason") == "DeadlineExceeded":
            deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
            notes.append(f"timed out after {deadline} s; the job was killed (DeadlineExceeded)")
        elif cond.get("message"):
            notes.append(f"job failed: {cond.get('reason')}: {cond.get('message')}")
        break
    if ((job.get("metadata") or {}).get("annotations") or {}).get(CANCELLED_ANNOTATION):
        notes.append("cancelled")
    pod_status = (pod or {}).get("status") or {}
    for cond in pod_status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("message"):
            notes.append(f"pod not scheduled: {cond.get('reason')}: {cond.get('message')}")
    for container in pod_status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            message = f": {waiting['message']}" if waiting.get("message") else ""
            notes.append(f"container waiting: {waiting['reason']}{message}")
    return [f"{NOTE_PREFIX} {note}" for note in dict.fromkeys(notes)]
