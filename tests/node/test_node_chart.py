"""The chart on the real node: ``helm install`` of charts/mlsandbox with locally built images.

MinIO, MLflow (SQL store, artifacts in MinIO), the Prefect server and its Kubernetes worker and the
operator (from its image, under exactly the chart's ClusterRole) run as pods; a Sandbox becomes Ready, a
pod inside it reaches the shared services through the sandbox's service aliases (DNS, Services and the
sandbox's NetworkPolicies, enforced), a warm reset removes the previous episode's Job and its pod, and
deleting the Sandbox removes its namespace and everything running in it.
"""

from __future__ import annotations

import json
import secrets

import pytest
from tests.node.conftest import core, pod_manifest, run_pod, wait_pod

from mlsandbox.k8s_operator.node_testbed import NodeCluster
from mlsandbox.k8s_operator.resources import EPISODE_LABEL, sandbox_namespace_name
from mlsandbox.k8s_operator.testbed import CONTROL_NAMESPACE, RELEASE

pytestmark = pytest.mark.timeout(1800)

SPEC = {
    "scenario": "tabular-quality-basic",
    "seed": 3,
    "budget": {"cpu": "2", "memory": "2Gi", "maxPods": 10},
}
# From inside a sandbox: the shared services by their aliases (minio, mlflow, prefect), an MLflow run
# whose artifact MLflow's proxy stores in MinIO, and the Prefect work pool the chart's worker polls.
PROBE = """
import json, time, urllib.error, urllib.request

def call(method, url, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        text = resp.read().decode()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

out = {}
out["minio"] = call("GET", "http://minio:9000/minio/health/ready")[0]
out["mlflow"] = call("GET", "http://mlflow:5000/health")[1]
exp = call("POST", "http://mlflow:5000/api/2.0/mlflow/experiments/create", {"name": "node-tier-probe"})[1]
run = call("POST", "http://mlflow:5000/api/2.0/mlflow/runs/create", {"experiment_id": exp["experiment_id"]})[1]["run"]
uri = run["info"]["artifact_uri"]
path = uri.split("mlflow-artifacts:/", 1)[1] + "/probe.txt"
out["artifact_put"] = call("PUT", "http://mlflow:5000/api/2.0/mlflow-artifacts/artifacts/" + path, raw=b"stored in MinIO")[0]
out["artifact_path"] = path
out["artifact_get"] = call("GET", "http://mlflow:5000/api/2.0/mlflow-artifacts/artifacts/" + path)[1]
out["prefect"] = call("GET", "http://prefect:4200/api/health")[1]
# The worker registers in its pool shortly after it starts.
for attempt in range(60):
    try:
        workers = call("POST", "http://prefect:4200/api/work_pools/mlsandbox/workers/filter", {})[1]
    except urllib.error.HTTPError as exc:  # 404: no pool yet
        workers = []
    if workers:
        break
    time.sleep(2)
out["workers"] = [w["status"] for w in workers]
print("PROBE " + json.dumps(out), flush=True)
"""


def _sandbox_namespace(name: str) -> str:
    return sandbox_namespace_name("team-a", name)


def test_the_chart_runs_on_the_node_and_a_sandbox_reaches_its_services(
    kube_node_cluster: NodeCluster,
) -> None:
    from kubernetes import client

    cluster = kube_node_cluster
    apps = client.AppsV1Api(cluster.api_client)
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(CONTROL_NAMESPACE).items}
    components = ("minio", "mlflow", "prefect-server", "prefect-worker", "operator")
    assert sorted(deployments) == sorted(f"{RELEASE}-{c}" for c in components)
    for name, deployment in deployments.items():
        assert deployment.status.available_replicas == 1, f"{name} is not available"
    operator = apps.read_namespaced_deployment(f"{RELEASE}-operator", CONTROL_NAMESPACE)
    assert operator.spec.template.spec.containers[0].image.startswith("mlsandbox/gateway:")
    assert operator.spec.template.spec.service_account_name == f"{RELEASE}-operator"

    name = f"s{secrets.token_hex(3)}"
    cluster.create_sandbox("team-a", name, SPEC)
    try:
        cluster.wait_phase("team-a", name, "Ready", timeout=120)
        target = _sandbox_namespace(name)
        run_pod(cluster, target, pod_manifest("probe", ["python3", "-c", PROBE], memory="64Mi"))
        done = wait_pod(cluster, target, "probe", ready=False, timeout=180)
        log = core(cluster).read_namespaced_pod_log("probe", target)
        assert done.status.phase == "Succeeded", f"{log}\n{cluster.describe_pods(CONTROL_NAMESPACE)}"
        result = json.loads(log.split("PROBE ", 1)[1])
        assert result["minio"] == 200
        assert result["mlflow"] == "OK"
        assert result["artifact_put"] == 200
        assert result["artifact_get"] == "stored in MinIO"
        assert result["prefect"] is True
        assert result["workers"] == ["ONLINE"], "the chart's Kubernetes worker does not poll its work pool"
        # The artifact is an object in MinIO's bucket, not a file in MLflow's pod.
        assert result["artifact_path"] in _minio_objects(cluster, "mlflow-artifacts")
    finally:
        cluster.delete_sandbox("team-a", name)
        cluster.wait("sandbox gone", lambda: cluster.sandbox("team-a", name) is None, timeout=180)


def _minio_objects(cluster: NodeCluster, bucket: str) -> list[str]:
    """Keys of ``bucket``, listed with the chart's credentials at MinIO's ClusterIP (which this machine
    reaches through kube-proxy's rules, as any node does)."""
    import base64

    import boto3
    from botocore.config import Config

    api = core(cluster)
    secret = api.read_namespaced_secret(f"{RELEASE}-minio", CONTROL_NAMESPACE).data
    ip = api.read_namespaced_service(f"{RELEASE}-minio", CONTROL_NAMESPACE).spec.cluster_ip
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://{ip}:9000",
        aws_access_key_id=base64.b64decode(secret["access-key"]).decode(),
        aws_secret_access_key=base64.b64decode(secret["secret-key"]).decode(),
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_warm_reset_removes_the_episode_and_delete_removes_the_sandbox(
    kube_node_cluster: NodeCluster,
) -> None:
    from kubernetes import client

    cluster = kube_node_cluster
    name = f"s{secrets.token_hex(3)}"
    cluster.create_sandbox("team-a", name, SPEC)
    cluster.wait_phase("team-a", name, "Ready", timeout=120)
    target = _sandbox_namespace(name)
    labels = {EPISODE_LABEL: "ep-1"}
    client.BatchV1Api(cluster.api_client).create_namespaced_job(
        target,
        {
            "metadata": {"name": "train", "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pod_manifest("train", ["sleep", "3600"], labels=labels, memory="64Mi")["spec"],
                },
            },
        },
    )
    api = core(cluster)
    cluster.wait("the episode's pod running", lambda: _running(api, target, labels), timeout=120)

    cluster.patch_spec("team-a", name, {"episode": 1})
    cluster.wait_phase("team-a", name, "Ready", episode=1, timeout=120)
    cluster.wait(
        "the previous episode's Job and pod gone",
        lambda: (
            not client.BatchV1Api(cluster.api_client).list_namespaced_job(target).items
            and not api.list_namespaced_pod(target).items
        ),
        timeout=120,
    )
    # What the sandbox is made of stays through a reset.
    assert api.read_namespaced_resource_quota("budget", target).spec.hard["pods"] == "10"

    run_pod(cluster, target, pod_manifest("survivor", ["sleep", "3600"], memory="64Mi"))
    wait_pod(cluster, target, "survivor")
    cluster.delete_sandbox("team-a", name)
    cluster.wait("sandbox gone", lambda: cluster.sandbox("team-a", name) is None, timeout=180)
    cluster.wait(
        "namespace gone",
        lambda: target not in [n.metadata.name for n in api.list_namespace().items],
        timeout=60,
    )


def _running(api: object, ns: str, labels: dict[str, str]) -> bool:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods = api.list_namespaced_pod(ns, label_selector=selector).items  # type: ignore[attr-defined]
    return bool(pods) and all(p.status.phase == "Running" for p in pods)
