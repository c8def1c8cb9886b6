"""Pure parts of the lifecycle limits: flow usage lines, replica states, the model server's pins."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

from mlsandbox.backends.common.prefect import NO_TORCH_ENV
from mlsandbox.backends.local.serving.deployments import Deployment, Placement
from mlsandbox.backends.local.serving.processes import SERVER_PACKAGES, server_requirements
from mlsandbox.gateway.packs.flows.handlers import USAGE_PREFIX, logged_usage
from mlsandbox.workloads import flows


def test_the_flow_and_the_pack_agree_on_the_usage_line() -> None:
    assert flows.USAGE_PREFIX == USAGE_PREFIX
    assert flows.NO_TORCH_ENV == NO_TORCH_ENV


def test_logged_usage_sums_every_execution_and_skips_garbage() -> None:
    lines = [
        "10:00:00 INFO prefect.flow_runs: loaded 2 batch(es)",
        f"10:00:05 INFO prefect.flow_runs: {USAGE_PREFIX}3.250",
        f"10:01:00 INFO prefect.flow_runs: {USAGE_PREFIX}oops",
        f"10:02:05 INFO prefect.flow_runs: {USAGE_PREFIX}1.750",
    ]
    assert logged_usage(lines) == (2, 5.0)
    assert logged_usage([]) == (0, 0.0)


def test_server_requirements_pin_what_the_sandbox_runs() -> None:
    reqs = server_requirements()
    assert len(reqs) == len(SERVER_PACKAGES)
    for dist, req in zip(SERVER_PACKAGES, reqs, strict=True):
        assert req == f"{dist}=={importlib.metadata.version(dist)}"


@dataclass
class _Replica:
    up: bool
    end: dict[str, Any] | None = None
    name: str = "r"

    def alive(self) -> bool:
        return self.up

    def termination(self) -> dict[str, Any] | None:
        return self.end


def test_describe_shows_limits_environment_and_how_a_replica_ended() -> None:
    oom = {"exit_code": 137, "reason": "OOMKilled", "message": "killed by the kernel: out of memory"}
    placement = Placement("cpu-tight", 0.5, 640, 0.02, "sklearn-15", "/envs/x/bin/python")
    dep = Deployment("churn", "churn", "ep-churn", "1", placement, [_Replica(True), _Replica(False, oom)])  # type: ignore[list-item]
    view = dep.describe()
    assert view["limits"] == {"cpus": 0.5, "memory_mb": 640}
    assert view["environment"] == "sklearn-15" and view["machine"] == "cpu-tight"
    assert view["replicas"] == 2 and view["replicas_up"] == 1
    assert view["replica_states"] == [
        {"replica": 0, "state": "running"},
        {"replica": 1, "state": "exited", **oom},
    ]
    assert dep.cpus == 0.5 and dep.credits_per_second == 0.02
