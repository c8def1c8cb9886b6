"""Batch jobs as ``batch/v1`` Jobs in the sandbox's namespace (the ``kube`` backend's :class:`Jobs`).

Everything is read back from the cluster (no state in this process): a Job carries its
:class:`~mlsandbox.backends.protocols.JobSpec` in an annotation and the sandbox and job-id labels, so any
process (the gateway, a restarted CLI, ``down``) sees the same jobs.

- **Limits**: requests = limits = ``cpus``/``memory_mb`` (Guaranteed QoS); on a real node the kernel
  OOM-kills a job over its memory and the pod's container ends ``OOMKilled``: the job is ``failed`` with
  exit code 137, and :meth:`KubeJobs.logs` ends with ``[mlsandbox] killed: out of memory (OOMKilled, ...)``
  (as on ``local``). ``timeout_s`` is the Job's ``activeDeadlineSeconds``.
- **Result**: the trainer prints ``MLSANDBOX_RESULT {json}`` as its last line on every backend; here it is
  read from the succeeded pod's log (once, then kept for this object's lifetime). A cluster that cannot
  serve pod logs (kwok's simulated nodes) gives an empty result and says so in :meth:`logs`.
- **State**: ``queued`` until the pod's container starts (a pod refused by the quota, left unscheduled on a
  cordoned or full node, or waiting for its image), then ``running``.
- **CPU seconds**: there is no per-pod CPU accounting without metrics-server; ``cpu_seconds`` is the time
  the container ran x its CPU request (what a cluster bills for reserved CPUs), so credits are charged as
  on ``local`` in spirit (not while queued).
- **Cancel** suspends the Job (its controller deletes the running pod) and marks it cancelled: the Job
  stays readable as ``cancelled``; :meth:`cleanup` deletes Jobs with background propagation (pods too).
- **Scripts** (workload ``script``, ``run_python``): the workspace's locked-down pod of
  :mod:`.workspace_manifests`, with a Secret of scoped store credentials owned by its Job and the scripts'
  NetworkPolicy in the namespace (made once); the files come from and go back to the workspace's bucket
  (:mod:`.workspaces`).
- **set_resources** changes a running pod's requests and limits in place through the ``pods/resize``
  subresource (in-place pod resize, on by default since Kubernetes 1.33): a Job's pod template is
  immutable, so a queued job (no pod yet) or a cluster without the subresource raises
  :class:`ValueError` saying so; the new values are also written into the Job's spec annotation.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
import time
from typing import Any

from mlsandbox.backends.common.workspaces import clean_path
from mlsandbox.backends.protocols import DEFAULT_KEY, Endpoints, JobSpec, JobStatus
from mlsandbox.errors import Unsupported
from mlsandbox.workloads.contract import RESULT_PREFIX

from . import manifests as M
from . import workspace_manifests as W
from .cluster import ApiRefused, Cluster, TransientApiError
from .environments import BACKEND, KubeEnvironments
from .secret import S3Secret
from .workspaces import KubeWorkspaces

JOB_API = ("batch/v1", "Job")
_TERMINAL = ("succeeded", "failed", "cancelled")


class KubeJobs:
    """Jobs of the sandbox ``sandbox`` in ``namespace``; workloads reach the services at ``endpoints``."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        namespace: str,
        sandbox: str,
        image: str,
        endpoints: Endpoints,
        image_pull_policy: str = "IfNotPresent",
        secret: S3Secret | None = None,
        control_namespace: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.sandbox = sandbox
        self.image = image
        self.endpoints = endpoints
        self.image_pull_policy = image_pull_policy
        self._lock = threading.Lock()
        self.secret = secret or S3Secret(cluster, namespace=namespace, sandbox=sandbox, endpoints=endpoints)
        self._results: dict[str, dict[str, Any]] = {}
        self._log_notes: dict[str, str] = {}
        self.control_namespace = control_namespace
        """Where the chart runs MinIO and MLflow (what the scripts' NetworkPolicy lets them reach)."""
        self.workspaces: KubeWorkspaces | None = None
        """Where ``script`` jobs' files live (set by the runtime; without it they are refused)."""
        self._script_policy = False
        self.environments: KubeEnvironments | None = None
        """The sandbox's built environments (set by the runtime; without them a named one is refused)."""

    def __repr__(self) -> str:
        return f"KubeJobs(namespace={self.namespace!r}, sandbox={self.sandbox!r})"

    # ------------------------------------------------------------------------------------------ protocol

    def submit(self, spec: JobSpec) -> JobStatus:
        """Create the Job; :class:`ValueError` for a spec Kubernetes cannot take or an id already used."""
        if spec.cpus <= 0 or spec.memory_mb <= 0:
            raise ValueError("cpus and memory_mb must be positive")
        if spec.environment not in (None, DEFAULT_KEY):
            if spec.workload == W.SCRIPT_WORKLOAD:
                raise ValueError("a workspace script runs in the image's interpreter, not an environment")
            if self.environments is None:
                raise Unsupported("environments.build", BACKEND, "this client has no object store")
            self.environments.get(str(spec.environment))  # KeyError: not built
        if spec.workload == W.SCRIPT_WORKLOAD:
            return self._submit_script(spec)
        _refuse_torch(spec)
        return self._create(spec)

    def submit_module(self, spec: JobSpec, module: str) -> JobStatus:
        """A Job running the workload module ``module`` (not an agent's: the sandbox's own, such as the
        production scorer of :meth:`KubeEnvironments.score`), otherwise as :meth:`submit`."""
        return self._create(spec, module)

    def _create(self, spec: JobSpec, module: str | None = None) -> JobStatus:
        self.secret.ensure()
        manifest = M.sandbox_job(
            spec,
            namespace=self.namespace,
            sandbox=self.sandbox,
            image=self.image,
            endpoints=self.endpoints,
            s3_secret=M.S3_SECRET_NAME,
            image_pull_policy=self.image_pull_policy,
            module=module,
        )
        try:
            self.cluster.create(manifest)
        except ApiRefused as exc:
            if exc.status == 409:
                raise ValueError(f"job {spec.job_id!r} already exists") from None
            raise ValueError(f"job {spec.job_id!r} was refused by the cluster: {exc}") from None
        return self.get(spec.job_id)

    def _submit_script(self, spec: JobSpec) -> JobStatus:
        """A workspace script's Secret of scoped credentials, the scripts' NetworkPolicy (once) and its Job."""
        workspace = spec.workspace
        if self.workspaces is None or workspace is None or not spec.args:
            raise ValueError("script jobs need the sandbox's workspaces, a workspace and a script path")
        if self.control_namespace is None:
            raise ValueError("script jobs need the control namespace (where MinIO and MLflow run)")
        bucket = self.workspaces.bucket_of(workspace)
        spec = spec.model_copy(update={"args": ["/".join(clean_path(spec.args[0])), *spec.args[1:]]})
        if not self._script_policy:
            policy = W.script_network_policy(self.namespace, self.control_namespace)
            try:
                self.cluster.create(policy)
            except ApiRefused as exc:
                if exc.status != 409:
                    raise
            self._script_policy = True
        creds = self.workspaces.credentials(workspace, spec.timeout_s)
        secret = W.credentials_secret(spec, self.namespace, creds, self.sandbox)
        manifest = W.script_job(
            spec,
            namespace=self.namespace,
            image=self.image,
            endpoints=self.endpoints,
            bucket=bucket,
            sandbox=self.sandbox,
            quota_bytes=self.workspaces.quota_bytes,
            image_pull_policy=self.image_pull_policy,
        )
        made_secret = False
        try:
            self._create_script_secret(spec.job_id, secret)
            made_secret = True
            job = self.cluster.create(manifest)
        except ApiRefused as exc:
            if made_secret:  # the Job was refused: its Secret must not be left to block the id
                self.cluster.delete("v1", "Secret", secret["metadata"]["name"], self.namespace)
            if exc.status == 409:
                raise ValueError(f"job {spec.job_id!r} already exists") from None
            raise ValueError(f"job {spec.job_id!r} was refused by the cluster: {exc}") from None
        self.cluster.patch("v1", "Secret", secret["metadata"]["name"], self.namespace, W.owned_by(job))
        return self.get(spec.job_id)

    def _create_script_secret(self, job_id: str, secret: dict[str, Any]) -> None:
        """Create a script job's Secret of credentials. A Secret of that name already there while no Job of
        the id exists is a leftover of a submission that stopped between the two (a gateway that crashed
        after creating the Secret): it is replaced, so it does not block the id. With the Job there, or a
        Secret that is not this sandbox's script Secret of the same id, the 409 stands."""
        name = secret["metadata"]["name"]
        try:
            self.cluster.create(secret)
            return
        except ApiRefused as exc:
            if exc.status != 409 or self.cluster.get(*JOB_API, M.job_name(job_id), self.namespace):
                raise
            found = self.cluster.get("v1", "Secret", name, self.namespace) or {}
            labels = (found.get("metadata") or {}).get("labels") or {}
            ours = secret["metadata"]["labels"]
            if any(labels.get(k) != ours.get(k) for k in (M.WORKLOAD_LABEL, M.SANDBOX_LABEL, M.JOB_ID_LABEL)):
                raise
        self.cluster.delete("v1", "Secret", name, self.namespace)
        self.cluster.create(secret)

    def get(self, job_id: str) -> JobStatus:
        """Raise :class:`KeyError` for an unknown job."""
        job = self._job(job_id)
        return self._status(job_id, job, self._pod(job_id))

    def logs(self, job_id: str, tail: int = 50) -> str:
        """The pod's log (its last ``tail`` lines), then what the cluster says about the job (OOM kill,
        deadline, cancellation, a pod that cannot start) as ``[mlsandbox] ...`` lines."""
        job = self._job(job_id)
        pod = self._pod(job_id)
        spec = M.spec_of(job)
        text = self._pod_log(pod, tail)
        notes = M.job_notes(job, pod, spec.memory_mb if spec else None)
        if pod is None:
            notes += self._creation_events(M.job_name(job_id))
        return "\n".join(part for part in (text.rstrip("\n"), *notes) if part)

    def cancel(self, job_id: str) -> JobStatus:
        """Suspend the Job (its pod is deleted by the Job controller); a finished job is left as is."""
        status = self.get(job_id)
        if status.state in _TERMINAL:
            return status
        self.cluster.patch(*JOB_API, M.job_name(job_id), self.namespace, M.cancel_patch())
        return self.get(job_id)

    def list(self, label: tuple[str, str] | None = None) -> list[JobStatus]:
        """Jobs of this sandbox in creation order, only those carrying ``label`` when given."""
        selector = f"{M.SANDBOX_LABEL}={self.sandbox}"
        if label is not None:
            selector += f",{label[0]}={label[1]}"
        jobs = self.cluster.list(*JOB_API, namespace=self.namespace, selector=selector)
        pods = self.cluster.list("v1", "Pod", namespace=self.namespace, selector=selector)
        by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            by_job.setdefault(
                ((pod.get("metadata") or {}).get("labels") or {}).get(M.JOB_ID_LABEL, ""), []
            ).append(pod)
        out = []
        for job in sorted(
            jobs, key=lambda j: (str(j["metadata"].get("creationTimestamp")), j["metadata"]["name"])
        ):
            job_id = (job["metadata"].get("annotations") or {}).get(
                "mlsandbox.dev/job-id", job["metadata"]["name"]
            )
            out.append(self._status(job_id, job, _newest(by_job.get(job["metadata"]["name"], []))))
        return out

    def cleanup(self, label: tuple[str, str]) -> None:
        """Delete every Job of this sandbox carrying ``label`` (and, by propagation, their pods)."""
        selector = f"{M.SANDBOX_LABEL}={self.sandbox},{label[0]}={label[1]}"
        for job in self.cluster.list(*JOB_API, namespace=self.namespace, selector=selector):
            self.cluster.delete(*JOB_API, job["metadata"]["name"], self.namespace, propagation="Background")
            job_id = (job["metadata"].get("annotations") or {}).get("mlsandbox.dev/job-id")
            with self._lock:
                self._results.pop(job_id or "", None)
        for pod in self.cluster.list("v1", "Pod", namespace=self.namespace, selector=selector):
            self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)

    def set_resources(
        self, job_id: str, cpus: float | None = None, memory_mb: int | None = None
    ) -> JobStatus:
        """Resize the running pod in place (requests = limits); see the module docstring for what cannot be."""
        if (cpus is not None and cpus <= 0) or (memory_mb is not None and memory_mb <= 0):
            raise ValueError("cpus and memory_mb must be positive")
        job = self._job(job_id)
        spec = M.spec_of(job)
        if spec is None:
            raise ValueError(f"job {job_id!r} was not made by mlsandbox: its resources are unknown")
        pod = self._pod(job_id)
        status = self._status(job_id, job, pod)
        if status.state in _TERMINAL:
            raise ValueError(f"job {job_id!r} is {status.state}: limits apply to a queued or running job")
        if pod is None or status.state != "running":
            raise ValueError(
                f"job {job_id!r} has no running pod yet, and a Job's pod template is immutable: "
                "its resources can be changed once it runs (in-place pod resize), or cancel and resubmit it"
            )
        new = spec.model_copy(
            update={"cpus": cpus if cpus is not None else spec.cpus, "memory_mb": memory_mb or spec.memory_mb}
        )
        containers = M.resize_containers(spec.workload, new.cpus, new.memory_mb)
        try:
            self.cluster.resize_pod(pod["metadata"]["name"], self.namespace, containers)
        except ApiRefused as exc:
            raise ValueError(
                f"the cluster refused to resize job {job_id!r} in place ({exc}); a Job's pod template is "
                "immutable, so its limits cannot be changed otherwise: cancel and resubmit it"
            ) from None
        annotations = {M.SPEC_ANNOTATION: new.model_dump_json()}
        self.cluster.patch(
            *JOB_API, M.job_name(job_id), self.namespace, {"metadata": {"annotations": annotations}}
        )
        return self.get(job_id)

    # ------------------------------------------------------------------------------------------- extra

    def pod(self, job_id: str) -> dict[str, Any] | None:
        """The job's (newest) pod, as the API server has it."""
        return self._pod(job_id)

    def resources(self, job_id: str) -> tuple[float, int]:
        """(cpus, memory_mb) the job's spec now says (after any :meth:`set_resources`)."""
        spec = M.spec_of(self._job(job_id))
        if spec is None:
            raise KeyError(f"job {job_id!r} carries no spec")
        return spec.cpus, spec.memory_mb

    def delete(self, job_id: str) -> bool:
        """Delete one Job and its pod (background propagation); False when there was none."""
        return self.cluster.delete(*JOB_API, M.job_name(job_id), self.namespace)

    def delete_all(self) -> int:
        """Delete every Job (and pod) of this sandbox: what ``down`` does. Returns how many Jobs."""
        selector = f"{M.SANDBOX_LABEL}={self.sandbox}"
        jobs = self.cluster.list(*JOB_API, namespace=self.namespace, selector=selector)
        for job in jobs:
            self.cluster.delete(*JOB_API, job["metadata"]["name"], self.namespace)
        for pod in self.cluster.list("v1", "Pod", namespace=self.namespace, selector=selector):
            self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)
        self.secret.delete()
        with self._lock:
            self._results.clear()
        return len(jobs)

    # --------------------------------------------------------------------------------------- internals

    def _job(self, job_id: str) -> dict[str, Any]:
        try:
            name = M.job_name(job_id)
        except ValueError:
            raise KeyError(f"unknown job {job_id!r}") from None
        job = self.cluster.get(*JOB_API, name, self.namespace)
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        if job is None or labels.get(M.SANDBOX_LABEL) != self.sandbox:
            raise KeyError(f"unknown job {job_id!r}")
        return job

    def _pod(self, job_id: str) -> dict[str, Any] | None:
        selector = f"{M.JOB_ID_LABEL}={M.job_name(job_id)},{M.SANDBOX_LABEL}={self.sandbox}"
        return _newest(self.cluster.list("v1", "Pod", namespace=self.namespace, selector=selector))

    def _status(self, job_id: str, job: dict[str, Any], pod: dict[str, Any] | None) -> JobStatus:
        status = M.job_status(job_id, job, pod)
        spec = M.spec_of(job)
        cancelled = ((job.get("metadata") or {}).get("annotations") or {}).get(M.CANCELLED_ANNOTATION)
        if cancelled and status.state != "succeeded":
            status = status.model_copy(update={"state": "cancelled"})
        started = status.started_at  # when its container started: a queued job is not charged
        finished = status.finished_at if status.state in _TERMINAL else None
        update: dict[str, Any] = {"started_at": started}
        if started is not None and spec is not None:
            end = finished if finished is not None else (None if status.state in _TERMINAL else time.time())
            if end is not None:
                update["cpu_seconds"] = round(max(0.0, end - started) * spec.cpus, 3)
        if status.state == "succeeded":
            update["result"] = self._result(job_id, pod)
        return status.model_copy(update=update)

    def _result(self, job_id: str, pod: dict[str, Any] | None) -> dict[str, Any]:
        with self._lock:
            if job_id in self._results:
                return self._results[job_id]
        result: dict[str, Any] = {}
        if pod is not None:
            try:
                text = self.cluster.pod_log(pod["metadata"]["name"], self.namespace, tail=200)
            except (ApiRefused, TransientApiError):
                text = ""
            result = M.parse_result(text) if RESULT_PREFIX in text else {}
        with self._lock:
            self._results[job_id] = result
        return result

    def _pod_log(self, pod: dict[str, Any] | None, tail: int) -> str:
        if pod is None:
            return "(no pod yet: no log)"
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        try:
            return self.cluster.pod_log(name, self.namespace, tail=tail)
        except (ApiRefused, TransientApiError) as exc:
            return (
                f"(no log from pod {name}, phase {phase}: the cluster did not serve it, e.g. a simulated "
                f"node without a kubelet: {exc})"
            )

    def _creation_events(self, name: str) -> builtins.list[str]:
        """Why the Job has no pod (an exhausted ResourceQuota, ...), from its warning events."""
        with contextlib.suppress(Exception):
            events = self.cluster.core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.name={name},type=Warning", _request_timeout=5
            )
            return [f"{M.NOTE_PREFIX} {e.reason}: {e.message}" for e in events.items[-3:]]
        return []


TORCH_REFUSAL = (
    "the trainer image carries no PyTorch (its size would double): train the image kind's pixel-feature "
    "model on kube, or the CNN on the local backend with the rl extra"
)


def _refuse_torch(spec: JobSpec) -> None:
    """:class:`Unsupported` for a trainer job whose algorithm trains with PyTorch (not in the image)."""
    from mlsandbox.workloads.trainer import torch_algorithm

    algorithm = torch_algorithm(spec.workload, spec.args)
    if algorithm is not None:
        raise Unsupported(f"jobs.{algorithm}", BACKEND, TORCH_REFUSAL)


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not pods:
        return None
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
