"""``http_errors`` on real pods: the families whose plan fails one of the episode's HTTP services play on
``--backend kube`` with their reference agents.

- ``serving-alert-feature-service-down``: the feature service's pod (the model-server image) takes the
  fault through its loopback control listener, over a port-forward; the model servers that call it fail,
  the agent restarts it (a new pod starts without the fault), and ``http_fault_active`` says so.
- ``orders-api-brownout``: the episode's API source pod answers 503 for the plan's first steps, then
  recovers when the plan clears the fault; the agent retries until it answers.

- a model deployment (``http:<deployment>``): every replica's pod takes the fault, a replica started during
  it starts with it, clearing it clears them all; the replicas' CPU and memory come from the kubelet.

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


def _until(what: str, check: Any, timeout_s: float = 120.0) -> Any:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(1.0)


def test_http_fault_on_a_model_deployment_reaches_every_replica(node_sandbox: NodeSandbox) -> None:
    """``serving-deploy-slo``'s reference agent deploys; then the fault on ``http:<deployment>``: each
    running replica's hook holds it (asked of its own control listener), the deployment answers no
    prediction, a replica that replaces one during the fault starts with it (from the deployment's fault Secret),
    clearing it clears every replica and the deployment answers again. Each replica's CPU and memory are
    what its node's kubelet says."""
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import decode_observation
    from mlsandbox.backends.kube import serving as KS
    from mlsandbox.backends.kube.control_listener import http_target
    from mlsandbox.backends.kube.deployments import DeploymentFault
    from mlsandbox.backends.protocols import HttpFault
    from mlsandbox.backends.protocols.serving import ServingError
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.scenario import load_scenario

    box = node_sandbox
    sc = load_scenario("serving-deploy-slo")
    env = MLSandboxEnv(sc, backend="kube", sandbox=box.name, backend_config=box.backend_config())
    cluster = box.backend().cluster
    agent = make_agent("mlsandbox.agents.serving_reference:ServingReferenceAgent", seed=sc.seed)
    try:
        obs, _ = env.reset(seed=sc.seed, options={"agent": agent.name})
        current = decode_observation(obs)
        agent.reset(current, seed=sc.seed)
        deployment = None
        for _ in range(40):
            action = agent.act(current)
            obs, _, terminated, truncated, _ = env.step(action)
            current = decode_observation(obs)
            if isinstance(action, dict) and action.get("type") == "deploy_model" and current.get("ok"):
                deployment = action["name"]
                break
            assert not (terminated or truncated), "the episode ended before a deployment"
        assert deployment is not None, "the reference agent deployed nothing"
        gw = env.gateway
        assert gw is not None
        episode_id = gw.episode.state.episode_id
        faults = gw.episode.runtime.faults
        target = http_target(deployment, episode_id)
        assert isinstance(target, DeploymentFault)
        serving = target.episode
        # POST /health: a replica without the fault answers 405 (it is a GET route), one with it 503.
        probe = "/health"

        # The replicas' CPU and memory, from the kubelet (a second read gives the CPU between reads).
        refs = serving.replicas()[deployment]
        for ref in refs:
            serving.stats(ref)
        _until("a replica's second CPU reading", lambda: serving.stats(refs[0]).cpu_percent is not None, 30)
        for ref in refs:
            stats = serving.stats(ref)
            print(f"replica {ref.replica}: cpu {stats.cpu_percent} %, memory {stats.memory_mb} MiB")
            assert stats.cpu_percent is not None and stats.cpu_percent >= 0.0
            assert stats.memory_mb is not None and 20.0 < stats.memory_mb < 4096.0

        faults.set_http_fault(
            deployment, HttpFault(error_rate=1.0, status=503, delay_ms=0, seed=1), episode_id=episode_id
        )
        faulted = target.replicas_faulted()
        assert faulted and all(faulted.values()), faulted
        assert faults.http_fault_active(deployment, episode_id=episode_id)

        def refused() -> bool:
            try:
                return serving.request(deployment, probe, b"", timeout_s=5.0).status == 503
            except ServingError:
                return True  # no ready replica behind the Service: the fault fails /health too

        _until("the faulted deployment refuses predictions", refused, 30)

        # A replica started during the fault (the ReplicaSet replacing one that died; a scale-out's
        # would wait for CPU on this 2-CPU node): the fault Secret gives it the fault at start.
        before = set(faulted)
        for pod in before:
            cluster.delete("v1", "Pod", pod, box.namespace, grace_period_s=0)

        def replaced() -> dict[str, bool | None]:
            now = target.replicas_faulted()
            fresh = {p: v for p, v in now.items() if p not in before}
            return fresh if fresh and None not in fresh.values() else {}

        added = _until("a replacement replica whose control listener answers", replaced, 180)
        assert all(added.values()), added
        assert serving.get(deployment).replicas_up == 0  # unready: the fault fails its /health too

        faults.clear_http_fault(deployment, episode_id=episode_id)
        assert not faults.http_fault_active(deployment, episode_id=episode_id)
        assert cluster.get("v1", "Secret", KS.fault_secret_name(deployment), box.namespace) is None
        cleared = target.replicas_faulted()
        assert cleared and not any(cleared.values()), cleared

        def answers() -> bool:
            try:
                return serving.request(deployment, probe, b"", timeout_s=5.0).status < 500
            except ServingError:
                return False

        _until("the deployment answers again", answers, 60)
    finally:
        env.close()
    left = wait_gone(cluster, box.namespace)
    assert not left, f"the episode left {left}"
