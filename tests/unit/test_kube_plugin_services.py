"""Plug-in services on the kube backend, the parts that run without a cluster: the plug-in's package packed
from where it is installed (content-addressed, byte-code left out, its own requirements refused), the pod's
Deployment (placeholders filled for the pod, the archive unpacked by an init container, the readiness
probe asking the health URL from inside the pod, restricted security), and the lifecycle over an in-memory
cluster (a pod that exits is a ``ServiceStartError`` with its log and its Deployment deleted). The node
tier runs the example plug-in's service on real pods."""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.kube import plugin_services as P
from mlsandbox.errors import ServiceStartError, Unsupported
from mlsandbox.plugins import ServiceSpec

SPEC = ServiceSpec(
    argv=["{python}", "-m", "toyplug.svc", "--port", "{port}", "--dir", "{dir}"],
    health_url="http://127.0.0.1:{port}/health",
    env={"TOY_SANDBOX": "{sandbox}", "TOY_S3": "{s3_url}"},
    start="up",
    start_timeout_s=5,
)


def _install(root: Path, name: str, requires: list[str]) -> None:
    pkg = root / "toyplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "svc.py").write_text("SERVICE = None\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "svc.cpython-311.pyc").write_bytes(b"\0")
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 0.1"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "entry_points.txt").write_text(f"[mlsandbox.services]\n{name}-svc = toyplug.svc:SERVICE\n")


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Path]:
    _install(tmp_path, "toyplug", ["mlsandbox>=0.1", 'pytest; extra == "test"'])
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m == "toyplug" or m.startswith("toyplug.")]:
            del sys.modules[mod]


def test_the_plugins_package_is_packed_from_where_it_is_installed(installed: Path) -> None:
    archive = P.pack_plugin("toyplug-svc")
    with tarfile.open(fileobj=io.BytesIO(archive.data)) as tar:
        names = tar.getnames()
    assert sorted(names) == [
        "toyplug-0.1.dist-info/METADATA",
        "toyplug-0.1.dist-info/entry_points.txt",
        "toyplug/__init__.py",
        "toyplug/svc.py",
    ]
    assert P.pack_plugin("toyplug-svc").digest == archive.digest  # the same files, the same archive
    (installed / "toyplug" / "svc.py").write_text("SERVICE = 1\n")
    assert P.pack_plugin("toyplug-svc").digest != archive.digest
    assert archive.key == f"{archive.digest}/plugin.tar"
    with pytest.raises(ValueError, match="no installed plug-in declares the service 'nope'"):
        P.pack_plugin("nope")


def test_a_plugin_with_requirements_of_its_own_is_refused(tmp_path: Path) -> None:
    _install(tmp_path, "needy", ["mlsandbox", "redis>=5"])
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(Unsupported) as refused:
            P.pack_plugin("needy-svc")
    finally:
        sys.path.remove(str(tmp_path))
    assert refused.value.capability == "plugin_services.requirements" and "redis>=5" in refused.value.reason


def _deployment(spec: ServiceSpec) -> dict[str, Any]:
    return P.plugin_deployment(
        "toy",
        spec,
        "abc/plugin.tar",
        namespace="sbx-demo",
        sandbox="demo",
        image="mlsandbox/gateway:0.1.0",
        endpoints=ENDPOINTS,
        s3_secret=M.S3_SECRET_NAME,
    )


def test_the_pod_runs_the_rendered_command_on_the_unpacked_package() -> None:
    dep = _deployment(SPEC)
    assert dep["metadata"]["name"] == "plugin-toy"
    pod = dep["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-3:] == [P.PLUGIN_BUCKET, "abc/plugin.tar", P.PLUGIN_DIR]
    (main,) = pod["containers"]
    port, work = str(P.PLUGIN_PORT), P.WORK_DIR
    assert main["command"] == ["python", "-m", "toyplug.svc", "--port", port, "--dir", work]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["PYTHONPATH"] == P.PLUGIN_DIR and env["TOY_SANDBOX"] == "demo"
    assert env["TOY_S3"] == ENDPOINTS.s3_url
    secret_keys = [e for e in main["env"] if "valueFrom" in e]
    assert secret_keys and all(
        e["valueFrom"]["secretKeyRef"]["name"] == M.S3_SECRET_NAME for e in secret_keys
    )
    probe = main["readinessProbe"]["exec"]["command"]
    assert probe[-1] == f"http://127.0.0.1:{port}/health"
    assert main["securityContext"] == M.container_security() and pod["securityContext"] == M.pod_security()
    assert pod["automountServiceAccountToken"] is False
    assert {m["mountPath"]: m.get("readOnly", False) for m in main["volumeMounts"]}[P.PLUGIN_DIR] is True
    without = _deployment(SPEC.model_copy(update={"health_url": None}))
    assert "readinessProbe" not in without["spec"]["template"]["spec"]["containers"][0]


class FakeStore:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.puts = 0

    def create_bucket(self, bucket: str) -> None:
        pass

    def object_exists(self, bucket: str, key: str) -> bool:
        return (bucket, key) in self.objects

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        self.puts += 1
        self.objects[(bucket, key)] = data


class PodCluster:
    """Deployments as dicts, one pod per Deployment whose phase the test sets."""

    def __init__(self, pod_status: dict[str, Any]) -> None:
        self.deployments: dict[str, dict[str, Any]] = {}
        self.pod_status = pod_status
        self.api_client = None

    def apply(self, manifest: dict[str, Any]) -> None:
        self.deployments[manifest["metadata"]["name"]] = manifest

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        return self.deployments.pop(name, None) is not None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Any]:
        terms = dict(t.split("=", 1) for t in (selector or "").split(",") if t)
        objects = self.deployments.values()
        if kind == "Pod":
            objects = [
                {
                    "metadata": {"name": f"{d['metadata']['name']}-0", "labels": d["metadata"]["labels"]},
                    "status": self.pod_status,
                }
                for d in self.deployments.values()
            ]
        return [o for o in objects if all(o["metadata"]["labels"].get(k) == v for k, v in terms.items())]

    def pod_log(
        self, name: str, namespace: str, *, tail: int | None = None, container: str | None = None
    ) -> str:
        return "toy: no config\n" if container == P.COMPONENT else ""


class Runtime:
    def __init__(self, cluster: PodCluster) -> None:
        self.cluster = cluster
        self.namespace = "sbx-demo"
        self.sandbox_name = "demo"
        self.workload_endpoints = ENDPOINTS
        self.object_store = FakeStore()
        self._secret = type("Secret", (), {"ensure": lambda self: None})()


def test_a_service_that_exits_is_a_start_error_with_its_log_and_leaves_nothing(installed: Path) -> None:
    crashed = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": P.COMPONENT,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 3}},
            }
        ],
    }
    cluster = PodCluster(crashed)
    services = P.KubePluginServices(Runtime(cluster), {"toyplug-svc": SPEC}, image="gw")
    with pytest.raises(ServiceStartError, match=r"CrashLoopBackOff \(code 3\)[\s\S]*toy: no config"):
        services.ensure("toyplug-svc")
    assert cluster.deployments == {}
    out = services.start_up()
    assert "CrashLoopBackOff" in out["toyplug-svc"]  # a warning, never raised
    with pytest.raises(ValueError, match="unknown plug-in service 'other'"):
        services.ensure("other")
    with pytest.raises(ValueError, match="takes the name of a built-in service"):
        P.KubePluginServices(Runtime(cluster), {"minio": SPEC}, image="gw").spec("minio")


def test_a_ready_service_is_kept_and_its_archive_uploaded_once(installed: Path) -> None:
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cluster = PodCluster(ready)
    runtime = Runtime(cluster)
    services = P.KubePluginServices(runtime, {"toyplug-svc": SPEC}, image="gw")
    services.url = lambda name: f"http://127.0.0.1:1/{name}"  # type: ignore[method-assign]
    assert services.start_up() == {"toyplug-svc": "running"}
    assert list(cluster.deployments) == ["plugin-toyplug-svc"] and runtime.object_store.puts == 1
    services.ensure("toyplug-svc")  # healthy already: nothing applied again
    assert runtime.object_store.puts == 1 and services.healthy("toyplug-svc")
    assert [d["metadata"]["name"] for d in services.deployed()] == ["plugin-toyplug-svc"]
    assert services.cleanup() == 1 and cluster.deployments == {}


def test_the_pod_placeholders_are_the_pods() -> None:
    rendered = P.render_for_pod(SPEC, sandbox="demo", endpoints=ENDPOINTS)
    assert rendered.argv[0] == "python" and "{" not in " ".join(rendered.argv)
    bad = SPEC.model_copy(update={"argv": ["{nope}"]})
    with pytest.raises(Exception, match="unknown placeholder"):
        P.render_for_pod(bad, sandbox="demo", endpoints=ENDPOINTS)
