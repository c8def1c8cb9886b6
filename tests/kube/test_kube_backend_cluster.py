"""The kube backend against a real API server (etcd + kube-apiserver + controller-manager + scheduler)
with kwok simulating the node and the pods' lifecycle (``control_plane`` in tests/kube/conftest.py).

kwok moves a pod annotated ``mlsandbox.dev/kwok-outcome: OOMKilled`` to terminated with that reason
(exit 137): everything above that - the Job's status, the job's state, exit code and notes, and the
agent's observation through the gateway - is the real code path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from tests.helpers import ENDPOINTS as WORKLOAD_ENDPOINTS

from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.backends.kube.faults import chaos_mesh as C
from mlsandbox.backends.kube.faults import native as N
from mlsandbox.backends.kube.runtime import KubeRuntime
from mlsandbox.backends.protocols import Endpoints, JobSpec, JobStatus

T = TypeVar("T")
KWOK_OUTCOME = "mlsandbox.dev/kwok-outcome"


def wait_for(fn: Callable[[], T | None], what: str, timeout: float = 60.0, every: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _runtime(backend: KubeBackend, endpoints: Endpoints = WORKLOAD_ENDPOINTS) -> KubeRuntime:
    return KubeRuntime(
        backend.cluster,
        sandbox=backend.name,
        namespace=backend.namespace,
        control_namespace=backend.control_namespace,
        endpoints=endpoints,
        workload_endpoints=WORKLOAD_ENDPOINTS,
        image="mlsandbox/trainer:0.1.0",
    )


def _running_pod(rt: KubeRuntime, job_id: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        pod = rt.jobs.pod(job_id)
        return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None

    return wait_for(running, f"the pod of {job_id} to run")


def _oom_kill(rt: KubeRuntime, pod: dict[str, Any]) -> None:
    rt.cluster.patch(
        "v1",
        "Pod",
        pod["metadata"]["name"],
        rt.namespace,
        {"metadata": {"annotations": {KWOK_OUTCOME: "OOMKilled"}}},
    )


def _ended(status: JobStatus) -> JobStatus | None:
    return status if status.state in ("succeeded", "failed", "cancelled") else None


def _containing(text: str, part: str) -> str | None:
    return text if part in text else None


def _final(rt: KubeRuntime, job_id: str) -> JobStatus:
    return wait_for(
        lambda: _ended(rt.jobs.get(job_id)),
        f"{job_id} to end",
    )


# ------------------------------------------------------------------------------------------ lifecycle


def test_up_checks_the_namespace_and_runtime_refuses_a_missing_sandbox(
    control_plane: Any, backend: KubeBackend
) -> None:
    backend.up()
    assert isinstance(backend.runtime(), KubeRuntime)
    missing = KubeBackend(
        "nobody", control_namespace=backend.control_namespace, api_client=control_plane.api_client
    )
    from mlsandbox.errors import NotRunningError

    with pytest.raises(NotRunningError, match=r"namespace sbx-.*-nobody does not exist"):
        missing.up()
    with pytest.raises(NotRunningError):
        missing.runtime()
    assert {s.state for s in backend.status()} == {"stopped"}  # no chart in this control namespace


def test_clients_verify_the_api_servers_certificate_against_the_control_planes_ca(control_plane: Any) -> None:
    import ssl

    import httpx
    import yaml

    cp = control_plane.cp
    cluster = yaml.safe_load(cp.kubeconfig.read_text())["clusters"][0]["cluster"]
    assert "insecure-skip-tls-verify" not in cluster and cluster["certificate-authority"] == str(cp.ca_cert)
    assert control_plane.api_client.configuration.verify_ssl is True
    headers = {"Authorization": f"Bearer {cp.token}"}
    assert httpx.get(f"{cp.server}/readyz", headers=headers, verify=cp.tls_context()).status_code == 200
    # The system's trust store does not know this CA: a client that verifies without it is refused.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{cp.server}/readyz", headers=headers, verify=ssl.create_default_context())


# ----------------------------------------------------------------------------------------------- jobs


def test_a_training_job_is_a_job_with_its_limits_and_an_oom_kill_fails_it_with_137(
    backend: KubeBackend,
) -> None:
    rt = _runtime(backend)
    label = ("mlsandbox.world.episode", "ep-oom")
    spec = JobSpec(
        job_id="ep-oom-job-1",
        workload="trainer",
        args=["--bucket", "b", "--key", "raw/x.csv"],
        cpus=0.5,
        memory_mb=256,
        labels=dict([label]),
        timeout_s=300,
    )
    submitted = rt.jobs.submit(spec)
    assert submitted.state in ("queued", "running")
    with pytest.raises(ValueError, match="already exists"):
        rt.jobs.submit(spec)
    job = rt.cluster.get("batch/v1", "Job", "ep-oom-job-1", backend.namespace)
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "256Mi"}
    assert job["metadata"]["labels"]["mlsandbox.world.episode"] == "ep-oom"
    assert job["metadata"]["labels"][M.SANDBOX_LABEL] == backend.name
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == M.S3_SECRET_NAME
    secret = rt.cluster.get("v1", "Secret", M.S3_SECRET_NAME, backend.namespace)
    assert secret is not None

    pod = _running_pod(rt, spec.job_id)
    assert rt.jobs.get(spec.job_id).state == "running"
    assert [s.job_id for s in rt.jobs.list(label)] == [spec.job_id]
    assert rt.jobs.list(("mlsandbox.world.episode", "another")) == []

    _oom_kill(rt, pod)
    status = _final(rt, spec.job_id)
    assert status.state == "failed" and status.exit_code == 137
    assert status.started_at is not None and status.finished_at is not None
    assert status.cpu_seconds == pytest.approx((status.finished_at - status.started_at) * 0.5)
    logs = rt.jobs.logs(spec.job_id)
    assert "[mlsandbox] killed: out of memory (OOMKilled, memory limit 256 MiB, exit code 137)" in logs
    assert "no log from pod" in logs  # kwok's node has no kubelet: said, not crashed
    with pytest.raises(ValueError, match="is failed"):
        rt.jobs.set_resources(spec.job_id, memory_mb=128)

    rt.jobs.cleanup(label)
    with pytest.raises(KeyError):
        rt.jobs.get(spec.job_id)
    with pytest.raises(KeyError):
        rt.jobs.get("never-submitted")


def test_a_job_succeeds_is_cancelled_and_is_resized_in_place(backend: KubeBackend) -> None:
    rt = _runtime(backend)
    label = ("mlsandbox.world.episode", "ep-life")
    specs = [
        JobSpec(
            job_id=f"ep-life-{i}",
            workload="burn",
            args=["--sleep", "1"],
            cpus=0.25,
            memory_mb=128,
            labels=dict([label]),
        )
        for i in range(3)
    ]
    for spec in specs:
        rt.jobs.submit(spec)
    pods = [_running_pod(rt, s.job_id) for s in specs]

    rt.cluster.patch(
        "v1",
        "Pod",
        pods[0]["metadata"]["name"],
        rt.namespace,
        {"metadata": {"annotations": {KWOK_OUTCOME: "Succeeded"}}},
    )
    done = _final(rt, specs[0].job_id)
    assert done.state == "succeeded" and done.exit_code == 0 and done.result == {}

    cancelled = rt.jobs.cancel(specs[1].job_id)
    assert cancelled.state == "cancelled"
    assert rt.jobs.get(specs[1].job_id).state == "cancelled"
    wait_for(lambda: rt.jobs.pod(specs[1].job_id) is None or None, "the cancelled job's pod to go")
    assert "[mlsandbox] cancelled" in rt.jobs.logs(specs[1].job_id)

    try:
        resized = rt.jobs.set_resources(specs[2].job_id, cpus=0.5, memory_mb=192)
    except ValueError as exc:  # a cluster without in-place resize: the message says what to do instead
        assert "cancel and resubmit" in str(exc)
    else:
        assert resized.state == "running"
        assert rt.jobs.resources(specs[2].job_id) == (0.5, 192)
        pod = rt.jobs.pod(specs[2].job_id)
        assert pod is not None
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "192Mi"}

    states = {s.job_id: s.state for s in rt.jobs.list(label)}
    assert states == {specs[0].job_id: "succeeded", specs[1].job_id: "cancelled", specs[2].job_id: "running"}
    backend.down()
    assert rt.jobs.list() == []
    assert rt.cluster.get("v1", "Secret", M.S3_SECRET_NAME, backend.namespace) is None


# ------------------------------------------------------------------------------ the agent's observation


def test_an_oom_killed_job_reaches_the_agents_observation(backend: KubeBackend, sandbox: Any) -> None:
    """The gateway on a runtime whose object store and tracker are a local sandbox's and whose jobs are
    Jobs on the API server: the agent's get_job shows the OOM kill."""
    from mlsandbox.gateway.dispatcher import Gateway
    from mlsandbox.scenario import load_builtin

    rt = _runtime(backend, endpoints=sandbox.endpoints())
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3, sandbox=sandbox.name)
    gw.start()
    try:
        obs = gw.step(
            {
                "type": "train_model",
                "dataset": "raw/customers.parquet",
                "algorithm": "logistic_regression",
                "resources": {"cpus": 0.5, "memory_mb": 256},
            }
        ).observation
        assert obs["ok"], obs["error"]
        backend_id = gw.state.jobs["job-1"].backend_id
        job = rt.cluster.get("batch/v1", "Job", M.job_name(backend_id), backend.namespace)
        assert job is not None and job["spec"]["activeDeadlineSeconds"] == 240

        _oom_kill(rt, _running_pod(rt, backend_id))
        _final(rt, backend_id)
        obs = gw.step({"type": "get_job", "job_id": "job-1"}).observation
        assert obs["ok"], obs["error"]
        result = obs["result"]
        assert result["state"] == "failed" and result["exit_code"] == 137
        assert "OOMKilled" in result["log_tail"] and "memory limit 256 MiB" in result["log_tail"]
    finally:
        gw.close()
    assert rt.jobs.list() == []  # the episode's jobs are cleaned up with it


# ------------------------------------------------------------------------------------- native faults


def _deployment(namespace: str, component: str, replicas: int = 2) -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": component, "app.kubernetes.io/part-of": "mlsandbox"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"mls-mlsandbox-{component}", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": component, "image": f"example.invalid/{component}:1"}]},
            },
        },
    }


def test_native_faults_round_trip_and_down_recovers_what_a_crash_left(
    control_plane: Any, backend: KubeBackend
) -> None:
    rt = _runtime(backend)
    ctl = backend.control_namespace
    cluster = rt.cluster
    cluster.create(_deployment(ctl, "mlflow"))
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "mls-mlsandbox-mlflow", "namespace": ctl},
            "spec": {
                "selector": {"app.kubernetes.io/component": "mlflow"},
                "ports": [{"port": 5000, "targetPort": 5000}],
            },
        }
    )
    faults = rt.faults

    # kill = scale to zero, recorded on the Deployment; restart puts the replicas back.
    faults.services.kill("mlflow")
    dep = cluster.get("apps/v1", "Deployment", "mls-mlsandbox-mlflow", ctl)
    assert dep is not None and dep["spec"]["replicas"] == 0
    assert dep["metadata"]["labels"][N.NATIVE_FAULT_LABEL] == "scale_to_zero"
    faults.services.kill("mlflow")  # twice: the first original (2) is kept
    faults.services.restart("mlflow", wait=False)
    dep = cluster.get("apps/v1", "Deployment", "mls-mlsandbox-mlflow", ctl)
    assert dep is not None and dep["spec"]["replicas"] == 2
    assert N.NATIVE_FAULT_LABEL not in dep["metadata"]["labels"]
    assert N.ORIGINAL_ANNOTATION not in (dep["metadata"].get("annotations") or {})
    assert faults.recover(N.ScaleToZero("mls-mlsandbox-mlflow", ctl)) is False  # idempotent

    # wrong Service port and wrong image, then a "crash": a new backend object's down() undoes both.
    faults.inject(N.WrongServicePort("mls-mlsandbox-mlflow", ctl))
    faults.inject(N.WrongImage("mls-mlsandbox-mlflow", ctl))
    svc = cluster.get("v1", "Service", "mls-mlsandbox-mlflow", ctl)
    assert svc is not None and svc["spec"]["ports"][0]["targetPort"] == N.WRONG_PORT
    dep = cluster.get("apps/v1", "Deployment", "mls-mlsandbox-mlflow", ctl)
    assert dep is not None and dep["spec"]["template"]["spec"]["containers"][0]["image"] == N.MISSING_IMAGE
    KubeBackend(backend.name, control_namespace=ctl, api_client=control_plane.api_client).down()
    svc = cluster.get("v1", "Service", "mls-mlsandbox-mlflow", ctl)
    dep = cluster.get("apps/v1", "Deployment", "mls-mlsandbox-mlflow", ctl)
    assert svc is not None and svc["spec"]["ports"][0]["targetPort"] == 5000
    assert (
        dep is not None
        and dep["spec"]["template"]["spec"]["containers"][0]["image"] == "example.invalid/mlflow:1"
    )


def test_a_cordoned_node_and_an_exhausted_quota_keep_a_job_from_starting(backend: KubeBackend) -> None:
    rt = _runtime(backend)
    faults = rt.faults
    nodes = rt.cluster.list("v1", "Node")
    assert nodes, "kwok registers a node"
    node = nodes[0]["metadata"]["name"]
    others = [n["metadata"]["name"] for n in nodes[1:]]
    for name in [node, *others]:
        faults.inject(N.CordonNode(name))
    try:
        assert (rt.cluster.get("v1", "Node", node) or {})["spec"]["unschedulable"] is True
        rt.jobs.submit(JobSpec(job_id="cordoned-1", workload="burn", args=[], cpus=0.25, memory_mb=128))
        wait_for(lambda: "pod not scheduled" in rt.jobs.logs("cordoned-1") or None, "the scheduler's verdict")
        assert rt.jobs.get("cordoned-1").state in ("queued", "running")
    finally:
        for name in [node, *others]:
            faults.recover(N.CordonNode(name))
    assert not (rt.cluster.get("v1", "Node", node) or {})["spec"].get("unschedulable")
    _running_pod(rt, "cordoned-1")

    rt.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "budget", "namespace": backend.namespace},
            "spec": {"hard": {"pods": "10", "requests.cpu": "4", "requests.memory": "8Gi"}},
        }
    )
    wait_for(
        lambda: (
            (rt.cluster.get("v1", "ResourceQuota", "budget", backend.namespace) or {}).get("status") or {}
        ).get("used"),
        "the quota controller to count usage",
    )
    faults.inject(N.ExhaustQuota("budget", backend.namespace))
    quota = rt.cluster.get("v1", "ResourceQuota", "budget", backend.namespace) or {}
    assert quota["spec"]["hard"]["pods"] == quota["status"]["used"]["pods"] == "1"
    rt.jobs.submit(JobSpec(job_id="over-quota-1", workload="burn", args=[], cpus=0.25, memory_mb=128))
    logs = wait_for(lambda: _containing(rt.jobs.logs("over-quota-1"), "exceeded quota"), "the quota refusal")
    assert "FailedCreate" in logs
    backend.down()  # recovers the quota (and deletes the jobs)
    quota = rt.cluster.get("v1", "ResourceQuota", "budget", backend.namespace) or {}
    assert quota["spec"]["hard"] == {"pods": "10", "requests.cpu": "4", "requests.memory": "8Gi"}


# ---------------------------------------------------------------------------------------- chaos mesh


def test_service_and_network_faults_create_chaos_mesh_objects_with_the_right_selector(
    backend: KubeBackend,
) -> None:
    rt = _runtime(backend)
    ctl = backend.control_namespace
    rt.cluster.create(_deployment(ctl, "minio", replicas=1))
    faults = rt.faults
    assert faults.chaos_mesh(), "the control plane serves the Chaos Mesh CRDs"
    assert set(faults.unavailable()) == {"reset_peer"}
    assert backend.support().reason("fault:latency") is None  # asked of the cluster, without a sandbox

    faults.services.freeze("minio")
    chaos = rt.cluster.get(C.API_VERSION, "PodChaos", "mls-freeze-minio", ctl)
    assert chaos is not None
    assert chaos["spec"]["action"] == "pod-failure"
    assert chaos["spec"]["selector"] == {
        "namespaces": [ctl],
        "labelSelectors": {"app.kubernetes.io/component": "minio"},
    }
    assert chaos["metadata"]["labels"][C.SANDBOX_LABEL] == backend.name

    network = faults.network
    assert network is not None
    network.add_toxic("minio", "slow", "latency", {"latency": 250, "jitter": 0})
    delay = rt.cluster.list(C.API_VERSION, "NetworkChaos", ctl, selector=f"{C.SANDBOX_LABEL}={backend.name}")
    assert [d["spec"]["delay"]["latency"] for d in delay] == ["250ms"]
    network.remove_toxic("minio", "slow")
    assert rt.cluster.list(C.API_VERSION, "NetworkChaos", ctl) == []

    network.set_enabled("minio", False)
    faults.create_chaos(C.TimeSkew(name="skew", target=C.Target(component="trainer"), offset="-5m"))
    faults.start_contention("noisy", "service:minio", 2)  # CPU contention: StressChaos on its pods
    (stress,) = rt.cluster.list(C.API_VERSION, "StressChaos", ctl)
    assert stress["spec"]["stressors"] == {"cpu": {"workers": 2, "load": 100}}
    assert stress["spec"]["selector"]["labelSelectors"] == {"app.kubernetes.io/component": "minio"}
    time_chaos = rt.cluster.get(C.API_VERSION, "TimeChaos", "mls-skew", backend.namespace)
    assert time_chaos is not None and time_chaos["spec"]["selector"]["namespaces"] == [backend.namespace]

    faults.services.thaw("minio")
    assert rt.cluster.get(C.API_VERSION, "PodChaos", "mls-freeze-minio", ctl) is None
    backend.down()  # the rest: the endpoint-down NetworkChaos, the TimeChaos and the StressChaos
    assert rt.cluster.list(C.API_VERSION, "NetworkChaos", ctl) == []
    assert rt.cluster.list(C.API_VERSION, "TimeChaos", backend.namespace) == []
    assert rt.cluster.list(C.API_VERSION, "StressChaos", ctl) == []
