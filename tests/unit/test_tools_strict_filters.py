"""Tool schemas narrowed to a scenario or packs, the Responses-API shape, OpenAI strict mode (schemas and
calls back into actions), ``GET /tools?format=`` giving what the CLI prints, and a parameter error's
observation naming the refused action."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from test_tools_render import SAMPLE_CALLS
from typer.testing import CliRunner

from mlsandbox.cli.main import app as cli_app
from mlsandbox.gateway import ACTION_TYPES, action_catalog, parse_action
from mlsandbox.gateway.http import create_app
from mlsandbox.gateway.sessions import ActionSpec, ToolsResponse
from mlsandbox.gateway.tools import (
    pack_actions,
    parameters_schema,
    scenario_actions,
    strict_schema,
    tool_call_to_action,
    tool_specs,
    tools_document,
)
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario

# Keywords OpenAI's strict mode accepts (structured outputs' supported subset).
STRICT_KEYWORDS = {
    "type", "description", "enum", "const", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "properties", "required",
    "additionalProperties", "items", "anyOf",
}  # fmt: skip


def _check_strict(node: dict[str, Any], where: str) -> None:
    assert set(node) <= STRICT_KEYWORDS, (where, set(node) - STRICT_KEYWORDS)
    types = node.get("type")
    if types == "object" or (isinstance(types, list) and "object" in types):
        assert node["additionalProperties"] is False, where
        assert node["required"] == list(node["properties"]), where
    for name, sub in node.get("properties", {}).items():
        _check_strict(sub, f"{where}.{name}")
    for i, sub in enumerate(node.get("anyOf", [])):
        _check_strict(sub, f"{where}[{i}]")
    if isinstance(node.get("items"), dict):
        _check_strict(node["items"], f"{where}[]")


def _accepts_null(node: dict[str, Any]) -> bool:
    t = node.get("type")
    return (
        t == "null" or (isinstance(t, list) and "null" in t) or any(map(_accepts_null, node.get("anyOf", [])))
    )


def test_strict_schemas_follow_openai_strict_mode() -> None:
    specs = tool_specs(strict=True)
    assert [s["name"] for s in specs] == list(ACTION_TYPES)
    for spec in specs:
        params = spec["parameters"]
        Draft202012Validator.check_schema(params)
        _check_strict(params, spec["name"])
        full = parameters_schema(next(m for m in _models() if m.model_fields["type"].default == spec["name"]))
        optional = set(full["properties"]) - set(full.get("required", []))
        for name in optional:  # an optional parameter is required but nullable
            assert _accepts_null(params["properties"][name]), (spec["name"], name)
    text = json.dumps(specs)
    assert "patternProperties" not in text and '"default"' not in text and "propertyNames" not in text
    train = next(s for s in specs if s["name"] == "train_model")["parameters"]["properties"]
    assert train["hyperparams"]["type"] == ["string", "null"]  # a free-form map: JSON text


def _models() -> list[Any]:
    from mlsandbox.gateway.registry import get_catalog

    return list(get_catalog().models)


def _strict_args(args: dict[str, Any], strict: dict[str, Any]) -> dict[str, Any]:
    """The arguments a strict-mode model sends for ``args``: every property, maps as JSON text."""
    out: dict[str, Any] = {}
    for name, sub in strict["properties"].items():
        value = args.get(name)
        branches = [sub, *sub.get("anyOf", [])]
        types = {
            t for b in branches for t in (b["type"] if isinstance(b.get("type"), list) else [b.get("type")])
        }
        if isinstance(value, dict) and "object" not in types and "string" in types:
            value = json.dumps(value)
        elif isinstance(value, dict):
            obj = next((b for b in [sub, *sub.get("anyOf", [])] if b.get("properties")), None)
            value = value if obj is None else _strict_args(value, obj)
        out[name] = value
    return out


def test_strict_calls_come_back_as_the_same_actions() -> None:
    for spec in tool_specs(strict=True):
        args = SAMPLE_CALLS[spec["name"]]
        sent = _strict_args(args, spec["parameters"])
        Draft202012Validator(spec["parameters"]).validate(sent)
        action = tool_call_to_action(spec["name"], json.dumps(sent), strict=True)
        assert parse_action(action) == parse_action(tool_call_to_action(spec["name"], args)), spec["name"]
    hp = {"dataset": "d.csv", "algorithm": "mlp", "hyperparams": '{"alpha": 0.1}', "resources": None}
    action = tool_call_to_action("train_model", hp, strict=True)
    assert action["hyperparams"] == {"alpha": 0.1} and "resources" not in action
    assert tool_call_to_action("train_model", hp)["hyperparams"] == '{"alpha": 0.1}'  # strict only


def test_strict_schema_rewrites_nullable_unions_and_drops_defaults() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "b": {"type": "string", "enum": ["x", "y"], "default": "x", "minLength": 1},
            "m": {"type": "object", "patternProperties": {"^k$": {"type": "number"}}},
        },
        "required": [],
    }
    out = strict_schema(schema)
    assert out["properties"]["a"] == {"type": ["integer", "null"]}
    assert out["properties"]["b"] == {"type": ["string", "null"], "enum": ["x", "y", None]}
    assert out["properties"]["m"]["type"] == ["string", "null"] and out["required"] == ["a", "b", "m"]


def test_responses_format_and_strict_flag() -> None:
    tools = tools_document("responses", strict=True)
    assert all(set(t) == {"type", "name", "description", "parameters", "strict"} for t in tools)
    assert all(t["type"] == "function" and t["strict"] is True for t in tools)
    assert {t["name"] for t in tools_document("responses")} == set(ACTION_TYPES)
    chat = tools_document("openai", strict=True)
    assert all(t["function"]["strict"] is True for t in chat)
    with pytest.raises(ValueError, match="strict applies to"):
        tools_document("json-schema", strict=True)


def test_tools_filtered_by_scenario_and_pack() -> None:
    basic = scenario_actions(load_builtin("tabular-quality-basic"))
    serving = scenario_actions(load_builtin("serving-deploy-slo"))
    assert "train_model" in basic and "deploy_model" not in basic and "ingest_source" not in basic
    assert "deploy_model" in serving and "predict" in serving
    assert "ingest_source" in scenario_actions(load_builtin("data-csv-batch-missing-outliers"))
    assert "run_flow" in scenario_actions(load_builtin("pipeline-failure-upstream"))
    data = load_builtin("tabular-quality-basic").model_dump(mode="json")
    data["constraints"]["forbidden_actions"] = [
        {"action": "restart_*"},
        {"action": "clean_dataset", "params": {"strategy": "drop_na"}},  # only some calls: kept
    ]
    forbidding = Scenario.model_validate(data)
    assert "restart_service" in basic and "restart_service" not in scenario_actions(forbidding)
    assert "clean_dataset" in scenario_actions(forbidding)
    assert pack_actions(["config"]) == ["get_config", "set_config"]
    with pytest.raises(ValueError, match="unknown action pack"):
        pack_actions(["nope"])
    assert [t["function"]["name"] for t in tools_document("openai", actions=basic)] == basic


def test_cli_tools_filters_formats_and_refusals(tmp_path: Any) -> None:
    runner = CliRunner()
    res = runner.invoke(
        cli_app,
        [
            "tools",
            "--scenario",
            "serving-deploy-slo",
            "--pack",
            "serving",
            "--format",
            "responses",
            "--strict",
        ],
    )
    assert res.exit_code == 0, res.output
    tools = json.loads(res.stdout)
    assert [t["name"] for t in tools] == pack_actions(["serving"]) and tools[0]["strict"] is True
    assert json.loads(res.stdout) == tools_document(
        "responses", actions=pack_actions(["serving"]), strict=True
    )
    bad = runner.invoke(cli_app, ["tools", "--format", "json-schema", "--strict"])
    assert bad.exit_code == 2 and "--strict applies to" in bad.output
    bad = runner.invoke(cli_app, ["tools", "--pack", "nope"])
    assert bad.exit_code == 1 and "unknown action pack" in bad.output


class _Manager:
    def tools(self) -> ToolsResponse:
        return ToolsResponse(actions=[ActionSpec(**a) for a in action_catalog()])

    def close_all(self) -> None:
        pass


@pytest.mark.parametrize("fmt", ["openai", "responses", "anthropic", "json-schema"])
def test_http_tools_honours_the_cli_formats(fmt: str) -> None:
    client = TestClient(create_app(_Manager()))  # type: ignore[arg-type]
    assert client.get("/tools").json() == {"actions": action_catalog()}
    got = client.get("/tools", params={"format": fmt})
    assert got.status_code == 200 and got.json() == tools_document(fmt)
    cli = CliRunner().invoke(cli_app, ["tools", "--format", fmt])
    assert json.loads(cli.stdout) == got.json()
    if fmt != "json-schema":
        narrowed = client.get(
            "/tools", params={"format": fmt, "strict": "true", "scenario": "tabular-quality-basic"}
        )
        assert narrowed.json() == tools_document(
            fmt, actions=scenario_actions(load_builtin("tabular-quality-basic")), strict=True
        )


def test_http_tools_rejects_bad_queries_with_the_parameter_named() -> None:
    client = TestClient(create_app(_Manager()))  # type: ignore[arg-type]
    for params, field in (
        ({"format": "xml"}, "format"),
        ({"format": "json-schema", "strict": "true"}, "strict"),
        ({"format": "openai", "scenario": "../../etc/passwd"}, "scenario"),
        ({"format": "openai", "pack": "nope"}, "pack"),
        ({"strict": "true"}, "format"),
    ):
        res = client.get("/tools", params=params)
        assert res.status_code == 422, params
        assert res.json()["detail"][0]["loc"] == ["query", field], res.json()


def test_a_parameter_error_names_the_refused_action() -> None:
    from mlsandbox.env import MLSandboxEnv, decode_observation
    from mlsandbox.gateway.render import render_observation

    env = MLSandboxEnv("tabular-quality-basic", backend="sim", sandbox="refused-action")
    try:
        env.reset(seed=1)
        obs = decode_observation(env.step({"type": "train_model", "dataset": 3})[0])
        assert not obs["ok"] and obs["error"]["code"] == "invalid_parameters"
        assert obs["action"] == "train_model"
        assert "[step 1] train_model: ERROR invalid_parameters" in render_observation(obs)
        text = decode_observation(env.step('{"type": "wait", "seconds": "soon"}')[0])
        assert text["action"] == "wait"
        unknown = decode_observation(env.step({"type": "fly"})[0])
        assert unknown["action"] is None and unknown["error"]["code"] == "unknown_action"
    finally:
        env.close()
