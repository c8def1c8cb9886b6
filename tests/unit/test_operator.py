"""The Sandbox operator without a cluster: the CRD, the manifest builders, reconcile/finalize over an
in-memory API, and the kopf handlers called directly with a fake API in ``memo``.

Running the handlers inside kopf (``kopf.testing.KopfRunner``) needs an API server: that belongs to the
kube-apiserver + kwok tier, not to these unit tests.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube.client import TransientApiError
from mlsandbox.errors import MissingToolError
from mlsandbox.k8s_operator import handlers
from mlsandbox.k8s_operator.model import API_VERSION, FINALIZER, KIND, AgentAccess, Budget, SandboxSpec
from mlsandbox.k8s_operator.reconcile import (
    Invalid,
    Retry,
    exhausted_quota,
    finalize_sandbox,
    reconcile_sandbox,
)
from mlsandbox.k8s_operator.resources import (
    SANDBOX_LABEL,
    agent_rules,
    sandbox_namespace_name,
    sandbox_resources,
)

CRD = yaml.safe_load(schemas.SANDBOX_CRD.read_text())
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"
SCENARIOS = ["tabular-quality-basic"]


class FakeApi:
    """An in-memory ClusterApi: namespaces go through Terminating before they disappear."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.fail_with: Exception | None = None

    @staticmethod
    def key(
        api_version: str, kind: str, name: str, namespace: str | None
    ) -> tuple[str, str, str | None, str]:
        return (api_version, kind, namespace, name)

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    def apply(self, manifest: Mapping[str, Any]) -> None:
        self._check()
        meta = manifest["metadata"]
        key = self.key(manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace"))
        current = self.objects.get(key, {})
        obj = json.loads(json.dumps(dict(manifest)))
        obj["status"] = current.get("status", {"phase": "Active"} if manifest["kind"] == "Namespace" else {})
        self.objects[key] = obj
        self.calls.append(("apply", manifest["kind"], meta["name"]))

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        self._check()
        return self.objects.get(self.key(api_version, kind, name, namespace))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        self._check()
        key = self.key(api_version, kind, name, namespace)
        self.calls.append(("delete", kind, name))
        if key not in self.objects:
            return False
        if kind == "Namespace":
            self.objects[key]["status"] = {"phase": "Terminating"}
        else:
            del self.objects[key]
        return True

    def delete_collection(self, api_version: str, kind: str, namespace: str, label_selector: str) -> int:
        self._check()
        self.calls.append(("delete_collection", kind, label_selector))
        doomed = [
            k
            for k, obj in self.objects.items()
            if k[:3] == (api_version, kind, namespace)
            and label_selector in obj.get("metadata", {}).get("labels", {})
        ]
        for k in doomed:
            del self.objects[k]
        return len(doomed)

    def finish_namespace_deletion(self, name: str) -> None:
        self.objects = {k: v for k, v in self.objects.items() if k[2] != name and k[3] != name}


def sandbox_spec(**overrides: Any) -> dict[str, Any]:
    return {"scenario": "tabular-quality-basic", "seed": 7, **overrides}


def reconcile(api: FakeApi, spec: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "api": api,
        "name": "demo",
        "namespace": "team-a",
        "spec": spec or sandbox_spec(),
        "generation": 1,
        "control_namespace": "mlsandbox",
        "known_scenarios": SCENARIOS,
        "now": NOW,
    }
    return reconcile_sandbox(**{**args, **kwargs})


def conditions(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


@pytest.fixture(scope="module")
def crd_schema_dir() -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        schemas.write_crd_schemas([CRD], Path(tmp))
        yield Path(tmp)


def kubeconform(docs: list[dict[str, Any]], crd_dir: Path) -> schemas.Report:
    try:
        report = schemas.kubeconform(docs, crd_schema_dirs=[crd_dir])
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs), report.results
    return report


# ------------------------------------------------------------------------------------------------- CRD


def test_crd_declares_the_sandbox_resource_with_status_and_printer_columns() -> None:
    spec = CRD["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "mlsandbox.dev",
        KIND,
        "sandboxes",
    )
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert {"Scenario", "Seed", "Namespace", "Age"} <= set(columns)
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {"scenario", "seed", "budget", "agentAccess", "episode"}
    assert set(props["spec"]["properties"]["budget"]["properties"]) == {"cpu", "memory", "credits", "maxPods"}
    condition_types = props["status"]["properties"]["conditions"]["items"]["properties"]["type"]["enum"]
    assert condition_types == ["Ready", "Degraded", "Terminating"]


def _structural_problems(schema: Mapping[str, Any], path: str = "") -> list[str]:
    """The rules of a structural schema that matter here: every node has a type (or is int-or-string or
    preserves unknown fields), and an object lists its properties or preserves unknown fields."""
    problems = []
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path or '/'}: no type")
    if schema.get("x-kubernetes-int-or-string") and schema.get("anyOf") != [
        {"type": "integer"},
        {"type": "string"},
    ]:
        problems.append(f"{path}: int-or-string needs anyOf integer|string")
    for name, sub in schema.get("properties", {}).items():
        problems += _structural_problems(sub, f"{path}/{name}")
    if "items" in schema:
        problems += _structural_problems(schema["items"], f"{path}[]")
    return problems


def test_crd_schema_is_structural_and_the_model_defaults_match_it() -> None:
    root = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _structural_problems(root) == []
    budget = root["properties"]["spec"]["properties"]["budget"]["properties"]
    assert Budget() == Budget.model_validate({k: v["default"] for k, v in budget.items()})
    access = root["properties"]["spec"]["properties"]["agentAccess"]["properties"]
    assert AgentAccess() == AgentAccess.model_validate({k: v["default"] for k, v in access.items()})
    assert access["mode"]["enum"] == ["none", "read", "operate"]


def test_crd_and_sandboxes_validate_strictly(crd_schema_dir: Path) -> None:
    good = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "demo", "namespace": "team-a"},
        "spec": {
            "scenario": "tabular-quality-basic",
            "seed": 3,
            "budget": {"cpu": 2, "memory": "4Gi", "credits": 50, "maxPods": 10},
            "agentAccess": {"mode": "read"},
        },
    }
    unknown_field = {**good, "spec": {**good["spec"], "gpu": 1}}
    bad_mode = {**good, "spec": {**good["spec"], "agentAccess": {"mode": "admin"}}}
    bad_memory = {**good, "spec": {**good["spec"], "budget": {"memory": "lots"}}}
    no_scenario = {**good, "spec": {"seed": 1}}
    report = kubeconform([CRD, good, unknown_field, bad_mode, bad_memory, no_scenario], crd_schema_dir)
    assert [r.status for r in report.results] == ["statusValid", "statusValid"] + ["statusInvalid"] * 4, (
        report.results
    )


def test_model_parses_the_wire_form() -> None:
    spec = SandboxSpec.model_validate(
        {
            "scenario": "x",
            "budget": {"cpu": 2, "memory": "1Gi", "maxPods": 3},
            "agentAccess": {"mode": "none"},
        }
    )
    assert spec.budget.cpu == "2" and spec.budget.max_pods == 3 and spec.agent_access.mode == "none"


# -------------------------------------------------------------------------------------------- builders


def test_namespace_names_are_valid_and_unique_per_sandbox() -> None:
    assert sandbox_namespace_name("team-a", "demo") == "sbx-team-a-demo"
    long_a = sandbox_namespace_name("n" * 40, "a" * 40)
    long_b = sandbox_namespace_name("n" * 40, "a" * 39 + "b")
    assert len(long_a) <= 63 and long_a != long_b
    assert long_a[-9] == "-" and long_a[:4] == "sbx-"


def test_sandbox_resources_follow_the_budget_and_the_access_mode() -> None:
    spec = SandboxSpec.model_validate(sandbox_spec(budget={"cpu": "3", "memory": "5Gi", "maxPods": 12}))
    docs = sandbox_resources("team-a", "demo", spec, "mlsandbox")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
        assert doc["metadata"]["labels"][SANDBOX_LABEL] == "demo"
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == "sbx-team-a-demo"
    assert all(d["metadata"].get("namespace") == "sbx-team-a-demo" for d in docs[1:])
    hard = by_kind["ResourceQuota"][0]["spec"]["hard"]
    assert hard["limits.cpu"] == hard["requests.cpu"] == "3"
    assert hard["limits.memory"] == "5Gi" and hard["pods"] == "12" and hard["services.nodeports"] == "0"
    limits = by_kind["LimitRange"][0]["spec"]["limits"][0]
    assert limits["max"] == {"cpu": "3", "memory": "5Gi"} and limits["type"] == "Container"
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind["NetworkPolicy"]}
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    control = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mlsandbox"}}}
    assert policies["allow-control-plane"]["ingress"] == [{"from": [control]}]
    assert policies["allow-control-plane"]["egress"] == [{"to": [control]}]
    assert policies["allow-dns"]["egress"][0]["ports"] == [
        {"protocol": "UDP", "port": 53},
        {"protocol": "TCP", "port": 53},
    ]
    serving = policies["allow-serving-proxy"]
    assert serving["policyTypes"] == ["Ingress"] and "egress" not in serving
    assert serving["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": "http"}]}
    ]
    assert serving["podSelector"]["matchExpressions"][0]["values"] == ["model-server", "feature-service"]
    own = policies["allow-same-namespace"]["egress"][0]["to"][0]
    assert own["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "sbx-team-a-demo"
    binding, worker = by_kind["RoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "agent", "namespace": "sbx-team-a-demo"}
    ]
    assert binding["roleRef"]["name"] == by_kind["Role"][0]["metadata"]["name"] == "agent-operate"
    # The chart's Prefect worker (control namespace) runs the sandbox's flow runs as Jobs here, no more.
    assert worker["subjects"] == [
        {"kind": "ServiceAccount", "name": "mlsandbox-prefect-worker", "namespace": "mlsandbox"}
    ]
    role = by_kind["Role"][1]
    assert worker["roleRef"]["name"] == role["metadata"]["name"] == "prefect-worker"
    writes = {
        r
        for rule in role["rules"]
        for r in rule["resources"]
        if set(rule["verbs"]) - {"get", "list", "watch"}
    }
    assert writes == {"jobs"}


def test_agent_rules_never_touch_secrets_rbac_or_quotas() -> None:
    assert agent_rules("none") == []
    read, operate = agent_rules("read"), agent_rules("operate")
    assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in read)
    for rule in operate:
        assert not {"secrets", "roles", "rolebindings", "namespaces"} & set(rule["resources"])
        if "resourcequotas" in rule["resources"] or "limitranges" in rule["resources"]:
            assert set(rule["verbs"]) == {"get", "list", "watch"}
    assert any("create" in r["verbs"] and r["resources"] == ["jobs"] for r in operate)
    none = SandboxSpec.model_validate(sandbox_spec(agentAccess={"mode": "none"}))
    docs = sandbox_resources("a", "b", none, "mlsandbox")
    assert "ServiceAccount" not in {d["kind"] for d in docs}
    # No agent RBAC: only the Prefect worker's, bound to the chart's worker.
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert [b["subjects"][0]["name"] for b in bindings] == ["mlsandbox-prefect-worker"]


@pytest.mark.parametrize("mode", ["none", "read", "operate"])
def test_every_sandbox_manifest_validates_strictly(mode: str, crd_schema_dir: Path) -> None:
    spec = SandboxSpec.model_validate(sandbox_spec(agentAccess={"mode": mode}))
    docs = sandbox_resources("team-a", "x" * 50, spec, "mlsandbox")
    report = kubeconform(docs, crd_schema_dir)
    assert not report.failures, report.describe()


# ------------------------------------------------------------------------------------------- reconcile


def test_reconcile_creates_everything_and_reports_ready() -> None:
    api = FakeApi()
    status = reconcile(api)
    assert status["phase"] == "Ready" and status["namespace"] == "sbx-team-a-demo"
    assert status["observedGeneration"] == 1
    conds = conditions(status)
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "Reconciled"
    assert conds["Degraded"]["status"] == conds["Terminating"]["status"] == "False"
    kinds = sorted({kind for op, kind, _ in api.calls if op == "apply"})
    assert kinds == [
        "LimitRange",
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    assert api.calls[0] == ("apply", "Namespace", "sbx-team-a-demo")
    assert status["episode"] == 0
    alias = api.get("v1", "Service", "minio", "sbx-team-a-demo")
    assert alias is not None and alias["spec"]["type"] == "ExternalName"
    assert alias["spec"]["externalName"] == "mlsandbox-minio.mlsandbox.svc.cluster.local"


def test_bumping_the_episode_deletes_only_the_previous_episodes_objects() -> None:
    api = FakeApi()
    reconcile(api)
    ns = "sbx-team-a-demo"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train-1", "namespace": ns, "labels": {"mlsandbox.world.episode": "e1"}},
    }
    chaos = {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "PodChaos",
        "metadata": {"name": "kill", "namespace": ns, "labels": {"mlsandbox.dev/fault": "kill"}},
    }
    api.apply(job)
    api.apply(chaos)
    # The same episode again (a plain re-reconcile): nothing of the episode goes.
    status = reconcile(api, episode=0)
    assert api.get("batch/v1", "Job", "train-1", ns) is not None and status["episode"] == 0
    status = reconcile(api, sandbox_spec(episode=1), episode=0)
    assert status["episode"] == 1 and status["phase"] == "Ready"
    assert api.get("batch/v1", "Job", "train-1", ns) is None
    assert api.get("chaos-mesh.org/v1alpha1", "PodChaos", "kill", ns) is None
    # Namespace, quota, RBAC and service aliases stay (a warm reset).
    for kind, name in [("Namespace", ns), ("Service", "minio")]:
        assert api.get("v1", kind, name, None if kind == "Namespace" else ns) is not None
    assert not [c for c in api.calls if c[0] == "delete" and c[1] == "Namespace"]


def test_reconcile_is_idempotent_and_keeps_transition_times() -> None:
    api = FakeApi()
    first = reconcile(api)
    objects = repr(sorted(api.objects.items()))
    second = reconcile(api, previous=first["conditions"], now=LATER, generation=2)
    assert repr(sorted(api.objects.items())) == objects
    assert conditions(second)["Ready"]["lastTransitionTime"] == NOW
    assert conditions(second)["Ready"]["observedGeneration"] == 2


def test_an_unknown_scenario_or_bad_spec_is_permanent_and_recorded() -> None:
    api = FakeApi()
    with pytest.raises(Invalid) as info:
        reconcile(api, sandbox_spec(scenario="no-such-scenario"))
    assert info.value.status["phase"] == "Failed"
    assert conditions(info.value.status)["Ready"]["reason"] == "UnknownScenario"
    with pytest.raises(Invalid) as info:
        reconcile(api, sandbox_spec(budget={"cpu": "lots"}))
    assert conditions(info.value.status)["Ready"]["reason"] == "InvalidSpec"
    assert "budget.cpu" in conditions(info.value.status)["Ready"]["message"]
    assert api.calls == []


def test_a_foreign_namespace_is_never_adopted() -> None:
    api = FakeApi()
    api.objects[("v1", "Namespace", None, "sbx-team-a-demo")] = {"metadata": {"labels": {}}, "status": {}}
    with pytest.raises(Invalid, match="does not belong"):
        reconcile(api)
    assert not [c for c in api.calls if c[0] == "apply"]


def test_transient_failures_and_a_terminating_namespace_are_retried() -> None:
    api = FakeApi()
    api.fail_with = TransientApiError("API server answered 503")
    with pytest.raises(Retry) as info:
        reconcile(api)
    assert info.value.delay > 0 and conditions(info.value.status)["Ready"]["status"] == "Unknown"
    api.fail_with = None
    reconcile(api)
    api.delete("v1", "Namespace", "sbx-team-a-demo")
    with pytest.raises(Retry, match="still being deleted"):
        reconcile(api)


def test_an_exhausted_quota_makes_the_sandbox_degraded() -> None:
    api = FakeApi()
    reconcile(api)
    quota = api.objects[("v1", "ResourceQuota", "sbx-team-a-demo", "budget")]
    quota["status"] = {
        "hard": {"limits.memory": "6Gi", "pods": "30"},
        "used": {"limits.memory": "6144Mi", "pods": "3"},
    }
    status = reconcile(api)
    assert status["phase"] == "Degraded"
    assert conditions(status)["Degraded"]["status"] == "True"
    assert conditions(status)["Degraded"]["reason"] == "QuotaExhausted"
    assert "limits.memory" in conditions(status)["Degraded"]["message"]
    assert exhausted_quota(None) == [] and exhausted_quota({"status": {}}) == []


def test_finalize_deletes_the_namespace_and_waits_until_it_is_gone() -> None:
    api = FakeApi()
    reconcile(api)
    args: dict[str, Any] = {"api": api, "name": "demo", "namespace": "team-a", "generation": 1, "now": NOW}
    with pytest.raises(Retry) as info:
        finalize_sandbox(**args)
    assert ("delete", "Namespace", "sbx-team-a-demo") in api.calls
    assert info.value.status["phase"] == "Terminating"
    assert conditions(info.value.status)["Terminating"]["status"] == "True"
    with pytest.raises(Retry):  # still terminating: not deleted twice
        finalize_sandbox(**args)
    assert api.calls.count(("delete", "Namespace", "sbx-team-a-demo")) == 1
    api.finish_namespace_deletion("sbx-team-a-demo")
    assert finalize_sandbox(**args)["phase"] == "Terminating"
    assert api.objects == {}


def test_finalize_leaves_a_foreign_namespace_alone() -> None:
    api = FakeApi()
    api.objects[("v1", "Namespace", None, "sbx-team-a-demo")] = {
        "metadata": {"labels": {"x": "y"}},
        "status": {},
    }
    finalize_sandbox(api=api, name="demo", namespace="team-a", generation=1, now=NOW)
    assert api.calls == []


# -------------------------------------------------------------------------------------------- handlers


def memo(api: FakeApi) -> kopf.Memo:
    return kopf.Memo(api=api, control_namespace="mlsandbox", known_scenarios=SCENARIOS)


def handler_kwargs(api: FakeApi, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "spec": spec or sandbox_spec(),
        "name": "demo",
        "namespace": "team-a",
        "meta": {"name": "demo", "namespace": "team-a", "generation": 4},
        "status": {},
        "memo": memo(api),
        "patch": kopf.Patch(),
        "logger": None,
    }


def test_reconcile_handler_records_the_status_in_the_patch() -> None:
    api = FakeApi()
    kwargs = handler_kwargs(api)
    assert handlers.reconcile(**kwargs) is None
    status = kwargs["patch"]["status"]
    assert status["phase"] == "Ready" and status["observedGeneration"] == 4
    assert conditions(status)["Ready"]["status"] == "True"


def test_reconcile_handler_raises_kopf_errors_after_recording_status() -> None:
    api = FakeApi()
    kwargs = handler_kwargs(api, sandbox_spec(scenario="nope"))
    with pytest.raises(kopf.PermanentError, match="unknown scenario"):
        handlers.reconcile(**kwargs)
    assert kwargs["patch"]["status"]["phase"] == "Failed"
    api.fail_with = TransientApiError("timeout")
    kwargs = handler_kwargs(api)
    with pytest.raises(kopf.TemporaryError) as info:
        handlers.reconcile(**kwargs)
    assert info.value.delay == pytest.approx(5.0)
    assert kwargs["patch"]["status"]["phase"] == "Pending"


def test_health_timer_repairs_drift_and_skips_deleted_sandboxes() -> None:
    api = FakeApi()
    handlers.reconcile(**handler_kwargs(api))
    del api.objects[("v1", "ResourceQuota", "sbx-team-a-demo", "budget")]
    handlers.health(**handler_kwargs(api))
    assert ("v1", "ResourceQuota", "sbx-team-a-demo", "budget") in api.objects
    kwargs = handler_kwargs(api)
    kwargs["meta"] = {**kwargs["meta"], "deletionTimestamp": NOW}
    before = len(api.calls)
    handlers.health(**kwargs)
    assert len(api.calls) == before and kwargs["patch"] == {}


def test_delete_handler_holds_the_finalizer_until_the_namespace_is_gone() -> None:
    api = FakeApi()
    handlers.reconcile(**handler_kwargs(api))
    kwargs = handler_kwargs(api)
    del kwargs["spec"]
    with pytest.raises(kopf.TemporaryError) as info:
        handlers.finalize(**kwargs)
    assert info.value.delay == pytest.approx(2.0)
    assert kwargs["patch"]["status"]["phase"] == "Terminating"
    api.finish_namespace_deletion("sbx-team-a-demo")
    kwargs = handler_kwargs(api)
    del kwargs["spec"]
    assert handlers.finalize(**kwargs) is None


def test_startup_configures_finalizer_and_annotation_storage() -> None:
    settings = kopf.OperatorSettings()
    given = kopf.Memo(api=FakeApi())
    handlers.configure(settings=settings, memo=given, logger=None)
    assert settings.persistence.finalizer == FINALIZER
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert isinstance(given["api"], FakeApi)
    assert given["control_namespace"] == "mlsandbox"
    assert "tabular-quality-basic" in given["known_scenarios"]


def test_handlers_are_registered_for_the_sandbox_resource() -> None:
    registry = kopf.get_default_registry()
    ids = {h.id for h in registry._changing.get_all_handlers()}
    assert {"reconcile", "finalize"} <= ids
    assert {h.id for h in registry._spawning.get_all_handlers()} == {"health", "keep_pool", "bind"}
