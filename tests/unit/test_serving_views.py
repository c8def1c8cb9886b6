"""The agent's view of a deployment: the protocol's ``DeploymentView``, the same keys on local and kube
(nothing backend-specific), how a local replica ended, and the rollout state; the shared refusals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import serving as KS
from mlsandbox.backends.local.serving.deployments import Deployment, Placement
from mlsandbox.backends.protocols.serving import (
    DeploymentView,
    Limits,
    ReplicaView,
    ServingError,
    check_set_version,
    not_found,
)


@dataclass
class _Replica:
    """What a local deployment reads of a replica process."""

    up: bool
    end: dict[str, Any] | None = None
    name: str = "r"
    version: str | None = None

    def alive(self) -> bool:
        return self.up

    def termination(self) -> dict[str, Any] | None:
        return self.end


def test_a_local_view_shows_limits_environment_and_how_a_replica_ended() -> None:
    oom = {"exit_code": 137, "reason": "OOMKilled", "message": "killed by the kernel: out of memory"}
    placement = Placement("cpu-tight", 0.5, 640, 0.02, "sklearn-15", "/envs/x/bin/python")
    dep = Deployment("churn", "churn", "ep-churn", "1", placement, [_Replica(True), _Replica(False, oom)])  # type: ignore[list-item]
    view = dep.view().model_dump(mode="json")
    assert view["limits"] == {"cpus": 0.5, "memory_mb": 640}
    assert view["environment"] == "sklearn-15" and view["machine"] == "cpu-tight"
    assert view["replicas"] == 2 and view["replicas_up"] == 1
    assert view["rollout"] == "progressing"  # a replica died and is not replaced yet
    none = {"exit_code": None, "reason": None, "message": None}
    assert view["replica_states"] == [
        {"replica": 0, "version": "1", "state": "running", **none},
        {"replica": 1, "version": "1", "state": "exited", **oom},
    ]
    assert dep.cpus == 0.5 and dep.credits_per_second == 0.02
    whole = Deployment("churn", "churn", "ep-churn", "1", placement, [_Replica(True)])  # type: ignore[list-item]
    assert whole.view().rollout == "complete"
    whole.changing = 1  # a scale or rollout in progress
    assert whole.view().rollout == "progressing"


def test_local_and_kube_views_have_the_same_keys_and_values() -> None:
    """The agent's ``get_deployment`` observation has one shape: the protocol's view, nothing more."""
    placement = Placement("cpu-small", 1.0, 2048, 0.05)
    local = Deployment("churn", "churn", "ep-churn", "1", placement, [_Replica(True)], ["1"]).view()  # type: ignore[list-item]
    spec = KS.ModelServerSpec(
        deployment="churn", model="churn", registry_name="ep-churn", version="1", replicas=1,
        machine="cpu-small", cpus=1.0, memory_mb=2048,
    )  # fmt: skip
    manifest = KS.model_server_deployment(
        spec, namespace="ns", sandbox="s", image="i", endpoints=ENDPOINTS, history=["1"]
    )
    manifest["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    pod = {
        "metadata": {"name": "p", "labels": {KS.VERSION_LABEL: "1"}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    kube = KS.describe(manifest, [pod])
    for view in (local, kube):
        assert type(view) is DeploymentView
        dumped = view.model_dump(mode="json")
        assert list(dumped) == list(DeploymentView.model_fields)
        assert [list(r) for r in dumped["replica_states"]] == [list(ReplicaView.model_fields)]
    assert local.model_dump() == kube.model_dump()


def test_set_version_refusals_and_not_found_are_the_same_everywhere() -> None:
    view = DeploymentView(
        deployment="churn",
        model="churn",
        version="2",
        machine="cpu-small",
        limits=Limits(cpus=1.0, memory_mb=2048),
        environment="default",
        replicas=1,
        replicas_up=1,
        rollout="complete",
        replica_states=[],
        version_history=["1", "2"],
    )
    check_set_version(view, "1")
    for version, match in (("7", "never served version 7 .served: 1, 2."), ("2", "already serves version 2")):
        with pytest.raises(ServingError, match=match) as refused:
            check_set_version(view, version)
        assert refused.value.code == "conflict"
    err = not_found("ghost", ["b", "a"])
    assert err.code == "not_found" and err.message == "deployment 'ghost' does not exist (deployments: a, b)"
    assert not_found("ghost", []).message.endswith("(deployments: none)")
