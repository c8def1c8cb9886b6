"""The catalogue's representative sample: it covers every feature of every family (so every kind, goal,
fault type, source and reference agent is played in CI), a family that brings nothing new does not join
it, one that brings a new situation does."""

from __future__ import annotations

from mlsandbox.scenario import catalog_ids, load_builtin, parse_scenario
from mlsandbox.scenario.sample import catalog_sample, features, representative
from mlsandbox.tasks.registry import kinds


def _catalog() -> list:
    return [load_builtin(sid) for sid in catalog_ids()]


def test_the_sample_covers_every_feature_of_the_catalogue_with_fewer_families() -> None:
    catalog = _catalog()
    sample = set(catalog_sample())
    every = set().union(*(features(sc) for sc in catalog))
    covered = set().union(*(features(sc) for sc in catalog if sc.id in sample))
    assert covered == every
    assert len(sample) < len(catalog)
    played_kinds = {sc.work()[0] for sc in catalog if sc.id in sample}
    assert played_kinds == {sc.work()[0] for sc in catalog} and played_kinds <= set(kinds()) | {"tabular"}
    goals = {sc.goal.type for sc in catalog}
    assert {sc.goal.type for sc in catalog if sc.id in sample} == goals


def test_features_name_kind_goal_faults_sources_defects_and_traffic() -> None:
    f = features(load_builtin("data-monthly-drift-retrain"))
    assert {"kind:tabular", "goal:registered_model_auc", "source:postgres", "source:lake"} <= f
    assert "source-drift:concept_drift" in f
    assert "fault:kill_service" in features(load_builtin("forecast-warehouse-tracker-outage"))
    assert "defect:late" in features(load_builtin("forecast-store-sales-late-data"))
    assert "traffic:spikes" in features(load_builtin("serving-traffic-spike"))
    assert "constraint:wrong_mitigations" in features(load_builtin("serving-alert-traffic-surge"))


def test_a_copy_adds_nothing_and_a_new_situation_joins() -> None:
    catalog = _catalog()
    base = representative(catalog)
    copy = load_builtin("churn-clean-small").model_copy(update={"id": "aaa-copy"})
    assert len(representative([*catalog, copy])) == len(base)
    data = load_builtin("churn-clean-small").model_dump(mode="json", exclude={"space"})
    data["id"] = "zzz-new-fault"
    data["perturbations"] = [
        {"name": "cpu", "when": {"at_step": 1}, "fault": {"type": "cpu_throttle", "cpus": 0.5}}
    ]
    data["reference_agent"] = "mlsandbox.agents.rule_agent:RuleAgent"  # a reference no family has
    new = parse_scenario(data)
    assert {"fault:cpu_throttle", "reference:mlsandbox.agents.rule_agent:RuleAgent"} <= features(new)
    assert "zzz-new-fault" in representative([*catalog, new])
    assert representative([]) == []
