"""Action parsing: every kind of bad input becomes an ActionError with a stable code, never another exception."""

from __future__ import annotations

import json

import pytest

from mlsandbox.errors import ActionError
from mlsandbox.gateway import ACTION_TYPES, action_catalog, parse_action
from mlsandbox.gateway.packs.core.actions import CheckDataQuality, TrainModel


def _code(raw: object) -> str:
    with pytest.raises(ActionError) as e:
        parse_action(raw)
    return e.value.code


def test_dict_json_and_model_inputs_parse_to_the_same_action() -> None:
    d = {"type": "check_data_quality", "dataset": "raw/customers.csv"}
    assert (
        parse_action(d)
        == parse_action(json.dumps(d))
        == parse_action(CheckDataQuality(dataset="raw/customers.csv"))
    )
    assert parse_action(json.dumps(d).encode()) == parse_action(d)


def test_defaults_are_filled() -> None:
    a = parse_action({"type": "train_model", "dataset": "clean/x.parquet", "algorithm": "random_forest"})
    assert isinstance(a, TrainModel)
    assert a.resources.cpus == 1.0 and a.hyperparams == {}


@pytest.mark.parametrize("raw", ["{not json", "", "[1, 2]", 42, None, b"\xff\xfe"])
def test_malformed_input_is_invalid_json(raw: object) -> None:
    assert _code(raw) == "invalid_json"


@pytest.mark.parametrize("raw", [{"type": "rm_rf"}, {}, {"dataset": "x"}, {"type": 3}])
def test_unknown_action(raw: object) -> None:
    assert _code(raw) == "unknown_action"


def test_wrong_types_name_the_field() -> None:
    with pytest.raises(ActionError) as e:
        parse_action({"type": "wait", "seconds": "soon"})
    assert e.value.code == "invalid_parameters"
    assert e.value.details[0]["field"] == "seconds"
    with pytest.raises(ActionError) as e:
        parse_action(
            {"type": "train_model", "dataset": "a.csv", "algorithm": "svm", "resources": {"cpus": 64}}
        )
    fields = {d["field"] for d in e.value.details}
    assert fields == {"algorithm", "resources.cpus"}


def test_extra_fields_are_rejected() -> None:
    assert _code({"type": "list_datasets", "force": True}) == "invalid_parameters"


@pytest.mark.parametrize(
    "name",
    [
        "../other-episode/raw/x.csv",
        "raw/../../etc/passwd",
        "/etc/passwd",
        "raw/./x.csv",
        "raw\\x.csv",
        "raw//x.csv",
        "",
    ],
)
def test_path_traversal_and_bad_names_are_rejected(name: str) -> None:
    with pytest.raises(ActionError) as e:
        parse_action({"type": "check_data_quality", "dataset": name})
    assert e.value.code == "invalid_parameters"


def test_ids_have_strict_shapes() -> None:
    assert _code({"type": "get_job", "job_id": "job-1; rm -rf /"}) == "invalid_parameters"
    assert _code({"type": "register_model", "run_id": "abc", "name": "m"}) == "invalid_parameters"
    assert _code({"type": "register_model", "run_id": "a" * 32, "name": "../m"}) == "invalid_parameters"


def test_catalog_lists_every_action_with_a_description_and_schema() -> None:
    cat = action_catalog()
    assert [c["type"] for c in cat] == list(ACTION_TYPES)
    for c in cat:
        assert len(c["description"]) > 20
        assert c["parameters"]["properties"]["type"]["const"] == c["type"]
