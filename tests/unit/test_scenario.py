"""Scenario spec: the catalog loads, and a broken file gets a precise error (file, field path, expectation)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlsandbox.errors import ScenarioError
from mlsandbox.scenario import catalog_ids, load_builtin, load_scenario, load_scenario_file


def _base() -> dict:
    return yaml.safe_load(
        """
id: tiny
title: Tiny
task: do it
datasets:
  - name: t
    rows: 100
    columns:
      - {type: numeric, name: a, weight: 1.0}
goal: {dataset: t, model_name: m}
"""
    )


def _write(tmp_path: Path, data: dict | str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def test_catalog_has_the_foundation_scenario_and_every_entry_loads() -> None:
    ids = catalog_ids()
    assert "tabular-quality-basic" in ids
    for sid in ids:
        sc = load_builtin(sid)
        assert sc.id == sid
        assert sc.goal.dataset in [d.name for d in sc.datasets]


def test_valid_minimal_file_loads_with_defaults(tmp_path: Path) -> None:
    sc = load_scenario(_write(tmp_path, _base()))
    assert sc.max_steps == 40
    assert sc.datasets[0].formats == ["csv"]
    assert sc.perturbations == []


def test_unknown_field_names_its_path(tmp_path: Path) -> None:
    data = _base()
    data["datasets"][0]["colums"] = []
    with pytest.raises(ScenarioError) as e:
        load_scenario_file(_write(tmp_path, data))
    msg = str(e.value)
    assert str(tmp_path / "s.yaml") in msg
    assert "datasets[0].colums" in msg
    assert "Extra inputs are not permitted" in msg


def test_wrong_type_names_field_and_value(tmp_path: Path) -> None:
    data = _base()
    data["datasets"][0]["rows"] = "many"
    with pytest.raises(ScenarioError, match=r"datasets\[0\]\.rows: .*integer.*\(got 'many'\)"):
        load_scenario_file(_write(tmp_path, data))


def test_bad_column_type_and_rate_out_of_range(tmp_path: Path) -> None:
    data = _base()
    data["datasets"][0]["columns"].append({"type": "complex", "name": "z"})
    data["datasets"][0]["defects"] = {"missing_rate": 1.5}
    with pytest.raises(ScenarioError) as e:
        load_scenario_file(_write(tmp_path, data))
    msg = str(e.value)
    assert "2 errors" in msg
    assert "datasets[0].columns[1]" in msg
    assert "datasets[0].defects.missing_rate" in msg


def test_goal_must_reference_a_dataset(tmp_path: Path) -> None:
    data = _base()
    data["goal"]["dataset"] = "nope"
    with pytest.raises(ScenarioError, match=r"goal.dataset 'nope' is not one of the datasets"):
        load_scenario_file(_write(tmp_path, data))


def test_impossible_perturbation_timing(tmp_path: Path) -> None:
    data = _base()
    data["max_steps"] = 5
    data["perturbations"] = [
        {
            "name": "late",
            "when": {"at_step": 9},
            "target": "service:mlflow",
            "fault": {"type": "kill_service"},
        }
    ]
    with pytest.raises(ScenarioError, match="at step 9, which never comes"):
        load_scenario_file(_write(tmp_path, data))


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"not valid YAML at line 2, column"):
        load_scenario_file(_write(tmp_path, "id: x\n  title: [unclosed\n"))


def test_not_a_mapping_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="must be a YAML mapping, got list"):
        load_scenario_file(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario_file(tmp_path / "absent.yaml")


def test_unknown_builtin_lists_the_known_ones() -> None:
    with pytest.raises(
        ScenarioError, match=r"unknown scenario 'nope'; built-in scenarios: .*tabular-quality-basic"
    ):
        load_scenario("nope")
