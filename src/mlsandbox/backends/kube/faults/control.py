"""Faults on the kube backend: the :class:`~mlsandbox.backends.protocols.FaultControl` over Kubernetes.

Two mechanisms: the Kubernetes-native faults of :mod:`.native` (each a recorded change to one object, no
add-on needed) and Chaos Mesh objects (:mod:`.chaos_mesh`), created with the sandbox's label and deleted
to recover. How the backend-neutral operations map (``services`` are the chart's Deployments in the
control namespace, found by their ``app.kubernetes.io/component`` label):

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
reset_peer            unsupported (Chaos Mesh has no TCP reset action)
bucket quota          MinIO's admin API on the S3 endpoint (as on ``local``)
job limits            in-place pod resize (``KubeJobs.set_resources``), originals in an annotation
cpu contention        StressChaos ``cpu`` stressors on the service's pods, or on each job's pods
http faults           the fault hook of the episode's HTTP API sources, of its feature service and
                      of each replica of a model deployment, written through the pod's loopback
                      control listener over a port-forward (:mod:`..control_listener`); a
                      deployment's fault is also in its fault Secret, which a replica started
                      during the fault reads at start
====================  ==========================================================================

Without the Chaos Mesh CRDs in the cluster, what needs them raises
:class:`~mlsandbox.errors.Unsupported` and :meth:`KubeFaultControl.unavailable` says so;
:func:`unavailable_on` answers the same for a cluster (or none reachable) without a sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from mlsandbox import httpclients
from mlsandbox.backends.kube.cluster import ApiRefused, Cluster, TransientApiError
from mlsandbox.backends.kube.faults import chaos_mesh as C
from mlsandbox.backends.kube.faults.native import (
    NativeFault,
    ScaleToZero,
    inject_native,
    recover_native,
)
from mlsandbox.backends.kube.faults.native import recover_all as recover_all_native
from mlsandbox.backends.kube.jobs import JOB_API, KubeJobs
from mlsandbox.backends.kube.manifests import QDISC_LABEL_PREFIX
from mlsandbox.backends.protocols import Endpoints, HttpFault, NoSuchTarget, ServiceHealth
from mlsandbox.errors import Unsupported
from mlsandbox.faultkinds import made_by, qdiscs_needed, refused_on

BACKEND = "kube"
JOB_LIMITS_ANNOTATION = "mlsandbox.dev/original-limits"
CHAOS_KINDS = ("PodChaos", "NetworkChaos", "StressChaos", "HTTPChaos", "IOChaos", "TimeChaos")
SERVICES = ("minio", "mlflow", "prefect-server", "prefect-worker")
PROXIED = ("minio", "mlflow")
"""The endpoints network faults apply to (as the local backend's Toxiproxy proxies)."""

UNAVAILABLE: dict[str, str] = refused_on(BACKEND)
"""Fault types the kube backend refuses whatever its cluster has (as their declarations say)."""
NO_RESET_PEER = UNAVAILABLE["reset_peer"]
NEEDS_CHAOS_MESH: tuple[str, ...] = made_by(BACKEND, "chaos-mesh")
"""Fault types made real by Chaos Mesh objects (as their declarations say)."""
QDISCS_NEEDED: dict[str, tuple[str, ...]] = qdiscs_needed(BACKEND)
"""Fault type -> the kernel's queueing disciplines its Chaos Mesh object needs (as declared)."""
NO_CHAOS_MESH = (
    "the Chaos Mesh CRDs (chaos-mesh.org) are not installed in the cluster (`mlsandbox cluster up` installs "
    "Chaos Mesh on kind, and on the built-in real node once scripts/build-chaos-mesh.sh has built it)"
)
UNKNOWN_CHAOS_MESH = "needs Chaos Mesh in the cluster (no cluster is reachable to check for its CRDs)"

Manifest = dict[str, Any]


def unavailable_on(cluster: Cluster | None) -> dict[str, str]:
    """Fault types a kube sandbox on ``cluster`` cannot make real, checked without a sandbox (None, or a
    cluster that does not answer: the Chaos Mesh faults are marked as needing it)."""
    out = dict(UNAVAILABLE)
    served: bool | None = None
    if cluster is not None:
        try:
            cluster.version()
            served = cluster.serves(C.API_VERSION, "PodChaos")
        except Exception:  # no answer (refused, timed out, no credentials): unknown
            served = None
    if not served:
        out.update(dict.fromkeys(NEEDS_CHAOS_MESH, NO_CHAOS_MESH if served is False else UNKNOWN_CHAOS_MESH))
    elif cluster is not None:
        out.update(without_qdiscs(cluster))
    return out


def without_qdiscs(cluster: Cluster) -> dict[str, str]:
    """Fault types whose Chaos Mesh mechanism needs a queueing discipline that no node's kernel has, as
    the nodes say (label ``qdisc.mlsandbox.dev/<name>``, which the real node sets from a probe at
    start; a node without the label is taken to have it), each with the reason."""
    try:
        nodes = cluster.list("v1", "Node")
    except (ApiRefused, TransientApiError):
        return {}
    if not nodes:
        return {}
    lacking = set()
    for qdisc in {q for needed in QDISCS_NEEDED.values() for q in needed}:
        key = f"{QDISC_LABEL_PREFIX}{qdisc}"
        if all(((n.get("metadata") or {}).get("labels") or {}).get(key) == "false" for n in nodes):
            lacking.add(qdisc)
    return {
        fault: (
            f"the cluster's nodes have no {'/'.join(sorted(set(needed) & lacking))} queueing discipline in "
            "their kernel (Chaos Mesh's NetworkChaos needs it; the node's label "
            f"{QDISC_LABEL_PREFIX}<name> says so)"
        )
        for fault, needed in QDISCS_NEEDED.items()
        if set(needed) & lacking
    }


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
        self.control.require_chaos_mesh("freeze_service")
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
        if kind == "reset_peer":
            raise Unsupported("fault:reset_peer", BACKEND, NO_RESET_PEER)
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
        self._without_qdiscs: dict[str, str] | None = None
        self._contention: dict[str, tuple[str, int, set[str]]] = {}
        """Contention key -> (target, workers, jobs caught)."""

    # ------------------------------------------------------------------------------------ protocol

    @property
    def services(self) -> KubeServiceControl:
        return self._services

    @property
    def network(self) -> KubeNetworkControl:
        if not self.chaos_mesh():
            raise Unsupported("faults.network", BACKEND, NO_CHAOS_MESH)
        return KubeNetworkControl(self)

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

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        """The episode's HTTP service ``target`` (an API source, the feature service, a model deployment's
        replicas) answers as ``fault`` says: its fault hook, written through its pods' control listeners; a
        name the episode has no service of is :class:`NoSuchTarget`."""
        from mlsandbox.backends.kube.control_listener import http_target, http_targets

        found = http_target(target, episode_id)
        if found is None:
            known = ", ".join(http_targets(episode_id)) or "none"
            raise NoSuchTarget(
                f"episode {episode_id} runs no HTTP service {target!r} with a fault hook (running: {known})"
            )
        found.set_http_fault(fault)

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        from mlsandbox.backends.kube.control_listener import http_target

        found = http_target(target, episode_id)
        if found is not None:
            found.clear_http_fault()

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        """Whether the fault set on ``target`` is still in its pod (asked of its control listener): False
        once cleared, and once the pod that held it was replaced (a restart clears it)."""
        from mlsandbox.backends.kube.control_listener import http_target

        found = http_target(target, episode_id)
        return found is not None and found.http_fault_active()

    def start_contention(self, key: str, target: str, workers: int, *, pin: bool = True) -> None:
        """StressChaos ``cpu`` stressors (``workers`` of them, full load) in the pods of a service
        (``service:NAME``); for ``jobs``, one per job as :meth:`refresh_contention` is told of it.
        ``pin`` has no meaning here: the stressors run in the pods' own CPU allowance."""
        self.require_chaos_mesh("cpu_contention")
        if target != "jobs":
            kind, _, service = target.partition(":")
            if kind != "service":
                raise ValueError(f"a contention target is service:NAME or jobs, got {target!r}")
            self.services.deployment(service)  # an unknown service fails here
        if key in self._contention:
            return
        self._contention[key] = (target, workers, set())
        if target != "jobs":
            stress = C.StressCpu(
                name=self._stress_name(key),
                target=C.Target(component=target.split(":", 1)[1]),
                workers=workers,
            )
            self.create_chaos(stress, namespace=self.control_namespace)

    def refresh_contention(self, key: str, jobs: Sequence[str] = ()) -> list[str]:
        """New job pods get their own StressChaos (a service's pods are selected by label already)."""
        from mlsandbox.backends.kube import manifests as M

        found = self._contention.get(key)
        if found is None or found[0] != "jobs":
            return []
        _, workers, caught = found
        new = []
        for job_id in dict.fromkeys(jobs):
            if job_id in caught:
                continue
            try:
                status = self.jobs.get(job_id)
            except KeyError:
                continue
            if status.state != "running":
                continue
            pod = self.jobs.pod(job_id)
            component = ((pod or {}).get("metadata") or {}).get("labels", {}).get(M.COMPONENT_LABEL)
            if not component:
                continue
            target = C.Target(component=component, labels={M.JOB_ID_LABEL: M.job_name(job_id)})
            stress = C.StressCpu(name=self._stress_name(key, job_id), target=target, workers=workers)
            self.create_chaos(stress, namespace=self.namespace)
            caught.add(job_id)
            new.append(job_id)
        return new

    def stop_contention(self, key: str) -> None:
        found = self._contention.pop(key, None)
        if found is None:
            return
        target, _, caught = found
        if target != "jobs":
            self.delete_named_chaos("StressChaos", self._stress_name(key), self.control_namespace)
        for job_id in caught:
            self.delete_named_chaos("StressChaos", self._stress_name(key, job_id), self.namespace)

    @staticmethod
    def _stress_name(key: str, job_id: str | None = None) -> str:
        digest = hashlib.sha256(f"{key}/{job_id or ''}".encode()).hexdigest()[:12]
        return f"cpu-{digest}"

    def recover_all(self) -> list[str]:
        """Every chaos object and native change of this sandbox, undone (``down``, a reset, after a
        crash: what it finds on the cluster by label, whoever made it)."""
        self._contention.clear()
        deleted = self.delete_all_chaos()
        recovered = recover_all_native(
            self.cluster, list(dict.fromkeys((self.namespace, self.control_namespace))), self.sandbox
        )
        return [*recovered, *([f"{deleted} Chaos Mesh object(s)"] if deleted else [])]

    def unavailable(self) -> dict[str, str]:
        out = dict(UNAVAILABLE)
        if not self.chaos_mesh():
            out.update(dict.fromkeys(NEEDS_CHAOS_MESH, NO_CHAOS_MESH))
        else:
            if self._without_qdiscs is None:
                self._without_qdiscs = without_qdiscs(self.cluster)
            out.update(self._without_qdiscs)
        return out

    # --------------------------------------------------------------------------------- chaos mesh

    def chaos_mesh(self) -> bool:
        """Whether the cluster serves the Chaos Mesh kinds (checked once)."""
        if self._chaos_mesh is None:
            self._chaos_mesh = self.cluster.serves(C.API_VERSION, "PodChaos")
        return self._chaos_mesh

    def chaos_manifest(self, fault: C.ChaosFault, *, namespace: str | None = None) -> Manifest:
        return C.chaos_resource(fault, namespace=namespace or self.namespace, sandbox=self.sandbox)

    def require_chaos_mesh(self, fault_type: str) -> None:
        """:class:`Unsupported` (``fault:TYPE``) when the cluster has no Chaos Mesh."""
        if not self.chaos_mesh():
            raise Unsupported(f"fault:{fault_type}", BACKEND, NO_CHAOS_MESH)

    def create_chaos(self, fault: C.ChaosFault, *, namespace: str | None = None) -> Manifest:
        """Create (or update) the Chaos Mesh object of ``fault``; :class:`Unsupported` without Chaos Mesh."""
        self.require_chaos_mesh(fault.type)
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

    def probe_url(self, service: str) -> str | None:
        """Where a client checks the service answers (None: readiness of its Deployment only)."""
        e = self.endpoints
        return {
            "minio": f"{e.s3_url}/minio/health/live",
            "mlflow": f"{e.mlflow_url}/health",
            "prefect-server": f"{e.prefect_api_url}/health",
        }.get(service)
