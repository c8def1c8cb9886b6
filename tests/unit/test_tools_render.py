"""Tool schemas (OpenAI, Anthropic, JSON Schema, MCP) and the text renderer of observations."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import pytest
from gymnasium import spaces
from jsonschema import Draft202012Validator

from mlsandbox.errors import ActionError
from mlsandbox.gateway import ACTION_TYPES, parse_action
from mlsandbox.gateway.mcp_server import mcp_tools
from mlsandbox.gateway.render import (
    TEXT_CHARSET,
    TextObservation,
    estimate_tokens,
    render,
    render_observation,
)
from mlsandbox.gateway.tools import (
    action_json_schema,
    anthropic_tools,
    openai_tools,
    tool_call_to_action,
    tool_specs,
    tools_document,
)

SAMPLE_CALLS: dict[str, dict[str, Any]] = {
    "list_datasets": {},
    "check_data_quality": {"dataset": "raw/customers.csv"},
    "clean_dataset": {
        "dataset": "raw/customers.csv",
        "strategy": "impute_median",
        "output": "clean/c.parquet",
    },
    "train_model": {
        "dataset": "clean/c.parquet",
        "algorithm": "random_forest",
        "hyperparams": {"n_estimators": 50, "max_depth": None},
        "resources": {"cpus": 0.5, "memory_mb": 512},
    },
    "get_job": {"job_id": "job-1"},
    "list_runs": {},
    "register_model": {"run_id": "a" * 32, "name": "churn"},
    "wait": {"seconds": 2.5},
    "get_logs": {"target": "service:mlflow", "tail": 20},
    "get_service_health": {"service": "mlflow"},
    "restart_service": {"service": "minio"},
    "retry_job": {"job_id": "job-1", "changes": {"algorithm": "random_forest", "resources": {"cpus": 0.5}}},
    "set_job_resources": {"job_id": "job-2", "memory_mb": 2048},
    "submit": {},
    "list_machines": {},
    "request_resources": {"machine": "cpu-small"},
    "release_resources": {"reservation_id": "res-1"},
    "cancel_job": {"job_id": "job-3"},
    "get_queue": {},
    "list_environments": {},
    "create_environment": {"name": "sklearn-15", "requirements": ["scikit-learn==1.5.2"]},
    "search_runs": {"filter": "metrics.val_auc > 0.8", "order_by": ["metrics.val_auc DESC"]},
    "get_run": {"run_id": "a" * 32},
    "compare_runs": {"run_ids": ["a" * 32, "b" * 32]},
    "get_model_versions": {"name": "churn"},
    "set_model_alias": {"name": "churn", "version": 2, "alias": "production"},
    "delete_model_alias": {"name": "churn", "alias": "staging"},
    "list_flows": {},
    "run_flow": {"name": "ingestion", "parameters": {"dataset": "customers", "batch": "2026-11-28"}},
    "get_flow_run": {"flow_run_id": "fr-1", "log_lines": 20},
    "retry_flow_run": {"flow_run_id": "fr-1"},
    "get_config": {"key": "s3_endpoint_url"},
    "set_config": {"key": "s3_secret_access_key", "value": "@secret:minio-secret-key"},
    "list_sources": {},
    "preview_source": {"source": "orders_api", "rows": 3},
    "ingest_source": {
        "source": "sales_lake",
        "batches": [0, 1],
        "rename": {"amount_usd": "amount"},
        "output": "sources/sales.parquet",
        "refresh_credentials": True,
    },
    "sample_dataset": {"dataset": "sources/sales.parquet", "rows": 5, "seed": 3},
    "schema_diff": {"reference": "lake/sales/batch-00.parquet", "current": "lake/sales/batch-03.parquet"},
    "drift_check": {"reference": "lake/sales/batch-00.parquet", "current": "lake/sales/batch-05.parquet"},
    "deploy_model": {"name": "churn", "version": "2", "replicas": 2, "machine": "cpu-large"},
    "rollback": {"deployment": "churn", "version": "1"},
    "scale": {"deployment": "churn", "replicas": 3},
    "undeploy": {"deployment": "churn"},
    "get_deployment": {"deployment": "churn"},
    "predict": {"deployment": "churn", "entity_ids": ["p0-1", "p0-2"]},
    "get_metrics": {"target": "churn", "names": ["latency_p99_ms", "error_rate"], "window_s": 30},
    "get_alerts": {"active_only": True},
    "ack_alert": {"alert_id": "alert-1"},
    "write_file": {"path": "train.py", "content": "print(1)"},
    "read_file": {"path": "train.py"},
    "list_files": {},
    "run_python": {"path": "train.py", "args": ["--seed", "1"], "timeout_s": 60},
}

BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("wait", {"seconds": 100}),
    ("wait", {"seconds": "soon"}),
    ("check_data_quality", {}),
    ("train_model", {"dataset": "raw/customers.csv", "algorithm": "svm"}),
    ("train_model", {"dataset": "raw/customers.csv", "algorithm": "random_forest", "resources": {"cpus": 4}}),
    ("get_job", {"job_id": "1"}),
    ("register_model", {"run_id": "xyz", "name": "churn"}),
    ("list_runs", {"extra": 1}),
]


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_every_action_has_a_sample() -> None:
    missing = set(ACTION_TYPES) - set(SAMPLE_CALLS)
    assert not missing, f"add a sample call for the new action(s) {sorted(missing)}"
    assert [s["name"] for s in tool_specs()] == list(ACTION_TYPES)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_function_calling_schemas_are_valid_and_self_contained(fmt: str) -> None:
    tools = tools_document(fmt)
    assert len(tools) == len(ACTION_TYPES)
    for tool in tools:
        if fmt == "openai":
            assert tool["type"] == "function" and set(tool) == {"type", "function"}
            tool = tool["function"]
            params = tool["parameters"]
            assert set(tool) == {"name", "description", "parameters"}
        else:
            params = tool["input_schema"]
            assert set(tool) == {"name", "description", "input_schema"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
        assert len(tool["description"]) > 20
        Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert "type" not in params["properties"], "the discriminator is the tool name"
        refs = [n for n in _walk(params) if "$ref" in n]
        assert refs == [] and "$defs" not in params
        assert json.loads(json.dumps(tool)) == tool


def test_sample_calls_validate_and_round_trip_through_parse_action() -> None:
    for spec in tool_specs():
        args = SAMPLE_CALLS[spec["name"]]
        Draft202012Validator(spec["parameters"]).validate(args)
        action = tool_call_to_action(spec["name"], args)
        model = parse_action(action)
        assert model.type == spec["name"]
        assert model.model_dump(exclude={"type"}, exclude_defaults=True) == {
            k: v for k, v in args.items() if v != {} or k != "hyperparams"
        }
        # Arguments as the JSON text OpenAI sends.
        assert parse_action(tool_call_to_action(spec["name"], json.dumps(args))) == model


@pytest.mark.parametrize(("name", "args"), BAD_CALLS)
def test_schema_and_gateway_reject_the_same_bad_calls(name: str, args: dict[str, Any]) -> None:
    params = next(s["parameters"] for s in tool_specs() if s["name"] == name)
    assert list(Draft202012Validator(params).iter_errors(args)), args
    with pytest.raises(ActionError) as e:
        parse_action(tool_call_to_action(name, args))
    assert e.value.code == "invalid_parameters"


def test_tool_call_to_action_edge_cases() -> None:
    assert tool_call_to_action("wait", None) == {"type": "wait"}
    assert tool_call_to_action("wait", "") == {"type": "wait"}
    assert tool_call_to_action("wait", {"type": "submit", "seconds": 1}) == {"type": "wait", "seconds": 1}
    # Text that is no JSON object goes to the gateway as is, which rejects it with its usual error.
    assert tool_call_to_action("wait", "{oops") == "{oops"
    with pytest.raises(ActionError) as e:
        parse_action(tool_call_to_action("wait", "[1]"))
    assert e.value.code == "invalid_json"


def test_json_schema_format_describes_action_objects() -> None:
    schema = action_json_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    for name, args in SAMPLE_CALLS.items():
        validator.validate({"type": name, **args})
    assert list(validator.iter_errors({"type": "drop_all_tables"}))
    assert list(validator.iter_errors({"type": "wait", "seconds": -1}))


def test_mcp_tools_are_generated_from_the_same_specs() -> None:
    tools = mcp_tools()
    specs = tool_specs()
    assert [t.name for t in tools] == [s["name"] for s in specs]
    for tool, spec in zip(tools, specs, strict=True):
        assert tool.input_schema == spec["parameters"]
        assert tool.description == spec["description"]
    read_only = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
    assert {"list_datasets", "check_data_quality", "get_job", "list_runs"} <= read_only
    assert not read_only & {"clean_dataset", "train_model", "register_model", "submit", "restart_service"}


def test_anthropic_and_openai_carry_the_same_content() -> None:
    for o, a in zip(openai_tools(), anthropic_tools(), strict=True):
        assert o["function"]["name"] == a["name"]
        assert o["function"]["parameters"] == a["input_schema"]


# ---------------------------------------------------------------------------------------------- render

BUDGET = {"credits": 100.0, "credits_used": 1.25, "steps_left": 27}


def _ok(result: dict[str, Any], action: str = "list_runs", step: int = 3) -> dict[str, Any]:
    return {"step": step, "ok": True, "action": action, "result": result, "error": None, "budget": BUDGET}


def test_render_ok_observation_with_table() -> None:
    obs = _ok(
        {
            "runs": [
                {
                    "run_id": "a" * 32,
                    "status": "FINISHED",
                    "params": {"n": "10"},
                    "metrics": {"val_auc": 0.8123456789},
                },
                {"run_id": "b" * 32, "status": "FAILED", "params": {}, "metrics": {}},
            ]
        }
    )
    text = render_observation(obs)
    lines = text.splitlines()
    assert lines[0] == "[step 3] list_runs: ok"
    assert lines[1] == "budget: credits used 1.25 of 100 | steps left 27"
    assert "runs (2):" in text
    header = next(line for line in lines if "run_id" in line)
    assert header.split() == ["run_id", "status", "params", "metrics"]
    assert "val_auc=0.812346" in text  # 6 significant digits
    assert text == render_observation(json.loads(json.dumps(obs)))  # stable across a JSON round trip


def test_render_error_observation_names_code_message_and_fields() -> None:
    obs = {
        "step": 4,
        "ok": False,
        "action": "wait",
        "result": None,
        "error": {
            "code": "invalid_parameters",
            "message": "invalid parameters for wait: seconds: Input should be a valid number",
            "details": [{"field": "seconds", "message": "Input should be a valid number"}],
        },
        "budget": BUDGET,
    }
    text = render_observation(obs)
    assert text.splitlines()[0].startswith(
        "[step 4] wait: ERROR invalid_parameters: invalid parameters for wait"
    )
    assert "  - seconds: Input should be a valid number" in text
    unknown = {**obs, "action": None, "error": {"code": "invalid_json", "message": "not JSON"}}
    assert render_observation(unknown).splitlines()[0] == "[step 4] action: ERROR invalid_json: not JSON"


def test_render_truncates_with_a_marker_within_max_chars() -> None:
    rows = [{"job_id": f"job-{i}", "state": "running"} for i in range(500)]
    obs = _ok({"jobs": rows, "note": "x" * 50}, action="wait")
    full = render(obs, max_rows=1000, max_chars=50_000)
    assert not full.truncated and "job-499" in full.text
    capped = render(obs, max_rows=10)
    assert "... 490 more rows" in capped.text and "job-10 " not in capped.text
    small = render(obs, max_chars=500, max_rows=1000)
    assert small.truncated and len(small.text) <= 500
    assert re.search(r"\.\.\. \[truncated: \d+ more lines, \d+ more chars\]$", small.text)
    assert small.tokens == estimate_tokens(small.text) == -(-len(small.text) // 4)
    huge_line = _ok({"blob": "y" * 10_000})
    one = render(huge_line, max_chars=300)
    assert one.truncated and len(one.text) <= 300


def test_render_uses_printable_ascii_and_keeps_multiline_text_readable() -> None:
    obs = _ok({"task": "Line one — with a dash\nline two\ttabbed", "name": "caf\u00e9\x00"}, action=None)  # type: ignore[arg-type]
    text = render_observation(obs)
    assert set(text) <= set(TEXT_CHARSET)
    assert "  task: |\n    Line one \\u2014 with a dash\n    line two\\ttabbed" in text
    assert "caf\\xe9\\x00" in text


class _JsonTextEnv(gym.Env[dict[str, Any], str]):
    """A stand-in with MLSandboxEnv's observation encoding ({"text": JSON}), to test the wrapper alone."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict({"text": spaces.Text(max_length=10_000)})
        self.action_space = spaces.Text(max_length=100)
        self.n = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.n = 0
        return {"text": json.dumps(_ok({"datasets": []}, action=None, step=0))}, {}  # type: ignore[arg-type]

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self.n += 1
        obs = _ok({"jobs": [{"job_id": f"job-{i}"} for i in range(300)]}, action="wait", step=self.n)
        return {"text": json.dumps(obs)}, -0.1, False, False, {"step": self.n}


def test_text_observation_wrapper() -> None:
    env = TextObservation(_JsonTextEnv(), max_chars=400)
    obs, info = env.reset(seed=1)
    assert obs.startswith("[step 0] reset: ok") and env.observation_space.contains(obs)
    assert info["observation_tokens"] == estimate_tokens(obs)
    obs, reward, terminated, truncated, info = env.step('{"type": "wait"}')
    assert env.observation_space.contains(obs) and len(obs) <= 400
    assert info["observation_truncated"] is True and info["step"] == 1
    assert reward == -0.1 and not terminated and not truncated
