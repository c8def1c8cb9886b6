"""The KubeRay manifests, offline: ``kubeconform -strict`` on every Kubernetes object (the RayJob's pod
templates as PodTemplates; the pool, and the Sandbox or SandboxClaim a runner makes, against the chart's
CRDs), the entrypoint parsed by the command it runs, and the RBAC the claims need."""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from integration_helpers import ROOT

from mlsandbox.backends.kube import schemas
from mlsandbox.errors import MissingToolError
from mlsandbox.integrations.kube_claims import CLAIM_LABEL, SandboxClaim, claim_name
from mlsandbox.integrations.rllib import build_parser

pytestmark = pytest.mark.integrations

KUBERAY = ROOT / "examples" / "kuberay"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]


@pytest.fixture(scope="module")
def crd_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        crds = [yaml.safe_load(p.read_text()) for p in sorted(schemas.SANDBOX_CRD.parent.glob("*.yaml"))]
        schemas.write_crd_schemas(crds, Path(tmp))
        yield Path(tmp)


def _validate(docs: list[dict[str, Any]], crd_dir: Path) -> None:
    try:
        report = schemas.kubeconform(docs, crd_schema_dirs=[crd_dir])
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs) and not report.failures, report.describe()


def test_rbac_and_pod_templates_are_valid_kubernetes(crd_dir: Path) -> None:
    rbac = _docs("rbac.yaml")
    (job,) = _docs("rayjob.yaml")
    cluster = job["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    pod_templates = [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t{i}"}, "template": t}
        for i, t in enumerate(templates)
    ]
    claim = SandboxClaim(claim_name("ppo", 3), scenario="tabular-quality-basic", owner="mlsandbox-ppo")
    (pool,) = _docs("pool.yaml")
    pooled = SandboxClaim(claim_name("ppo", 3), scenario="x", pool=pool["metadata"]["name"], owner="o")
    _validate([*rbac, *pod_templates, pool, claim.manifest(), pooled.manifest()], crd_dir)
    assert claim.manifest()["kind"] == "Sandbox" and pooled.manifest()["kind"] == "SandboxClaim"
    assert claim.manifest()["metadata"]["labels"][CLAIM_LABEL] == "mlsandbox-ppo"

    sa = next(d for d in rbac if d["kind"] == "ServiceAccount")
    assert all(t["spec"]["serviceAccountName"] == sa["metadata"]["name"] for t in templates)
    for t in templates:
        env = {e["name"]: e.get("value") for e in t["spec"]["containers"][0]["env"]}
        assert (
            env["MLSANDBOX_CONTROL_NAMESPACE"] == sa["metadata"]["namespace"] == job["metadata"]["namespace"]
        )
        assert env["MLSANDBOX_CLAIM_OWNER"] == job["metadata"]["name"]  # one owner for the whole run
    role = next(d for d in rbac if d["kind"] == "Role")
    for resource in ("sandboxes", "sandboxclaims"):
        rule = next(r for r in role["rules"] if r["resources"] == [resource])
        assert {"create", "get", "delete"} <= set(rule["verbs"]) and rule["apiGroups"] == ["mlsandbox.dev"]


def test_the_rayjob_runs_the_trainer_with_a_sandbox_per_runner() -> None:
    (job,) = _docs("rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "mlsandbox.integrations.rllib"]
    args = build_parser().parse_args(argv[3:])
    assert args.backend == "kube" and args.sandbox_per_runner and args.address == "auto"
    workers = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    slots = int(workers["replicas"]) * int(workers["rayStartParams"]["num-cpus"])
    assert args.runners == slots  # one EnvRunner per CPU slot of the worker pods, each with its Sandbox
    (pool,) = _docs("pool.yaml")  # claimed from the warm pool, which holds a Ready Sandbox per runner
    assert args.claim_pool == pool["metadata"]["name"] and pool["spec"]["size"] == args.runners
    assert pool["metadata"]["namespace"] == job["metadata"]["namespace"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no EnvRunner on the head (the driver, the learner)
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == __import__("ray").__version__
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    assert '["ray"]' in dockerfile and "mlsandbox/gateway" in dockerfile
