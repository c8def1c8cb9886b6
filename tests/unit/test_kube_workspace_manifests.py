"""A workspace script's locked-down pod on kube, without a cluster: the Job, its ConfigMap of files, its
Secret of scoped credentials and the scripts' NetworkPolicy, validated with ``kubeconform -strict``
against the pinned Kubernetes schemas; the init container's unpacking run for real on a temp directory;
the operator's broad allows leaving the scripts out."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube.workspace_manifests import (
    CONFIGMAP_MAX_BYTES,
    SCRIPT_SELECTOR_EXCLUSION,
    UNPACK,
    credentials_secret,
    files_configmap,
    script_job,
    script_network_policy,
)
from mlsandbox.backends.protocols import JobSpec
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
        spec(), namespace=NS, image="mlsandbox/trainer:1", endpoints=ENDPOINTS, bucket="ep-7-abc"
    )


def test_the_script_pod_is_locked_down() -> None:
    manifest = job()
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["activeDeadlineSeconds"] == 121
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "hostPID" not in pod and "serviceAccountName" not in pod
    for c in [*pod["initContainers"], *pod["containers"]]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "1000m", "memory": "1024Mi"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["workspace"]["emptyDir"] == {"sizeLimit": "256Mi"}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "64Mi"
    assert volumes["seed"]["configMap"]["name"] == "ep-7-abc-job-2-files"
    script = pod["containers"][0]
    assert script["command"] == ["python", "train.py", "--fast"] and script["workingDir"] == "/workspace"
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert labels["mlsandbox.dev/workload"] == "script" and labels["mlsandbox.dev/workspace"] == "7-abc"


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
    secret = credentials_secret(spec(), NS, CREDS)
    assert secret["stringData"]["AWS_SESSION_TOKEN"] == "token"


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


def test_the_init_container_unpacks_the_files_and_refuses_a_path_out(tmp_path: Path) -> None:
    files = {"train.py": b"print('hi')\n", "lib/util.py": b"X = 1\n", "data/a.bin": bytes(range(256))}
    cm = files_configmap(spec(), NS, files)
    seed, root = tmp_path / "seed", tmp_path / "workspace"
    seed.mkdir()
    root.mkdir()
    (seed / "index.json").write_text(cm["data"]["index.json"])
    for key, b64 in cm["binaryData"].items():
        (seed / key).write_bytes(base64.b64decode(b64))
    subprocess.run([sys.executable, "-I", "-S", "-c", UNPACK, str(seed), str(root)], check=True)
    assert {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()} == files
    for bad in ("../x.py", "/etc/x", "a//b"):
        with pytest.raises(ValueError, match="leaves the workspace"):
            files_configmap(spec(), NS, {bad: b""})
    with pytest.raises(ValueError, match="at most"):
        files_configmap(spec(), NS, {"big.bin": b"x" * (CONFIGMAP_MAX_BYTES + 1)})
    with pytest.raises(ValueError, match="workload 'script'"):
        script_job(spec(workload="trainer"), namespace=NS, image="i", endpoints=ENDPOINTS, bucket="b")


def test_the_manifests_are_valid_kubernetes_objects() -> None:
    docs = [
        job(),
        files_configmap(spec(), NS, {"train.py": b"print(1)"}),
        credentials_secret(spec(), NS, CREDS),
        script_network_policy(NS, "mlsandbox"),
    ]
    try:
        report = schemas.kubeconform(docs)
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs), report.results
    assert not report.failures, report.describe()
