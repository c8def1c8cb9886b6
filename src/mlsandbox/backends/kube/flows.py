"""Flows on the kube backend: the chart's Prefect with its Kubernetes work pool.

Each flow run is a Job that the chart's Prefect worker creates in the sandbox's namespace, in the trainer
image (which has the flows), with the in-cluster endpoints and the episode's labels on it (plus
:data:`FLOW_COMPONENT` and :data:`FLOW_SANDBOX_LABEL`, not the sandbox label the agent's jobs carry).
Closing an episode's flows deletes its flow-run Jobs; ``down`` deletes every flow-run Job of the sandbox.
Named environments are refused (``flows.environment``): the runs are Jobs of the trainer image's own
interpreter (training jobs run in named environments, see :mod:`.environments`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mlsandbox.backends.common.prefect import FlowPlacement, PrefectFlows, no_environments
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.workloads.contract import endpoint_env

from . import manifests as M
from .cluster import Cluster

BACKEND = "kube"
FLOW_COMPONENT = "flow-run"
FLOW_SANDBOX_LABEL = "mlsandbox.dev/flow-sandbox"
"""The sandbox of a flow-run Job (not the sandbox label: the agent's jobs are the Jobs carrying that)."""
ENVIRONMENT_REASON = (
    "flow runs are Jobs in the trainer image's own interpreter: on this backend, named environments are "
    "for training jobs"
)


class KubeFlows(PrefectFlows):
    """The :class:`~mlsandbox.backends.protocols.Flows` of a sandbox on a cluster: runs of its work pool
    ``work_pool`` on the Prefect at ``api_url``, as Jobs in ``namespace``."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        api_url: str,
        sandbox: str,
        namespace: str,
        work_pool: str,
        image: str,
        workload_endpoints: Endpoints,
    ) -> None:
        self.cluster = cluster
        self.sandbox = sandbox
        self.namespace = namespace
        self.work_pool = work_pool
        self.image = image
        self.workload_endpoints = workload_endpoints
        super().__init__(
            api_url,
            self.placement,
            interpreter=no_environments(BACKEND, ENVIRONMENT_REASON),
            cleanup=self.delete_jobs,
        )

    def placement(self, labels: Mapping[str, str]) -> FlowPlacement:
        """Jobs of the Kubernetes work pool in the sandbox's namespace, in the trainer image, with the
        in-cluster endpoints and ``labels`` (the episode's)."""
        job_labels = {
            **M.check_labels(dict(labels)),
            M.COMPONENT_LABEL: FLOW_COMPONENT,
            FLOW_SANDBOX_LABEL: M.check_labels({FLOW_SANDBOX_LABEL: self.sandbox})[FLOW_SANDBOX_LABEL],
        }
        job_variables = {
            "image": self.image,
            "namespace": self.namespace,
            "labels": job_labels,
            "image_pull_policy": "IfNotPresent",
            "stream_output": False,  # the runs ship their logs to Prefect; the worker need not read pods
        }
        env = {**endpoint_env(**self.workload_endpoints.model_dump()), **M.QUIET_ENV}
        return FlowPlacement(self.work_pool, env, job_variables)

    def delete_jobs(self, labels: Mapping[str, str] | None = None) -> int:
        """Delete the flow-run Jobs (and pods) of this sandbox (with ``labels`` when given); how many Jobs."""
        selector = f"{M.COMPONENT_LABEL}={FLOW_COMPONENT},{FLOW_SANDBOX_LABEL}={self.sandbox}"
        selector += "".join(f",{k}={v}" for k, v in (labels or {}).items())
        jobs = self.cluster.list("batch/v1", "Job", self.namespace, selector)
        for job in jobs:
            self.cluster.delete(
                "batch/v1", "Job", job["metadata"]["name"], self.namespace, propagation="Background"
            )
        for pod in self.cluster.list("v1", "Pod", self.namespace, selector):
            self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)
        return len(jobs)


__all__ = ["ENVIRONMENT_REASON", "FLOW_COMPONENT", "FLOW_SANDBOX_LABEL", "KubeFlows"]
