"""One family of each kind of work beyond binary classification, with ``--backend kube`` on real pods.

Multi-class, regression, forecasting, text classification and image classification: each kind's
difficulty-1 family with its reference agent (``kind_reference``: the preparation and algorithm the kind's
policy picks from the profile). The training Jobs run the trainer image on the real node with the kind's
``--task``; the model they register is graded through the registry on the hidden holdout with the kind's
metric. Each must succeed and leave none of its objects behind in the sandbox's namespace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from tests.node.test_node_episodes import run_in_process, wait_gone

from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.kube.node import NODE_NAME
from mlsandbox.tasks.registry import get as get_kind

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.agents.runner import StepRecord

pytestmark = pytest.mark.timeout(1200)

FAMILIES = {
    "tabular_multiclass": "multiclass-ticket-priority",
    "tabular_regression": "regression-delivery-times",
    "timeseries_forecasting": "forecast-web-visits-basic",
    "text_classification": "text-support-ticket-routing",
    "image_classification": "images-parts-sorting",
}
"""Kind -> its difficulty-1 family."""


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_a_family_of_each_kind_on_real_pods(node_sandbox: NodeSandbox, kind: str) -> None:
    scenario = FAMILIES[kind]
    task = get_kind(kind).fit_task
    cluster = node_sandbox.backend().cluster
    ns = node_sandbox.namespace
    pods: dict[str, dict[str, Any]] = {}

    def look(rec: StepRecord) -> None:
        for pod in cluster.list("v1", "Pod", ns, f"{M.COMPONENT_LABEL}=trainer"):
            pods[pod["metadata"]["name"]] = pod

    res = run_in_process(node_sandbox, scenario, "kind_reference", look)
    print(f"{scenario} ({kind}) on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}")
    assert res.success, res.grade
    assert pods, f"no training pod was seen in {ns}"
    for pod in pods.values():
        (container,) = pod["spec"]["containers"]
        assert container["image"] == node_sandbox.env["MLSANDBOX_TRAINER_IMAGE"]
        assert pod["spec"]["nodeName"] == NODE_NAME
        args = [*(container.get("command") or []), *(container.get("args") or [])]
        assert args[args.index("--task") + 1] == task, args
    left = wait_gone(cluster, ns)
    assert not left, f"the episode left {left}"
