"""The kube backend's builders without a cluster: Jobs of a sandbox, their notes, resize bodies, native
fault patches (inject, record, recover) for every fault, network faults as NetworkChaos, endpoints.

What the cluster does with them is tested against a real API server in tests/kube/.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends import backend_names, get_backend
from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube.backend import KubeBackend, sandbox_namespace
from mlsandbox.backends.kube.faults import chaos_mesh as C
from mlsandbox.backends.kube.faults import control as F
from mlsandbox.backends.kube.faults import native as N
from mlsandbox.backends.kube.runtime import client_endpoints, workload_endpoints
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import MissingToolError, NotRunningError

SPEC = JobSpec(
    job_id="7-abc12345-job-1",
    workload="trainer",
    args=["--bucket", "ep-1"],
    cpus=0.5,
    memory_mb=256,
    labels={"mlsandbox.world.episode": "7-abc12345"},
    timeout_s=120,
)


def _job() -> dict[str, Any]:
    return M.sandbox_job(
        SPEC, namespace="sbx-mlsandbox-demo", sandbox="demo", image="img:1", endpoints=ENDPOINTS
    )


# --------------------------------------------------------------------------------------------- jobs


def test_a_sandbox_job_is_labelled_for_listing_and_carries_its_spec() -> None:
    job = _job()
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        assert meta["labels"][M.SANDBOX_LABEL] == "demo"
        assert meta["labels"]["mlsandbox.world.episode"] == "7-abc12345"
        assert meta["labels"][M.JOB_ID_LABEL] == "7-abc12345-job-1"
    assert M.spec_of(job) == SPEC
    assert M.spec_of({"metadata": {"annotations": {M.SPEC_ANNOTATION: "{not json"}}}) is None
    assert M.spec_of({"metadata": {}}) is None
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert job["spec"]["activeDeadlineSeconds"] == 120 and job["spec"]["backoffLimit"] == 0


def test_sandbox_jobs_and_their_secret_validate_strictly() -> None:
    secret = M.s3_secret(
        M.S3_SECRET_NAME, namespace="sbx-mlsandbox-demo", sandbox="demo", endpoints=ENDPOINTS
    )
    assert secret["stringData"] == {
        "access-key": ENDPOINTS.s3_access_key,
        "secret-key": ENDPOINTS.s3_secret_key,
    }
    try:
        report = schemas.kubeconform([_job(), secret])
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == 2 and not report.failures, report.describe()


def test_cancel_suspends_and_marks_the_job() -> None:
    assert M.cancel_patch() == {
        "metadata": {"annotations": {M.CANCELLED_ANNOTATION: "true"}},
        "spec": {"suspend": True},
    }


def test_resize_keeps_requests_equal_to_limits() -> None:
    assert M.resize_containers("trainer", 0.25, 128) == [
        {
            "name": "trainer",
            "resources": {
                "requests": {"cpu": "250m", "memory": "128Mi"},
                "limits": {"cpu": "250m", "memory": "128Mi"},
            },
        }
    ]


def _pod(terminated: dict[str, Any] | None = None, waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"waiting": waiting} if waiting else {"running": {}}
    return {"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "trainer", "state": state}]}}


FAILED = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}


def test_notes_say_oom_killed_with_the_limit_like_on_local() -> None:
    pod = _pod({"exitCode": 137, "reason": "OOMKilled"})
    notes = M.job_notes(FAILED, pod, 256)
    assert notes[0] == "[mlsandbox] killed: out of memory (OOMKilled, memory limit 256 MiB, exit code 137)"
    status = M.job_status("j", FAILED, pod)
    assert status.state == "failed" and status.exit_code == 137


def test_notes_for_deadline_cancel_image_and_scheduling() -> None:
    deadline = {
        "spec": {"activeDeadlineSeconds": 30},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
    }
    assert M.job_notes(deadline, None, None) == [
        "[mlsandbox] timed out after 30 s; the job was killed (DeadlineExceeded)"
    ]
    cancelled = {"metadata": {"annotations": {M.CANCELLED_ANNOTATION: "true"}}}
    assert M.job_notes(cancelled, None, None) == ["[mlsandbox] cancelled"]
    image = _pod(waiting={"reason": "ImagePullBackOff", "message": "pull failed"})
    assert M.job_notes({}, image, None) == ["[mlsandbox] container waiting: ImagePullBackOff: pull failed"]
    assert M.job_notes({}, _pod(waiting={"reason": "ContainerCreating"}), None) == []
    unscheduled = {
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
            ]
        }
    }
    assert M.job_notes({}, unscheduled, None) == ["[mlsandbox] pod not scheduled: Unschedulable: 0/1 nodes"]
    failed_exit = _pod({"exitCode": 1, "reason": "Error"})
    assert M.job_notes(FAILED, failed_exit, None) == ["[mlsandbox] container exited with code 1 (Error)"]


# ------------------------------------------------------------------------------------ native faults

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "mls-mlsandbox-mlflow", "namespace": "mlsandbox", "labels": {"a": "b"}},
    "spec": {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "mlflow", "image": "ghcr.io/mlflow/mlflow:v3"}]}},
    },
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "mls-mlsandbox-minio", "namespace": "mlsandbox"},
    "spec": {
        "ports": [
            {"name": "s3", "port": 9000, "targetPort": "s3"},
            {"name": "console", "port": 9001, "targetPort": 9001},
        ]
    },
}
QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "budget", "namespace": "sbx-mlsandbox-demo"},
    "spec": {"hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi"}},
    "status": {"used": {"pods": "2", "requests.cpu": "500m"}},
}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "kwok-node-0"}, "spec": {}}


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A small strategic merge: maps merge, ``None`` deletes, lists of named/port-keyed items merge by key."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif (
            isinstance(value, list)
            and isinstance(out.get(key), list)
            and value
            and isinstance(value[0], dict)
        ):
            merge_key = "name" if "name" in value[0] else "port"
            items = {item.get(merge_key): item for item in out[key]}
            for item in value:
                items[item[merge_key]] = _merge(items.get(item[merge_key], {}), item)
            out[key] = list(items.values())
        else:
            out[key] = copy.deepcopy(value)
    return out


CASES: list[tuple[N.NativeFault, dict[str, Any], dict[str, Any]]] = [
    (N.ScaleToZero("mls-mlsandbox-mlflow", "mlsandbox"), DEPLOYMENT, {"spec": {"replicas": 0}}),
    (
        N.WrongImage("mls-mlsandbox-mlflow", "mlsandbox"),
        DEPLOYMENT,
        {"spec": {"template": {"spec": {"containers": [{"name": "mlflow", "image": N.MISSING_IMAGE}]}}}},
    ),
    (
        N.WrongServicePort("mls-mlsandbox-minio", "mlsandbox"),
        SERVICE,
        {"spec": {"ports": [{"port": 9000, "targetPort": 1}, {"port": 9001, "targetPort": 1}]}},
    ),
    (
        N.ExhaustQuota("budget", "sbx-mlsandbox-demo"),
        QUOTA,
        {"spec": {"hard": {"pods": "2", "requests.cpu": "500m", "limits.memory": "0"}}},
    ),
    (N.CordonNode("kwok-node-0"), NODE, {"spec": {"unschedulable": True}}),
]


@pytest.mark.parametrize(("fault", "obj", "change"), CASES, ids=[type(c[0]).type for c in CASES])
def test_each_native_fault_records_the_original_and_recovers_it(
    fault: N.NativeFault, obj: dict[str, Any], change: dict[str, Any]
) -> None:
    patch = N.inject_patch(fault, obj, "demo")
    meta = patch.pop("metadata")
    assert patch == change
    assert meta["labels"] == {N.NATIVE_FAULT_LABEL: fault.type}
    assert meta["annotations"][N.SANDBOX_ANNOTATION] == "demo"
    assert json.loads(meta["annotations"][N.ORIGINAL_ANNOTATION]) == fault.original(obj)
    faulty = _merge(obj, N.inject_patch(fault, obj, "demo"))
    # Injecting again (e.g. after a crash and a retry) keeps the first original.
    again = N.inject_patch(fault, faulty, "demo")
    assert (
        again["metadata"]["annotations"][N.ORIGINAL_ANNOTATION] == meta["annotations"][N.ORIGINAL_ANNOTATION]
    )
    recovered = _merge(faulty, N.recover_patch(faulty) or {})
    for part in ("labels", "annotations"):
        assert not {
            k: v for k, v in (recovered["metadata"].get(part) or {}).items() if k.startswith("mlsandbox.dev/")
        }
    assert recovered["spec"] == _merge(obj, {})["spec"] | (
        {"unschedulable": False} if fault.kind == "Node" else {}
    )
    assert N.recover_patch(recovered) is None  # idempotent: nothing recorded, nothing to do


def test_a_second_native_fault_on_the_same_object_is_refused() -> None:
    faulty = _merge(DEPLOYMENT, N.inject_patch(N.ScaleToZero("d", "ns"), DEPLOYMENT, "demo"))
    with pytest.raises(ValueError, match="already carries the scale_to_zero fault"):
        N.inject_patch(N.WrongImage("d", "ns"), faulty, "demo")


def test_wrong_image_names_a_missing_container_clearly() -> None:
    with pytest.raises(ValueError, match="no container 'sidecar'"):
        N.inject_patch(N.WrongImage("d", "ns", container="sidecar"), DEPLOYMENT, "demo")


# ------------------------------------------------------------------------------- chaos mesh mapping


@pytest.mark.parametrize(
    ("kind", "attributes", "expected_type", "expected"),
    [
        ("latency", {"latency": 300, "jitter": 20}, "NetworkChaos", {"action": "delay"}),
        ("bandwidth", {"rate": 64}, "NetworkChaos", {"action": "bandwidth"}),
        (
            "timeout",
            {"timeout": 0},
            "NetworkChaos",
            {"action": "loss", "loss": {"loss": "100", "correlation": "0"}},
        ),
        ("down", {}, "NetworkChaos", {"action": "loss"}),
    ],
)
def test_network_toxics_map_to_network_chaos_on_the_endpoints_pods(
    kind: str, attributes: dict[str, Any], expected_type: str, expected: dict[str, Any]
) -> None:
    fault = F.network_fault(F.chaos_name(f"minio-mlsandbox-{kind}"), "minio", kind, attributes)
    manifest = C.chaos_resource(fault, namespace="mlsandbox", sandbox="demo")
    assert manifest["kind"] == expected_type
    for key, value in expected.items():
        assert manifest["spec"][key] == value
    assert manifest["spec"]["selector"] == {
        "namespaces": ["mlsandbox"],
        "labelSelectors": {"app.kubernetes.io/component": "minio"},
    }
    if kind == "latency":
        assert (
            manifest["spec"]["delay"]["latency"] == "300ms" and manifest["spec"]["delay"]["jitter"] == "20ms"
        )
    if kind == "bandwidth":
        assert manifest["spec"]["bandwidth"]["rate"] == "512kbps"  # 64 KB/s


def test_reset_peer_has_no_chaos_mesh_equivalent() -> None:
    with pytest.raises(ValueError, match="no Chaos Mesh equivalent"):
        F.network_fault("x", "minio", "reset_peer", {})


def test_freezing_a_service_is_a_pod_failure_on_its_pods() -> None:
    manifest = C.chaos_resource(F.freeze_fault("mlflow"), namespace="mlsandbox", sandbox="demo")
    assert manifest["kind"] == "PodChaos" and manifest["spec"]["action"] == "pod-failure"
    assert manifest["metadata"]["name"] == "mls-freeze-mlflow"
    assert manifest["spec"]["selector"]["labelSelectors"] == {"app.kubernetes.io/component": "mlflow"}
    assert F.chaos_name("MLflow_Slow API!") == "mlflow-slow-api"
    assert len(F.chaos_name("x" * 100)) == 42


# ------------------------------------------------------------------------------ backend and runtime


def test_the_sandbox_namespace_follows_the_operators_rule() -> None:
    from mlsandbox.k8s_operator.resources import sandbox_namespace_name

    for ns, name in (("mlsandbox", "demo"), ("default", "x" * 60), ("a", "b")):
        assert sandbox_namespace(ns, name) == sandbox_namespace_name(ns, name)
    assert KubeBackend("demo").namespace == "sbx-mlsandbox-demo"


def test_client_endpoints_default_to_the_kind_node_ports_and_follow_the_environment() -> None:
    e = client_endpoints({"s3_access_key": "k", "s3_secret_key": "s"}, environ={})
    assert (e.s3_url, e.mlflow_url, e.prefect_api_url) == (
        "http://127.0.0.1:9000",
        "http://127.0.0.1:5000",
        "http://127.0.0.1:4200/api",
    )
    assert (e.s3_access_key, e.s3_secret_key) == ("k", "s")
    env = {"MLSANDBOX_KUBE_S3_URL": "http://127.0.0.1:19000", "MLSANDBOX_KUBE_S3_SECRET_KEY": "other"}
    e = client_endpoints({"s3_access_key": "k", "s3_secret_key": "s"}, environ=env)
    assert e.s3_url == "http://127.0.0.1:19000" and e.s3_secret_key == "other" and e.s3_access_key == "k"
    inside = workload_endpoints("mlsandbox", {"minio": "mls-mlsandbox-minio"}, e)
    assert inside.s3_url == "http://mls-mlsandbox-minio.mlsandbox.svc:9000"
    assert inside.prefect_api_url == "http://mls-mlsandbox-prefect-server.mlsandbox.svc:4200/api"
    assert inside.s3_secret_key == "other"


def test_kube_is_a_registered_backend() -> None:
    assert "kube" in backend_names()
    backend = get_backend("kube", "demo")
    assert isinstance(backend, KubeBackend) and backend.name == "demo"


def test_up_without_an_answering_api_server_says_what_to_run(tmp_path: Any) -> None:
    from kubernetes.client import ApiClient, Configuration

    config = Configuration()
    config.host = "http://127.0.0.1:9"  # discard port: nothing answers
    backend = KubeBackend("demo", api_client=ApiClient(config))
    with pytest.raises(NotRunningError, match="mlsandbox cluster up"):
        backend.up()
    assert backend.is_alive() is False
    assert {s.state for s in backend.status()} == {"stopped"}
    backend.down()  # nothing to do, no error


def test_status_shows_the_pod_its_node_restarts_age_and_memory() -> None:
    import datetime as dt

    from mlsandbox.backends.kube.backend import _pod_facts

    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=90)).isoformat().replace("+00:00", "Z")

    def pod(name: str, restarts: int) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "mlsandbox"},
            "spec": {"nodeName": "node-0"},
            "status": {"startTime": started, "containerStatuses": [{"restartCount": restarts}]},
        }

    facts = _pod_facts(
        [pod("minio-1", 1), pod("minio-2", 2)], {"mlsandbox/minio-1": 100, "mlsandbox/minio-2": 50}
    )
    assert facts["detail"] == "pod minio-1 (+1) on node-0, 3 restart(s)"
    assert facts["rss_bytes"] == 150 and 85 < facts["uptime_s"] < 120
    assert _pod_facts([], {}) == {}
