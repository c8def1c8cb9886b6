"""Faults on the kube backend: the :class:`~mlsandbox.backends.protocols.FaultControl` over Kubernetes.

Two mechanisms:

- **Kubernetes-native faults** (no add-on needed): :class:`ScaleToZero`, :class:`WrongImage`,
  :class:`WrongServicePort`, :class:`ExhaustQuota`, :class:`CordonNode`. Each is a change to one object;
  :func:`inject_patch` builds the strategic-merge patch that makes the change *and* records the original
  value on the object itself (annotation :data:`ORIGINAL_ANNOTATION`, JSON) with the label
  :data:`NATIVE_FAULT_LABEL` = fault type (so a crashed run leaves a record that :func:`recover_all`
  finds by label). Injecting twice keeps the first original; :func:`recover_patch` puts the original back
  and removes the record, and is a no-op (None) on an object without one: recovery is idempotent.
- **Chaos Mesh** resources (:mod:`.chaos`): created with the sandbox's label, deleted to recover.

How the backend-neutral operations map (``services`` are the chart's Deployments in the control namespace,
found by their ``app.kubernetes.io/component`` label):

====================  ==========================================================================
operation             on kube
====================  ==========================================================================
services.kill         scale the Deployment to zero (native, recorded): it stays down until restart
services.freeze       PodChaos ``pod-failure`` (the pod stays, its containers stop answering)
services.thaw         delete that PodChaos
services.restart      undo kill/freeze, delete the pods (the Deployment makes new ones), wait ready
network latency       NetworkChaos ``delay`` on the endpoint's pods
network bandwidth     NetworkChaos ``bandwidth`` (Toxiproxy KB/s x 8 = kbps)
network timeout       NetworkChaos ``loss`` 100 % (connections hang until the client times out)
endpoint down         NetworkChaos ``loss`` 100 % (set_enabled(False); True deletes it)
reset_peer            unavailable (Chaos Mesh has no TCP reset action)
bucket quota          MinIO's admin API on the S3 endpoint (as on ``local``)
job limits            in-place pod resize (``KubeJobs.set_resources``), originals in an annotation
====================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from mlsandbox import httpclients
from mlsandbox.backends.kube.cluster import ApiRefused, Cluster, TransientApiError
from mlsandbox.backends.kube.faults import chaos_mesh as C
from mlsandbox.backends.kube.jobs import JOB_API, KubeJobs
from mlsandbox.backends.protocols import Endpoints, ServiceHealth

NATIVE_FAULT_LABEL = "mlsandbox.dev/native-fault"
ORIGINAL_ANNOTATION = "mlsandbox.dev/native-fault-original"
SANDBOX_ANNOTATION = "mlsandbox.dev/native-fault-sandbox"
JOB_LIMITS_ANNOTATION = "mlsandbox.dev/original-limits"
MISSING_IMAGE = "registry.invalid/mlsandbox/missing:0"
WRONG_PORT = 1
CHAOS_KINDS = ("PodChaos", "NetworkChaos", "StressChaos", "HTTPChaos", "IOChaos", "TimeChaos")
SERVICES = ("minio", "mlflow", "prefect-server", "prefect-worker")
PROXIED = ("minio", "mlflow")
"""The endpoints network faults apply to (as the local backend's Toxiproxy proxies)."""
NEEDS_CHAOS_MESH = ("freeze_service", "latency", "bandwidth", "timeout", "endpoint_down", "crash_loop")

Manifest = dict[str, Any]


# ---------------------------------------------------------------------------------- native faults


@dataclass(frozen=True)
class NativeFault:
    """One change to one object; subclasses say which object, what to remember and what to set."""

    type: ClassVar[str]
    api_version: ClassVar[str]
    kind: ClassVar[str]
    name: str
    namespace: str | None

    def original(self, obj: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        raise NotImplementedError

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        raise NotImplementedError


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [])


@dataclass(frozen=True)
class ScaleToZero(NativeFault):
    """A Deployment scaled to zero replicas (remembers its replica count)."""

    type: ClassVar[str] = "scale_to_zero"
    api_version: ClassVar[str] = "apps/v1"
    kind: ClassVar[str] = "Deployment"

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"replicas": (obj.get("spec") or {}).get("replicas", 1)}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        return {"spec": {"replicas": 0}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"replicas": int(original["replicas"])}}


@dataclass(frozen=True)
class WrongImage(NativeFault):
    """A Deployment's container set to an image that cannot be pulled (remembers the image)."""

    type: ClassVar[str] = "wrong_image"
    api_version: ClassVar[str] = "apps/v1"
    kind: ClassVar[str] = "Deployment"
    container: str | None = None
    image: str = MISSING_IMAGE

    def _container(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        containers = _containers(obj)
        for c in containers:
            if self.container is None or c.get("name") == self.container:
                return c
        raise ValueError(f"{self.kind} {self.name} has no container {self.container!r}")

    def original(self, obj: Mapping[str, Any]) -> Any:
        c = self._container(obj)
        return {"container": c["name"], "image": c["image"]}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        name = self._container(obj)["name"]
        return {"spec": {"template": {"spec": {"containers": [{"name": name, "image": self.image}]}}}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        containers = [{"name": original["container"], "image": original["image"]}]
        return {"spec": {"template": {"spec": {"containers": containers}}}}


@dataclass(frozen=True)
class WrongServicePort(NativeFault):
    """A Service whose ports all point at the wrong container port (remembers each targetPort)."""

    type: ClassVar[str] = "wrong_service_port"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Service"
    target_port: int = WRONG_PORT

    def original(self, obj: Mapping[str, Any]) -> Any:
        ports = (obj.get("spec") or {}).get("ports") or []
        return {"ports": [{"port": p["port"], "targetPort": p.get("targetPort", p["port"])} for p in ports]}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        ports = (obj.get("spec") or {}).get("ports") or []
        return {"spec": {"ports": [{"port": p["port"], "targetPort": self.target_port} for p in ports]}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"ports": [dict(p) for p in original["ports"]]}}


@dataclass(frozen=True)
class ExhaustQuota(NativeFault):
    """A ResourceQuota whose every hard limit is set to what is used now: nothing more fits."""

    type: ClassVar[str] = "exhaust_quota"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "ResourceQuota"

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"hard": dict((obj.get("spec") or {}).get("hard") or {})}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        hard = (obj.get("spec") or {}).get("hard") or {}
        used = (obj.get("status") or {}).get("used") or {}
        return {"spec": {"hard": {key: str(used.get(key, "0")) for key in hard}}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"hard": dict(original["hard"])}}


@dataclass(frozen=True)
class CordonNode(NativeFault):
    """A node marked unschedulable (remembers whether it already was)."""

    type: ClassVar[str] = "cordon_node"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Node"
    namespace: str | None = None

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"unschedulable": bool((obj.get("spec") or {}).get("unschedulable", False))}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        return {"spec": {"unschedulable": True}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"unschedulable": bool(original["unschedulable"])}}


NATIVE_FAULTS: dict[str, type[NativeFault]] = {
    f.type: f for f in (ScaleToZero, WrongImage, WrongServicePort, ExhaustQuota, CordonNode)
}


def _record(obj: Mapping[str, Any]) -> tuple[str | None, Any]:
    meta = obj.get("metadata") or {}
    kind = (meta.get("labels") or {}).get(NATIVE_FAULT_LABEL)
    raw = (meta.get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    return kind, (json.loads(raw) if raw else None)


def _deep_merge(a: Manifest, b: Mapping[str, Any]) -> Manifest:
    out = dict(a)
    for key, value in b.items():
        out[key] = (
            _deep_merge(out[key], value)
            if isinstance(value, Mapping) and isinstance(out.get(key), dict)
            else value
        )
    return out


def inject_patch(fault: NativeFault, obj: Mapping[str, Any], sandbox: str) -> Manifest:
    """The patch applying ``fault`` to ``obj`` and recording its original value on it. An object already
    carrying a record of this fault keeps that (first) original; :class:`ValueError` when it carries
    another fault's record (two native faults on one object are refused)."""
    kind, original = _record(obj)
    if kind is not None and kind != fault.type:
        raise ValueError(f"{fault.kind} {fault.name} already carries the {kind} fault; recover it first")
    if original is None:
        original = fault.original(obj)
    record = {
        "metadata": {
            "labels": {NATIVE_FAULT_LABEL: fault.type},
            "annotations": {
                ORIGINAL_ANNOTATION: json.dumps(original, sort_keys=True),
                SANDBOX_ANNOTATION: sandbox,
            },
        }
    }
    return _deep_merge(record, fault.change(obj))


def recover_patch(obj: Mapping[str, Any]) -> Manifest | None:
    """The patch putting back what the recorded fault changed and removing the record; None without one."""
    kind, original = _record(obj)
    if kind is None or kind not in NATIVE_FAULTS:
        return None
    erase = {
        "metadata": {
            "labels": {NATIVE_FAULT_LABEL: None},
            "annotations": {ORIGINAL_ANNOTATION: None, SANDBOX_ANNOTATION: None},
        }
    }
    if original is None:
        return erase
    restore = NATIVE_FAULTS[kind].restore(original)
    return _deep_merge(erase, restore)


def inject_native(cluster: Cluster, fault: NativeFault, sandbox: str) -> dict[str, Any]:
    """Apply ``fault`` (idempotent); :class:`KeyError` when its object does not exist."""
    obj = cluster.get(fault.api_version, fault.kind, fault.name, fault.namespace)
    if obj is None:
        raise KeyError(f"{fault.kind} {fault.name} not found")
    patched = cluster.patch(
        fault.api_version, fault.kind, fault.name, fault.namespace, inject_patch(fault, obj, sandbox)
    )
    return patched or obj


def recover_native(cluster: Cluster, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
    """Undo the fault recorded on an object; False when there was nothing to undo (or no object)."""
    obj = cluster.get(api_version, kind, name, namespace)
    patch = recover_patch(obj) if obj is not None else None
    if patch is None:
        return False
    cluster.patch(api_version, kind, name, namespace, patch)
    return True


def recover_all(cluster: Cluster, namespaces: list[str], sandbox: str | None = None) -> list[str]:
    """Undo every recorded native fault in ``namespaces`` and on nodes (only ``sandbox``'s when given)."""
    recovered: list[str] = []
    for fault_type in NATIVE_FAULTS.values():
        scopes: list[str | None] = [None] if fault_type.kind == "Node" else list(namespaces)
        for ns in scopes:
            for obj in cluster.list(fault_type.api_version, fault_type.kind, ns, selector=NATIVE_FAULT_LABEL):
                meta = obj["metadata"]
                if sandbox is not None and (meta.get("annotations") or {}).get(SANDBOX_ANNOTATION) not in (
                    None,
                    sandbox,
                ):
                    continue
                if recover_native(cluster, fault_type.api_version, fault_type.kind, meta["name"], ns):
                    recovered.append(f"{fault_type.kind}/{meta['name']}")
    return recovered


# --------------------------------------------------------------------------------------- chaos mesh


def network_fault(name: str, endpoint: str, kind: str, attributes: Mapping[str, Any]) -> C.ChaosFault:
    """The NetworkChaos fault standing for a Toxiproxy toxic ``kind`` on an endpoint's pods."""
    target = C.Target(component=endpoint)
    if kind == "latency":
        return C.NetworkDelay(
            name=name,
            target=target,
            latency_ms=int(attributes.get("latency", 0)),
            jitter_ms=int(attributes.get("jitter", 0)),
        )
    if kind == "bandwidth":
        return C.NetworkBandwidth(name=name, target=target, rate=f"{int(attributes['rate']) * 8}kbps")
    if kind in ("timeout", "down"):
        return C.NetworkLoss(name=name, target=target, loss_percent=100)
    raise ValueError(f"the network fault {kind!r} has no Chaos Mesh equivalent here")


def freeze_fault(service: str) -> C.PodFailure:
    """A frozen service: Chaos Mesh ``pod-failure`` on its pods until the object is deleted."""
    return C.PodFailure(name=f"freeze-{service}", target=C.Target(component=service))


def chaos_name(text: str) -> str:
    """A fault name Chaos Mesh objects can carry (lowercase, digits, '-', at most 42 characters)."""
    cleaned = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    return cleaned[:42].strip("-") or "fault"


def _deployment_ready(dep: Mapping[str, Any]) -> bool:
    want = (dep.get("spec") or {}).get("replicas", 1)
    ready = (dep.get("status") or {}).get("readyReplicas") or 0
    return bool(want) and ready >= want


class KubeServiceControl:
    """Kill, freeze, thaw, restart, probe and read the logs of the chart's services."""

    def __init__(self, control: KubeFaultControl) -> None:
        self.control = control

    @property
    def cluster(self) -> Cluster:
        return self.control.cluster

    def names(self) -> list[str]:
        return list(SERVICES)

    def deployment(self, service: str) -> dict[str, Any]:
        if service not in SERVICES:
            raise ValueError(f"unknown service {service!r}; services: {', '.join(SERVICES)}")
        found = self.cluster.list(
            "apps/v1", "Deployment", self.control.control_namespace, selector=f"{C.COMPONENT_LABEL}={service}"
        )
        if not found:
            raise KeyError(f"no Deployment of {service} in namespace {self.control.control_namespace}")
        return found[0]

    def kill(self, service: str) -> None:
        dep = self.deployment(service)
        inject_native(
            self.cluster,
            ScaleToZero(dep["metadata"]["name"], self.control.control_namespace),
            self.control.sandbox,
        )
        for pod in self._pods(service):
            self.cluster.delete(
                "v1", "Pod", pod["metadata"]["name"], self.control.control_namespace, grace_period_s=0
            )

    def freeze(self, service: str) -> None:
        self.deployment(service)
        self.control.create_chaos(freeze_fault(service), namespace=self.control.control_namespace)

    def thaw(self, service: str) -> None:
        self.control.delete_chaos(freeze_fault(service), namespace=self.control.control_namespace)

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        dep = self.deployment(service)
        name = dep["metadata"]["name"]
        self.thaw(service)
        recover_native(self.cluster, "apps/v1", "Deployment", name, self.control.control_namespace)
        for pod in self._pods(service):
            self.cluster.delete(
                "v1", "Pod", pod["metadata"]["name"], self.control.control_namespace, grace_period_s=0
            )
        if not wait:
            return self.health(service)
        deadline = time.monotonic() + timeout
        while True:
            health = self.health(service)
            if health.healthy or time.monotonic() > deadline:
                return health
            time.sleep(1.0)

    def health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        started = time.perf_counter()
        try:
            dep = self.deployment(service)
        except (KeyError, ApiRefused, TransientApiError) as exc:
            return ServiceHealth(service=service, healthy=False, error=str(exc))
        if not _deployment_ready(dep):
            status = dep.get("status") or {}
            want = (dep.get("spec") or {}).get("replicas", 1)
            return ServiceHealth(
                service=service,
                healthy=False,
                error=f"{status.get('readyReplicas') or 0}/{want} replicas ready",
            )
        url = self.control.probe_url(service)
        if url is not None:
            try:
                with httpclients.client(timeout) as client:
                    code = client.get(url).status_code
            except httpx.HTTPError as exc:
                return ServiceHealth(service=service, healthy=False, error=f"{type(exc).__name__}: {exc}")
            if code >= 500:
                return ServiceHealth(service=service, healthy=False, error=f"HTTP {code} from {url}")
        latency = (time.perf_counter() - started) * 1000
        return ServiceHealth(service=service, healthy=True, latency_ms=round(latency, 1))

    def logs(self, service: str, tail: int = 50) -> str:
        pods = self._pods(service)
        if not pods:
            return f"(no pod of {service} is running)"
        name = pods[0]["metadata"]["name"]
        try:
            return self.cluster.pod_log(name, self.control.control_namespace, tail=tail)
        except (ApiRefused, TransientApiError) as exc:
            return f"(no log from pod {name}: {exc})"

    def _pods(self, service: str) -> list[dict[str, Any]]:
        return self.cluster.list(
            "v1", "Pod", self.control.control_namespace, selector=f"{C.COMPONENT_LABEL}={service}"
        )


class KubeNetworkControl:
    """Network faults on the S3 and MLflow endpoints as NetworkChaos on their pods."""

    def __init__(self, control: KubeFaultControl) -> None:
        self.control = control

    def endpoints(self) -> list[str]:
        return list(PROXIED)

    def _check(self, endpoint: str) -> None:
        if endpoint not in PROXIED:
            raise ValueError(f"unknown endpoint {endpoint!r}; endpoints: {', '.join(PROXIED)}")

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        """``stream`` is ignored: NetworkChaos shapes the pods' traffic in both directions."""
        self._check(endpoint)
        fault = network_fault(chaos_name(f"{endpoint}-{name}"), endpoint, kind, attributes)
        self.control.create_chaos(fault, namespace=self.control.control_namespace)

    def remove_toxic(self, endpoint: str, name: str) -> None:
        self._check(endpoint)
        self.control.delete_named_chaos(
            "NetworkChaos", chaos_name(f"{endpoint}-{name}"), self.control.control_namespace
        )

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        self._check(endpoint)
        name = chaos_name(f"{endpoint}-down")
        if enabled:
            self.control.delete_named_chaos("NetworkChaos", name, self.control.control_namespace)
        else:
            self.control.create_chaos(
                network_fault(name, endpoint, "down", {}), namespace=self.control.control_namespace
            )

    def reset(self) -> None:
        self.control.delete_all_chaos(kinds=("NetworkChaos",))


class KubeFaultControl:
    """:class:`~mlsandbox.backends.protocols.FaultControl` for one sandbox on a cluster."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        sandbox: str,
        namespace: str,
        control_namespace: str,
        endpoints: Endpoints,
        jobs: KubeJobs,
    ) -> None:
        self.cluster = cluster
        self.sandbox = sandbox
        self.namespace = namespace
        self.control_namespace = control_namespace
        self.endpoints = endpoints
        self.jobs = jobs
        self._services = KubeServiceControl(self)
        self._chaos_mesh: bool | None = None

    # ------------------------------------------------------------------------------------ protocol

    @property
    def services(self) -> KubeServiceControl:
        return self._services

    @property
    def network(self) -> KubeNetworkControl | None:
        return KubeNetworkControl(self) if self.chaos_mesh() else None

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        from mlsandbox.backends.common.minio import set_bucket_quota

        set_bucket_quota(self.endpoints, bucket, quota_bytes)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Resize the job's pod in place; its limits before the first cut stay in an annotation."""
        from mlsandbox.backends.kube.manifests import job_name

        job = self.cluster.get(*JOB_API, job_name(job_id), self.namespace)
        if job is None:
            raise KeyError(f"unknown job {job_id!r}")
        if JOB_LIMITS_ANNOTATION not in ((job.get("metadata") or {}).get("annotations") or {}):
            cur_cpus, cur_mem = self.jobs.resources(job_id)
            record = json.dumps({"cpus": cur_cpus, "memory_mb": cur_mem})
            self.cluster.patch(
                *JOB_API,
                job["metadata"]["name"],
                self.namespace,
                {"metadata": {"annotations": {JOB_LIMITS_ANNOTATION: record}}},
            )
        self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        from mlsandbox.backends.kube.manifests import job_name

        with contextlib.suppress(KeyError, ValueError):  # ended (or gone): nothing to give back
            self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        self.cluster.patch(
            *JOB_API,
            job_name(job_id),
            self.namespace,
            {"metadata": {"annotations": {JOB_LIMITS_ANNOTATION: None}}},
        )

    def unavailable(self) -> dict[str, str]:
        out = {"reset_peer": "Chaos Mesh has no TCP-reset action (use timeout or endpoint_down)"}
        if not self.chaos_mesh():
            reason = "the Chaos Mesh CRDs (chaos-mesh.org) are not installed in the cluster (make sandbox-up installs them)"
            out.update(dict.fromkeys(NEEDS_CHAOS_MESH, reason))
            out.update(
                dict.fromkeys(
                    ("pod_kill", "pod_failure", "container_kill", "stress_cpu", "stress_memory"), reason
                )
            )
            out.update(
                dict.fromkeys(("http_abort", "http_delay", "io_latency", "io_fault", "time_skew"), reason)
            )
        return out

    # --------------------------------------------------------------------------------- chaos mesh

    def chaos_mesh(self) -> bool:
        """Whether the cluster serves the Chaos Mesh kinds (checked once)."""
        if self._chaos_mesh is None:
            self._chaos_mesh = self.cluster.serves(C.API_VERSION, "PodChaos")
        return self._chaos_mesh

    def chaos_manifest(self, fault: C.ChaosFault, *, namespace: str | None = None) -> Manifest:
        return C.chaos_resource(fault, namespace=namespace or self.namespace, sandbox=self.sandbox)

    def create_chaos(self, fault: C.ChaosFault, *, namespace: str | None = None) -> Manifest:
        """Create (or update) the Chaos Mesh object of ``fault``; :class:`ApiRefused` without Chaos Mesh."""
        if not self.chaos_mesh():
            raise ApiRefused(404, self.unavailable()["pod_kill"])
        manifest = self.chaos_manifest(fault, namespace=namespace)
        self.cluster.apply(manifest)
        return manifest

    def delete_chaos(self, fault: C.ChaosFault, *, namespace: str | None = None) -> bool:
        manifest = self.chaos_manifest(fault, namespace=namespace)
        return self.delete_named_chaos(
            manifest["kind"], C.resource_name(fault), manifest["metadata"]["namespace"]
        )

    def delete_named_chaos(self, kind: str, fault_name: str, namespace: str) -> bool:
        if not self.chaos_mesh():
            return False
        name = fault_name if fault_name.startswith("mls-") else f"mls-{fault_name}"
        return self.cluster.delete(C.API_VERSION, kind, name, namespace)

    def delete_all_chaos(self, kinds: tuple[str, ...] = CHAOS_KINDS) -> int:
        """Delete this sandbox's Chaos Mesh objects in its namespace and the control namespace."""
        if not self.chaos_mesh():
            return 0
        count = 0
        for kind in kinds:
            for ns in dict.fromkeys((self.namespace, self.control_namespace)):
                try:
                    objs = self.cluster.list(
                        C.API_VERSION, kind, ns, selector=f"{C.SANDBOX_LABEL}={self.sandbox}"
                    )
                except ApiRefused:
                    continue
                for obj in objs:
                    count += self.cluster.delete(C.API_VERSION, kind, obj["metadata"]["name"], ns)
        return count

    # -------------------------------------------------------------------------------- native faults

    def inject(self, fault: NativeFault) -> dict[str, Any]:
        return inject_native(self.cluster, fault, self.sandbox)

    def recover(self, fault: NativeFault) -> bool:
        return recover_native(self.cluster, fault.api_version, fault.kind, fault.name, fault.namespace)

    def recover_everything(self) -> list[str]:
        """Every chaos object and native change this sandbox made, undone (``down`` and resets)."""
        deleted = self.delete_all_chaos()
        recovered = recover_all(
            self.cluster, list(dict.fromkeys((self.namespace, self.control_namespace))), self.sandbox
        )
        return [*recovered, *([f"{deleted} Chaos Mesh object(s)"] if deleted else [])]

    def probe_url(self, service: str) -> str | None:
        """Where a client checks the service answers (None: readiness of its Deployment only)."""
        e = self.endpoints
        return {
            "minio": f"{e.s3_url}/minio/health/live",
            "mlflow": f"{e.mlflow_url}/health",
            "prefect-server": f"{e.prefect_api_url}/health",
        }.get(service)
