"""What each backend's fault control refuses, and the catalog that says so: ``mlsandbox faults catalog
--backend X`` (asked without starting anything), and the kube control's typed refusals (with an
in-memory stand-in for the cluster: the control-plane tier runs them against a real API server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ENDPOINTS
from typer.testing import CliRunner

from mlsandbox.backends.kube.faults import chaos_mesh as C
from mlsandbox.backends.kube.faults import control as K
from mlsandbox.backends.protocols import JobStatus
from mlsandbox.cli.main import app
from mlsandbox.errors import Unsupported
from mlsandbox.scenario.perturbations import FAULT_TYPES


def _catalog(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["faults", "catalog", *args], env={"COLUMNS": "240", **(env or {})})


@pytest.fixture()
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No kubeconfig and no in-cluster configuration: no cluster is reachable."""
    env = {"KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return env


def test_catalog_of_kube_without_a_cluster_marks_what_needs_chaos_mesh(no_cluster: dict[str, str]) -> None:
    out = _catalog("--backend", "kube", "--json", env=no_cluster)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["backend"] == "kube"
    rows = {r["type"]: r for r in data["faults"]}
    assert set(rows) == set(FAULT_TYPES)
    for kind in K.NEEDS_CHAOS_MESH:
        assert rows[kind]["available"] == "no", kind
        assert rows[kind]["reasons"] == [K.UNKNOWN_CHAOS_MESH]
    assert rows["reset_peer"]["reasons"] == [K.NO_RESET_PEER]
    for kind in (
        "kill_service",
        "http_errors",
        "restart_service",
        "disk_full",
        "memory_limit",
        "pool_shrink",
    ):
        assert rows[kind]["available"] == "yes", rows[kind]

    table = _catalog("--backend", "kube", env=no_cluster)
    assert table.exit_code == 0, table.output
    assert "fault catalog (kube backend)" in table.output
    assert "latency unavailable on kube: needs Chaos Mesh in the cluster" in table.output
    assert "reset_peer unavailable on kube: Chaos Mesh has no TCP-reset action" in table.output


def test_catalog_of_local_follows_what_this_machine_has() -> None:
    from mlsandbox.backends.local.faults.control import unavailable_here

    out = _catalog("--json")
    assert out.exit_code == 0, out.output
    rows = {r["type"]: r for r in json.loads(out.output)["faults"]}
    missing = unavailable_here()
    for kind, row in rows.items():
        if kind in missing:
            assert row["available"] == "no" and row["reasons"] == [missing[kind]]
        elif kind not in ("late_batch", "missing_batch", "schema_change", "database_down"):
            assert row["available"] in ("yes", "partly"), row


def test_catalog_refuses_an_unknown_backend() -> None:
    out = _catalog("--backend", "nomad")
    assert out.exit_code != 0
    assert "nomad" in out.output and "local" in out.output and "kube" in out.output


# ------------------------------------------------------------------------------------ kube refusals


class FakeCluster:
    """The calls the kube fault control makes, on objects in memory."""

    def __init__(self, chaos_mesh: bool) -> None:
        self.chaos_mesh = chaos_mesh
        self.objects: dict[tuple[str, str, str | None], dict[str, Any]] = {}

    def version(self) -> str:
        return "v1.34.0"

    def serves(self, api_version: str, kind: str) -> bool:
        return self.chaos_mesh and api_version == C.API_VERSION

    def apply(self, manifest: dict[str, Any]) -> None:
        meta = manifest["metadata"]
        self.objects[(manifest["kind"], meta["name"], meta.get("namespace"))] = manifest

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.objects.get((kind, name, namespace))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, **kw: Any) -> bool:
        return self.objects.pop((kind, name, namespace), None) is not None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str = ""
    ) -> list[Any]:
        if kind == "Deployment":
            component = selector.split("=", 1)[1]
            labels = {C.COMPONENT_LABEL: component}
            return [{"metadata": {"name": f"mls-{component}", "labels": labels}, "spec": {"replicas": 1}}]
        return [o for (k, _, ns), o in self.objects.items() if k == kind and ns == namespace]


class FakeJobs:
    def get(self, job_id: str) -> JobStatus:
        if job_id == "gone":
            raise KeyError(job_id)
        return JobStatus(job_id=job_id, state="queued" if job_id == "waiting" else "running")

    def pod(self, job_id: str) -> dict[str, Any]:
        return {"metadata": {"labels": {C.COMPONENT_LABEL: "trainer"}}}


def _control(chaos_mesh: bool) -> tuple[K.KubeFaultControl, FakeCluster]:
    cluster = FakeCluster(chaos_mesh)
    control = K.KubeFaultControl(
        cluster,  # type: ignore[arg-type]
        sandbox="demo",
        namespace="sbx-ctl-demo",
        control_namespace="ctl",
        endpoints=ENDPOINTS,
        jobs=FakeJobs(),  # type: ignore[arg-type]
    )
    return control, cluster


def _refused(fn: Any, capability: str) -> Unsupported:
    with pytest.raises(Unsupported) as info:
        fn()
    assert info.value.capability == capability and info.value.backend == "kube"
    return info.value


def test_kube_without_chaos_mesh_refuses_what_needs_it_with_a_typed_error() -> None:
    control, cluster = _control(chaos_mesh=False)
    assert set(control.unavailable()) == {*K.NEEDS_CHAOS_MESH, "reset_peer"}
    assert control.unavailable()["latency"] == K.NO_CHAOS_MESH
    assert "Chaos Mesh CRDs" in _refused(lambda: control.network, "faults.network").reason
    _refused(lambda: control.services.freeze("minio"), "fault:freeze_service")
    _refused(lambda: control.start_contention("k", "service:mlflow", 2), "fault:cpu_contention")
    control.clear_http_fault("api", episode_id="e")  # nothing was set: nothing to clear, no error
    assert not control.http_fault_active("api", episode_id="e")
    assert cluster.objects == {} and control.refresh_contention("k", ["job-1"]) == []
    assert K.unavailable_on(cluster)["cpu_contention"] == K.NO_CHAOS_MESH  # type: ignore[arg-type]
    assert K.unavailable_on(None)["cpu_contention"] == K.UNKNOWN_CHAOS_MESH


def test_kube_with_chaos_mesh_refuses_reset_peer_and_makes_contention_stress_chaos() -> None:
    control, cluster = _control(chaos_mesh=True)
    assert control.unavailable() == {"reset_peer": K.NO_RESET_PEER}
    _refused(lambda: control.network.add_toxic("minio", "rst", "reset_peer", {}), "fault:reset_peer")

    control.start_contention("svc", "service:mlflow", 3)
    control.start_contention("svc", "service:mlflow", 3)  # idempotent
    ((kind, _, ns), stress), *more = cluster.objects.items()
    assert not more and (kind, ns) == ("StressChaos", "ctl")
    assert stress["spec"]["stressors"] == {"cpu": {"workers": 3, "load": 100}}
    assert stress["spec"]["selector"]["labelSelectors"] == {C.COMPONENT_LABEL: "mlflow"}
    with pytest.raises(ValueError, match="service:NAME or jobs"):
        control.start_contention("bad", "endpoint:minio", 1)

    control.start_contention("jobs", "jobs", 2)
    assert control.refresh_contention("jobs", ["job-1", "waiting", "gone", "job-1"]) == ["job-1"]
    assert control.refresh_contention("jobs", ["job-1"]) == []  # caught once
    job_stress = [o for (k, _, ns), o in cluster.objects.items() if ns == "sbx-ctl-demo"]
    assert [o["spec"]["selector"]["labelSelectors"] for o in job_stress] == [
        {C.COMPONENT_LABEL: "trainer", "mlsandbox.dev/job-id": "job-1"}
    ]
    control.stop_contention("jobs")
    control.stop_contention("svc")
    control.stop_contention("svc")  # idempotent
    assert cluster.objects == {}
