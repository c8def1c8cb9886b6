"""Parameter spaces, stable instance ids, and splits whose test parameters never occur in train."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from mlsandbox.errors import ScenarioError
from mlsandbox.instances.generate import NoSpaceError, candidates
from mlsandbox.instances.models import instance_id, materialize, params_hash, scenario_hash
from mlsandbox.instances.splits import (
    SUITES_DIR,
    load_manifest,
    load_spec,
    split_hash,
    split_of,
    suite_ids,
)
from mlsandbox.scenario import catalog_ids, load_builtin, parse_scenario
from mlsandbox.scenario.space import ParameterSpace, apply_parameters, read_parameter
from mlsandbox.scenario.suites import signature

TABULAR = [
    "churn-clean-small",
    "tabular-quality-basic",
    "churn-imbalanced-missing",
    "churn-deadline-outliers",
    "churn-compliance-guardrails",
    "churn-flaky-lake",
    "churn-incident-combined",
    "tabular-ops-tracker-outage",
    "tabular-ops-resource-storm",
]


def test_tabular_families_declare_a_space_whose_draws_build() -> None:
    for fid in TABULAR:
        fam = load_builtin(fid)
        assert fam.space is not None, fid
        stream = candidates(fam, seed=0)
        for _ in range(5):
            params = next(stream)
            sc = materialize(fam, params)
            assert sc.space is None and sc.id == instance_id(fid, params)
            for path, value in params.items():
                assert read_parameter(sc.model_dump(mode="json"), path) == value


def test_same_seed_same_candidates_and_ids_are_hashes_of_the_parameters() -> None:
    fam = load_builtin("churn-flaky-lake")
    a, b = candidates(fam, 3), candidates(fam, 3)
    first = [next(a) for _ in range(4)]
    assert first == [next(b) for _ in range(4)]
    assert first != [next(candidates(fam, 4)) for _ in range(1)] * 4
    p = first[0]
    reordered = dict(reversed(list(p.items())))
    assert params_hash(fam.id, p) == params_hash(fam.id, reordered)  # key order does not matter
    assert instance_id(fam.id, p).startswith("churn-flaky-lake-")
    assert scenario_hash(materialize(fam, p)) == scenario_hash(materialize(fam, reordered))


def test_a_family_without_space_is_refused() -> None:
    family = parse_scenario(_family_data("serving-deploy-slo"))  # every built-in family declares one
    assert family.space is None
    with pytest.raises(NoSpaceError, match="declares no parameter space"):
        next(candidates(family, 0))


def _family_data(fid: str) -> dict:
    return load_builtin(fid).model_dump(mode="json", exclude={"space"})


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"parameters": {"datasets.nowhere.rows": {"type": "int", "low": 1, "high": 2}}}, "no element named"),
        ({"parameters": {"budget.coins": {"type": "int", "low": 1, "high": 2}}}, "no field 'coins'"),
        ({"parameters": {"seed": {"type": "int", "low": 5, "high": 2}}}, "below low"),
        ({"parameters": {"seed": {"type": "int", "low": 1, "high": 2, "step": 1}}}, "Extra inputs"),
        ({"parameters": {"seed": {"type": "normal", "mean": 1}}}, "does not match any of the expected tags"),
        ({"parameters": {"title": {"type": "choice", "values": ["x"]}}}, "not parameters"),
        ({"parameters": {}}, "at least 1 item"),
    ],
)
def test_a_broken_space_is_a_precise_error(space: dict, message: str) -> None:
    data = _family_data("churn-clean-small")
    data["space"] = space
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, "family.yaml")


def test_apply_parameters_reaches_lists_by_name_and_index() -> None:
    data = _family_data("churn-flaky-lake")
    out = apply_parameters(
        data,
        {"perturbations.lake-full.when.at_step": 5, "datasets.0.rows": 999, "budget.credits": 7.5},
    )
    assert read_parameter(out, "perturbations.lake-full.when.at_step") == 5
    assert out["datasets"][0]["rows"] == 999 and out["budget"]["credits"] == 7.5
    assert data["datasets"][0]["rows"] != 999  # the input is untouched


def test_a_space_draw_is_typed() -> None:
    space = ParameterSpace.model_validate(
        {
            "parameters": {
                "a": {"type": "int", "low": 1, "high": 3},
                "b": {"type": "float", "low": 0.1, "high": 0.2, "digits": 2},
                "c": {"type": "choice", "values": [{"x": 1}, "y"]},
            }
        }
    )
    d = space.draw(random.Random(0))
    assert isinstance(d["a"], int) and 1 <= d["a"] <= 3
    assert isinstance(d["b"], float) and 0.1 <= d["b"] <= 0.2 and round(d["b"], 2) == d["b"]
    assert d["c"] in ({"x": 1}, "y")


def test_split_of_partitions_every_hash() -> None:
    rng = random.Random(1)
    shares = {"train": 0, "dev": 0, "test": 0}
    for _ in range(5000):
        shares[split_of(f"{rng.getrandbits(256):064x}")] += 1
    assert 0.15 < shares["test"] / 5000 < 0.25 and 0.06 < shares["dev"] / 5000 < 0.14


def test_variant_signatures_ignore_the_space() -> None:
    fam = load_builtin("churn-clean-small")
    assert signature(fam) == signature(fam.model_copy(update={"space": None}))


# -------------------------------------------------------------------------------------- the frozen suite


def test_the_frozen_suite_ships_train_and_dev_only_and_no_test_parameters() -> None:
    assert "mle-core-v1" in suite_ids()
    spec = load_spec("mle-core-v1")
    manifest = load_manifest("mle-core-v1")
    assert set(manifest.splits) == {"train", "dev"}  # the test split is not in the package
    for name, part in manifest.splits.items():
        assert split_hash(part.instances) == part.sha256
        assert len(part.instances) == spec.per_family[name] * len(spec.families)
        for inst in part.instances:
            assert split_of(inst.params_sha256) == name
            assert params_hash(inst.family, inst.params) == inst.params_sha256
    train = {(i.family, i.params_sha256) for i in manifest.splits["train"].instances}
    dev = {(i.family, i.params_sha256) for i in manifest.splits["dev"].instances}
    assert not train & dev
    # No file in the package holds test instances.
    pkg = Path(__file__).resolve().parents[2] / "src" / "mlsandbox" / "instances" / SUITES_DIR
    assert not [p for p in pkg.iterdir() if "test" in p.name]


def test_test_parameters_never_occur_in_train() -> None:
    """Whatever secret seed is used, a test draw is never a train instance (its hash decides its split)."""
    manifest = load_manifest("mle-core-v1")
    train = {i.params_sha256 for i in manifest.splits["train"].instances}
    train_params = {(i.family, repr(sorted(i.params.items()))) for i in manifest.splits["train"].instances}
    for fid in load_spec("mle-core-v1").families:
        fam = load_builtin(fid)
        for secret in (7, 123456789):
            stream = candidates(fam, secret)
            drawn = [next(stream) for _ in range(200)]
            test = [p for p in drawn if split_of(params_hash(fid, p)) == "test"]
            assert test
            assert not {params_hash(fid, p) for p in test} & train
            assert not {(fid, repr(sorted(p.items()))) for p in test} & train_params
        # and the train instances themselves are never in the test bucket
    assert all(split_of(h) == "train" for h in train)


def test_suite_families_are_catalog_families_with_spaces() -> None:
    spec = load_spec("mle-core-v1")
    assert set(spec.families) <= set(catalog_ids())
    raw = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "src/mlsandbox/instances/suites/mle-core-v1.yaml").read_text()
    )
    assert raw["id"] == "mle-core-v1"
    assert all(load_builtin(f).space is not None for f in spec.families)
