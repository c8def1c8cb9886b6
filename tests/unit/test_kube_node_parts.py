"""The real node's pieces that need no node: image keys and references, the chart's values for the node's
images, the manifests the node applies (strictly valid), and precise errors when something is missing."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from mlsandbox.backends.kube import controlplane, node, node_images, node_manifests, schemas
from mlsandbox.errors import BackendError, MissingToolError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_every_image_has_a_dockerfile_and_a_stable_key_over_its_inputs() -> None:
    images = node_images.images()
    assert [i.name for i in images][:2] == ["base", "pause"]  # what the others build on / the pod sandbox
    for image in images:
        assert (schemas.REPO_ROOT / image.dockerfile).is_file()
    pause = node_images.by_name(["pause"])[0]
    assert node_images.key(pause) == node_images.key(pause)
    assert node_images.key(dataclasses.replace(pause, build_args={"X": "1"})) != node_images.key(pause)
    assert pause.cri_ref == "docker.io/mlsandbox/pause:1"
    with pytest.raises(ValueError, match=r"unknown image.*nope"):
        node_images.by_name(["nope"])


def test_the_mlflow_and_prefect_images_take_the_versions_pyproject_pins() -> None:
    (mlflow,) = node_images.by_name(["mlflow"])
    (prefect,) = node_images.by_name(["prefect"])
    assert mlflow.ref == "mlsandbox/mlflow:3.17.2"
    assert prefect.build_args == {
        "PREFECT_VERSION": "3.9.1",
        "PREFECT_KUBERNETES_VERSION": "0.8.0",
        "UV_VERSION": "0.13.8",
    }
    # The Dockerfiles' defaults say the same (a plain `docker build` gets the pinned versions too).
    text = (schemas.REPO_ROOT / "workloads" / "Dockerfile.prefect").read_text()
    assert "ARG PREFECT_VERSION=3.9.1" in text and "ARG PREFECT_KUBERNETES_VERSION=0.8.0" in text


def test_the_chart_renders_with_the_node_images_and_never_pulls() -> None:
    names = ("mlflow", "prefect", "gateway", "trainer")  # minio's tag needs the built binary
    out = subprocess.run(
        [str(schemas.tool("helm")), "template", "mlsandbox", str(schemas.CHART_DIR), "-n", "mlsandbox",
         "-f", str(schemas.CHART_DIR / "ci" / "node-values.yaml"), *node_images.chart_values(names)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    containers = [
        c
        for d in docs
        if d["kind"] == "Deployment"
        for c in [
            *d["spec"]["template"]["spec"].get("initContainers", []),
            *d["spec"]["template"]["spec"]["containers"],
        ]
    ]
    images = {c["name"]: c["image"] for c in containers}
    assert images["mlflow"] == "mlsandbox/mlflow:3.17.2"
    assert images["prefect-server"] == images["prefect-worker"] == "mlsandbox/prefect:3.9.1"
    assert images["operator"] == "mlsandbox/gateway:0.1.0"
    assert {c["imagePullPolicy"] for c in containers} == {"Never"}


def test_the_manifests_the_node_applies_are_valid() -> None:
    docs = [*node.dns_manifests("mlsandbox/coredns:v1.15.0"), *node_manifests.kube_router_rbac()]
    report = schemas.kubeconform(docs)
    assert not report.failures, report.describe()
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["clusterIP"] == node.CLUSTER_DNS
    # Sandboxes' NetworkPolicies admit DNS to pods labelled k8s-app=kube-dns on port 53 of the pod.
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == {"k8s-app": "kube-dns"}
    assert {p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]} == {53}


def test_a_missing_piece_is_named_with_what_provides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path))
    if os.geteuid() != 0:
        with pytest.raises(BackendError, match="needs root"):
            node.check_prerequisites()
        return
    with pytest.raises(
        MissingToolError, match=r"`kubelet` is not installed .*install-kube-tools\.sh --with-node"
    ):
        node.check_prerequisites()


def test_a_node_refuses_a_control_plane_that_runs_kwok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node, "check_prerequisites", lambda: None)
    cp = controlplane.ControlPlane(
        root=tmp_path,
        server="https://127.0.0.1:1",
        token="t",
        kubeconfig=tmp_path / "k",
        audit_log=tmp_path / "a",
    )
    with pytest.raises(BackendError, match=r"runs kwok: start it with controlplane\.start\(kwok=False\)"):
        node.start(cp)


def test_client_certificates_carry_the_user_and_groups(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    controlplane._write_serving_certificate(
        tmp_path, ips=("192.0.2.7", controlplane.SERVICE_IP), dns_names=("kubernetes",)
    )
    crt, key = controlplane.issue_certificate(
        tmp_path, "k", "system:node:n1", organizations=("system:nodes",), client=True
    )
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert (
        oct(key.stat().st_mode & 0o777) == "0o600"
        and oct((tmp_path / "ca.key").stat().st_mode & 0o777) == "0o600"
    )
    serving = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "192.0.2.7",
        "10.96.0.1",
    }
    # Both verify against the CA.
    ca = x509.load_pem_x509_certificate((tmp_path / controlplane.CA_FILE).read_bytes())
    cert.verify_directly_issued_by(ca)
    serving.verify_directly_issued_by(ca)
