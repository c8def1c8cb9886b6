"""``http_errors`` on the kube backend: the fault hook of the episode's HTTP services (the API sources, the
feature service and the model deployments' replicas), written through a control listener on the pod's
loopback address. The pieces that
run without a cluster: the control routes the services serve, the feature service's manifests, the hook's
truthfulness, the fault control's dispatch and refusals (the node tier runs them on real pods)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from test_faults_backends import _control  # tests/unit is on sys.path
from test_kube_serving_episode import EPISODE, MemoryCluster, serving
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import serving as KS
from mlsandbox.backends.kube.control_listener import (
    ControlUnreachable,
    PodFaultHook,
    http_target,
    http_targets,
    register_http_target,
    unregister_http_target,
)
from mlsandbox.backends.kube.faults import control as K
from mlsandbox.backends.protocols import HttpFault, NoSuchTarget
from mlsandbox.faultkinds import Mechanism, refused_on
from mlsandbox.faultkinds.services import HTTP_ERRORS
from mlsandbox.workloads.fault_control import create_fault_control_app
from mlsandbox.workloads.feature_service import FeatureStore, create_app

FAULT = HttpFault(error_rate=1.0, status=503, delay_ms=0, seed=3)


def test_http_errors_is_a_fault_hook_mechanism_on_kube_not_a_refusal() -> None:
    mechanism = HTTP_ERRORS.backends["kube"]
    assert isinstance(mechanism, Mechanism) and mechanism.via == "fault-hook"
    assert "control listener" in mechanism.detail and "model deployments are refused" in mechanism.detail
    assert "http_errors" not in refused_on("kube") and "http_errors" not in K.UNAVAILABLE


def test_the_feature_service_answers_the_fault_its_control_routes_write(tmp_path: Path) -> None:
    fault_file = tmp_path / "fault" / "feature-service.json"
    frame = pd.DataFrame({"entity_id": ["a", "b"], "x": [1.0, 2.0]})
    control = TestClient(create_fault_control_app(fault_file))
    with TestClient(
        create_app(lambda: FeatureStore(frame, "entity_id"), fault_file=str(fault_file))
    ) as public:
        assert public.post("/features", json={"ids": ["a"]}).json()["rows"] == [[1.0]]
        assert control.get("/fault").json() == {"active": False, "fault": {}}
        body = {"error_rate": 1.0, "status": 503, "delay_ms": 0, "seed": 1}
        assert control.put("/fault", content=json.dumps(body)).status_code == 204
        assert control.get("/fault").json()["active"] is True
        assert public.post("/features", json={"ids": ["a"]}).status_code == 503
        assert public.get("/health").status_code == 503  # a sick server answers its health check badly
        assert public.get("/metrics").status_code == 200  # scrapes are exempt
        assert control.delete("/fault").status_code == 204
        assert control.get("/fault").json()["active"] is False
        assert public.post("/features", json={"ids": ["b"]}).json()["rows"] == [[2.0]]
        assert control.put("/fault", content=json.dumps({"status": 404})).status_code == 400
        assert control.get("/health").json() == {"status": "ok"}


def test_the_feature_service_pod_keeps_its_control_listener_off_the_service() -> None:
    deployment, service = KS.feature_service_manifests(
        namespace="sbx-s1",
        sandbox="s1",
        image="mlsandbox/model-server:0.1.0",
        endpoints=ENDPOINTS,
        bucket="b",
        key="online/features.parquet",
        id_column="entity_id",
        labels=EPISODE,
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--admin-port") + 1] == str(KS.FEATURE_ADMIN_PORT)
    assert command[command.index("--fault-file") + 1] == KS.FEATURE_FAULT_FILE
    assert KS.FEATURE_FAULT_FILE.startswith("/tmp/")  # the pod's emptyDir: a new pod starts without it
    assert [p["containerPort"] for p in container["ports"]] == [KS.FEATURE_PORT]
    assert [p["port"] for p in service["spec"]["ports"]] == [KS.FEATURE_PORT]


class FakeListener:
    """A control listener in memory (``reachable`` False: the pod is gone)."""

    def __init__(self) -> None:
        self.fault: dict[str, Any] = {}
        self.reachable = True
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    def request(self, method: str, path: str, body: bytes = b"", *, timeout_s: float = 30.0) -> Any:
        self.calls.append((method, path))
        if not self.reachable:
            raise ControlUnreachable("the feature service's control listener: ConnectError")
        if method == "PUT":
            self.fault = json.loads(body)
        elif method == "DELETE":
            self.fault = {}
        active = bool(self.fault)
        return type("Answer", (), {"json": lambda _: {"active": active, "fault": self.fault}})()

    def close(self) -> None:
        self.closed = True


def test_the_pod_fault_hook_tells_the_truth() -> None:
    listener = FakeListener()
    hook = PodFaultHook(listener)  # type: ignore[arg-type]
    assert not hook.active() and listener.calls == []  # nothing set: nothing asked
    hook.set(FAULT)
    assert listener.fault == {"error_rate": 1.0, "status": 503, "delay_ms": 0, "seed": 3}
    assert hook.active()
    listener.fault = {}  # a new pod (a restart) starts without the fault
    assert not hook.active()
    hook.set(FAULT)
    listener.reachable = False  # no pod runs: nothing answers with the fault
    assert not hook.active()
    hook.clear()  # no error when the pod is gone
    listener.reachable = True
    listener.fault = {"error_rate": 1.0}
    assert not hook.active()  # cleared here: not ours any more


class FakeTarget:
    def __init__(self) -> None:
        self.fault: HttpFault | None = None

    def set_http_fault(self, fault: HttpFault) -> None:
        self.fault = fault

    def clear_http_fault(self) -> None:
        self.fault = None

    def http_fault_active(self) -> bool:
        return self.fault is not None


def test_the_fault_control_reaches_the_registered_service_and_refuses_the_rest() -> None:
    control, cluster = _control(chaos_mesh=False)
    target = FakeTarget()
    register_http_target("ep-9", "feature-service", target)
    try:
        assert http_targets("ep-9") == ["feature-service"]
        control.set_http_fault("feature-service", FAULT, episode_id="ep-9")
        assert target.fault == FAULT and control.http_fault_active("feature-service", episode_id="ep-9")
        assert not control.http_fault_active("feature-service", episode_id="ep-other")
        control.clear_http_fault("feature-service", episode_id="ep-9")
        assert target.fault is None and not control.http_fault_active("feature-service", episode_id="ep-9")

        with pytest.raises(NoSuchTarget, match=r"no HTTP service 'orders_api'.*running: feature-service"):
            control.set_http_fault("orders_api", FAULT, episode_id="ep-9")
        # A model deployment of another episode (or none at all) is no target of this one.
        cluster.apply(
            {
                "kind": "Deployment",
                "metadata": {
                    "name": KS.server_name("churn_v2"),
                    "namespace": "sbx-ctl-demo",
                    "labels": {"app.kubernetes.io/component": KS.COMPONENT},
                },
            }
        )
        with pytest.raises(NoSuchTarget, match="'churn_v2'"):
            control.set_http_fault("churn_v2", FAULT, episode_id="ep-9")
    finally:
        unregister_http_target("ep-9", "feature-service", target)
    assert http_target("feature-service", "ep-9") is None
    unregister_http_target("ep-9", "feature-service", target)  # idempotent


def test_the_episodes_feature_service_is_an_http_target_until_the_episode_closes() -> None:
    cluster = MemoryCluster()
    episode = serving(cluster, rollout_timeout_s=5.0).open("ep-1", EPISODE)
    assert http_target("feature-service", "ep-1") is None
    episode.start_feature_service("b", "online/features.parquet", "entity_id")
    assert http_target("feature-service", "ep-1") is episode
    (pod,) = episode._feature_pods()
    assert episode._running_feature_pod() == pod["metadata"]["name"]
    listener = FakeListener()
    episode._feature_hook = PodFaultHook(listener)  # type: ignore[arg-type]
    episode.set_http_fault(FAULT)
    assert episode.http_fault_active()
    episode.close()
    assert http_target("feature-service", "ep-1") is None and listener.closed


def test_a_closed_control_listener_opens_no_new_port_forward() -> None:
    from mlsandbox.backends.kube.control_listener import ControlListener

    listener = ControlListener(object(), "sbx", lambda: None, 8082, "the feature service")
    listener.close()
    with pytest.raises(ControlUnreachable, match="closed"):
        listener.request("GET", "/fault")
    assert listener._forward is None
    PodFaultHook(listener).clear()  # no error


def test_the_control_listener_goes_to_a_running_pod_ready_or_not() -> None:
    from mlsandbox.backends.kube.control_listener import running_pod

    def pod(name: str, phase: str, deleting: bool = False, ready: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, **({"deletionTimestamp": "now"} if deleting else {})}
        conditions = [{"type": "Ready", "status": str(ready)}]
        return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}

    assert running_pod([]) is None
    assert running_pod([pod("new", "Pending"), pod("old", "Running", deleting=True)]) is None
    assert running_pod([pod("old", "Running", deleting=True), pod("sick", "Running")]) == "sick"


def test_a_model_deployment_is_an_http_target_whose_fault_every_replica_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deployment's fault: its Secret (what a replica started later reads at start), and each running
    replica's hook; a scale-out's new replica is reached at the next write; clear and undeploy remove it."""
    from test_kube_serving_episode import spec

    from mlsandbox.backends.kube import deployments as KD

    listeners: dict[str, FakeListener] = {}

    def fake_listener(api: Any, namespace: str, find_pod: Any, port: int, what: str) -> FakeListener:
        assert port == KS.SERVER_ADMIN_PORT and namespace == "sbx-s1"
        listeners[find_pod()] = listener = FakeListener()
        return listener

    monkeypatch.setattr(KD, "ControlListener", fake_listener)
    cluster = MemoryCluster()
    cluster.api_client = None  # type: ignore[attr-defined]  # the fake listeners need none
    episode = serving(cluster, rollout_timeout_s=5.0).open("ep-7", EPISODE)
    episode.deploy(spec(replicas=2))
    target = http_target("churn", "ep-7")
    assert isinstance(target, KD.DeploymentFault) and "churn" in http_targets("ep-7")
    assert not target.http_fault_active()

    target.set_http_fault(FAULT)
    secret = cluster.get("v1", "Secret", KS.fault_secret_name("churn"))
    assert secret is not None and secret["metadata"]["labels"][KS.DEPLOYMENT_LABEL] == KS.server_name("churn")
    assert json.loads(secret["stringData"][KS.SERVER_FAULT_KEY]) == {
        "error_rate": 1.0,
        "status": 503,
        "delay_ms": 0,
        "seed": 3,
    }
    assert len(listeners) == 2 and all(lst.fault["error_rate"] == 1.0 for lst in listeners.values())
    assert target.http_fault_active()
    assert set(target.replicas_faulted().values()) == {True}

    # A replica that starts during the fault mounts the Secret (optional: none, no fault) and copies it.
    dep = cluster.get("apps/v1", "Deployment", KS.server_name("churn"))
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "fault"]
    assert volume["secret"] == {"secretName": KS.fault_secret_name("churn"), "optional": True}
    args = pod["containers"][0]["command"]
    assert args[args.index("--fault-from") + 1] == f"{KS.SERVER_FAULT_MOUNT}/{KS.SERVER_FAULT_KEY}"
    assert args[args.index("--admin-port") + 1] == str(KS.SERVER_ADMIN_PORT)

    episode.scale("churn", 3)
    target.set_http_fault(FAULT)  # written again: the third replica's hook too
    assert len(listeners) == 3 and all(lst.fault for lst in listeners.values())

    target.clear_http_fault()
    assert cluster.get("v1", "Secret", KS.fault_secret_name("churn")) is None
    assert not target.http_fault_active() and not any(lst.fault for lst in listeners.values())

    # A replica that does not answer its listener: the write says so (the Secret still holds the fault).
    next(iter(listeners.values())).reachable = False
    with pytest.raises(KD.ServingError, match="control listener"):
        target.set_http_fault(FAULT)
    assert target.http_fault_active()

    episode.undeploy("churn")
    assert http_target("churn", "ep-7") is None
    assert cluster.get("v1", "Secret", KS.fault_secret_name("churn")) is None
    assert all(lst.closed for lst in listeners.values())
    episode.close()


def test_the_episodes_close_takes_the_deployments_faults_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from test_kube_serving_episode import spec

    from mlsandbox.backends.kube import deployments as KD

    made: list[FakeListener] = []

    def fake_listener(*_: Any) -> FakeListener:
        made.append(FakeListener())
        return made[-1]

    monkeypatch.setattr(KD, "ControlListener", fake_listener)
    cluster = MemoryCluster()
    cluster.api_client = None  # type: ignore[attr-defined]
    episode = serving(cluster, rollout_timeout_s=5.0).open("ep-8", EPISODE)
    episode.deploy(spec(replicas=1))
    http_target("churn", "ep-8").set_http_fault(FAULT)  # type: ignore[union-attr]
    episode.close()
    assert http_target("churn", "ep-8") is None and made and all(lst.closed for lst in made)
    assert cluster.list("v1", "Secret", "sbx-s1", f"{KS.DEPLOYMENT_LABEL}={KS.server_name('churn')}") == []


def test_a_replica_starts_with_the_fault_its_deployment_holds(tmp_path: Path) -> None:
    from mlsandbox.workloads.model_server import parse_args, start_fault

    mounted, hook = tmp_path / "mounted" / "fault.json", tmp_path / "tmp" / "fault.json"
    assert not start_fault(mounted, hook) and not hook.exists()  # no Secret: the volume is empty
    mounted.parent.mkdir()
    mounted.write_text("")
    assert not start_fault(mounted, hook) and not hook.exists()
    mounted.write_text(json.dumps({"error_rate": 2.0}))  # not a fault the hook can hold
    assert not start_fault(mounted, hook) and not hook.exists()
    mounted.write_text(json.dumps({"error_rate": 0.5, "status": 502, "delay_ms": 10, "seed": 4}))
    assert start_fault(mounted, hook)
    assert json.loads(hook.read_text()) == {"error_rate": 0.5, "status": 502, "delay_ms": 10, "seed": 4}
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--fault-from", str(mounted)])  # needs --fault-file
