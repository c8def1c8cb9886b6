"""A workspace script's locked-down pod on kube, without a cluster: the Job, its Secret of scoped
credentials and the scripts' NetworkPolicy, validated with ``kubeconform -strict`` against the pinned
Kubernetes schemas; the operator's broad allows leaving the scripts out; the workspace's files in the
episode's bucket (``KubeWorkspaces`` on an in-memory object store), with local's path rules and quota."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.helpers import ENDPOINTS
from tests.unit.source_fakes import MemoryObjectStore

from mlsandbox.backends.common.workspaces import MAX_PROCS, uid_of
from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube.workspace_manifests import (
    SCRIPT_SELECTOR_EXCLUSION,
    WORKSPACE_PREFIX,
    WRITE_BACK_GRACE_S,
    credentials_secret,
    owned_by,
    script_job,
    script_network_policy,
)
from mlsandbox.backends.kube.workspaces import KubeWorkspaces
from mlsandbox.backends.protocols import JobSpec, WorkspaceError
from mlsandbox.errors import MissingToolError
from mlsandbox.k8s_operator import resources

NS = "sbx-demo"
CREDS = {"AccessKeyId": "AKIA", "SecretAccessKey": "scoped-secret", "SessionToken": "token"}


def spec(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "job_id": "ep-7-abc-job-2",
        "workload": "script",
        "args": ["train.py", "--fast"],
        "cpus": 1.0,
        "memory_mb": 1024,
        "timeout_s": 120.5,
        "workspace": "7-abc",
        "labels": {"mlsandbox.dev/episode": "7-abc"},
        "env": {"MLSANDBOX_EXPERIMENT_ID": "3", "AWS_SECRET_ACCESS_KEY": "never-this", "PATH": "/evil"},
        **overrides,
    }
    return JobSpec(**values)


def job() -> dict[str, Any]:
    return script_job(
        spec(),
        namespace=NS,
        image="mlsandbox/trainer:1",
        endpoints=ENDPOINTS,
        bucket="ep-7-abc",
        sandbox="demo",
    )


def test_the_script_pod_is_locked_down() -> None:
    manifest = job()
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["spec"]["backoffLimit"] == 0
    assert manifest["spec"]["activeDeadlineSeconds"] == 121 + WRITE_BACK_GRACE_S
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == uid_of("7-abc") != 0
    assert security["runAsGroup"] == security["fsGroup"] == uid_of("7-abc")
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "hostPID" not in pod and "serviceAccountName" not in pod
    assert "shareProcessNamespace" not in pod
    for c in [*pod["initContainers"], *pod["containers"]]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "1000m", "memory": "1024Mi"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["workspace"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    assert volumes["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert set(volumes) == {"workspace", "tmp"}
    (fetch,) = pod["initContainers"]
    assert fetch["command"][:3] == ["python", "-I", "-c"] and fetch["command"][4:6] == [
        "ep-7-abc",
        WORKSPACE_PREFIX,
    ]
    script = pod["containers"][0]
    command = script["command"]
    assert command[:3] == ["python", "-I", "-c"] and command[-2:] == ["train.py", "--fast"]
    assert command[3:7][1:] == ["120.5", str(MAX_PROCS), str(256 << 20)], command[4:7]
    assert script["workingDir"] == "/workspace"
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert labels["mlsandbox.dev/workload"] == "script" and labels["mlsandbox.dev/workspace"] == "7-abc"
    assert labels["mlsandbox.dev/sandbox"] == "demo"
    assert (
        JobSpec.model_validate_json(manifest["metadata"]["annotations"]["mlsandbox.dev/job-spec"]) == spec()
    )


def test_the_script_gets_only_its_scoped_credentials_and_the_services_endpoints() -> None:
    env = job()["spec"]["template"]["spec"]["containers"][0]["env"]
    values = {e["name"]: e.get("value") for e in env}
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert set(refs) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    assert {r["name"] for r in refs.values()} == {"ep-7-abc-job-2-creds"}  # the run's own Secret
    assert (
        values["AWS_ENDPOINT_URL_S3"] == ENDPOINTS.s3_url
        and values["MLFLOW_TRACKING_URI"] == ENDPOINTS.mlflow_url
    )
    assert values["MLSANDBOX_BUCKET"] == "ep-7-abc" and values["MLSANDBOX_EXPERIMENT_ID"] == "3"
    assert "PREFECT_API_URL" not in values and "PATH" not in values  # only MLSANDBOX_* of the spec pass
    assert ENDPOINTS.s3_secret_key not in json.dumps(job())
    secret = credentials_secret(spec(), NS, CREDS, "demo")
    assert secret["stringData"]["AWS_SESSION_TOKEN"] == "token"
    assert secret["metadata"]["labels"]["mlsandbox.dev/sandbox"] == "demo"
    created = {"metadata": {"name": "ep-7-abc-job-2", "uid": "u-1"}}
    (owner,) = owned_by(created)["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "batch/v1", "kind": "Job", "name": "ep-7-abc-job-2", "uid": "u-1"}


def test_the_network_policy_allows_dns_minio_and_mlflow_only() -> None:
    policy = script_network_policy(NS, "mlsandbox")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"mlsandbox.dev/workload": "script"}}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["ingress"] == []
    egress = policy["spec"]["egress"]
    assert egress[0]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    reached = {
        (rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], rule["ports"][0]["port"])
        for rule in egress[1:]
    }
    assert reached == {("minio", 9000), ("mlflow", 5000)}
    for rule in egress:
        assert all("ipBlock" not in peer for peer in rule["to"]) and rule["ports"]


def test_the_operators_broad_allows_leave_the_scripts_out() -> None:
    assert resources.NOT_SCRIPTS == SCRIPT_SELECTOR_EXCLUSION
    policies = {
        p["metadata"]["name"]: p["spec"] for p in resources.network_policies(NS, ("team", "demo"), "ctl")
    }
    for name in ("allow-same-namespace", "allow-control-plane"):
        assert policies[name]["podSelector"] == {"matchExpressions": [SCRIPT_SELECTOR_EXCLUSION]}, name


def test_the_workspace_files_live_in_the_episodes_bucket_with_locals_rules() -> None:
    store = MemoryObjectStore()
    store.create_bucket("ep-7-abc")
    spaces = KubeWorkspaces(store, ENDPOINTS, quota_bytes=4096)
    with pytest.raises(WorkspaceError, match="is not open"):
        spaces.write_file("7-abc", "a.py", b"x")
    spaces.open("7-abc", "ep-7-abc")
    assert spaces.write_file("7-abc", "train.py", b"print(1)\n") == 9
    spaces.write_file("7-abc", "lib/util/x.py", b"X = 1\n")
    assert store.get_object("ep-7-abc", WORKSPACE_PREFIX + "lib/util/x.py") == b"X = 1\n"
    assert spaces.read_file("7-abc", "train.py") == (b"print(1)\n", 9)
    assert spaces.read_file("7-abc", "./train.py", max_bytes=5) == (b"print", 9)
    assert [(e.path, e.kind, e.size) for e in spaces.list_files("7-abc")] == [
        ("lib", "dir", 0), ("lib/util", "dir", 0), ("lib/util/x.py", "file", 6), ("train.py", "file", 9),
    ]  # fmt: skip
    assert [e.path for e in spaces.list_files("7-abc", "lib/util")] == ["lib/util/x.py"]
    assert spaces.usage("7-abc").used_bytes == 15
    for bad, code in (("../x.py", "invalid_parameters"), ("/etc/passwd", "invalid_parameters")):
        with pytest.raises(WorkspaceError) as e:
            spaces.write_file("7-abc", bad, b"")
        assert e.value.code == code
    with pytest.raises(WorkspaceError, match="not a directory"):
        spaces.write_file("7-abc", "train.py/x", b"")
    with pytest.raises(WorkspaceError, match="Is a directory"):
        spaces.write_file("7-abc", "lib", b"")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        spaces.read_file("7-abc", "lib")
    with pytest.raises(WorkspaceError) as e:
        spaces.read_file("7-abc", "nothing.py")
    assert e.value.code == "not_found"
    with pytest.raises(WorkspaceError) as e:
        spaces.write_file("7-abc", "big.bin", b"x" * 4096)
    assert e.value.code == "quota_exceeded"
    assert spaces.usage("7-abc").used_bytes == 15  # nothing written by a refused call
    store.put_object("ep-7-abc", "raw/data.csv", b"a,b\n")
    spaces.close("7-abc")
    assert [o.key for o in store.list_objects("ep-7-abc")] == ["raw/data.csv"]  # the episode's data stays


def test_a_script_job_without_a_workspace_or_script_is_refused() -> None:
    with pytest.raises(ValueError, match="workload 'script'"):
        script_job(spec(workload="trainer"), namespace=NS, image="i", endpoints=ENDPOINTS, bucket="b")
    with pytest.raises(ValueError, match="its workspace"):
        script_job(spec(workspace=None), namespace=NS, image="i", endpoints=ENDPOINTS, bucket="b")


def test_the_manifests_are_valid_kubernetes_objects() -> None:
    docs = [
        job(),
        credentials_secret(spec(), NS, CREDS, "demo"),
        script_network_policy(NS, "mlsandbox"),
    ]
    try:
        report = schemas.kubeconform(docs)
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs), report.results
    assert not report.failures, report.describe()
