"""The kube backend's data-source servers without a cluster: their manifests (validated strictly), the API
source's control listener, the local end of a port-forward, and what the backend says it supports."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_kube_manifests import validate  # tests/unit is on sys.path

from mlsandbox.backends.kube import source_manifests as SM
from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.backends.kube.portforward import PortForwarder
from mlsandbox.backends.kube.sources import KubeSourceHosting, http_target
from mlsandbox.backends.protocols import ApiDataset
from mlsandbox.errors import NotRunningError
from mlsandbox.workloads.api_source import create_app
from mlsandbox.workloads.api_source_admin import create_admin_app

LABELS = {"mlsandbox.world.episode": "ep-1a2b"}


def _api() -> tuple[dict[str, Any], dict[str, Any]]:
    return SM.api_source_manifests(
        namespace="sbx", sandbox="s1", episode_id="ep-1a2b", episode_labels=LABELS, image="gw:1"
    )


def _pg() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return SM.postgres_manifests(
        namespace="sbx",
        sandbox="s1",
        episode_id="ep-1a2b",
        episode_labels=LABELS,
        image="pg:15",
        password="pw-0f9e8d",
        cpu_request=0.25,
    )


def test_source_manifests_validate_strictly() -> None:
    report = validate([*_api(), *_pg()])
    assert not report.failures, report.describe()


def test_the_api_source_pod_serves_publicly_and_keeps_its_control_listener_off_the_service() -> None:
    deployment, service = _api()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "gw:1"
    assert container["command"] == ["python", "-m", "mlsandbox.workloads.api_source"]
    args = container["args"]
    assert args[args.index("--admin-port") + 1] == str(SM.API_ADMIN_PORT)
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert [p["containerPort"] for p in container["ports"]] == [SM.API_PORT]
    assert [p["port"] for p in service["spec"]["ports"]] == [SM.API_PORT]
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The episode's label on every object and pod: the warm reset deletes them by it.
    for obj in (deployment, service, deployment["spec"]["template"]):
        assert obj["metadata"]["labels"]["mlsandbox.world.episode"] == "ep-1a2b"
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert deployment["metadata"]["name"] == SM.object_name("api-source", "ep-1a2b")


def test_the_postgres_pod_reads_its_admin_password_from_a_secret() -> None:
    secret, deployment, service = _pg()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POSTGRES_USER"]["value"] == SM.POSTGRES_ADMIN
    ref = env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and secret["stringData"][ref["key"]] == "pw-0f9e8d"
    assert "pw-0f9e8d" not in json.dumps(deployment)
    assert container["resources"]["requests"]["cpu"] == "125m"
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert service["spec"]["ports"][0]["port"] == SM.POSTGRES_PORT == 5432


def test_two_episodes_never_share_a_server_name() -> None:
    a, b = SM.object_name("postgres", "ep-1"), SM.object_name("postgres", "ep-2")
    assert a != b and a.startswith("postgres-") and len(a) <= 63
    with pytest.raises(ValueError):
        SM.object_name("redis", "ep-1")


def test_the_control_listener_writes_what_the_public_api_serves(tmp_path: Path) -> None:
    import pandas as pd

    fault = tmp_path / "fault.json"
    admin = TestClient(create_admin_app(tmp_path, fault))
    public = TestClient(create_app(tmp_path, str(fault)))
    buf = pd.DataFrame({"x": [1, 2, 3]}).to_parquet(index=False)
    assert admin.put("/datasets/orders/data.parquet", content=buf).status_code == 204
    meta = {"token": "t0k", "rate_limit_per_s": 100, "burst": 100, "max_page_size": 10}
    assert admin.put("/datasets/orders/meta.json", content=json.dumps(meta)).status_code == 204
    page = public.get("/v1/datasets/orders/records?page_size=10", headers={"Authorization": "Bearer t0k"})
    assert page.status_code == 200 and page.json()["total_rows"] == 3
    assert public.get("/v1/datasets/orders/records").status_code == 401
    # The fault hook, through the control listener.
    put = admin.put("/fault", content=json.dumps({"error_rate": 1.0, "status": 502, "seed": 1}))
    assert put.status_code == 204
    assert public.get("/health").status_code == 502
    assert admin.delete("/fault").status_code == 204
    assert public.get("/health").status_code == 200
    # Bad input is refused; a deleted dataset is gone.
    assert admin.put("/datasets/..%2Fx/meta.json", content=b"{}").status_code in (400, 404)
    assert admin.put("/datasets/orders/evil.sh", content=b"").status_code == 400
    assert admin.put("/datasets/orders/meta.json", content=b"[1]").status_code == 400
    assert admin.put("/fault", content=json.dumps({"status": 200})).status_code == 400
    assert admin.delete("/datasets/orders").status_code == 204
    assert (
        public.get("/v1/datasets/orders/records", headers={"Authorization": "Bearer t0k"}).status_code == 404
    )


def test_a_forwarded_connection_reaches_the_pod_stream_and_closes_without_a_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local end of the port-forward: bytes go both ways through the stream the API server opens;
    with no pod to forward to, the client's connection is closed at once."""
    pods: list[str | None] = ["pod-a"]
    made: list[str] = []

    def stream(self: PortForwarder) -> Any:
        pod = self.find_pod()
        if pod is None:
            return None
        made.append(pod)
        ours, theirs = socket.socketpair()

        def echo() -> None:
            while data := theirs.recv(1024):
                theirs.sendall(data.upper())
            theirs.close()

        threading.Thread(target=echo, daemon=True).start()
        return _Wrapped(ours)

    monkeypatch.setattr(PortForwarder, "_stream", stream)
    forward = PortForwarder(object(), "sbx", lambda: pods[0], 5432)
    try:
        with socket.create_connection(forward.address, timeout=5) as conn:
            conn.sendall(b"hello")
            assert conn.recv(16) == b"HELLO"
        assert made == ["pod-a"]
        pods[0] = None
        with socket.create_connection(forward.address, timeout=5) as conn:
            conn.settimeout(5)
            assert conn.recv(16) == b""
    finally:
        forward.close()
    with pytest.raises(OSError):
        socket.create_connection(forward.address, timeout=1).close()


class _Wrapped:
    """What the client library's port-forward hands out: a socket behind ``_socket``."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock

    def close(self) -> None:
        self._socket.close()


def test_without_a_cluster_the_sources_say_so_and_close_cleanly() -> None:
    sources = KubeSourceHosting().open("ep-1")
    dataset = ApiDataset(
        dataset_id="d", name="orders", token="t", rate_limit_per_s=1, burst=1, max_page_size=10
    )
    with pytest.raises(NotRunningError):
        sources.publish(dataset, b"")
    assert sources.address("postgres") == "(not started)"
    assert http_target("orders", "ep-1") is None
    sources.close()
    sources.close()


def test_kube_support_no_longer_refuses_the_api_and_postgres_sources() -> None:
    support = KubeBackend("t1", api_client=object()).support()
    assert support.reason("sources.api") is None and support.reason("sources.postgres") is None
    assert support.reason("sources.lake") is None and support.reason("sources") is None
    assert support.reason("environments.build") is None and support.reason("flows.environment")
