"""Model serving on the kube backend, behind the declared protocol
(:class:`~mlsandbox.backends.protocols.serving.ModelServing`): Deployments and Services in the sandbox's
namespace (built by :mod:`mlsandbox.backends.kube.serving`), requests and scrapes through the API server's
proxy.

:class:`KubeServing` is the runtime's ``serving``; :meth:`KubeServing.open` gives an episode its
:class:`KubeEpisodeServing`, which sees only the objects carrying the episode's labels (a deployment name
taken by another episode of the sandbox is a ``conflict``) and deletes them on ``close``; the operator's
warm reset and ``KubeBackend.down`` delete them by label too.

- ``deploy`` creates the Deployment and its ClusterIP Service, or changes the pod template (Kubernetes'
  rolling update, ``maxUnavailable: 0``); it returns once the rollout is complete. When a new replica
  exits, crash-loops or cannot get its image, or the rollout does not complete within the rollout
  timeout, the change is undone (a new Deployment is deleted; an existing one gets its previous template
  back, so the old version keeps serving) and ``deploy_failed`` says why, with the replica's log tail
  when the API server has it. ``scale`` and ``set_version`` are undone the same way.
- Requests go to the deployment's Service (``/api/v1/namespaces/<ns>/services/<name>:<port>/proxy/<path>``:
  one of its ready pods answers, as any client of the Service gets); scrapes go to each pod
  (``.../pods/<pod>:<port>/proxy/metrics``). The API server's own refusals (no ready endpoint, a pod that
  does not answer) are ``unavailable``. The credentials must allow ``services/proxy`` and ``pods/proxy``.
- Replicas that die are replaced by the ReplicaSet on its own. A replica's CPU and memory are read from
  its node's kubelet (:mod:`.replica_metrics`; the credentials need ``nodes/proxy``).
- An HTTP fault on a deployment (``http:DEPLOYMENT``, :class:`DeploymentFault`) is the fault of every
  replica, as a local deployment's replicas share one control file: each running replica's fault hook is
  written through its pod's control listener, and the deployment's fault Secret, mounted in its pods,
  gives a replica started during the fault (a scale-out, a replacement, a rollout) the fault at start.
- Named environments for replicas are refused (``serving.environment``): replicas run the model-server
  image.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from mlsandbox.backends.protocols import Endpoints, HttpFault, ServiceHealth
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    EpisodeServing,
    ModelServing,
    ReplicaRef,
    ReplicaStats,
    ServingError,
    ServingResponse,
    check_set_version,
    not_found,
)
from mlsandbox.errors import Unsupported

from . import manifests as M
from .cluster import ApiRefused, Cluster
from .control_listener import (
    ControlListener,
    ControlUnreachable,
    PodFaultHook,
    register_http_target,
    running_pod,
    unregister_http_target,
)
from .environments import SERVING_REASON
from .replica_metrics import ResourceMetrics, read_resource_metrics
from .secret import S3Secret
from .serving import (
    COMPONENT,
    DEPLOYMENT_LABEL,
    FEATURE_ADMIN_PORT,
    FEATURE_COMPONENT,
    FEATURE_PORT,
    FEATURE_SERVICE_NAME,
    ROLLOUT_TIMEOUT_S,
    SERVER_ADMIN_PORT,
    SERVER_PORT,
    SPEC_ANNOTATION,
    ModelServerSpec,
    describe,
    fault_secret,
    fault_secret_name,
    feature_service_manifests,
    history_of,
    labels_of,
    model_server_deployment,
    model_server_service,
    pod_state,
    rollout_failure,
    running,
    server_name,
    spec_of,
)

DEPLOYMENT_API = ("apps/v1", "Deployment")
SERVICE_API = ("v1", "Service")
SECRET_API = ("v1", "Secret")
BACKEND = "kube"
ENVIRONMENT_REFUSAL = SERVING_REASON
"""Why ``serving.environment`` is refused on this backend (what ``support()`` says)."""
LOG_TAIL_LINES = 8


class KubeServing:
    """The model deployments of the sandbox ``sandbox`` in ``namespace`` (the kube runtime's ``serving``)."""

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
        refresh_s: float = 1.0,
        cpu_request: float = 1.0,
    ) -> None:
        self.cluster = cluster
        self.cpu_request = cpu_request
        """The share of its CPU limit a replica (and the feature service) requests: 1 (Guaranteed QoS)
        unless the cluster is one small machine (:data:`~mlsandbox.backends.kube.runtime.SERVER_CPU_REQUEST_ENV`)."""
        self.port = port
        self.feature_port = feature_port
        self.namespace = namespace
        self.sandbox = sandbox
        self.image = image
        self.endpoints = endpoints
        self.image_pull_policy = image_pull_policy
        self.rollout_timeout_s = rollout_timeout_s
        self.refresh_s = refresh_s
        self.secret = secret or S3Secret(cluster, namespace=namespace, sandbox=sandbox, endpoints=endpoints)

    def __repr__(self) -> str:
        return f"KubeServing(namespace={self.namespace!r}, sandbox={self.sandbox!r})"

    def open(self, episode_id: str, labels: dict[str, str]) -> KubeEpisodeServing:
        """The episode's deployments: the objects carrying ``labels`` (checked as Kubernetes labels)."""
        return KubeEpisodeServing(self, episode_id, M.check_labels(dict(labels)))

    def cleanup(self, labels: Mapping[str, str] | None = None) -> int:
        """Delete the deployments (with ``labels`` when given), their Services and pods, and the feature
        service; how many deployments."""
        count = 0
        for component in (COMPONENT, FEATURE_COMPONENT):
            selector = self.selector(labels, component)
            deps = self.cluster.list(*DEPLOYMENT_API, self.namespace, selector)
            for dep in deps:
                self.cluster.delete(
                    *DEPLOYMENT_API, dep["metadata"]["name"], self.namespace, propagation="Background"
                )
            for svc in self.cluster.list(*SERVICE_API, self.namespace, selector):
                self.cluster.delete(*SERVICE_API, svc["metadata"]["name"], self.namespace)
            for pod in self.cluster.list("v1", "Pod", self.namespace, selector):
                self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)
            if component == COMPONENT:
                for secret in self.cluster.list(*SECRET_API, self.namespace, selector):
                    self.cluster.delete(*SECRET_API, secret["metadata"]["name"], self.namespace)
            count += len(deps) if component == COMPONENT else 0
        return count

    # ------------------------------------------------------------------------------------ internals

    @property
    def feature_url(self) -> str:
        """The feature service's in-cluster address (what the replicas get as ``--feature-url``)."""
        return f"http://{FEATURE_SERVICE_NAME}.{self.namespace}.svc:{self.feature_port}"

    def selector(self, labels: Mapping[str, str] | None, component: str = COMPONENT) -> str:
        selector = f"{M.SANDBOX_LABEL}={self.sandbox},{M.COMPONENT_LABEL}={component}"
        return selector + "".join(f",{k}={v}" for k, v in (labels or {}).items())

    def manifest(self, spec: ModelServerSpec, history: list[str]) -> M.Manifest:
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
            cpu_request=self.cpu_request,
        )


class KubeEpisodeServing:
    """The deployments of one episode on the cluster (see the module docstring)."""

    def __init__(self, serving: KubeServing, episode_id: str, labels: dict[str, str]) -> None:
        self.serving = serving
        self.cluster = serving.cluster
        self.namespace = serving.namespace
        self.episode_id = episode_id
        self.labels = labels
        self._feature_url: str | None = None
        self._feature_hook: PodFaultHook | None = None
        self._lock = threading.RLock()
        self._client: httpx.Client | None = None
        self._base = ""
        self._targets: dict[str, list[ReplicaRef]] = {}
        self._read_at = -1.0e9
        self._closed = False
        self._faults: dict[str, DeploymentFault] = {}
        self._placed: dict[str, str] = {}
        """Pod -> its node, as of the last read."""
        self._usage = ResourceMetrics(lambda node: self._node_metrics(node))

    def __repr__(self) -> str:
        return f"KubeEpisodeServing(namespace={self.namespace!r}, episode={self.episode_id!r})"

    # ---------------------------------------------------------------------------------- operations

    def deploy(self, spec: DeploymentSpec, *, wait: bool = True) -> tuple[DeploymentView, bool]:
        """See the protocol; ``wait=False`` returns without waiting for the rollout (no undo then)."""
        if spec.environment is not None:
            raise Unsupported("serving.environment", BACKEND, ENVIRONMENT_REFUSAL)
        try:
            ms = ModelServerSpec(
                deployment=spec.deployment,
                model=spec.model,
                registry_name=spec.registry_name,
                version=spec.version,
                replicas=spec.replicas,
                machine=spec.machine.name,
                cpus=spec.machine.cpus,
                memory_mb=spec.machine.memory_mb,
                credits_per_second=spec.machine.credits_per_second,
                labels=self.labels,
                feature_url=self._feature_url,
                response=spec.response,
            )
        except ValidationError as e:
            raise ServingError("invalid_parameters", f"deployment {spec.deployment!r}: {e}") from None
        name = server_name(spec.deployment)
        existing = self._deployment(spec.deployment, missing_ok=True)
        if existing is not None:
            old = spec_of(existing)
            assert old is not None  # _deployment checks it
            if old.model != spec.model:
                raise ServingError(
                    "conflict",
                    f"deployment {spec.deployment!r} serves model {old.model!r}, not {spec.model!r}",
                )
            old_history = history_of(existing)
            history = list(old_history)
            if not history or history[-1] != spec.version:
                history.append(spec.version)
            before = self._pod_names(existing)
            self._apply(ms, history)
            view = self._settled(
                spec.deployment, wait, before, undo=lambda: self._apply(old, old_history), what=spec.version
            )
            self._fault_target(spec.deployment)
            return view, False
        manifest = self.serving.manifest(ms, [spec.version])
        service = model_server_service(
            ms, namespace=self.namespace, sandbox=self.serving.sandbox, port=self.serving.port
        )
        self.serving.secret.ensure()
        try:
            self.cluster.create(manifest)
        except ApiRefused as exc:
            if exc.status == 409:
                raise ServingError(
                    "conflict", f"a Deployment named {name} already exists in {self.namespace}"
                ) from None
            raise ServingError(
                "invalid_parameters", f"the cluster refused deployment {spec.deployment!r}: {exc}"
            ) from None
        try:
            self.cluster.apply(service)
        except Exception as exc:
            self.cluster.delete(*DEPLOYMENT_API, name, self.namespace)
            raise ServingError(
                "unavailable", f"the Service of deployment {spec.deployment!r} could not be created: {exc}"
            ) from None
        self._read_at = -1.0e9  # the new deployment is a target now
        view = self._settled(spec.deployment, wait, set(), undo=lambda: self._remove(name), what=spec.version)
        self._fault_target(spec.deployment)
        return view, True

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        dep = self._deployment(deployment)
        check_set_version(describe(dep, self._pods(dep)), version)
        spec = spec_of(dep)
        assert spec is not None
        old_history = history_of(dep)
        new = spec.model_copy(
            update={"version": version, "replicas": (dep.get("spec") or {}).get("replicas", spec.replicas)}
        )
        before = self._pod_names(dep)
        self._apply(new, [*old_history, version])
        return self._settled(
            deployment, True, before, undo=lambda: self._apply(spec, old_history), what=version
        )

    def scale(self, deployment: str, replicas: int, *, wait: bool = True) -> DeploymentView:
        """Set ``spec.replicas`` (the ReplicaSet replaces replicas that died)."""
        if replicas < 0:
            raise ServingError("invalid_parameters", f"replicas must be 0 or more, not {replicas}")
        dep = self._deployment(deployment)
        spec = spec_of(dep)
        assert spec is not None
        had = (dep.get("spec") or {}).get("replicas", spec.replicas) or 0
        before = self._pod_names(dep)
        self._set_replicas(dep["metadata"]["name"], spec, replicas)
        return self._settled(
            deployment,
            wait,
            before,
            undo=lambda: self._set_replicas(dep["metadata"]["name"], spec, had),
            what=f"{replicas} replicas of version {spec.version}",
        )

    def undeploy(self, deployment: str) -> DeploymentView:
        """Delete the Deployment (its ReplicaSets and pods go with it) and its Service; the last view."""
        dep = self._deployment(deployment)
        view = describe(dep, self._pods(dep))
        self._remove(dep["metadata"]["name"])
        return view

    def get(self, deployment: str) -> DeploymentView:
        dep = self._deployment(deployment)
        return describe(dep, self._pods(dep))

    def list(self) -> list[DeploymentView]:
        deps = self._deployments()
        pods = self.cluster.list("v1", "Pod", self.namespace, self.serving.selector(self.labels))
        out = []
        for dep in sorted(deps, key=lambda d: d["metadata"]["name"]):
            mine = [
                p for p in pods if labels_of(p).get(DEPLOYMENT_LABEL) == labels_of(dep).get(DEPLOYMENT_LABEL)
            ]
            out.append(describe(dep, mine))
        return sorted(out, key=lambda v: v.deployment)

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        """Run the episode's feature service over ``s3://bucket/key`` (idempotent) and wait until its pod
        is ready; ``unavailable`` when it is not ready within the rollout timeout."""
        if self._feature_url is not None:
            return
        serving = self.serving
        deployment, service = feature_service_manifests(
            namespace=self.namespace,
            sandbox=serving.sandbox,
            image=serving.image,
            endpoints=serving.endpoints,
            bucket=bucket,
            key=key,
            id_column=id_column,
            labels=self.labels,
            s3_secret=M.S3_SECRET_NAME,
            image_pull_policy=serving.image_pull_policy,
            port=serving.feature_port,
            cpu_request=serving.cpu_request,
        )
        serving.secret.ensure()
        try:
            self.cluster.apply(deployment)
            self.cluster.apply(service)
        except ApiRefused as exc:
            raise ServingError("unavailable", f"the cluster refused the feature service: {exc}") from None
        deadline = time.monotonic() + serving.rollout_timeout_s
        while not any(running(p) for p in self._feature_pods()):
            if time.monotonic() >= deadline:
                raise ServingError(
                    "unavailable",
                    f"the feature service was not ready after {serving.rollout_timeout_s:.0f} s",
                )
            time.sleep(0.25)
        self._feature_url = serving.feature_url
        self._read_at = -1.0e9
        register_http_target(self.episode_id, FEATURE_SERVICE, self)

    def _started_feature_service(self) -> None:
        if self._feature_url is None:
            raise ServingError("unavailable", "the feature service is not running (no deployment yet)")

    def feature_service_health(self, *, timeout_s: float = 2.0) -> ServiceHealth:
        """The readiness of its pods as the cluster sees it (its Service routes to ready pods only)."""
        self._started_feature_service()
        if any(running(p) for p in self._feature_pods()):
            return ServiceHealth(service=FEATURE_SERVICE, healthy=True)
        return ServiceHealth(service=FEATURE_SERVICE, healthy=False, error="no ready pod behind its Service")

    def restart_feature_service(self) -> ServiceHealth:
        """Delete its pods; its Deployment starts new ones (same Service address); wait for one ready."""
        self._started_feature_service()
        old = {p["metadata"]["name"] for p in self._feature_pods()}
        for name in sorted(old):
            self.cluster.delete("v1", "Pod", name, self.namespace)
        deadline = time.monotonic() + self.serving.rollout_timeout_s
        while not any(running(p) and p["metadata"]["name"] not in old for p in self._feature_pods()):
            if time.monotonic() >= deadline:
                raise ServingError(
                    "unavailable",
                    f"the feature service was not ready after {self.serving.rollout_timeout_s:.0f} s",
                )
            time.sleep(0.25)
        self._read_at = -1.0e9
        return self.feature_service_health()

    # ------------------------------------------------------------------- the feature service's fault

    def set_http_fault(self, fault: HttpFault) -> None:
        """The feature service answers as ``fault`` says: its fault hook, written through its pod's control
        listener (:mod:`.control_listener`); a restart (a new pod) clears it."""
        self._started_feature_service()
        try:
            self._feature_fault_hook().set(fault)
        except ControlUnreachable as e:
            raise ServingError("unavailable", str(e)) from None

    def clear_http_fault(self) -> None:
        with self._lock:
            hook = self._feature_hook
        if hook is not None:
            hook.clear()

    def http_fault_active(self) -> bool:
        with self._lock:
            hook = self._feature_hook
        return hook is not None and hook.active()

    def _feature_fault_hook(self) -> PodFaultHook:
        with self._lock:
            if self._feature_hook is None:
                listener = ControlListener(
                    self.cluster.api_client,
                    self.namespace,
                    self._running_feature_pod,
                    FEATURE_ADMIN_PORT,
                    "the feature service",
                )
                self._feature_hook = PodFaultHook(listener)
            return self._feature_hook

    def _running_feature_pod(self) -> str | None:
        """A running pod of the feature service, ready or not (a fault makes it unready)."""
        return running_pod(self._feature_pods())

    def feature_service_logs(self, tail: int = 50) -> str:
        self._started_feature_service()
        for p in self._feature_pods():
            try:
                return self.cluster.pod_log(p["metadata"]["name"], self.namespace, tail=tail)
            except Exception:
                continue
        return ""

    def credits_per_second(self) -> float:
        """Desired replicas x their machine's price, over the episode's deployments."""
        total = 0.0
        for dep in self._deployments():
            spec = spec_of(dep)
            if spec is not None:
                total += ((dep.get("spec") or {}).get("replicas") or 0) * spec.credits_per_second
        return total

    def close(self) -> None:
        """Delete the episode's deployments, Services, pods and feature service (idempotent)."""
        if self._closed:
            return
        self._closed = True
        unregister_http_target(self.episode_id, FEATURE_SERVICE, self)
        with self._lock:
            client, self._client = self._client, None
            hook, self._feature_hook = self._feature_hook, None
            faults, self._faults = list(self._faults.values()), {}
        for fault in faults:
            unregister_http_target(self.episode_id, fault.deployment, fault)
            fault.close()
        if client is not None:
            client.close()
        if hook is not None:
            hook.listener.close()
        self.serving.cleanup(self.labels)

    # ------------------------------------------------------------------------- requests and scrapes

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                api = self.cluster.api_client
                self._client = proxy_client(api)
                self._base = api.configuration.host.rstrip("/")
            return self._client

    def _proxy(self, kind: str, name: str, port: int) -> str:
        return f"{self._base}/api/v1/namespaces/{self.namespace}/{kind}/{name}:{port}/proxy"

    def request(
        self,
        deployment: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float,
        content_type: str = "application/json",
    ) -> ServingResponse:
        targets = self.replicas()
        if deployment not in targets or deployment == FEATURE_SERVICE:
            targets = self._refresh()  # deployed since the last read?
            if deployment not in targets or deployment == FEATURE_SERVICE:
                raise not_found(deployment, [t for t in targets if t != FEATURE_SERVICE])
        client = self._http()
        url = self._proxy("services", server_name(deployment), self.serving.port) + path
        try:
            resp = client.post(url, content=body, headers={"content-type": content_type}, timeout=timeout_s)
        except httpx.TimeoutException:
            raise ServingError(
                "timeout", f"deployment {deployment!r} did not answer within {timeout_s} s"
            ) from None
        except httpx.HTTPError as e:
            raise ServingError(
                "unavailable", f"the API server is unreachable: {type(e).__name__}: {e}"
            ) from None
        refusal = _api_refusal(resp)
        if refusal is not None:
            raise ServingError(
                "unavailable", f"deployment {deployment!r} has no replica that answers: {refusal}"
            )
        return ServingResponse(
            status=resp.status_code, body=resp.content, content_type=resp.headers.get("content-type")
        )

    def replicas(self) -> dict[str, builtins.list[ReplicaRef]]:
        """Read back from the cluster at most every ``refresh_s`` (a second by default)."""
        with self._lock:
            if time.monotonic() - self._read_at < self.serving.refresh_s:
                return dict(self._targets)
        return self._refresh()

    def _refresh(self) -> dict[str, builtins.list[ReplicaRef]]:
        deps = self._deployments()
        pods = self.cluster.list("v1", "Pod", self.namespace, self.serving.selector(self.labels))
        targets: dict[str, builtins.list[ReplicaRef]] = {}
        for dep in deps:
            spec = spec_of(dep)
            assert spec is not None  # _deployments keeps only ours
            mine = sorted(
                (
                    p
                    for p in pods
                    if labels_of(p).get(DEPLOYMENT_LABEL) == labels_of(dep).get(DEPLOYMENT_LABEL)
                ),
                key=lambda p: p["metadata"]["name"],
            )
            targets[spec.deployment] = [
                ReplicaRef(target=spec.deployment, replica=p["metadata"]["name"], ready=running(p))
                for p in mine
            ]
        fpods = self._feature_pods()
        if fpods:
            targets[FEATURE_SERVICE] = [
                ReplicaRef(target=FEATURE_SERVICE, replica=p["metadata"]["name"], ready=running(p))
                for p in fpods
            ]
        placed = {
            p["metadata"]["name"]: str((p.get("spec") or {}).get("nodeName") or "") for p in [*pods, *fpods]
        }
        with self._lock:
            self._targets, self._read_at = targets, time.monotonic()
            self._placed = {k: v for k, v in placed.items() if v}
        self._usage.forget(
            {(self.namespace, ref.replica, _container(ref)) for refs in targets.values() for ref in refs}
        )
        return dict(targets)

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        port = self.serving.feature_port if ref.target == FEATURE_SERVICE else self.serving.port
        client = self._http()
        url = self._proxy("pods", ref.replica, port) + "/metrics"
        try:
            resp = client.get(url, timeout=timeout_s)
        except httpx.TimeoutException:
            raise ServingError(
                "timeout", f"replica {ref.replica} did not answer within {timeout_s} s"
            ) from None
        except httpx.HTTPError as e:
            raise ServingError(
                "unavailable", f"the API server is unreachable: {type(e).__name__}: {e}"
            ) from None
        if resp.status_code != 200:
            why = _api_refusal(resp) or f"status {resp.status_code}"
            raise ServingError("unavailable", f"replica {ref.replica} did not answer: {why}")
        return resp.text

    def stats(self, ref: ReplicaRef) -> ReplicaStats:
        """The replica container's CPU % and working set, from its node's kubelet
        (:mod:`.replica_metrics`); None for what its node does not say."""
        with self._lock:
            node = self._placed.get(ref.replica)
        if node is None:
            self._refresh()  # started since the last read?
            with self._lock:
                node = self._placed.get(ref.replica)
        if node is None:
            return ReplicaStats()
        cpu, memory = self._usage.usage(node, (self.namespace, ref.replica, _container(ref)))
        return ReplicaStats(cpu_percent=cpu, memory_mb=memory)

    def _node_metrics(self, node: str) -> str | None:
        return read_resource_metrics(self.cluster, node)

    # ------------------------------------------------------------------------------------ internals

    def _deployments(self) -> builtins.list[dict[str, Any]]:
        deps = self.cluster.list(*DEPLOYMENT_API, self.namespace, self.serving.selector(self.labels))
        return [d for d in deps if spec_of(d) is not None]

    def _feature_pods(self) -> builtins.list[dict[str, Any]]:
        pods = self.cluster.list(
            "v1", "Pod", self.namespace, self.serving.selector(self.labels, FEATURE_COMPONENT)
        )
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def _deployment(self, deployment: str, *, missing_ok: bool = False) -> Any:
        name = server_name(deployment)
        dep = self.cluster.get(*DEPLOYMENT_API, name, self.namespace)
        if dep is None:
            if missing_ok:
                return None
            raise not_found(deployment, [v.deployment for v in self.list()])
        spec = spec_of(dep)
        labels = labels_of(dep)
        if spec is None or labels.get(M.SANDBOX_LABEL) != self.serving.sandbox:
            raise ServingError(
                "conflict",
                f"a Deployment named {name} exists in {self.namespace} that this sandbox did not make",
            )
        if any(labels.get(k) != v for k, v in self.labels.items()):
            raise ServingError(
                "conflict", f"deployment {deployment!r} belongs to another episode of this sandbox"
            )
        if spec.deployment != deployment:
            raise ServingError(
                "conflict", f"deployment {deployment!r} would share its cluster name with {spec.deployment!r}"
            )
        return dep

    def _pods(self, dep: Mapping[str, Any]) -> builtins.list[dict[str, Any]]:
        sel = f"{M.SANDBOX_LABEL}={self.serving.sandbox},{DEPLOYMENT_LABEL}={labels_of(dep).get(DEPLOYMENT_LABEL)}"
        return self.cluster.list("v1", "Pod", self.namespace, sel)

    def _pod_names(self, dep: Mapping[str, Any]) -> set[str]:
        return {p["metadata"]["name"] for p in self._pods(dep)}

    def _apply(self, spec: ModelServerSpec, history: builtins.list[str]) -> None:
        """Bring the Deployment to ``spec``: a new pod template starts a rolling update."""
        manifest = self.serving.manifest(spec, history)
        self.serving.secret.ensure()
        try:
            self.cluster.patch(
                *DEPLOYMENT_API,
                manifest["metadata"]["name"],
                self.namespace,
                {"metadata": manifest["metadata"], "spec": manifest["spec"]},
            )
        except ApiRefused as exc:
            raise ServingError("invalid_parameters", f"the cluster refused the rollout: {exc}") from None

    def _set_replicas(self, name: str, spec: ModelServerSpec, replicas: int) -> None:
        new = spec.model_copy(update={"replicas": replicas})
        body = {
            "metadata": {"annotations": {SPEC_ANNOTATION: new.model_dump_json()}},
            "spec": {"replicas": replicas},
        }
        self.cluster.patch(*DEPLOYMENT_API, name, self.namespace, body)

    def _remove(self, name: str) -> None:
        self.cluster.delete(*DEPLOYMENT_API, name, self.namespace, propagation="Background")
        self.cluster.delete(*SERVICE_API, name, self.namespace)
        self._read_at = -1.0e9
        with self._lock:
            gone = [d for d in self._faults if server_name(d) == name]
            faults = [self._faults.pop(d) for d in gone]
        for fault in faults:
            unregister_http_target(self.episode_id, fault.deployment, fault)
            fault.close()
        for deployment in gone:
            self.cluster.delete(*SECRET_API, fault_secret_name(deployment), self.namespace)

    def _fault_target(self, deployment: str) -> DeploymentFault:
        """The deployment's ``http:DEPLOYMENT`` fault target, registered for the episode (once)."""
        with self._lock:
            fault = self._faults.get(deployment)
            if fault is None:
                fault = self._faults[deployment] = DeploymentFault(self, deployment)
                register_http_target(self.episode_id, deployment, fault)
            return fault

    def _settled(
        self, deployment: str, wait: bool, before: set[str], *, undo: Callable[[], None], what: str
    ) -> DeploymentView:
        """The view once the rollout is complete. When a replica started by this change fails (see
        :func:`~mlsandbox.backends.kube.serving.rollout_failure`) or the rollout timeout passes, the
        change is undone and ``deploy_failed`` raised."""
        timeout = self.serving.rollout_timeout_s
        deadline = time.monotonic() + (timeout if wait else 0.0)
        while True:
            dep = self._deployment(deployment)
            pods = self._pods(dep)
            view = describe(dep, pods)
            if view.rollout == "complete" or not wait:
                return view
            spec = spec_of(dep)
            fresh = [p for p in pods if p["metadata"]["name"] not in before]
            states = [pod_state(p, spec.memory_mb if spec else None, i) for i, p in enumerate(fresh)]
            why = rollout_failure(states, view.version)
            if why is None and time.monotonic() >= deadline:
                why = f"the rollout did not complete within {timeout:.0f} s ({view.replicas_up}/{view.replicas} ready)"
            if why is not None:
                tail = self._log_tail(fresh)
                undo()
                raise ServingError(
                    "deploy_failed",
                    f"{what} did not start on deployment {deployment!r}: {why}"
                    + (f"; log tail:\n{tail}" if tail else ""),
                )
            time.sleep(0.25)

    def _log_tail(self, pods: builtins.list[dict[str, Any]]) -> str:
        """The last lines of the first new replica's log that the API server can give (none under a
        simulated node)."""
        for p in pods:
            try:
                text = self.cluster.pod_log(p["metadata"]["name"], self.namespace, tail=LOG_TAIL_LINES)
            except Exception:
                continue
            if text.strip():
                return text.rstrip()
        return ""


# -------------------------------------------------------------------------------- the request path


class DeploymentFault:
    """The ``http:DEPLOYMENT`` fault target of one model deployment of an episode: the fault of all its
    replicas (see the module docstring). ``set`` writes the deployment's fault Secret first (so a replica
    that starts from then on has it), then each running replica's hook through its control listener;
    ``clear`` deletes the Secret, then clears each running replica; ``active`` is whether the Secret holds
    a fault (the deployment's fault outlives its replicas, as a local deployment's control file does)."""

    def __init__(self, episode: KubeEpisodeServing, deployment: str) -> None:
        self.episode = episode
        self.deployment = deployment
        self._lock = threading.Lock()
        self._hooks: dict[str, PodFaultHook] = {}

    def __repr__(self) -> str:
        return f"DeploymentFault({self.deployment!r})"

    def set_http_fault(self, fault: HttpFault) -> None:
        ep = self.episode
        dep = ep._deployment(self.deployment)
        spec = spec_of(dep)
        assert spec is not None  # _deployment checks it
        body = {"error_rate": fault.error_rate, "status": fault.status, "delay_ms": fault.delay_ms}
        try:
            ep.cluster.apply(
                fault_secret(
                    spec,
                    namespace=ep.namespace,
                    sandbox=ep.serving.sandbox,
                    fault={**body, "seed": fault.seed},
                )
            )
        except ApiRefused as exc:
            raise ServingError("unavailable", f"the cluster refused the deployment's fault: {exc}") from None
        failed = []
        for _, hook in self._replica_hooks(dep):
            try:
                hook.set(fault)
            except ControlUnreachable as e:
                failed.append(str(e))
        if failed:
            raise ServingError("unavailable", "; ".join(failed))

    def clear_http_fault(self) -> None:
        ep = self.episode
        ep.cluster.delete(*SECRET_API, fault_secret_name(self.deployment), ep.namespace)
        dep = ep._deployment(self.deployment, missing_ok=True)
        for _, hook in self._replica_hooks(dep) if dep is not None else []:
            hook.clear()

    def http_fault_active(self) -> bool:
        ep = self.episode
        try:
            secret = ep.cluster.get(*SECRET_API, fault_secret_name(self.deployment), ep.namespace)
        except ApiRefused:
            return False
        return secret is not None

    def replicas_faulted(self) -> dict[str, bool | None]:
        """Each running replica's pod -> whether its fault hook holds a fault now (asked of its listener;
        None when it does not answer, as before its server listens)."""
        dep = self.episode._deployment(self.deployment, missing_ok=True)
        if dep is None:
            return {}
        out: dict[str, bool | None] = {}
        for name, hook in self._replica_hooks(dep):
            try:
                answer = hook.listener.request("GET", "/fault", timeout_s=10.0).json()
            except (ControlUnreachable, ValueError):
                out[name] = None
                continue
            out[name] = bool(isinstance(answer, Mapping) and answer.get("active"))
        return out

    def close(self) -> None:
        """Stop the replicas' port-forwards (idempotent)."""
        with self._lock:
            hooks, self._hooks = list(self._hooks.values()), {}
        for hook in hooks:
            hook.listener.close()

    def _running(self, dep: Mapping[str, Any]) -> builtins.list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in self.episode._pods(dep)
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") == "Running"
        )

    def _replica_hooks(self, dep: Mapping[str, Any]) -> builtins.list[tuple[str, PodFaultHook]]:
        """Each running replica's pod and hook (ready or not: a fault makes a replica unready), in pod-name
        order; the hooks of replicas gone are closed."""
        names = self._running(dep)
        with self._lock:
            gone = [self._hooks.pop(n) for n in list(self._hooks) if n not in names]
            for name in names:
                if name not in self._hooks:
                    listener = ControlListener(
                        self.episode.cluster.api_client,
                        self.episode.namespace,
                        _named(name),
                        SERVER_ADMIN_PORT,
                        f"replica {name} of deployment {self.deployment!r}",
                    )
                    self._hooks[name] = PodFaultHook(listener)
            hooks = [(n, self._hooks[n]) for n in names]
        for hook in gone:
            hook.listener.close()
        return hooks


def _container(ref: ReplicaRef) -> str:
    """The server container's name in the replica's pod."""
    return FEATURE_COMPONENT if ref.target == FEATURE_SERVICE else COMPONENT


def _named(pod: str) -> Callable[[], str | None]:
    """A control listener's pod finder for one replica's pod (a replica replaced is another pod)."""
    return lambda: pod


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


def _api_refusal(resp: httpx.Response) -> str | None:
    """The API server's own refusal of a proxied request (a ``Status`` object with 5xx or 403: no ready
    endpoint, a pod that does not answer, no right to proxy), or None for the server's answer."""
    if resp.status_code < 500 and resp.status_code != 403:
        return None
    try:
        body = resp.json()
    except ValueError:
        return None
    if not (isinstance(body, dict) and body.get("kind") == "Status"):
        return None
    return str(body.get("message") or resp.text[:300])


def _conforms(serving: KubeServing, episode: KubeEpisodeServing) -> tuple[ModelServing, EpisodeServing]:
    """What the type checker verifies: these implement the declared protocols."""
    return serving, episode


__all__ = ["ENVIRONMENT_REFUSAL", "DeploymentFault", "KubeEpisodeServing", "KubeServing", "proxy_client"]
