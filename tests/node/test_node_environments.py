"""Named environments on real pods: `churn-legacy-scorer` with ``--backend kube``.

The family's production scorer is pinned to ``scikit-learn==1.5.2``. Its reference builds an environment
with that pin (uv resolves it on this client for the trainer image's Python, the archive goes to the
sandbox's MinIO), trains every job in it (each pod unpacks the archive in an init container and runs on
those packages alone) and registers the model; at the episode's end the scorer itself runs as a Job in
the same environment and the grade reads its probabilities. A job naming an environment never built is
refused before any pod exists, and the episode leaves nothing behind in the sandbox's namespace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from tests.node.test_node_episodes import run_in_process, wait_gone

from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.protocols import JobSpec

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.agents.runner import StepRecord

pytestmark = pytest.mark.timeout(1200)

SCENARIO = "churn-legacy-scorer"
REFERENCE = "mlsandbox.agents.families_reference:ScorerEnvironmentReferenceAgent"


def test_a_model_trained_and_scored_in_a_pinned_environment_on_real_pods(node_sandbox: NodeSandbox) -> None:
    backend = node_sandbox.backend()
    cluster = backend.cluster
    ns = node_sandbox.namespace
    pods: dict[str, dict[str, Any]] = {}
    logs: dict[str, str] = {}

    def look(rec: StepRecord) -> None:
        for pod in cluster.list("v1", "Pod", ns, f"{M.SANDBOX_LABEL}"):
            pods[pod["metadata"]["name"]] = pod
            if (pod.get("status") or {}).get("phase") == "Succeeded" and pod["metadata"]["name"] not in logs:
                logs[pod["metadata"]["name"]] = cluster.pod_log(pod["metadata"]["name"], ns, tail=200)

    res = run_in_process(node_sandbox, SCENARIO, REFERENCE, look)
    print(f"{SCENARIO} on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}")
    assert res.success, res.grade
    assert "scored by the production scorer (scikit-learn==1.5.2)" in str(res.grade), res.grade
    created = [
        s for s in res.steps if isinstance(s.action, dict) and s.action.get("type") == "create_environment"
    ]
    assert created and created[0].observation["ok"], created
    assert created[0].observation["result"]["packages"]["scikit-learn"] == "1.5.2"
    trainers = [p for p in pods.values() if p["metadata"]["labels"].get(M.COMPONENT_LABEL) == "trainer"]
    assert trainers, f"no training pod was seen in {ns}"
    for pod in trainers:
        (init,) = pod["spec"]["initContainers"]
        assert init["name"] == "environment" and M.ENV_BUCKET in init["command"]
        (container,) = pod["spec"]["containers"]
        assert container["command"][:4] == ["python", "-S", "-c", M.ENV_BOOT], container["command"]
        assert {"name": M.ENV_VOLUME, "mountPath": M.ENV_DIR, "readOnly": True} in container["volumeMounts"]
    # What the jobs ran on: the pinned release, not the image's own (their logs say which they loaded).
    trained = [text for name, text in logs.items() if name in {p["metadata"]["name"] for p in trainers}]
    assert trained and all("scikit-learn 1.5.2, Python 3.11" in t for t in trained), trained
    # The archive is in the sandbox's MinIO, keyed by its content.
    store = backend.runtime().object_store
    keys = [o["Key"] for o in store.client.list_objects_v2(Bucket=M.ENV_BUCKET).get("Contents", [])]
    assert any(k.endswith("/site.tar") for k in keys) and any(k.endswith("/info.json") for k in keys), keys
    assert not [k for k in keys if k.startswith("scoring/")], keys  # the scorer's rows went with it
    assert not wait_gone(cluster, ns), "the episode left objects behind"


def test_a_job_in_an_environment_never_built_is_refused(node_sandbox: NodeSandbox) -> None:
    rt = node_sandbox.backend().runtime()
    spec = JobSpec(job_id="never-built", workload="trainer", args=["--help"], environment="0123456789abcdef")
    with pytest.raises(KeyError, match="has not been built"):
        rt.jobs.submit(spec)
    assert not cluster_jobs(node_sandbox, "never-built")


def cluster_jobs(box: NodeSandbox, job_id: str) -> list[dict[str, Any]]:
    cluster = box.backend().cluster
    return cluster.list("batch/v1", "Job", box.namespace, f"{M.JOB_ID_LABEL}={M.job_name(job_id)}")
