"""The Helm chart without a cluster: ``helm lint`` and ``helm template`` for several value sets, every
rendered manifest validated with ``kubeconform -strict`` (offline schemas), and the chart's settings checked
against the local backend's (the same lean MLflow and Prefect settings).

helm and kubeconform come from ``make setup`` (scripts/install-kube-tools.sh); without them these tests
fail and say so.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlsandbox.backends.kube import schemas
from mlsandbox.errors import MissingToolError

CHART = schemas.CHART_DIR
VALUE_SETS: dict[str, list[str]] = {
    "default": [],
    **{
        path.name.removesuffix("-values.yaml"): ["-f", str(path)]
        for path in sorted((CHART / "ci").glob("*-values.yaml"))
    },
    "custom": [
        "--set",
        "operator.image.repository=registry.local/mls/gateway,operator.image.tag=dev",
        "--set",
        "mlflow.workers=2,operator.controlNamespace=control",
    ],
}
MIB = 1 << 20


def helm() -> Path:
    try:
        return schemas.tool("helm")
    except MissingToolError as exc:
        pytest.fail(str(exc))


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm()), *args], capture_output=True, text=True, check=False, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def template(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_helm(
        "template",
        "mls",
        str(CHART),
        "--namespace",
        "mlsandbox",
        "--include-crds",
        "--kube-version",
        schemas.kubernetes_version(),
        *args,
        check=check,
    )


def render(*args: str) -> list[dict[str, Any]]:
    return schemas.load_yaml_documents(template(*args).stdout)


@pytest.fixture(scope="module")
def crd_schema_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        schemas.write_crd_schemas(schemas.load_yaml_documents(schemas.SANDBOX_CRD.read_text()), Path(tmp))
        yield Path(tmp)


@pytest.fixture(scope="module")
def default_docs() -> list[dict[str, Any]]:
    return render()


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def containers(docs: list[dict[str, Any]], init: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """(deployment/container, container) of every Deployment's (init) containers."""
    for name, deployment in by_kind(docs, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        for container in [*(pod.get("initContainers", []) if init else []), *pod["containers"]]:
            yield f"{name}/{container['name']}", container


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def quantity(value: str | int | float) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(value))


# -------------------------------------------------------------------------------------- lint, schema


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict(name: str) -> None:
    proc = run_helm(
        "lint", "--strict", str(CHART), "--kube-version", schemas.kubernetes_version(), *VALUE_SETS[name]
    )
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_manifest_validates_strictly(name: str, crd_schema_dir: Path) -> None:
    docs = render(*VALUE_SETS[name])
    assert docs and all(d.get("metadata", {}).get("name") for d in docs)
    try:
        report = schemas.kubeconform(docs, crd_schema_dirs=[crd_schema_dir])
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs)
    assert not report.failures, report.describe()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "minio.replicas=3"], "additional properties 'replicas' not allowed"),
        (["--set", "mlflow.workers=0"], "minimum"),
        (["--set", "imagePullPolicy=Sometimes"], "imagePullPolicy"),
        (["--set", "minio.rootPassword=short"], "rootPassword"),
        (["--set", "prefect.worker.resources.limits=null"], "limits"),
        (["--set", "minio.enabled=false"], "mlflow.enabled needs minio.enabled"),
        (["--set", "prefect.server.enabled=false"], "prefect.worker.enabled needs prefect.server.enabled"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(args: list[str], message: str) -> None:
    proc = template(*args, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_the_values_file_and_schema_agree() -> None:
    values_schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(values_schema["properties"])
    assert values_schema["additionalProperties"] is False
    for section in ("minio", "mlflow", "operator", "workloads"):
        assert values_schema["properties"][section]["additionalProperties"] is False
        assert set(values[section]) == set(values_schema["properties"][section]["properties"]), section


# --------------------------------------------------------------------------------------- what renders


def test_default_release_has_every_service_and_the_operator(default_docs: list[dict[str, Any]]) -> None:
    deployments = by_kind(default_docs, "Deployment")
    assert set(deployments) == {
        f"mls-mlsandbox-{c}" for c in ("minio", "mlflow", "prefect-server", "prefect-worker", "operator")
    }
    assert all(d["spec"]["replicas"] == 1 for d in deployments.values())
    assert set(by_kind(default_docs, "Service")) == {
        "mls-mlsandbox-minio",
        "mls-mlsandbox-mlflow",
        "mls-mlsandbox-prefect-server",
    }
    assert set(by_kind(default_docs, "CustomResourceDefinition")) == {
        f"{plural}.mlsandbox.dev" for plural in ("sandboxes", "sandboxpools", "sandboxclaims")
    }
    assert by_kind(default_docs, "PersistentVolumeClaim") == {}  # no PVC by default
    for deployment in deployments.values():
        assert deployment["metadata"]["namespace"] == "mlsandbox"


def test_services_select_their_deployments_pods(default_docs: list[dict[str, Any]]) -> None:
    deployments = by_kind(default_docs, "Deployment")
    for name, service in by_kind(default_docs, "Service").items():
        pod_labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items(), name
        ports = {
            p["name"] for c in deployments[name]["spec"]["template"]["spec"]["containers"] for p in c["ports"]
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_every_container_is_small_limited_and_pinned(default_docs: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, container in containers(default_docs):
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert set(resources[kind]) == {"cpu", "memory"}, name
        assert quantity(resources["requests"]["memory"]) <= quantity(resources["limits"]["memory"]), name
        assert not container["image"].endswith(":latest") and ":" in container["image"], name
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
    running = [c["resources"] for _, c in containers(default_docs, init=False)]
    requests_cpu = sum(quantity(r["requests"]["cpu"]) for r in running)
    requests_mem = sum(quantity(r["requests"]["memory"]) for r in running)
    limits_mem = sum(quantity(r["limits"]["memory"]) for r in running)
    # Fits a laptop's kind cluster (the whole sandbox within 8 GB) with room for the agent's jobs.
    assert requests_cpu <= 1.0 and requests_mem <= 1.5 * 1024 * MIB and limits_mem <= 4 * 1024 * MIB
    images = {c["image"] for _, c in containers(default_docs)}
    assert f"{values['minio']['image']['repository']}:{values['minio']['image']['tag']}" in images


def test_mlflow_runs_lean_as_on_the_local_backend(default_docs: list[dict[str, Any]]) -> None:
    pod = by_kind(default_docs, "Deployment")["mls-mlsandbox-mlflow"]["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    command = server["command"]
    assert command[:2] == ["mlflow", "server"]
    assert command[command.index("--workers") + 1] == "1"
    assert command[command.index("--backend-store-uri") + 1].startswith("sqlite:///")
    assert command[command.index("--artifacts-destination") + 1] == "s3://mlflow-artifacts"
    assert "--serve-artifacts" in command
    allowed = command[command.index("--allowed-hosts") + 1].split(",")
    assert "mls-mlsandbox-mlflow:*" in allowed and "mls-mlsandbox-mlflow.mlsandbox*" in allowed
    # Inside a sandbox the server is called by the operator's alias (found on the real-node tier: 403).
    assert {"mlflow", "mlflow:*", "mlflow.sbx-*"} <= set(allowed)
    variables = env(server)
    assert variables["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert variables["MLFLOW_DISABLE_TELEMETRY"] == "true"
    # By its name in every namespace: MLflow's presigned artifact URLs carry it to the sandboxes' pods
    # (a short name does not resolve there; found on the real-node tier).
    assert variables["MLFLOW_S3_ENDPOINT_URL"] == "http://mls-mlsandbox-minio.mlsandbox.svc:9000"
    assert variables["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "mls-mlsandbox-minio", "key": "secret-key"}
    }
    (init,) = pod["initContainers"]
    assert init["name"] == "ensure-bucket" and env(init)["BUCKET"] == "mlflow-artifacts"


def test_prefect_runs_with_sqlite_no_ui_no_analytics_and_a_kubernetes_worker(
    default_docs: list[dict[str, Any]],
) -> None:
    deployments = by_kind(default_docs, "Deployment")
    (server,) = deployments["mls-mlsandbox-prefect-server"]["spec"]["template"]["spec"]["containers"]
    assert "--no-ui" in server["command"] and "--analytics-off" in server["command"]
    variables = env(server)
    assert variables["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("sqlite+aiosqlite:///")
    assert variables["PREFECT_SERVER_ANALYTICS_ENABLED"] == variables["PREFECT_UI_ENABLED"] == "false"
    worker_pod = deployments["mls-mlsandbox-prefect-worker"]["spec"]["template"]["spec"]
    (worker,) = worker_pod["containers"]
    command = worker["command"]
    assert command[command.index("--type") + 1] == "kubernetes"
    assert command[command.index("--pool") + 1] == "mlsandbox"
    assert env(worker)["PREFECT_API_URL"] == "http://mls-mlsandbox-prefect-server.mlsandbox.svc:4200/api"
    role = by_kind(default_docs, "Role")["mls-mlsandbox-prefect-worker"]
    assert {"create", "delete"} <= set(role["rules"][0]["verbs"]) and role["rules"][0]["resources"] == [
        "jobs"
    ]
    assert worker_pod["serviceAccountName"] == "mls-mlsandbox-prefect-worker"


def test_minio_has_no_browser_or_update_checks_and_credentials_in_a_secret(
    default_docs: list[dict[str, Any]],
) -> None:
    (minio,) = by_kind(default_docs, "Deployment")["mls-mlsandbox-minio"]["spec"]["template"]["spec"][
        "containers"
    ]
    variables = env(minio)
    assert variables["MINIO_BROWSER"] == variables["MINIO_UPDATE"] == "off"
    assert variables["MINIO_ROOT_PASSWORD"] == {
        "secretKeyRef": {"name": "mls-mlsandbox-minio", "key": "secret-key"}
    }
    secret = by_kind(default_docs, "Secret")["mls-mlsandbox-minio"]
    assert len(secret["stringData"]["secret-key"]) == 32 and secret["stringData"]["access-key"] == "mlsandbox"


def test_operator_rbac_covers_what_the_operator_creates(default_docs: list[dict[str, Any]]) -> None:
    from mlsandbox.k8s_operator.model import SandboxSpec
    from mlsandbox.k8s_operator.resources import sandbox_resources

    role = by_kind(default_docs, "ClusterRole")["mls-mlsandbox-operator"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    plural = {
        "Namespace": "namespaces",
        "ResourceQuota": "resourcequotas",
        "LimitRange": "limitranges",
        "NetworkPolicy": "networkpolicies",
        "ServiceAccount": "serviceaccounts",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "Service": "services",
    }
    for manifest in sandbox_resources("a", "b", SandboxSpec(scenario="x"), "mlsandbox"):
        group = manifest["apiVersion"].rpartition("/")[0]
        for verb in ("get", "patch", "delete"):
            assert (group, plural[manifest["kind"]], verb) in granted, (manifest["kind"], verb)
    from mlsandbox.k8s_operator.resources import EPISODE_KINDS

    for api_version, kind, _ in EPISODE_KINDS:
        group = api_version.rpartition("/")[0]
        resource = kind.lower() if group == "chaos-mesh.org" else kind.lower() + "s"
        for verb in ("list", "deletecollection"):
            assert (group, resource, verb) in granted, (kind, verb)
    assert ("mlsandbox.dev", "sandboxes/status", "patch") in granted
    for verb in ("create", "delete"):  # a warm pool's Sandboxes
        assert ("mlsandbox.dev", "sandboxes", verb) in granted
    for plural in ("sandboxpools", "sandboxclaims"):
        assert ("mlsandbox.dev", f"{plural}/status", "patch") in granted
    assert ("rbac.authorization.k8s.io", "roles", "escalate") in granted
    (operator,) = by_kind(default_docs, "Deployment")["mls-mlsandbox-operator"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert operator["command"][-2:] == ["-m", "mlsandbox.k8s_operator.handlers"]
    assert env(operator)["MLSANDBOX_CONTROL_NAMESPACE"] == "mlsandbox"


def test_value_sets_change_what_they_say() -> None:
    persistent = render(*VALUE_SETS["persistence"])
    claims = by_kind(persistent, "PersistentVolumeClaim")
    assert set(claims) == {f"mls-mlsandbox-{c}" for c in ("minio", "mlflow", "prefect-server")}
    assert claims["mls-mlsandbox-minio"]["spec"]["storageClassName"] == "standard"
    assert "storageClassName" not in claims["mls-mlsandbox-prefect-server"]["spec"]

    on_node = render(*VALUE_SETS["hostpath"])
    assert "mls-mlsandbox-mlflow" not in by_kind(on_node, "PersistentVolumeClaim")
    pod = by_kind(on_node, "Deployment")["mls-mlsandbox-mlflow"]["spec"]["template"]["spec"]
    (data,) = [v for v in pod["volumes"] if v["name"] == "data"]
    assert data == {"name": "data", "hostPath": {"path": "/var/lib/mlsandbox/mlflow", "type": "Directory"}}
    (minio,) = by_kind(on_node, "Deployment")["mls-mlsandbox-minio"]["spec"]["template"]["spec"]["volumes"]
    assert minio == {"name": "data", "emptyDir": {}}

    operator_only = render(*VALUE_SETS["operator-only"])
    assert set(by_kind(operator_only, "Deployment")) == {"mls-mlsandbox-operator"}

    services = render(*VALUE_SETS["services-only"])
    assert "sandbox-operator" not in by_kind(services, "Deployment")
    # Without the operator, the only cluster-wide role is the Prefect worker's, and it only reads.
    (worker,) = by_kind(services, "ClusterRole").values()
    assert worker["metadata"]["name"] == "sandbox-prefect-worker-mlsandbox"
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in worker["rules"])
    (mlflow,) = by_kind(services, "Deployment")["sandbox-mlflow"]["spec"]["template"]["spec"]["containers"]
    assert "*.sandbox.local:*" in mlflow["command"][mlflow["command"].index("--allowed-hosts") + 1]
    assert mlflow["imagePullPolicy"] == "Never"
    assert by_kind(services, "Secret")["sandbox-minio"]["stringData"]["secret-key"] == "a-fixed-password"

    custom = render(*VALUE_SETS["custom"])
    (operator,) = by_kind(custom, "Deployment")["mls-mlsandbox-operator"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert operator["image"] == "registry.local/mls/gateway:dev"
    assert env(operator)["MLSANDBOX_CONTROL_NAMESPACE"] == "control"
