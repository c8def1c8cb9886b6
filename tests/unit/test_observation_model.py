"""The observation is defined once (``mlsandbox.gateway.observations.Observation``): the HTTP gateway's
OpenAPI document, MCP's declared tool output and OpenEnv's observation type all carry exactly its fields,
types and required set, and the gateway's observation dicts are what the model dumps."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from mlsandbox.errors import ActionError
from mlsandbox.gateway.http import create_app
from mlsandbox.gateway.mcp_server import STEP_OUTPUT_SCHEMA, mcp_tools
from mlsandbox.gateway.observations import (
    OBSERVATION_FIELDS,
    Observation,
    error_observation,
    ok_observation,
    reset_observation,
)

BUDGET = {"credits": 100.0, "credits_used": 1.25, "steps_left": 27}


ANNOTATIONS = frozenset({"$defs", "title", "description", "default", "examples"})
"""JSON Schema keywords that document a value without constraining it (left out of the comparison)."""


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """The shape of ``schema``: every ``$ref`` replaced by the definition it names (its last path segment),
    annotations left out, so the schemas of documents that keep definitions in different places and
    document them differently compare equal when they take the same values."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return _inline(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k not in ANNOTATIONS}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _model_schema() -> dict[str, Any]:
    schema = Observation.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def test_the_http_openapi_observation_is_the_model() -> None:
    doc = TestClient(create_app(object())).get("/openapi.json").json()  # type: ignore[arg-type]
    components = doc["components"]["schemas"]
    assert _inline(components["Observation"], components) == _model_schema()
    for response in ("SessionCreated", "StepResponse", "ResetResponse", "ObservationResponse"):
        ref = components[response]["properties"]["observation"]
        assert _inline(ref, components) == _model_schema(), response


def test_mcp_tools_declare_the_model_as_their_output() -> None:
    output = _inline(STEP_OUTPUT_SCHEMA, STEP_OUTPUT_SCHEMA.get("$defs", {}))
    assert output["properties"]["observation"] == _model_schema()
    assert set(output["required"]) == {"observation", "reward", "terminated", "truncated"}
    assert all(t.output_schema == STEP_OUTPUT_SCHEMA for t in mcp_tools())


def test_the_openenv_observation_has_the_model_fields() -> None:
    pytest.importorskip("openenv.core.env_server.types")
    from mlsandbox.integrations.openenv.models import MLSandboxObservation

    raw = MLSandboxObservation.model_json_schema()
    schema = _inline(raw, raw.get("$defs", {}))
    model = _model_schema()
    for name, field in model["properties"].items():
        assert schema["properties"].get(name) == field, name
    assert set(schema["required"]) == set(model["required"])  # OpenEnv's own fields all have defaults
    assert set(schema["properties"]) - set(model["properties"]) == {
        "done",
        "reward",
        "metadata",
        "text",
        "info",
    }


def test_observation_dicts_are_the_model_dumped() -> None:
    ok = ok_observation(3, "list_runs", {"runs": []}, BUDGET)
    assert ok == {
        "step": 3,
        "ok": True,
        "action": "list_runs",
        "result": {"runs": []},
        "error": None,
        "budget": BUDGET,
    }
    assert tuple(ok) == OBSERVATION_FIELDS
    bare = error_observation(4, None, ActionError("not_found", "no such job"), BUDGET)
    assert bare["error"] == {"code": "not_found", "message": "no such job"}  # no details: left out
    detailed = error_observation(
        5,
        "wait",
        ActionError("invalid_parameters", "bad", details=[{"field": "seconds", "message": "<0"}]),
        BUDGET,
    )
    assert detailed["error"]["details"] == [{"field": "seconds", "message": "<0"}]
    assert detailed["result"] is None and detailed["ok"] is False
    first = reset_observation({"task": "t"}, BUDGET)
    assert first == {
        "step": 0,
        "ok": True,
        "action": None,
        "result": {"task": "t"},
        "error": None,
        "budget": BUDGET,
    }
    for obs in (ok, bare, detailed, first):
        assert Observation.model_validate(obs).as_dict() == obs
    with pytest.raises(ValueError):
        ok_observation(1, "list_runs", {}, {**BUDGET, "surprise": 1})  # the budget's shape is fixed
