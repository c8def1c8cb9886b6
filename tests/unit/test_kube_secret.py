"""The sandbox's S3 Secret: applied once on first need, shared by the runtime's Jobs and model servers."""

from __future__ import annotations

import threading
from typing import Any

from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube.manifests import S3_SECRET_NAME
from mlsandbox.backends.kube.runtime import KubeRuntime
from mlsandbox.backends.kube.secret import S3Secret


class RecordingCluster:
    """Records what is applied and deleted (the edge this unit test fakes: no API server)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        return manifest

    def delete(self, api_version: str, kind: str, name: str, namespace: str, **_: Any) -> bool:
        with self.lock:
            self.calls.append(("delete", kind, name))
        return True


def test_applied_once_until_deleted() -> None:
    cluster = RecordingCluster()
    secret = S3Secret(cluster, namespace="sbx-a", sandbox="a", endpoints=ENDPOINTS)  # type: ignore[arg-type]
    secret.ensure()
    secret.ensure()
    assert cluster.calls == [("apply", "Secret", S3_SECRET_NAME)]
    secret.delete()
    secret.ensure()
    assert cluster.calls[1:] == [("delete", "Secret", S3_SECRET_NAME), ("apply", "Secret", S3_SECRET_NAME)]


def test_the_manifest_carries_the_keys_and_the_sandbox_label() -> None:
    cluster = RecordingCluster()
    applied: list[dict[str, Any]] = []
    cluster.apply = lambda m: applied.append(m) or m  # type: ignore[method-assign]
    S3Secret(cluster, namespace="sbx-a", sandbox="a", endpoints=ENDPOINTS).ensure()  # type: ignore[arg-type]
    (manifest,) = applied
    assert manifest["metadata"]["namespace"] == "sbx-a"
    assert ENDPOINTS.s3_secret_key in str(manifest.get("stringData") or manifest.get("data"))


def test_the_runtime_gives_its_jobs_and_its_servers_one_secret() -> None:
    """So ``down`` deleting it through the Jobs is seen by the model servers, which apply it again."""
    cluster = RecordingCluster()
    runtime = KubeRuntime(
        cluster,  # type: ignore[arg-type]
        sandbox="a",
        namespace="sbx-a",
        control_namespace="mlsandbox-system",
        endpoints=ENDPOINTS,
        workload_endpoints=ENDPOINTS,
    )
    assert runtime.jobs.secret is runtime.serving.secret
