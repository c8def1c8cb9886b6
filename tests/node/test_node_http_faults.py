"""``http_errors`` on real pods: the families whose plan fails one of the episode's HTTP services play on
``--backend kube`` with their reference agents.

- ``serving-alert-feature-service-down``: the feature service's pod (the model-server image) takes the
  fault through its loopback control listener, over a port-forward; the model servers that call it fail,
  the agent restarts it (a new pod starts without the fault), and ``http_fault_active`` says so.
- ``orders-api-brownout``: the episode's API source pod answers 503 for the plan's first steps, then
  recovers when the plan clears the fault; the agent retries until it answers.

Each must succeed and leave none of its objects behind in the sandbox's namespace. The other cause of
the same alerts, ``serving-alert-traffic-surge`` (no HTTP fault; the agent scales out), also plays on
kube (docs/kubernetes.md has its figures); it is left out here, because its five minutes of production
traffic test the serving path the node tier's serving families already cover, not an HTTP fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from test_node_episodes import wait_gone  # tests/node is on sys.path

from mlsandbox.backends.kube.serving import FEATURE_COMPONENT
from mlsandbox.backends.kube.source_manifests import SOURCE_LABEL

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.agents.runner import StepRecord

pytestmark = pytest.mark.timeout(1800)

COMPONENT_LABEL = "app.kubernetes.io/component"


def _play(box: NodeSandbox, scenario: str, agent: str, target: str, pods: str) -> dict[str, Any]:
    """The episode with the reference agent; after each step, whether the fault control says the fault on
    ``http:target`` is in effect and which pods (by ``pods``, a selector) run."""
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.scenario import load_scenario

    sc = load_scenario(scenario)
    env = MLSandboxEnv(sc, backend="kube", sandbox=box.name, backend_config=box.backend_config())
    cluster = box.backend().cluster
    seen: dict[str, Any] = {"active": [], "pods": [], "actions": []}

    def look(rec: StepRecord) -> None:
        gw = env.gateway
        assert gw is not None
        episode = gw.episode
        faults = episode.runtime.faults
        seen["active"].append(faults.http_fault_active(target, episode_id=episode.state.episode_id))
        uids = [p["metadata"]["uid"] for p in cluster.list("v1", "Pod", box.namespace, pods)]
        seen["pods"].append(uids)
        action = rec.action if isinstance(rec.action, dict) else {}
        seen["actions"].append((action.get("type"), action.get("service"), rec.observation.get("ok")))

    try:
        seen["result"] = run_episode(env, make_agent(agent, seed=sc.seed), seed=sc.seed, on_step=look)
    finally:
        env.close()
    seen["left"] = wait_gone(cluster, box.namespace)
    return seen


def test_feature_service_down_on_real_pods(node_sandbox: NodeSandbox) -> None:
    seen = _play(
        node_sandbox,
        "serving-alert-feature-service-down",
        "mlsandbox.agents.families_reference:AlertTriageReferenceAgent",
        "feature-service",
        f"{COMPONENT_LABEL}={FEATURE_COMPONENT}",
    )
    res = seen["result"]
    print(
        f"serving-alert-feature-service-down on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, "
        f"grade {res.grade}"
    )
    active = seen["active"]
    assert True in active, "the fault was never in effect in the feature service's pod"
    first = active.index(True)
    restarts = [
        i
        for i, (kind, service, ok) in enumerate(seen["actions"])
        if kind == "restart_service" and service == "feature-service" and ok
    ]
    assert restarts and restarts[0] >= first, seen["actions"]
    after = restarts[0]
    assert active[after] is False, "a new pod of the feature service starts without the fault"
    before_pods, after_pods = set(seen["pods"][after - 1]), set(seen["pods"][after])
    assert after_pods and not before_pods & after_pods, "the restart made a new pod"
    assert res.success, res.grade
    assert not seen["left"], f"the episode left {seen['left']}"


def test_orders_api_brownout_on_real_pods(node_sandbox: NodeSandbox) -> None:
    seen = _play(
        node_sandbox,
        "orders-api-brownout",
        "mlsandbox.agents.families_reference:OutageReferenceAgent",
        "orders_api",
        f"{SOURCE_LABEL}=api-source",
    )
    res = seen["result"]
    print(f"orders-api-brownout on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}")
    active = seen["active"]
    assert True in active, "the fault was never in effect in the API source's pod"
    assert active[-1] is False, "the plan's end cleared the fault"
    failed = [ok for kind, _, ok in seen["actions"] if kind == "ingest_source"]
    assert False in failed and True in failed, seen["actions"]
    assert res.success, res.grade
    assert not seen["left"], f"the episode left {seen['left']}"
