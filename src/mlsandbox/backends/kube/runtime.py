"""The operations over a sandbox on a cluster (handed out by ``KubeBackend.runtime()``).

Two sets of endpoints:

- ``endpoints`` (the clients of this process: the gateway, the agent's tools): by default what
  ``mlsandbox cluster up`` recorded for its cluster (:mod:`.cluster_state`: the NodePorts at the real
  node's address), else the kind NodePorts mapped to localhost by ``kind-config.yaml`` (S3
  ``http://127.0.0.1:9000``, MLflow ``:5000``, Prefect ``:4200/api``); each URL and the S3 keys can be overridden with ``MLSANDBOX_KUBE_S3_URL``,
  ``MLSANDBOX_KUBE_MLFLOW_URL``, ``MLSANDBOX_KUBE_PREFECT_URL``, ``MLSANDBOX_KUBE_S3_ACCESS_KEY`` and
  ``MLSANDBOX_KUBE_S3_SECRET_KEY`` (or by the constructor), e.g. to point at another sandbox's services;
- ``workload_endpoints`` (what Jobs get in their environment): the chart's Services by their in-cluster
  DNS names in the control namespace.

The object store and the tracker are the same S3 and MLflow clients as on ``local``, on ``endpoints``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mlsandbox import paths
from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.backends.common.clients import ServiceClients
from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.common.config_store import PrefectConfigStore, job_config_of
from mlsandbox.backends.kube.faults.control import UNAVAILABLE as FAULTS_UNAVAILABLE
from mlsandbox.backends.kube.faults.control import KubeFaultControl
from mlsandbox.backends.protocols import Endpoints, Support
from mlsandbox.backends.protocols.runtime import random_episode_id

from . import environments as kube_environments
from . import sources as kube_sources
from .cluster import Cluster
from .deployments import ENVIRONMENT_REFUSAL, KubeServing
from .environments import KubeEnvironments
from .flows import ENVIRONMENT_REASON as FLOWS_ENVIRONMENT_REASON
from .flows import KubeFlows
from .jobs import KubeJobs
from .plugin_services import KubePluginServices
from .secret import S3Secret
from .serving import FEATURE_PORT, SERVER_PORT
from .sources import KubeSourceHosting
from .workspaces import KubeWorkspaces

BACKEND = "kube"
STATIC_UNSUPPORTED: dict[str, str] = {
    **{f"fault:{kind}": why for kind, why in FAULTS_UNAVAILABLE.items()},
    **kube_sources.UNSUPPORTED,
    **kube_environments.UNSUPPORTED,
    "flows.environment": FLOWS_ENVIRONMENT_REASON,
    "serving.environment": ENVIRONMENT_REFUSAL,
}
"""What a kube sandbox refuses whatever its cluster has (capability or ``fault:TYPE`` -> reason)."""
KIND_ENDPOINTS = {
    "s3_url": "http://127.0.0.1:9000",
    "mlflow_url": "http://127.0.0.1:5000",
    "prefect_api_url": "http://127.0.0.1:4200/api",
}
ENDPOINT_ENV = {
    "s3_url": "MLSANDBOX_KUBE_S3_URL",
    "mlflow_url": "MLSANDBOX_KUBE_MLFLOW_URL",
    "prefect_api_url": "MLSANDBOX_KUBE_PREFECT_URL",
    "s3_access_key": "MLSANDBOX_KUBE_S3_ACCESS_KEY",
    "s3_secret_key": "MLSANDBOX_KUBE_S3_SECRET_KEY",
}
DEFAULT_IMAGE = "mlsandbox/trainer:0.1.0"
IMAGE_ENV = "MLSANDBOX_TRAINER_IMAGE"
DEFAULT_SERVER_IMAGE = "mlsandbox/model-server:0.1.0"
SERVER_IMAGE_ENV = "MLSANDBOX_MODEL_SERVER_IMAGE"
DEFAULT_API_SOURCE_IMAGE = "mlsandbox/gateway:0.1.0"
"""The HTTP API source's image: the gateway's (the source imports more of the package than the
model-server image carries)."""
API_SOURCE_IMAGE_ENV = "MLSANDBOX_KUBE_API_SOURCE_IMAGE"
DEFAULT_POSTGRES_IMAGE = "mlsandbox/postgres:15"
POSTGRES_IMAGE_ENV = "MLSANDBOX_KUBE_POSTGRES_IMAGE"
SERVER_CPU_REQUEST_ENV = "MLSANDBOX_KUBE_SERVER_CPU_REQUEST"
"""The share (0 < x <= 1) of its machine's CPU a model-server replica requests (its limit stays the
machine's): 1 by default; ``mlsandbox cluster up`` records a smaller one for its one-machine clusters."""
SERVICE_PORTS = {"minio": 9000, "mlflow": 5000, "prefect-server": 4200}
WORK_POOL = "mlsandbox"
"""The chart's Kubernetes work pool (``prefect.worker.workPool``); ``MLSANDBOX_KUBE_WORK_POOL`` overrides."""
WORK_POOL_ENV = "MLSANDBOX_KUBE_WORK_POOL"
CONFIG_TAG = "mlsandbox-namespace"
"""Tag of the config store's variables: ``mlsandbox-namespace:<the sandbox's namespace>``."""


def client_endpoints(
    credentials: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    defaults: Endpoints | None = None,
) -> Endpoints:
    """The endpoints this process uses: ``defaults`` (what ``mlsandbox cluster up`` recorded) or else
    the kind NodePorts, overridden by the environment, with the S3 keys from the environment or else
    ``credentials`` (the chart's MinIO Secret) or else ``defaults``'."""
    env = os.environ if environ is None else environ
    base = (
        defaults.model_dump()
        if defaults is not None
        else {**KIND_ENDPOINTS, "s3_access_key": "", "s3_secret_key": ""}
    )
    values = {**base, **{k: v for k, v in (credentials or {}).items() if v}}
    for field, var in ENDPOINT_ENV.items():
        if env.get(var):
            values[field] = env[var]
    return Endpoints(**values)


def client_state_dir(control_namespace: str, sandbox: str) -> Path:
    """What this client keeps of the sandbox ``control_namespace/sandbox`` on this machine (the episodes'
    audit logs)."""
    return paths.home() / "kube" / control_namespace / paths.validate_sandbox_name(sandbox)


def workload_endpoints(
    control_namespace: str, services: Mapping[str, str], credentials: Endpoints
) -> Endpoints:
    """What Jobs use: ``services`` maps a component (minio, mlflow, prefect-server) to its Service name."""

    def url(component: str) -> str:
        name = services.get(component, f"mls-mlsandbox-{component}")
        return f"http://{name}.{control_namespace}.svc:{SERVICE_PORTS[component]}"

    return Endpoints(
        s3_url=url("minio"),
        s3_access_key=credentials.s3_access_key,
        s3_secret_key=credentials.s3_secret_key,
        mlflow_url=url("mlflow"),
        prefect_api_url=url("prefect-server") + "/api",
    )


class KubeRuntime(ServiceClients):
    """Object store, tracking, jobs, model deployments and faults of one sandbox on a cluster; clients
    made on first use."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        sandbox: str,
        namespace: str,
        control_namespace: str,
        endpoints: Endpoints,
        workload_endpoints: Endpoints,
        image: str | None = None,
        server_image: str | None = None,
        server_cpu_request: float | None = None,
        server_port: int = SERVER_PORT,
        feature_port: int = FEATURE_PORT,
        work_pool: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.sandbox_name = sandbox
        self.namespace = namespace
        self.control_namespace = control_namespace
        super().__init__(endpoints)
        self.workload_endpoints = workload_endpoints
        self.image = image or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
        self.server_image = server_image or os.environ.get(SERVER_IMAGE_ENV) or DEFAULT_SERVER_IMAGE
        self.server_cpu_request = server_cpu_request or float(os.environ.get(SERVER_CPU_REQUEST_ENV) or 1.0)
        self.server_port = server_port
        self.feature_port = feature_port
        self.work_pool = work_pool or os.environ.get(WORK_POOL_ENV) or WORK_POOL
        self._secret = S3Secret(cluster, namespace=namespace, sandbox=sandbox, endpoints=workload_endpoints)
        self._clock = RealClock()
        self._audit = FileAuditLog(client_state_dir(control_namespace, sandbox) / "episodes")
        self._jobs: KubeJobs | None = None
        self._serving: KubeServing | None = None
        self._faults: KubeFaultControl | None = None
        self._sources = KubeSourceHosting(
            cluster,
            namespace=namespace,
            sandbox=sandbox,
            api_image=os.environ.get(API_SOURCE_IMAGE_ENV) or DEFAULT_API_SOURCE_IMAGE,
            postgres_image=os.environ.get(POSTGRES_IMAGE_ENV) or DEFAULT_POSTGRES_IMAGE,
            cpu_request=self.server_cpu_request,
        )
        self._flows: KubeFlows | None = None
        self._config: PrefectConfigStore | None = None
        self._environments: KubeEnvironments | None = None
        self._workspaces: KubeWorkspaces | None = None
        self._plugin_services: KubePluginServices | None = None

    def __repr__(self) -> str:
        return f"KubeRuntime(sandbox={self.sandbox_name!r}, namespace={self.namespace!r})"

    # ------------------------------------------------------------------------------------ identity

    @property
    def backend(self) -> str:
        return BACKEND

    @property
    def sandbox(self) -> str:
        return self.sandbox_name

    @property
    def clock(self) -> RealClock:
        return self._clock

    @property
    def audit(self) -> FileAuditLog:
        """The episodes' audit logs, on this client's machine (under :func:`client_state_dir`)."""
        return self._audit

    def new_episode_id(self, seed: int) -> str:
        """Random: several clients share the sandbox's namespace."""
        return random_episode_id(seed)

    def support(self) -> Support:
        """The static refusals, and the fault types this cluster lacks (no Chaos Mesh CRDs)."""
        refused = dict(STATIC_UNSUPPORTED)
        refused.update({f"fault:{k}": v for k, v in self.faults.unavailable().items()})
        return Support(backend=BACKEND, unsupported=refused)

    # -------------------------------------------------------------------------------- capabilities

    @property
    def jobs(self) -> KubeJobs:
        workspaces = self.workspaces
        environments = self.environments
        with self._lock:
            if self._jobs is None:
                self._jobs = KubeJobs(
                    self.cluster,
                    namespace=self.namespace,
                    sandbox=self.sandbox_name,
                    image=self.image,
                    endpoints=self.workload_endpoints,
                    secret=self._secret,
                    control_namespace=self.control_namespace,
                )
                self._jobs.workspaces = workspaces
                self._jobs.environments = environments
            return self._jobs

    @property
    def serving(self) -> KubeServing:
        """Model deployments as Deployments and Services, requests and scrapes through the API server's
        proxy (see :mod:`mlsandbox.backends.kube.deployments`)."""
        with self._lock:
            if self._serving is None:
                self._serving = KubeServing(
                    self.cluster,
                    namespace=self.namespace,
                    sandbox=self.sandbox_name,
                    image=self.server_image,
                    endpoints=self.workload_endpoints,
                    port=self.server_port,
                    feature_port=self.feature_port,
                    secret=self._secret,
                    cpu_request=self.server_cpu_request,
                )
            return self._serving

    @property
    def faults(self) -> KubeFaultControl:
        jobs = self.jobs
        with self._lock:
            if self._faults is None:
                self._faults = KubeFaultControl(
                    self.cluster,
                    sandbox=self.sandbox_name,
                    namespace=self.namespace,
                    control_namespace=self.control_namespace,
                    endpoints=self._endpoints,
                    jobs=jobs,
                )
            return self._faults

    # ------------------------------------------------- sources, flows, config store, environments

    @property
    def sources(self) -> KubeSourceHosting:
        """The HTTP API source and PostgreSQL as pods of the episode, reached over port-forwards."""
        return self._sources

    @property
    def plugin_services(self) -> KubePluginServices:
        """The plug-ins' services as pods of the sandbox (:mod:`.plugin_services`), in the gateway image."""
        if self._plugin_services is None:
            image = os.environ.get(API_SOURCE_IMAGE_ENV) or DEFAULT_API_SOURCE_IMAGE
            self._plugin_services = KubePluginServices(self, image=image)
        return self._plugin_services

    @property
    def flows(self) -> KubeFlows:
        """Flow runs as Jobs of the chart's Kubernetes work pool in the sandbox's namespace."""
        with self._lock:
            if self._flows is None:
                self._flows = KubeFlows(
                    self.cluster,
                    api_url=self._endpoints.prefect_api_url,
                    sandbox=self.sandbox_name,
                    namespace=self.namespace,
                    work_pool=self.work_pool,
                    image=self.image,
                    workload_endpoints=self.workload_endpoints,
                )
            return self._flows

    @property
    def config(self) -> PrefectConfigStore:
        """Prefect variables of the chart's Prefect server; the job config is what Jobs reach (the
        in-cluster endpoints). Every variable is tagged with the sandbox's namespace: ``down`` deletes
        what a crashed client left."""
        with self._lock:
            if self._config is None:
                self._config = PrefectConfigStore(
                    self._endpoints.prefect_api_url,
                    job_config=job_config_of(self.workload_endpoints),
                    tags=[f"{CONFIG_TAG}:{self.namespace}"],
                )
            return self._config

    @property
    def environments(self) -> KubeEnvironments:
        """Named environments: pinned packages in the sandbox's object store, unpacked into a job's pod
        (:mod:`mlsandbox.backends.kube.environments`)."""
        store = self.object_store  # (takes the clients' lock itself)
        with self._lock:
            if self._environments is None:
                self._environments = KubeEnvironments(store, lambda: self.jobs)
            return self._environments

    @property
    def workspaces(self) -> KubeWorkspaces:
        """The episodes' code workspaces: files in the episode's bucket, scripts as locked-down Jobs
        (:mod:`mlsandbox.backends.kube.workspaces`)."""
        store = self.object_store  # (takes the clients' lock itself)
        with self._lock:
            if self._workspaces is None:
                self._workspaces = KubeWorkspaces(store, self._endpoints)
            return self._workspaces

    def close(self) -> None:
        """Nothing to stop here: Jobs belong to the cluster (``KubeBackend.down`` deletes them)."""
