"""The HTTP API source and PostgreSQL as pods of the episode on the real node, reached through port-forwards.

Each scenario's episode runs through the Gateway on ``--backend kube``: the source's pod is made at the
start (the API source from the gateway image, PostgreSQL from Debian's server), ingesting reads from it,
a fault on it is seen the way a client sees it (HTTP 503 from the API source's fault hook; PostgreSQL
scaled to zero refuses connections), a restart brings it back on the episode's data (a new pod, seeded
again), and closing the episode removes its objects.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from test_node_episodes import wait_gone  # tests/node is on sys.path

from mlsandbox.backends.kube.source_manifests import SOURCE_LABEL

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

pytestmark = pytest.mark.timeout(900)


def _source_pods(box: NodeSandbox, service: str) -> list[dict[str, Any]]:
    cluster = box.backend().cluster
    return cluster.list("v1", "Pod", box.namespace, f"{SOURCE_LABEL}={service}")


def _step(gw: Any, action: dict[str, Any]) -> dict[str, Any]:
    observation: dict[str, Any] = gw.step(action).observation
    return observation


@pytest.mark.parametrize(
    ("scenario", "source", "service"),
    [
        ("data-csv-batch-missing-outliers", "orders_api", "api-source"),
        ("data-monthly-drift-retrain", "history_db", "postgres"),
    ],
)
def test_a_source_pod_serves_fails_and_restarts_on_its_data(
    node_sandbox: NodeSandbox, scenario: str, source: str, service: str
) -> None:
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.gateway.packs.sources import faults as source_faults
    from mlsandbox.scenario import load_builtin

    env = MLSandboxEnv(
        load_builtin(scenario),
        backend="kube",
        sandbox=node_sandbox.name,
        backend_config=node_sandbox.backend_config(),
    )
    try:
        started = time.monotonic()
        env.reset(seed=3)
        gw = env.gateway
        assert gw is not None
        print(f"{scenario}: episode started with its {service} pod in {time.monotonic() - started:.1f} s")
        (pod,) = _source_pods(node_sandbox, service)
        first = _step(gw, {"type": "ingest_source", "source": source})
        assert first["ok"] and first["result"]["rows"] == 3000, first
        if service == "api-source":
            source_faults.api_unavailable(gw.episode, source, error_rate=1.0, status=503)
            failed = _step(gw, {"type": "ingest_source", "source": source})
            assert not failed["ok"] and "HTTP 503" in failed["error"]["message"], failed
        else:
            source_faults.database_down(gw.episode, source)
            assert not _source_pods(node_sandbox, service)
            failed = _step(gw, {"type": "ingest_source", "source": source})
            assert not failed["ok"] and failed["error"]["code"] == "source_unavailable", failed
        restarted = _step(gw, {"type": "restart_service", "service": service})
        assert restarted["ok"] and restarted["result"]["healthy"], restarted
        (new,) = _source_pods(node_sandbox, service)
        assert new["metadata"]["uid"] != pod["metadata"]["uid"]
        again = _step(gw, {"type": "ingest_source", "source": source})
        assert again["ok"] and again["result"]["rows"] == 3000, again
    finally:
        env.close()
    left = wait_gone(node_sandbox.backend().cluster, node_sandbox.namespace)
    assert not left, f"the episode left {left}"
