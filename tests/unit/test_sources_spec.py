"""Scenario sources: the built-in data scenarios load, and bad source specs get precise errors."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.errors import ScenarioError
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.loader import parse_scenario
from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.sources import ApiSource, LakeSource, PostgresSource

DATA_SCENARIOS = [
    "data-csv-batch-missing-outliers",
    "data-parquet-schema-change",
    "data-monthly-drift-retrain",
]


@pytest.mark.parametrize("scenario_id", DATA_SCENARIOS)
def test_builtin_data_scenarios_load(scenario_id: str) -> None:
    sc = load_builtin(scenario_id)
    assert sc.sources and sc.goal.type == "registered_model_auc"
    assert {s.dataset for s in sc.sources} <= {d.name for d in sc.datasets}


def test_source_kinds_of_the_builtin_scenarios() -> None:
    kinds = {type(s) for sid in DATA_SCENARIOS for s in load_builtin(sid).sources}
    assert kinds == {ApiSource, PostgresSource, LakeSource}
    drift = load_builtin("data-monthly-drift-retrain")
    lake = next(s for s in drift.sources if isinstance(s, LakeSource))
    assert lake.holdout == "last_batch" and len(lake.arrivals) == lake.batches


def _base(**source: Any) -> dict[str, Any]:
    data = load_builtin("data-parquet-schema-change").model_dump(mode="json")
    data["sources"] = [{**data["sources"][0], **source}]
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arrivals": [0, 0, 1]}, "arrivals has 3 steps but batches is 4"),
        ({"arrivals": [0, 2, 1, 3]}, "arrivals must not decrease"),
        ({"arrivals": [0, 0, 0, 61]}, "arrivals [61] are after max_steps 60"),
        ({"dataset": "nope"}, "dataset 'nope' is not one of the datasets ['sales']"),
        ({"name": "Bad-Name"}, "not a valid source name"),
        (
            {"schema_changes": [{"batch": 4, "change": "drop", "column": "amount"}]},
            "schema_changes.0: batch 4 is past the last batch 3",
        ),
        (
            {"schema_changes": [{"batch": 1, "change": "drop", "column": "price"}]},
            "schema_changes.0: column 'price' is not a feature column of 'sales'",
        ),
        (
            {
                "schema_changes": [
                    {"batch": 1, "change": "rename", "column": "amount", "new_name": "frequency"}
                ]
            },
            "new_name 'frequency' is already a column",
        ),
        (
            {"schema_changes": [{"batch": 1, "change": "rename", "column": "amount"}]},
            "a rename needs new_name",
        ),
        (
            {
                "drifts": [
                    {"type": "concept_drift", "column": "segment", "weight": 1, "schedule": {"start": 1}}
                ]
            },
            "sources.0 (lake 'sales_lake'): drifts.0 (concept_drift): column 'segment' must be numeric or boolean",
        ),
        ({"format": "xml"}, "format"),
    ],
)
def test_bad_lake_sources_get_precise_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_base(**change), "test.yaml")
    assert message in str(info.value), str(info.value)


def test_duplicate_source_names_and_bad_tokens() -> None:
    data = _base()
    data["sources"].append(dict(data["sources"][0]))
    with pytest.raises(ValueError, match="duplicate source names: \\['sales_lake'\\]"):
        Scenario.model_validate(data)
    api = load_builtin("data-csv-batch-missing-outliers").model_dump(mode="json")
    api["sources"][0]["token"] = "short"
    with pytest.raises(ValueError, match="token"):
        Scenario.model_validate(api)
    api["sources"][0].update(token=None, rate_limit_per_s=0)
    with pytest.raises(ValueError, match="rate_limit_per_s"):
        Scenario.model_validate(api)


def test_unknown_source_field_is_named() -> None:
    with pytest.raises(ScenarioError, match=r"sources\[0\]\.lake\.batch_size: Extra inputs"):
        parse_scenario(_base(batch_size=3), "test.yaml")
