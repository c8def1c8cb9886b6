"""Scenario suites: procedurally generated variants, a held-out test split disjoint from train."""

from __future__ import annotations

import json

import pytest

from mlsandbox.scenario import catalog_ids, load_builtin
from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.suites import SEED_RANGES, signature, split_of, suite, variants


def test_builtin_suite_is_the_catalog() -> None:
    entries = suite("builtin")
    assert [e.id for e in entries] == catalog_ids()
    assert all(e.split == "builtin" and e.family == e.id for e in entries)


def test_train_and_test_are_disjoint_and_deterministic() -> None:
    train = suite("train", variants_per_family=6)
    test = suite("test", variants_per_family=3)
    assert train and test
    train_sigs = {signature(e.scenario) for e in train}
    test_sigs = {signature(e.scenario) for e in test}
    assert len(train_sigs) == len(train) and len(test_sigs) == len(test)  # no duplicates within a split
    assert not train_sigs & test_sigs
    assert not {e.id for e in train} & {e.id for e in test}
    assert all(split_of(e.scenario) == "test" for e in test)
    assert all(split_of(e.scenario) == "train" for e in train)
    # Seeds come from disjoint ranges, with room for many episodes per variant.
    assert all(SEED_RANGES["train"][0] <= e.scenario.seed < SEED_RANGES["train"][1] for e in train)
    assert all(SEED_RANGES["test"][0] <= e.scenario.seed < SEED_RANGES["test"][1] for e in test)
    assert SEED_RANGES["train"][1] + 1000 < SEED_RANGES["test"][0]
    # The same call gives the same suite.
    assert [signature(e.scenario) for e in suite("test", variants_per_family=3)] == [
        signature(e.scenario) for e in test
    ]
    # Asking for more train variants never moves one into test.
    more = {signature(e.scenario) for e in suite("train", variants_per_family=12)}
    assert not more & test_sigs


def test_variants_are_valid_scenarios_of_their_family_that_differ() -> None:
    for fid in catalog_ids():
        base = load_builtin(fid)
        vs = variants(base, "test", 2)
        assert len(vs) == 2, fid
        for v in vs:
            Scenario.model_validate(v.model_dump(mode="json"))  # round trips
            assert v.id.startswith(fid[:54]) and len(v.id) <= 63
            assert v.difficulty == base.difficulty and v.goal == base.goal and v.task == base.task
            assert v.seed != base.seed


def test_variants_vary_defects_and_fault_timings() -> None:
    base = load_builtin("tabular-ops-resource-storm")
    vs = variants(base, "train", 8)
    rates = {v.datasets[0].defects.missing_rate for v in vs}
    assert len(rates) > 3
    plans = {tuple((p.name, p.when.model_dump_json()) for p in v.perturbations) for v in vs}
    assert len(plans) > 3
    assert len({len(v.perturbations) for v in vs}) > 1  # fault combinations differ


def test_suite_filters_and_errors() -> None:
    only = suite("test", families=["tabular-quality-basic"], variants_per_family=1)
    assert [e.family for e in only] == ["tabular-quality-basic"]
    assert all(e.difficulty <= 1 for e in suite("builtin", max_difficulty=1))
    with pytest.raises(ValueError, match="unknown suite"):
        suite("validation")
    with pytest.raises(ValueError, match="unknown scenario family"):
        suite("test", families=["no-such-family"])
    with pytest.raises(ValueError, match="train"):
        variants(load_builtin("tabular-quality-basic"), "builtin", 1)


def _without_reference() -> set[str]:
    """Scenarios whose goal the default reference agent is not written for and that name no other."""
    out = set()
    for sid in catalog_ids():
        sc = load_builtin(sid)
        if sc.reference_agent == "reference" and sc.goal.type != "registered_model_auc":
            out.add(sid)
    return out


def test_every_builtin_scenario_loads_with_a_reference_agent() -> None:
    from mlsandbox.agents.validate import check_loads

    problems = check_loads(catalog_ids())
    assert set(problems) == _without_reference()
    assert all("set reference_agent" in msg for msg in problems.values())
    assert check_loads(["no-such-scenario"])["no-such-scenario"].startswith("unknown scenario")


def test_scenarios_validate_load_only_and_suite_listing() -> None:
    from typer.testing import CliRunner

    from mlsandbox.cli.main import app

    n, missing = len(catalog_ids()), _without_reference()
    r = CliRunner().invoke(app, ["scenarios", "validate", "--load-only"])
    assert r.exit_code == (1 if missing else 0), r.output
    assert f"{n - len(missing)} of {n} scenarios load" in " ".join(r.output.split())
    bad = CliRunner().invoke(app, ["scenarios", "validate", "--load-only", "nope-x"])
    assert bad.exit_code == 1 and "unknown scenario" in bad.output
    listing = CliRunner().invoke(app, ["scenarios", "suite", "test", "--variants", "1", "--json"])
    assert listing.exit_code == 0, listing.output
    lines = [json.loads(line) for line in listing.output.splitlines() if line.strip()]
    assert [x["family"] for x in lines] == catalog_ids()
    assert all(x["split"] == "test" for x in lines)
